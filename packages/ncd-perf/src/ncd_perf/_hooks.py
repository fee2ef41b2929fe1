"""Entry point of the ncd-perf plugin: registrations only, no heavy imports (sympy, numpy and
matplotlib load inside the registered objects' methods)."""

from __future__ import annotations

from typing import Any, ClassVar

from ncd.plugins import hookimpl
from ncd.plugins.interfaces import Command, CostModel, DemoStep


class PerfCostModel(CostModel):
    """``ncd_perf.cost`` behind the plugin interface: ``cost(model, machine, **options)``."""

    name: ClassVar[str] = "perf"

    def cost(self, model: Any, machine: Any, **options: Any) -> Any:
        from ncd_perf.model import cost

        return cost(model, machine, **options)


def _configure_perf(p: Any) -> None:
    from ncd_perf.cli import configure_perf

    configure_perf(p)


def _run_perf(args: Any) -> int:
    from ncd_perf.cli import run_perf

    return run_perf(args)


def _configure_calibrate(p: Any) -> None:
    from ncd_perf.cli import configure_calibrate

    configure_calibrate(p)


def _run_calibrate(args: Any) -> int:
    from ncd_perf.cli import run_calibrate

    return run_calibrate(args)


def _demo(ctx: dict[str, Any]) -> None:
    from ncd_perf.cli import demo_step

    demo_step(ctx)


@hookimpl
def ncd_register_cost_models() -> list[CostModel]:
    return [PerfCostModel()]


@hookimpl
def ncd_register_commands() -> list[Command]:
    return [
        Command(
            "perf",
            "per-kernel, per-level performance model of a model on a machine",
            _configure_perf,
            _run_perf,
        ),
        Command(
            "calibrate",
            "detect this machine and show what ncd-perf measured of it (the machine 'host')",
            _configure_calibrate,
            _run_calibrate,
        ),
    ]


@hookimpl
def ncd_demo_steps() -> list[DemoStep]:
    return [
        DemoStep(
            "performance model (ncd-perf): the transformer on an H100 and on this CPU", 40, _demo
        )
    ]
