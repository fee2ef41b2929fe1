"""``ncd.bench(model, target, plan=...)`` (``ncd bench MODEL``): one schedule, timed kernel by
kernel on the target's device, beside what the cost model predicts for that same plan.

Comparing two schedules is one line each::

    ncd.bench(model, "opencl")                                   # the target's own plan
    ncd.bench(model, "opencl", tiles={("x", 0): 64})             # the key chunk at 64
    ncd.bench(model, "opencl", plan=ncd.tune(model, "opencl").plan)

The target must declare ``"tune"`` (its ``measure`` times each kernel); the prediction comes
from the registry's ``perf`` cost model on the backend's ``tuning_machine`` when installed.
The outputs are checked against the reference interpreter (``ncd.tuning.agrees``), so a
schedule that is fast because it is wrong says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ncd.errors import ScheduleError
from ncd.kernel import FusionPlan

__all__ = ["Bench", "BenchRow", "bench"]


@attrs.frozen
class BenchRow:
    kernel: str
    choices: str  # the kernel's chosen tiles (``group(seq/32@L0) ...``), "" when none
    seconds: float  # median per launch
    predicted: float | None  # the cost model's time for this kernel, if priced

    @property
    def ratio(self) -> float | None:
        """Measured over predicted (1.0: the model is exact; 2.0: it runs twice as slow as
        predicted)."""
        return self.seconds / self.predicted if self.predicted else None


@attrs.frozen
class Bench:
    target: str
    plan: FusionPlan
    rows: tuple[BenchRow, ...]
    agrees: bool  # the outputs match the reference interpreter
    machine: str | None  # the machine the prediction is for

    @property
    def seconds(self) -> float:
        return math.fsum(r.seconds for r in self.rows)

    @property
    def predicted(self) -> float | None:
        if any(r.predicted is None for r in self.rows) or not self.rows:
            return None
        return math.fsum(r.predicted or 0.0 for r in self.rows)

    def __str__(self) -> str:
        head = f"{len(self.rows)} {self.target} kernel(s), outputs "
        head += "agree with the reference" if self.agrees else "DISAGREE with the reference"
        if self.machine:
            head += f"; predicted by ncd-perf on {self.machine!r}"
        lines = [head, f"  {'kernel':<40} {'measured':>11} {'predicted':>11} {'ratio':>6}  tiles"]
        for r in self.rows:
            pred = "-" if r.predicted is None else f"{r.predicted * 1e3:.3f} ms"
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
            lines.append(
                f"  {r.kernel:<40} {r.seconds * 1e3:>8.3f} ms {pred:>11} {ratio:>6}  {r.choices}"
            )
        total = self.predicted
        pred = "-" if total is None else f"{total * 1e3:.3f} ms"
        ratio = "-" if not total else f"{self.seconds / total:.2f}"
        lines.append(f"  {'total':<40} {self.seconds * 1e3:>8.3f} ms {pred:>11} {ratio:>6}")
        return "\n".join(lines)


def bench(
    model: Any,
    target: str = "opencl",
    *,
    plan: FusionPlan | None = None,
    tiles: Mapping[Any, int] | None = None,
    reps: int = 5,
    seed: int = 0,
    inputs: Sequence[np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    machine: str | None = None,
    **options: Any,
) -> Bench:
    """Time ``plan`` (default: ``ncd.plan(model, target=target, tiles=tiles, ...)``) on the
    target's device, ``reps`` launches per kernel (median), on seeded random inputs unless
    given; ``machine``: the ncd-perf machine to predict on (default: the backend's
    ``tuning_machine``). ``options``: the target's compile options."""
    from ncd.params import init
    from ncd.planning import plan as plan_of
    from ncd.plugins import registry
    from ncd.reference import run as reference_run
    from ncd.testing import random_inputs
    from ncd.tuning import agrees, tunable

    graph, backend = tunable(model, target, "ncd.bench", "cannot time its kernels one by one")
    if plan is not None and tiles:
        raise ScheduleError(
            "ncd.bench: both plan= and tiles= were given; tiles belong to the plan. Fix: "
            "ncd.plan(model, target=..., tiles=...) and pass that plan."
        )
    plan_opts = {k: v for k, v in options.items() if k in backend.plan_options}
    if plan is None:
        plan = plan_of(graph, target, tiles=tiles, **plan_opts)
    xs = list(inputs) if inputs is not None else random_inputs(graph, seed)
    ps = dict(init(model, seed=seed)) if params is None else dict(params)
    outs, secs = backend.measure(graph, plan, xs, ps, max(1, reps), **options)
    want = reference_run(graph, *xs, params=ps)
    flat_want = list(want) if isinstance(want, tuple | list) else [want]
    flat_got = list(outs) if isinstance(outs, tuple | list) else [outs]
    ok = all(agrees(g, w) for g, w in zip(flat_got, flat_want, strict=True))
    machine = machine or getattr(backend, "tuning_machine", None)
    predicted: list[float | None] = [None] * len(plan.kernels)
    reg = registry()
    if machine is not None and "perf" in reg.cost_models:
        try:
            priced = reg.cost_model("perf").cost(graph, machine, plan=plan)
            if len(priced.kernels) == len(plan.kernels):
                predicted = [None if k.time is None else float(k.time) for k in priced.kernels]
        except Exception:  # a prediction annotates the timing; it never fails it
            machine = None
    else:
        machine = None
    rows = tuple(
        BenchRow(k.name, " ".join(str(p) for p in k.choices), s, t)
        for k, s, t in zip(plan.kernels, secs, predicted, strict=True)
    )
    return Bench(target, plan, rows, ok, machine)
