"""Entry point of the ncd-opencl plugin: registrations only, no heavy imports."""

from __future__ import annotations

from typing import Any

from ncd.plugins import hookimpl


@hookimpl
def ncd_register_backends() -> list[Any]:
    from ncd_opencl.backend import OpenCLBackend

    return [OpenCLBackend()]
