"""Convolution and pooling as algebra: windows (``ops.window``) then an einsum with the kernel,
or a reduction over the offsets. ``conv1d``/``conv2d`` keep torch's weight layout
``(c_out, c_in / groups, *kernel)`` so a ``state_dict`` loads as it is; ``ncd.nn`` re-exports
them. Inputs are ``[c_in, *spatial]`` (a batch axis is lifted), as torch's ``NC(H)W``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ncd import ops
from ncd._term import Term
from ncd._trace import Tensor, trace
from ncd.axis import ArrayType, Axis, show
from ncd.axis import axis_arg as _ax
from ncd.errors import DefinitionError
from ncd.primitives.library import Parameter, View

__all__ = [
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "group_norm",
    "instance_norm",
    "max_pool1d",
    "max_pool2d",
]

AxisArg = Axis | int | str | None


def _pair(what: str, value: int | Sequence[int], dims: int, low: int) -> tuple[int, ...]:
    vals = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(vals) != dims or any(isinstance(v, bool) or not isinstance(v, int) for v in vals):
        raise DefinitionError(
            f"{what} must be an int or {dims} ints, got {show(value)}. Fix: pass e.g. "
            f"{what}={max(low, 1)}."
        )
    if any(v < low for v in vals):
        raise DefinitionError(
            f"{what} must be >= {low}, got {show(value)}. Fix: pass {low} or more."
        )
    return vals


def _split(whole: Axis, parts: tuple[Axis, Axis]) -> Term:
    """``whole`` as ``(group, member)``, ``x[g, i] = x[g * |member| + i]``: a window whose
    stride is its length, so it too is read in place."""
    g, member = parts
    return ops.window(whole, g, member, stride=member.size or 1)


def _merge(parts: tuple[Axis, Axis], whole: Axis, rest: Sequence[Axis]) -> Term:
    """``[*parts, *rest] -> [whole, *rest]``: the groups' channels joined, ahead of ``rest``."""
    ins = (*parts, *rest)
    return ops.prim(
        View(ins, (whole, *rest), tuple((a,) for a in ins), (parts, *((a,) for a in rest)))
    )


