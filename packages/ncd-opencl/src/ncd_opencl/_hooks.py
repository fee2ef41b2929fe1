"""Entry point of the ncd-opencl plugin: registrations only, no heavy imports."""

from __future__ import annotations

from typing import Any

from ncd.plugins import hookimpl


@hookimpl
def ncd_register_backends() -> list[Any]:
    from ncd_opencl.backend import OpenCLBackend

    return [OpenCLBackend()]


@hookimpl
def ncd_register_exporters() -> list[Any]:
    from ncd_opencl.backend import OpenCLSourceExporter

    return [OpenCLSourceExporter()]


@hookimpl
def ncd_register_commands() -> list[Any]:
    from ncd.plugins.interfaces import Command
    from ncd_opencl import cli

    return [
        Command(
            "compile",
            "generate fused OpenCL kernels for a model (--emit DIR writes "
            "the sources and the plan)",
            cli.configure,
            cli.run,
            target="opencl",
        )
    ]


@hookimpl
def ncd_demo_steps() -> list[Any]:
    from ncd.plugins.interfaces import DemoStep
    from ncd_opencl.cli import demo_step

    return [DemoStep("opencl: the GPT as fused OpenCL kernels", 50, demo_step)]
