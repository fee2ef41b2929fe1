"""Batch norm in training form (issue 15): the batch statistics and the running buffers.

``torch.nn.BatchNorm*`` in ``train()`` mode normalises each channel by the mean and the biased
variance of the batch (over the batch and spatial axes), then applies the affine ``weight`` and
``bias``; it also moves its running statistics towards the batch's, ``running = (1 - momentum)
* running + momentum * batch`` (the variance unbiased, ``n / (n - 1)``). Here the normalisation
is a ``LayerNorm`` over those axes lifted over the channels, and the running statistics are a
second and third output computed from the same input, so every interpretation (reference, torch
export, OpenCL, CUDA, FLOPs, diagram, JSON, gradient) applies unchanged. The running statistics
are buffers: read and written by the model, never given a gradient, and their new values pass
through ``stop_gradient`` (torch updates them under ``no_grad``), so ``ncd.grad`` of a model
with ``running=True`` needs seeds for its loss only.
"""

from __future__ import annotations

import math

from ncd._term import Term, copy, identity
from ncd.axis import Axis, show
from ncd.errors import DefinitionError, SizeError
from ncd.ops._reductions import _p, variance
from ncd.primitives.library import Binary, LayerNorm, Parameter, Reduce, Scalar, Unary, View

__all__ = ["batch_norm_train"]


def _check(channels: Axis, over: tuple[Axis, ...], momentum: float, running: bool) -> None:
    if not over or channels in over or len(set(over)) != len(over):
        raise DefinitionError(
            f"batch_norm over {[a.describe() for a in over]}: the statistics need one or more "
            f"distinct axes other than the channels {channels.describe()} (the batch and the "
            "spatial axes). Fix: e.g. ops.batch_norm('c', over=('batch', 'h', 'w'))."
        )
    if not isinstance(channels.size, int):
        raise SizeError(
            f"batch_norm: the channel axis {channels.describe()} needs a size (its parameters "
            "are one per channel). Fix: pass an ncd.Axis('c', size=16)."
        )
    if isinstance(momentum, bool) or not isinstance(momentum, int | float):
        raise DefinitionError(f"batch_norm: momentum must be a number, got {show(momentum)}.")
    if not 0.0 <= float(momentum) <= 1.0:
        raise DefinitionError(
            f"batch_norm: momentum {momentum} is outside [0, 1]. Fix: pass torch's 0.1."
        )
    sizes = [a.size for a in over]
    if running and all(isinstance(n, int) for n in sizes):
        count = math.prod(n for n in sizes if isinstance(n, int))
        if count < 2:
            raise SizeError(
                f"batch_norm over {', '.join(a.describe() for a in over)}: {count} value per "
                f"channel, so the unbiased variance of the running statistics is 0/0 (torch "
                "refuses it too). Fix: train with more than one value per channel (a larger "
                "batch or spatial size)."
            )


def _channel(channels: Axis, init: str, param: str, name: str, buffer: bool = False) -> Term:
    return _p(Parameter((channels,), init, param=param, buffer=buffer, name=name))


def batch_norm_train(
    channels: Axis,
    over: tuple[Axis, ...],
    *,
    eps: float,
    affine: bool,
    momentum: float,
    running: bool,
    name: str,
) -> Term:
    """The training form over ``over`` (see the module doc), its input typed ``[over[0],
    channels, *over[1:]]`` (torch's ``[N C H W]`` for ``over=(batch, h, w)``); ``running``:
    three outputs, the normalised value and the updated ``{name}.running_mean`` and
    ``{name}.running_var``."""
    _check(channels, over, momentum, running)
    # typed in torch's order when ``over`` starts with the batch: [batch c *spatial]
    order = (over[0], channels, *over[1:])
    typed = identity(list(order))
    y = typed >> _p(LayerNorm(over, eps, affine=False, name=name))
    if affine:
        for param, init, fn in (("weight", "ones", "mul"), ("bias", "zeros", "add")):
            y = y >> (identity(1) @ _channel(channels, init, param, name)) >> _p(Binary(fn))
    # the normalised value in the input's order (a view: no data moves in a kernel)
    y = y >> _p(View(order, order, tuple((a,) for a in order), tuple((a,) for a in order)))
    if not running:
        return y
    m = float(momentum)

    def blend(batch: Term, buffer: str, init: str) -> Term:
        old = _channel(channels, init, buffer, name, buffer=True) >> _p(Scalar("mul", 1.0 - m))
        new = ((batch >> _p(Scalar("mul", m))) @ old) >> _p(Binary("add"))
        return new >> _p(Unary("stop_gradient"))  # torch updates them under no_grad

    mean = blend(_p(Reduce("mean", over)), "running_mean", "zeros")
    var = blend(variance(over, 1), "running_var", "ones")
    return typed >> copy(3) >> (y @ mean @ var)
