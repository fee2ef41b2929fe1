"""The device level: collectives a kernel needs when config labels span several GPUs.

``parallel={"d_ff": 8}`` splits every axis labelled ``d_ff`` over 8 devices (each computes on
``d_ff / 8``). What a kernel must then communicate follows from the roles its ops give those
axes (``ncd.streaming.role``), with a rule table keyed by op class for ops that route data:

- an op reducing a split axis (a contraction over ``d_ff``, the MLP's second linear; the output
  projection over ``heads``) leaves partial sums: an **all-reduce** of the kernel's outputs;
- an op needing a split axis whole (a norm over a split ``d_model``): an **all-gather** of it;
- ``Experts`` with ``experts`` split: tokens go to their experts' devices and back, an
  **all-to-all** of ``k`` copies of each token, twice (dispatch and combine).

Times follow the alpha-beta model of ring collectives (Thakur et al., *Optimization of
Collective Communication Operations in MPICH*, 2005): all-reduce ``2(p-1) alpha +
2(p-1)/p B / beta``; all-gather and all-to-all ``(p-1) alpha + (p-1)/p B / beta``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import sympy as sp

from ncd.axis import dtype_bytes
from ncd.fusion import axis_labels
from ncd.kernel import Kernel
from ncd.op import Op
from ncd.primitives import routing as R
from ncd.streaming import REDUCING, role

__all__ = ["COMM_RULES", "Collective", "collectives"]


@attrs.frozen
class Collective:
    """A collective over ``devices`` moving ``bytes`` (the full buffer ``B``)."""

    kind: str  # all-reduce | all-gather | all-to-all
    bytes: sp.Expr
    devices: int
    label: str

    def volume(self) -> sp.Expr:
        """Bytes each device sends."""
        p = self.devices
        factor = sp.Rational(2 * (p - 1), p) if self.kind == "all-reduce" else sp.Rational(p - 1, p)
        return factor * self.bytes

    def time(self, machine: Any) -> float | None:
        link = machine.interconnect
        if link is None or self.devices < 2:
            return 0.0 if self.devices < 2 else None
        steps = 2 * (self.devices - 1) if self.kind == "all-reduce" else self.devices - 1
        try:
            return steps * link.latency + float(self.volume()) / link.bandwidth
        except TypeError:
            return None


CommRule = Callable[[Any, Any, Callable[[Any], sp.Expr], str, int, float], list[Collective]]

#: op class -> rule(op, node, size, label, devices, bytes per element) for ops that route data.
COMM_RULES: dict[type[Op], CommRule] = {}


def _experts(
    op: R.Experts, node: Any, size: Callable[[Any], sp.Expr], label: str, p: int, nbytes: float
) -> list[Collective]:
    tokens = sp.Mul(*(size(a) for a in node.loop))
    moved = tokens * op.k * size(op.d_model) * sp.Float(nbytes)
    return [
        Collective("all-to-all", moved, p, f"{label}: dispatch"),
        Collective("all-to-all", moved, p, f"{label}: combine"),
    ]


COMM_RULES[R.Experts] = _experts


def collectives(
    kernel: Kernel,
    size: Callable[[Any], sp.Expr],
    parallel: Mapping[str, int],
    dtype: str | None = None,
) -> list[Collective]:
    """The collectives ``kernel`` needs when the labels in ``parallel`` span devices."""
    if not parallel:
        return []
    graph = kernel.graph
    labels = axis_labels(graph)
    out: list[Collective] = []
    for label, p in parallel.items():
        if p < 2:
            continue
        split = [a for a in kernel.axes() if labels.get(a.uid) == label]
        if not split:
            continue
        reduced = whole = False
        for n in kernel.ops:
            rule = COMM_RULES.get(type(n.op))
            touched = [a for a in split if a in n.op.axes()]
            if rule is not None and any(a == getattr(n.op, "experts", None) for a in touched):
                nb = float(dtype_bytes(dtype or graph.values[n.inputs[0]].dtype))
                out.extend(rule(n.op, n, size, label, p, nb))
                continue
            roles = {role(n, a) for a in touched}
            reduced |= bool(roles & REDUCING)
            whole |= bool(roles & {"whole", "normalise"})
        if reduced:
            for v in kernel.outputs:
                t = graph.values[v]
                if not any(labels.get(a.uid) == label for a in t.axes):
                    nb = float(dtype_bytes(dtype if dtype and t.is_float else t.dtype))
                    out.append(
                        Collective(
                            "all-reduce",
                            sp.Mul(*(size(a) for a in t.axes)) * nb,
                            p,
                            f"{label}: partial sums of value {v}",
                        )
                    )
        elif whole:
            for v in kernel.inputs:
                t = graph.values[v]
                if any(labels.get(a.uid) == label for a in t.axes):
                    nb = float(dtype_bytes(dtype if dtype and t.is_float else t.dtype))
                    full = sp.Mul(*(size(a) for a in t.axes)) * p * nb
                    out.append(Collective("all-gather", full, p, f"{label}: gather value {v}"))
    return out
