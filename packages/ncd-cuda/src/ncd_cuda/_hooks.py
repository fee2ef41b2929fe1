"""Entry point of the ncd-cuda plugin: registrations only, no heavy imports."""

from __future__ import annotations

from typing import Any

from ncd.plugins import hookimpl


@hookimpl
def ncd_register_commands() -> list[Any]:
    from ncd.plugins.interfaces import Command
    from ncd_cuda import cli

    return [
        Command(
            "cuda",
            "CUDA kernels: `ncd cuda inspect MODEL` compiles them to PTX and cubin and prints "
            "each one's registers, shared memory and spills",
            cli.configure,
            cli.run,
        )
    ]


@hookimpl
def ncd_demo_steps() -> list[Any]:
    from ncd.plugins.interfaces import DemoStep
    from ncd_cuda.cli import demo_step

    return [DemoStep("cuda: the GPT's kernels through NVRTC to PTX and cubin", 55, demo_step)]


@hookimpl
def ncd_register_backends() -> list[Any]:
    from ncd_cuda.backend import CudaBackend

    return [CudaBackend()]
