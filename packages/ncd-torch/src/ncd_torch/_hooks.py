"""Entry point of the ncd-torch plugin: registrations only, no heavy imports (torch is imported
inside the objects' methods)."""

from __future__ import annotations

from ncd.plugins import Backend, DemoStep, Exporter, hookimpl


@hookimpl
def ncd_register_backends() -> list[Backend]:
    from ncd_torch._backend import TorchBackend

    return [TorchBackend()]


@hookimpl
def ncd_register_exporters() -> list[Exporter]:
    from ncd_torch._backend import TorchExporter

    return [TorchExporter()]


@hookimpl
def ncd_demo_steps() -> list[DemoStep]:
    from ncd_torch._backend import demo_step

    return [DemoStep("ncd-torch: export to a PyTorch module and compare", 20, demo_step)]
