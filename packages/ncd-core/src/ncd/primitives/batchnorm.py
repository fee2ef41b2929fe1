"""Batch normalisation in eval form: a per-channel affine map from running statistics,
``y = (x - running_mean) / sqrt(running_var + eps) * weight + bias``, with PyTorch's parameter
names so a ``BatchNorm1d/2d`` checkpoint loads as it is.

The op is elementwise over every axis of its input (no core axes, so the value keeps its axis
order, ``[c h w]`` as the convolution wrote it, and fuses after it); its parameters are
indexed by the channel axis, which the input carries as a lifted axis."""

from __future__ import annotations

from typing import ClassVar

import attrs
import numpy as np

from ncd.axis import Axis
from ncd.errors import DefinitionError
from ncd.op import Op, Param, Signature, axis_field, flag_field, number_field, register_op
from ncd.reference import Context, reference_rule
from ncd.streaming import ROLE_RULES

__all__ = ["BatchNorm", "channel_dim"]


@register_op
@attrs.frozen
class BatchNorm(Op):
    """``(x - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c] + bias[c]`` at every
    element, ``c`` its index along the channel axis ``axis`` (an axis of the input), the
    running statistics of training read as they are (eval mode)."""

    kind: ClassVar[str] = "batch_norm"
    category: ClassVar[str] = "elementwise"
    axis: Axis = axis_field()
    eps: float = number_field(1e-5, low=0.0, fix="pass a small positive eps such as 1e-5")
    affine: bool = flag_field(True)

    def signature(self) -> Signature:
        return ((),), ((),)

    def params(self) -> tuple[Param, ...]:
        stats = (
            Param("running_mean", (self.axis,), "zeros", buffer=True),
            Param("running_var", (self.axis,), "ones", buffer=True),
        )
        if not self.affine:
            return stats
        return (Param("weight", (self.axis,), "ones"), Param("bias", (self.axis,), "zeros"), *stats)

    @property
    def label(self) -> str:
        return self.name or "batch_norm"


@reference_rule(BatchNorm)
def _batch_norm(
    op: BatchNorm, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x = xs[0]
    shape = [1] * x.ndim  # the arrays hold the node's loop axes, in its loop order
    # a caller that leaves ``Context.loop`` unset (a backend deferring to this rule): the
    # node's own loop, found by the op it holds
    loop = ctx.loop or next((n.loop for n in ctx.graph.nodes if n.op is op), ())
    shape[channel_dim(op, loop)] = -1

    def at(name: str) -> np.ndarray:
        return p[name].reshape(shape)

    y = (x - at("running_mean")) / np.sqrt(at("running_var") + op.eps)
    if op.affine:
        y = y * at("weight") + at("bias")
    return [y.astype(x.dtype, copy=False)]


def channel_dim(op: BatchNorm, loop: tuple[Axis, ...]) -> int:
    """Where the channel axis sits among the node's axes; its absence is a definition error."""
    if op.axis not in loop:
        raise DefinitionError(
            f"{op.label}: its channel axis {op.axis.describe()} is not an axis of its input "
            f"({', '.join(a.describe() for a in loop) or 'a scalar'}). Fix: pass the Axis the "
            "layer before produces, e.g. ncd.nn.batch_norm(c_out) after conv2d(c_in, c_out)."
        )
    return loop.index(op.axis)


# Streaming roles: every axis is lifted (the statistics are parameters, not reduced)
ROLE_RULES[BatchNorm] = lambda op, axis: "map"