def _conv(
    kind: str,
    c_in: AxisArg,
    c_out: AxisArg,
    spatial: Sequence[tuple[AxisArg, AxisArg, str]],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
    bias: bool,
    name: str,
) -> Term:
    ci, co = _ax("c_in", c_in), _ax("c_out", c_out)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise DefinitionError(f"{kind}: groups must be a positive int, got {show(groups)}.")
    for ch in (ci, co):
        if groups > 1 and (ch.size is None or ch.size % groups):
            raise DefinitionError(
                f"{kind}: {ch.describe()} must be a known multiple of groups={groups} (each "
                f"group convolves |c_in|/{groups} channels into |c_out|/{groups}). Fix: size the "
                "channels as a multiple of groups."
            )
    ins = [_ax(a, v) for (v, _, a) in spatial]
    outs = [_ax(f"{a}_out", v) for (_, v, a) in spatial]
    ks = [Axis(f"k{a}", size=k) for (_, _, a), k in zip(spatial, kernel, strict=True)]
    cg = Axis("c_group", size=(ci.size or 0) // groups) if groups > 1 else ci

    @trace(inputs=[ArrayType((ci, *ins))], name=kind, label="")
    def body(x: Tensor) -> Tensor:
        for a, o, k, s, p, d in zip(ins, outs, ks, stride, padding, dilation, strict=True):
            x = ops.window(a, o, k, stride=s, padding=p, dilation=d)(x)
        w = ops.prim(Parameter((co, cg, *ks), "normal", param="weight", name=name))()
        wins = " ".join(f"{o.name} {k.name}" for o, k in zip(outs, ks, strict=True))
        kn = " ".join(k.name for k in ks)
        on = " ".join(o.name for o in outs)
        named: dict[str, Any] = {a.name: a for a in (*outs, *ks)}
        if groups == 1:
            spec = f"c_in {wins}, c_out c_in {kn} -> c_out {on}"
            y: Tensor = ops.einsum(spec, **named, c_in=ci, c_out=co)(x, w)
        else:
            g, og = Axis("groups", size=groups), Axis("c_group_out", size=(co.size or 0) // groups)
            xg = _split(ci, (g, cg))(x)
            wg = _split(co, (g, og))(w)
            spec = f"g cg {wins}, g og cg {kn} -> g og {on}"
            y = ops.einsum(spec, **named, g=g, cg=cg, og=og)(xg, wg)
            y = _merge((g, og), co, outs)(y)
        if bias:
            y = y + ops.prim(Parameter((co,), "zeros", param="bias", name=name))()
        return y

    return body


def conv1d(
    c_in: AxisArg = "c_in",
    c_out: AxisArg = "c_out",
    kernel_size: int = 3,
    *,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
    length: AxisArg = "l",
    length_out: AxisArg = None,
    name: str = "conv",
) -> Term:
    """``torch.nn.Conv1d``: ``[c_in l] -> [c_out l_out]``, the weight ``(c_out, c_in/groups,
    k)`` and bias ``(c_out,)`` as ``{name}.weight``/``{name}.bias``; ``l_out`` is derived."""
    return _conv(
        "conv1d",
        c_in,
        c_out,
        [(length, length_out, "l")],
        _pair("conv1d: kernel_size", kernel_size, 1, 1),
        _pair("conv1d: stride", stride, 1, 1),
        _pair("conv1d: padding", padding, 1, 0),
        _pair("conv1d: dilation", dilation, 1, 1),
        groups,
        bias,
        name,
    )


def conv2d(
    c_in: AxisArg = "c_in",
    c_out: AxisArg = "c_out",
    kernel_size: int | Sequence[int] = 3,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    bias: bool = True,
    height: AxisArg = "h",
    width: AxisArg = "w",
    height_out: AxisArg = None,
    width_out: AxisArg = None,
    name: str = "conv",
) -> Term:
    """``torch.nn.Conv2d``: ``[c_in h w] -> [c_out h_out w_out]``, the weight ``(c_out,
    c_in/groups, kh, kw)``: two windows then one einsum (plus the bias)."""
    return _conv(
        "conv2d",
        c_in,
        c_out,
        [(height, height_out, "h"), (width, width_out, "w")],
        _pair("conv2d: kernel_size", kernel_size, 2, 1),
        _pair("conv2d: stride", stride, 2, 1),
        _pair("conv2d: padding", padding, 2, 0),
        _pair("conv2d: dilation", dilation, 2, 1),
        groups,
        bias,
        name,
    )


def conv3d(
    c_in: AxisArg = "c_in",
    c_out: AxisArg = "c_out",
    kernel_size: int | Sequence[int] = 3,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    bias: bool = True,
    depth: AxisArg = "d",
    height: AxisArg = "h",
    width: AxisArg = "w",
    name: str = "conv",
) -> Term:
    """``torch.nn.Conv3d``: ``[c_in d h w] -> [c_out d_out h_out w_out]``, the weight ``(c_out,
    c_in/groups, kd, kh, kw)``: three windows then one einsum (plus the bias)."""
    return _conv(
        "conv3d",
        c_in,
        c_out,
        [(depth, None, "d"), (height, None, "h"), (width, None, "w")],
        _pair("conv3d: kernel_size", kernel_size, 3, 1),
        _pair("conv3d: stride", stride, 3, 1),
        _pair("conv3d: padding", padding, 3, 0),
        _pair("conv3d: dilation", dilation, 3, 1),
        groups,
        bias,
        name,
    )


def conv_transpose1d(
    c_in: AxisArg = "c_in",
    c_out: AxisArg = "c_out",
    kernel_size: int = 3,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
    bias: bool = True,
    dilation: int = 1,
    length: AxisArg = "l",
    length_out: AxisArg = None,
    name: str = "conv",
) -> Term:
    """``torch.nn.ConvTranspose1d``: ``[c_in l] -> [c_out l_out]``, ``l_out = (l - 1) stride -
    2 padding + dilation (k - 1) + output_padding + 1``, the weight ``(c_in, c_out/groups, k)``
    as torch stores it. One window (the input spread ``stride`` apart, padded by ``dilation (k
    - 1) - padding``, offsets reversed: the kernel flip) then one einsum, as a convolution."""
    k = _pair("conv_transpose1d: kernel_size", kernel_size, 1, 1)[0]
    s = _pair("conv_transpose1d: stride", stride, 1, 1)[0]
    d = _pair("conv_transpose1d: dilation", dilation, 1, 1)[0]
    p = _pair("conv_transpose1d: padding", padding, 1, 0)[0]
    extra = _pair("conv_transpose1d: output_padding", output_padding, 1, 0)[0]
    if extra >= max(s, d):
        raise DefinitionError(
            f"conv_transpose1d: output_padding {extra} must be smaller than the stride {s} or "
            f"the dilation {d} (torch's rule). Fix: pass output_padding < {max(s, d)}."
        )
    if p > d * (k - 1):
        raise DefinitionError(
            f"conv_transpose1d: padding {p} is more than dilation * (kernel_size - 1) = "
            f"{d * (k - 1)}, which would crop the output from inside. Fix: pass padding <= "
            f"{d * (k - 1)}."
        )
    ci, co = _ax("c_in", c_in), _ax("c_out", c_out)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise DefinitionError(
            f"conv_transpose1d: groups must be a positive int, got {show(groups)}."
        )
    for ch in (ci, co):
        if groups > 1 and (ch.size is None or ch.size % groups):
            raise DefinitionError(
                f"conv_transpose1d: {ch.describe()} must be a known multiple of groups={groups}. "
                "Fix: size the channels as a multiple of groups."
            )
    length_in, out = _ax("l", length), _ax("l_out", length_out)
    ka = Axis("kl", size=k)
    og = Axis("c_group_out", size=(co.size or 0) // groups) if groups > 1 else co

    @trace(inputs=[ArrayType((ci, length_in))], name="conv_transpose1d", label="")
    def body(x: Tensor) -> Tensor:
        view = ops.window(
            length_in,
            out,
            ka,
            padding=d * (k - 1) - p,
            dilation=d,
            upsample=s,
            extra=extra,
            reverse=True,
        )
        x = view(x)
        w = ops.prim(Parameter((ci, og, ka), "normal", param="weight", name=name))()
        if groups == 1:
            y: Tensor = ops.einsum("ci l k, ci co k -> co l", ci=ci, co=co, l=out, k=ka)(x, w)
        else:
            g, cg = Axis("groups", size=groups), Axis("c_group", size=(ci.size or 0) // groups)
            xg, wg = _split(ci, (g, cg))(x), _split(ci, (g, cg))(w)
            spec = "g cg l k, g cg og k -> g og l"
            y = ops.einsum(spec, g=g, cg=cg, og=og, l=out, k=ka)(xg, wg)
            y = _merge((g, og), co, (out,))(y)
        if bias:
            y = y + ops.prim(Parameter((co,), "zeros", param="bias", name=name))()
        return y

    return body


def _pool(
    kind: str,
    fn: str,
    spatial: Sequence[tuple[AxisArg, AxisArg, str]],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
) -> Term:
    for k, p in zip(kernel, padding, strict=True):
        if 2 * p > k:
            raise DefinitionError(
                f"{kind}: padding {p} is more than half the kernel {k} (torch refuses it: a "
                "window could hold padding only). Fix: pad at most kernel_size // 2."
            )
    fill = -math.inf if fn == "max" else 0.0
    ins = [_ax(a, v) for (v, _, a) in spatial]
    outs = [_ax(f"{a}_out", v) for (_, v, a) in spatial]
    ks = [Axis(f"k{a}", size=k) for (_, _, a), k in zip(spatial, kernel, strict=True)]

    @trace(inputs=[ArrayType(tuple(ins))], name=kind, label="")
    def body(x: Tensor) -> Tensor:
        for a, o, k, s, p, d in zip(ins, outs, ks, stride, padding, dilation, strict=True):
            x = ops.window(a, o, k, stride=s, padding=p, dilation=d, fill=fill)(x)
        y: Tensor = ops.reduce(fn, ks)(x)
        return y

    return body


def _strides(
    kind: str, stride: int | Sequence[int] | None, kernel: tuple[int, ...]
) -> tuple[int, ...]:
    return kernel if stride is None else _pair(f"{kind}: stride", stride, len(kernel), 1)


def max_pool1d(
    kernel_size: int,
    stride: int | None = None,
    padding: int = 0,
    *,
    dilation: int = 1,
    length: AxisArg = "l",
    length_out: AxisArg = None,
) -> Term:
    """``torch.nn.MaxPool1d``: the maximum of each window (padding never wins: it is -inf)."""
    k = _pair("max_pool1d: kernel_size", kernel_size, 1, 1)
    return _pool(
        "max_pool1d",
        "max",
        [(length, length_out, "l")],
        k,
        _strides("max_pool1d", stride, k),
        _pair("max_pool1d: padding", padding, 1, 0),
        _pair("max_pool1d: dilation", dilation, 1, 1),
    )


def max_pool2d(
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    *,
    dilation: int | Sequence[int] = 1,
    height: AxisArg = "h",
    width: AxisArg = "w",
    height_out: AxisArg = None,
    width_out: AxisArg = None,
) -> Term:
    """``torch.nn.MaxPool2d`` over ``[h w]`` (channels and batch lifted)."""
    k = _pair("max_pool2d: kernel_size", kernel_size, 2, 1)
    return _pool(
        "max_pool2d",
        "max",
        [(height, height_out, "h"), (width, width_out, "w")],
        k,
        _strides("max_pool2d", stride, k),
        _pair("max_pool2d: padding", padding, 2, 0),
        _pair("max_pool2d: dilation", dilation, 2, 1),
    )


def avg_pool1d(
    kernel_size: int,
    stride: int | None = None,
    padding: int = 0,
    *,
    length: AxisArg = "l",
    length_out: AxisArg = None,
) -> Term:
    """``torch.nn.AvgPool1d`` with ``count_include_pad=True`` (torch's default): the mean of
    each window, its padding counted as zeros."""
    k = _pair("avg_pool1d: kernel_size", kernel_size, 1, 1)
    return _pool(
        "avg_pool1d",
        "mean",
        [(length, length_out, "l")],
        k,
        _strides("avg_pool1d", stride, k),
        _pair("avg_pool1d: padding", padding, 1, 0),
        (1,),
    )


def avg_pool2d(
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    *,
    height: AxisArg = "h",
    width: AxisArg = "w",
    height_out: AxisArg = None,
    width_out: AxisArg = None,
) -> Term:
    """``torch.nn.AvgPool2d`` with ``count_include_pad=True`` over ``[h w]``."""
    k = _pair("avg_pool2d: kernel_size", kernel_size, 2, 1)
    return _pool(
        "avg_pool2d",
        "mean",
        [(height, height_out, "h"), (width, width_out, "w")],
        k,
        _strides("avg_pool2d", stride, k),
        _pair("avg_pool2d: padding", padding, 2, 0),
        (1, 1),
    )


def batch_norm(channels: Axis, *, eps: float = 1e-5, affine: bool = True, name: str = "bn") -> Term:
    """``torch.nn.BatchNorm1d/2d`` in eval mode over ``[channels, *spatial]``: the running
    statistics (``{name}.running_mean``/``running_var``) and the affine ``weight``/``bias``;
    elementwise, so it runs in the kernel of the convolution before it. ``channels`` is the
    Axis the layer before produces (``conv2d(c_in, c_out) >> batch_norm(c_out)``)."""
    if not isinstance(channels, Axis):
        raise DefinitionError(
            f"batch_norm: channels must be the Axis of the layer before, got {show(channels)}. "
            "Fix: c = ncd.Axis('c_out', size=16); conv2d(3, c) >> batch_norm(c)."
        )
    return ops.batch_norm(channels, eps=eps, affine=affine, name=name)


def group_norm(
    groups: int,
    channels: Axis,
    over: Sequence[Axis] = (),
    *,
    eps: float = 1e-5,
    affine: bool = True,
    name: str = "gn",
) -> Term:
    """``torch.nn.GroupNorm``: the ``channels`` split into ``groups`` of ``|channels| /
    groups``, each group normalised over its channels and the axes ``over`` (the spatial ones,
    ``[channels, *over]`` as torch's ``[C, H, W]``; biased variance, ``eps`` inside the root),
    then a per-channel ``{name}.weight`` and ``{name}.bias`` when ``affine``."""
    if not isinstance(channels, Axis) or not isinstance(channels.size, int):
        raise DefinitionError(
            f"group_norm: channels must be a sized Axis, got {show(channels)}. Fix: pass the "
            "Axis the layer before produces, e.g. c = ncd.Axis('c', size=16)."
        )
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise DefinitionError(f"group_norm: groups must be an int >= 1, got {show(groups)}.")
    if channels.size % groups:
        raise DefinitionError(
            f"group_norm: {channels.describe()} does not split into {groups} groups. Fix: pass "
            f"a number of groups that divides {channels.size}."
        )
    rest = tuple(over)
    g = Axis(f"{channels.name}_groups", size=groups)
    member = Axis(f"{channels.name}_in_group", size=channels.size // groups)
    norm = ops.layernorm((member, *rest), eps=eps, affine=False)

    @trace(inputs=[ArrayType((channels, *rest))], name="group_norm", label="")
    def body(x: Tensor) -> Tensor:
        y = _merge((g, member), channels, rest)(norm(_split(channels, (g, member))(x)))
        if affine:
            weight = ops.prim(Parameter((channels,), "ones", param="weight", name=name))()
            bias = ops.prim(Parameter((channels,), "zeros", param="bias", name=name))()
            y = y * weight + bias
        return y  # type: ignore[no-any-return]

    return body


def instance_norm(
    channels: Axis,
    over: Sequence[Axis] = (),
    *,
    eps: float = 1e-5,
    affine: bool = False,
    name: str = "instance_norm",
) -> Term:
    """``torch.nn.InstanceNorm1d/2d`` (no running statistics): each channel normalised over the
    axes ``over``; torch's defaults (``affine=False``). A group norm with a group per channel."""
    if not isinstance(channels, Axis) or not isinstance(channels.size, int):
        raise DefinitionError(
            f"instance_norm: channels must be a sized Axis, got {show(channels)}. Fix: pass the "
            "Axis the layer before produces, e.g. c = ncd.Axis('c', size=16)."
        )
    return group_norm(channels.size, channels, over, eps=eps, affine=affine, name=name)
