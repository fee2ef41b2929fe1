"""Mixture-of-experts routing ops: top-k gates and a bank of expert MLPs, with their
reference semantics and their streaming roles.

``TopKGate`` turns router scores into gates: a softmax over the ``k`` largest scores along the
expert axis and exact zeros elsewhere. ``Experts`` computes
``y = sum_e gate[e] * (W2_e act(W1_e x + b1_e) + b2_e)``; only experts with a nonzero gate
contribute (the reference evaluates every expert and weights it by its gate, which is the same
sum because unrouted gates are exactly zero).
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import numpy as np

from ncd.axis import Axis
from ncd.op import Op, Param, Signature, axis_field, choice_field, count_field, register_op
from ncd.primitives.library import UNARY_FNS
from ncd.reference import UNARY, Context, reference_rule
from ncd.streaming import ROLE_RULES

__all__ = ["Experts", "TopKGate"]


@register_op
@attrs.frozen
class TopKGate(Op):
    """Softmax over the ``k`` largest entries along ``axis``; zero elsewhere."""

    kind: ClassVar[str] = "topk_gate"
    category: ClassVar[str] = "normaliser"
    axis: Axis = axis_field()
    k: int = count_field(2)

    def signature(self) -> Signature:
        return ((self.axis,),), ((self.axis,),)

    @property
    def label(self) -> str:
        return self.name or f"top{self.k}"


@register_op
@attrs.frozen
class Experts(Op):
    """``experts`` MLPs ``d_model -> d_ff -> d_model``, mixed by gates over ``experts``; each
    token runs the ``k`` experts its gates select."""

    kind: ClassVar[str] = "experts"
    category: ClassVar[str] = "contraction"
    experts: Axis = axis_field()
    d_model: Axis = axis_field()
    d_ff: Axis = axis_field()
    k: int = count_field(2)
    activation: str = choice_field(UNARY_FNS, "gelu")

    def signature(self) -> Signature:
        return ((self.d_model,), (self.experts,)), ((self.d_model,),)

    def params(self) -> tuple[Param, ...]:
        e, d, f = self.experts, self.d_model, self.d_ff
        return (
            Param("fc_weight", (e, f, d), "uniform_fan_in", (d,)),
            Param("fc_bias", (e, f), "zeros"),
            Param("proj_weight", (e, d, f), "uniform_fan_in", (f,)),
            Param("proj_bias", (e, d), "zeros"),
        )


@reference_rule(TopKGate)
def _topk(
    op: TopKGate, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x = xs[0]
    k = min(op.k, x.shape[-1])
    # Ties break towards the lower expert index (a stable sort of the negated scores).
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    top = np.take_along_axis(x, order, axis=-1)
    e = np.exp(top - top.max(axis=-1, keepdims=True))
    gates = np.zeros_like(x)
    np.put_along_axis(gates, order, e / e.sum(axis=-1, keepdims=True), axis=-1)
    return [gates]


@reference_rule(Experts)
def _experts(
    op: Experts, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x, g = xs
    h = np.einsum("...d,efd->...ef", x, p["fc_weight"]) + p["fc_bias"]
    h = UNARY[op.activation](h)
    y = np.einsum("...ef,edf->...ed", h, p["proj_weight"]) + p["proj_bias"]
    return [np.einsum("...e,...ed->...d", g, y).astype(x.dtype)]


# Streaming roles: the gate needs every score; the experts' sum over experts is an accumulator.
ROLE_RULES[TopKGate] = lambda op, axis: "whole"
ROLE_RULES[Experts] = lambda op, axis: "sum" if axis == op.experts else "whole"
