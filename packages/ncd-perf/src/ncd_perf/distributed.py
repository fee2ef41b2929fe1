"""The device level: collectives a kernel needs when config labels span several GPUs.

``parallel={"d_ff": 8}`` splits every axis labelled ``d_ff`` over 8 devices (each computes on
``d_ff / 8``). What a kernel must then communicate follows from the roles its ops give those
axes (``ncd.streaming.role``), with a rule table keyed by op class for ops that route data:

- an op reducing a split axis (a contraction over ``d_ff``, the MLP's second linear; the output
  projection over ``heads``) leaves partial sums: an **all-reduce** of the kernel's outputs;
- an op needing a split axis whole (a norm over a split ``d_model``): an **all-gather** of it;
- ``Experts`` with ``experts`` split: tokens go to their experts' devices and back, an
  **all-to-all** of ``k`` copies of each token, twice (dispatch and combine);
- sequence parallelism, a split label on two axes of one kernel, one kept (the queries) and
  one reduced or streamed (the keys, a renamed copy: ``seq_k`` of ``seq``): each device keeps
  its slice of the queries and needs every key, so the keys stay whole in that kernel
  (``sequence_keys``) and the values carrying them (K and V) are **all-gathered**, or passed
  around a **ring** (``p - 1`` steps of ``B / p``, overlapping the kernel's compute: Liu et
  al., *Ring Attention with Blockwise Transformers*, 2023).

Times follow the alpha-beta model of ring collectives (Thakur et al., *Optimization of
Collective Communication Operations in MPICH*, 2005): all-reduce ``2(p-1) alpha +
2(p-1)/p B / beta``; all-gather and all-to-all ``(p-1) alpha + (p-1)/p B / beta``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import sympy as sp

from ncd.axis import Axis, dtype_bytes
from ncd.fusion import axis_labels
from ncd.kernel import Kernel
from ncd.op import Op
from ncd.primitives import routing as R
from ncd.streaming import REDUCING, role

__all__ = ["COMM_RULES", "SEQUENCE", "Collective", "collectives", "sequence_keys"]

#: ``cost(sequence=)``: how a sequence-parallel kernel brings every device the keys
SEQUENCE = ("all-gather", "ring")


@attrs.frozen
class Collective:
    """A collective over ``devices`` moving ``bytes`` (the full buffer ``B``)."""

    kind: str  # all-reduce | all-gather | all-to-all | ring
    bytes: sp.Expr
    devices: int
    label: str

    @property
    def overlaps(self) -> bool:
        """A ring pass overlaps the kernel's compute (each step's block is in flight while
        the previous one is computed on); the other collectives sit between kernels."""
        return self.kind == "ring"

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


def _root(kernel: Kernel, a: Axis) -> Axis:
    seen = {a}
    while kernel.aliases.get(a, a) not in seen:
        a = kernel.aliases[a]
        seen.add(a)
    return a


def sequence_keys(kernel: Kernel, parallel: Mapping[str, int]) -> dict[Axis, str]:
    """Key axes of a sequence-parallel kernel, each with its label: where a split label names
    two axes of ``kernel`` and the kernel reduces or streams one of them (the keys) while it
    keeps another (the queries), each device holds its slice of the queries and needs every
    key. The keys (and their renamed copies in the kernel) then stay whole on each device.
    A kernel that only renames one into the other (the K and V projections) has no keys."""
    labels = axis_labels(kernel.graph)
    streamed = {_root(kernel, a) for a in kernel.streamed}
    out: dict[Axis, str] = {}
    for label, p in parallel.items():
        roots = {_root(kernel, a) for a in kernel.axes() if labels.get(a.uid) == label}
        if p < 2 or len(roots) < 2:
            continue
        reduced = set(streamed & roots)
        for n in kernel.ops:
            for a in n.op.axes():
                if _root(kernel, a) in roots and role(n, a) in REDUCING | {"normalise"}:
                    reduced.add(_root(kernel, a))
        if reduced and roots - reduced:
            for a in kernel.axes():
                if _root(kernel, a) in reduced:
                    out[a] = label
    return out


def collectives(
    kernel: Kernel,
    size: Callable[[Any], sp.Expr],
    parallel: Mapping[str, int],
    dtype: str | None = None,
    sequence: str = "all-gather",
) -> list[Collective]:
    """The collectives ``kernel`` needs when the labels in ``parallel`` span devices;
    ``sequence``: how a sequence-parallel kernel's keys reach every device (``SEQUENCE``).
    ``size`` is the kernel's own (``sequence_keys`` whole)."""
    if not parallel:
        return []
    graph = kernel.graph
    labels = axis_labels(graph)
    keys = sequence_keys(kernel, parallel)
    out: list[Collective] = []
    for v in kernel.inputs if keys else ():
        t = graph.values[v]
        carried = [keys[a] for a in t.axes if a in keys]
        if carried:  # the keys' values from every device: K and V
            nb = float(dtype_bytes(dtype if dtype and t.is_float else t.dtype))
            full = sp.Mul(*(size(a) for a in t.axes)) * nb
            label = carried[0]
            what = f"{label}: {'pass' if sequence == 'ring' else 'gather'} keys' value {v}"
            out.append(Collective(sequence, full, parallel[label], what))
    for label, p in parallel.items():
        if p < 2:
            continue
        split = [a for a in kernel.axes() if labels.get(a.uid) == label and a not in keys]
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
