"""ncd-perf: multi-level performance models derived from ncd models.

``cost(model, machine)`` prices the fusion plan of a model on a machine described as data
(``Machine``, built-ins ``h100``, ``h200``, ``a100``, ``cpu``, and ``host``: this system,
detected and calibrated once, ``ncd_perf.host``): per kernel and per
memory level, transfers and resident memory as sympy formulas in the model's config labels and
tile sizes, FLOPs by kind, tiles chosen under every capacity, roofline time and bottleneck.
``optimise`` returns the fused, tiled schedule. Nothing here is specific to attention or
matmul: formulas follow from the kernels' partitions and ``ncd.streaming``.

Names load lazily, so the plugin's entry point (``ncd_perf._hooks``) imports no sympy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Collective": "ncd_perf.distributed",
    "KernelFormulas": "ncd_perf.formulas",
    "Level": "ncd_perf.machine",
    "Link": "ncd_perf.machine",
    "Machine": "ncd_perf.machine",
    "load_machine": "ncd_perf.machine",
    "machine_names": "ncd_perf.machine",
    "KernelCost": "ncd_perf.model",
    "LevelCost": "ncd_perf.model",
    "ModelCost": "ncd_perf.model",
    "cost": "ncd_perf.model",
    "Occupancy": "ncd_perf.occupancy",
    "occupancy": "ncd_perf.occupancy",
    "optimise": "ncd_perf.model",
    "calibrate": "ncd_perf.cli",
    "Calibration": "ncd_perf.host",
    "HostInfo": "ncd_perf.host",
    "detect": "ncd_perf.host",
    "host_machine": "ncd_perf.host",
}

__all__ = sorted(_EXPORTS)

MODULES = ("formulas", "machine", "model", "tiles", "flops", "distributed", "report", "cli", "host")


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in (
        "formulas",
        "machine",
        "model",
        "tiles",
        "flops",
        "distributed",
        "report",
        "cli",
        "host",
    ):
        return importlib.import_module(f"ncd_perf.{name}")
    raise AttributeError(f"module 'ncd_perf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "formulas", "machine", "model"])
