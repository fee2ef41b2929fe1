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
from ncd.dtypes import float32
from ncd.errors import DefinitionError
from ncd.op import pinned_format
from ncd.primitives.library import Parameter, View

__all__ = [
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "cnn",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "group_norm",
    "instance_norm",
    "max_pool1d",
    "max_pool2d",
    "pool_indices",
    "resnet_block",
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


#: a window along one axis: (input axis, position axis, offset axis, stride, padding,
#: dilation, extra padding at the end), as ``ops.window`` takes them
WindowSpec = tuple[Axis, Axis, Axis, int, int, int, int]

#: a position past every input position (and exact in float32): where a window reads padding
_PAST = 3.0e38


def _windowed(x: Tensor, windows: Sequence[WindowSpec], fill: float) -> Tensor:
    for a, o, k, s, p, d, e in windows:
        x = ops.window(a, o, k, stride=s, padding=p, dilation=d, fill=fill, extra=e)(x)
    return x


def pool_indices(windows: Sequence[WindowSpec], *, name: str = "") -> Term:
    """``[*inputs] -> [*positions]``, ``int64``: where each window's maximum lies in the input,
    its position flattened row-major over the windowed axes (torch's ``return_indices``):
    the first maximum in the window's order, or, where the window holds NaN, its last NaN
    (torch's comparison ``v > best or isnan(v)``); padding never wins. Positions are computed
    in float32 whatever the model's format (``pinned_format``): exact up to 2^24 elements.
    Sizes may be left to run time (the row length is a ``Scale`` by the later axes)."""
    ins = [w[0] for w in windows]
    ks = tuple(w[2] for w in windows)

    @trace(inputs=[ArrayType(tuple(ins))], name="pool_indices", label="")
    def body(x: Tensor) -> Tensor:
        seen = _windowed(x, windows, -math.inf)
        hit, nan = ops.eq()(seen, ops.reduce("max", ks)(seen)), ops.ne()(seen, seen)
        with pinned_format(float32):  # positions stay exact whatever the model's format
            flat: Tensor | None = None
            for i, a in enumerate(ins):
                ramp: Tensor = ops.arange(a)()
                if ins[i + 1 :]:
                    ramp = ops.scale(ins[i + 1 :], 1.0)(ramp)
                flat = ramp if flat is None else flat + ramp
            assert flat is not None
            where = _windowed(flat, windows, _PAST)
            past, none = ops.constant(_PAST)(), ops.constant(-1.0)()
            first = ops.reduce("min", ks)(ops.where()(hit, where, past))
            last_nan = ops.reduce("max", ks)(ops.where()(nan, where, none))
            index = ops.where()(ops.ge(0.0)(last_nan), last_nan, first)
            out: Tensor = ops.cast("int64", name=name)(index)
        return out

    return body


def _pool(
    kind: str,
    fn: str,
    spatial: Sequence[tuple[AxisArg, AxisArg, str]],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    indices: bool = False,
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
    windows = [
        (a, o, k, s, p, d, 0)
        for a, o, k, s, p, d in zip(ins, outs, ks, stride, padding, dilation, strict=True)
    ]

    @trace(inputs=[ArrayType(tuple(ins))], name=kind, label="")
    def body(x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        y: Tensor = ops.reduce(fn, ks)(_windowed(x, windows, fill))
        if indices:
            return y, pool_indices(windows, name="indices")(x)
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
    return_indices: bool = False,
    length: AxisArg = "l",
    length_out: AxisArg = None,
) -> Term:
    """``torch.nn.MaxPool1d``: the maximum of each window (padding never wins: it is -inf);
    ``return_indices``: also where it lies, ``int64`` (``pool_indices``)."""
    k = _pair("max_pool1d: kernel_size", kernel_size, 1, 1)
    return _pool(
        "max_pool1d",
        "max",
        [(length, length_out, "l")],
        k,
        _strides("max_pool1d", stride, k),
        _pair("max_pool1d: padding", padding, 1, 0),
        _pair("max_pool1d: dilation", dilation, 1, 1),
        return_indices,
    )


def max_pool2d(
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    *,
    dilation: int | Sequence[int] = 1,
    return_indices: bool = False,
    height: AxisArg = "h",
    width: AxisArg = "w",
    height_out: AxisArg = None,
    width_out: AxisArg = None,
) -> Term:
    """``torch.nn.MaxPool2d`` over ``[h w]`` (channels and batch lifted); ``return_indices``:
    also where each maximum lies, ``h * |w| + w`` as ``int64`` (``pool_indices``)."""
    k = _pair("max_pool2d: kernel_size", kernel_size, 2, 1)
    return _pool(
        "max_pool2d",
        "max",
        [(height, height_out, "h"), (width, width_out, "w")],
        k,
        _strides("max_pool2d", stride, k),
        _pair("max_pool2d: padding", padding, 2, 0),
        _pair("max_pool2d: dilation", dilation, 2, 1),
        return_indices,
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


def batch_norm(
    channels: Axis,
    *,
    eps: float = 1e-5,
    affine: bool = True,
    name: str = "bn",
    over: Sequence[Axis | str] | None = None,
    momentum: float = 0.1,
    running: bool = False,
) -> Term:
    """``torch.nn.BatchNorm1d/2d`` over ``[channels, *spatial]``. Eval mode (the default): the
    running statistics (``{name}.running_mean``/``running_var``, buffers) and the affine
    ``weight``/``bias``; elementwise, so it runs in the kernel of the convolution before it.
    Train mode (``over``: the batch and spatial axes): the batch statistics, and with
    ``running=True`` the updated running statistics as two more outputs (``ops.batch_norm``).
    ``channels`` is the Axis the layer before produces (``conv2d(c_in, c_out) >>
    batch_norm(c_out)``)."""
    if not isinstance(channels, Axis):
        raise DefinitionError(
            f"batch_norm: channels must be the Axis of the layer before, got {show(channels)}. "
            "Fix: c = ncd.Axis('c_out', size=16); conv2d(3, c) >> batch_norm(c)."
        )
    return ops.batch_norm(
        channels, eps=eps, affine=affine, name=name, over=over, momentum=momentum, running=running
    )


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


def resnet_block(
    c_in: AxisArg = "c_in",
    c_out: AxisArg = None,
    *,
    stride: int = 1,
    height: AxisArg = "h",
    width: AxisArg = "w",
    label: str = "block",
) -> Term:
    """torchvision's ``BasicBlock`` in eval form over ``[c_in h w]``: ``conv1`` (3x3, stride,
    no bias) ``bn1`` ReLU ``conv2`` (3x3) ``bn2``, plus the input (through ``downsample.0``, a
    1x1 conv with the stride, and ``downsample.1``, a batch norm, when the stride or the
    channels change), then ReLU; the parameters named as torchvision's so its ``state_dict``
    loads. The output is ``[c_out h_out w_out]``."""
    ci = _ax("c_in", c_in)
    co = Axis("c_out", size=ci.size) if c_out is None else _ax("c_out", c_out)
    s = _pair("resnet_block: stride", stride, 1, 1)[0]
    h, w = _ax("h", height), _ax("w", width)
    mid = Axis("c_mid", size=co.size)
    h1, w1 = Axis("h_mid", size=None), Axis("w_mid", size=None)
    h2, w2 = Axis("h_out", size=None), Axis("w_out", size=None)
    shortcut = s != 1 or ci.size != co.size

    @trace(inputs=[ArrayType((ci, h, w))], name="resnet_block", label=label)
    def body(x: Tensor) -> Tensor:
        def conv(c1: Axis, c2: Axis, k: int, st: int, p: int, hs: tuple[Axis, ...], n: str) -> Any:
            return conv2d(
                c1,
                c2,
                k,
                stride=st,
                padding=p,
                bias=False,
                height=hs[0],
                width=hs[1],
                height_out=hs[2],
                width_out=hs[3],
                name=n,
            )

        y = conv(ci, mid, 3, s, 1, (h, w, h1, w1), "conv1")(x)
        y = ops.relu()(batch_norm(mid, name="bn1")(y))
        y = conv(mid, co, 3, 1, 1, (h1, w1, h2, w2), "conv2")(y)
        y = batch_norm(co, name="bn2")(y)
        if shortcut:
            hd, wd = Axis("h_down", size=None), Axis("w_down", size=None)
            r = conv(ci, co, 1, s, 0, (h, w, hd, wd), "downsample.0")(x)
            r = batch_norm(co, name="downsample.1")(r)
            r = ops.rename(wd, w2)(ops.rename(hd, h2)(r))
        else:
            r = ops.rename(w, w2)(ops.rename(h, h2)(ops.rename(ci, co)(x)))
        out: Tensor = ops.relu()(y + r)
        return out

    return body


def cnn(
    classes: int = 10,
    *,
    c_in: int = 1,
    size: int = 28,
    label: str = "cnn",
) -> Term:
    """A LeNet-sized conv net over ``[c h w]`` images (``c_in`` channels, ``size`` square, at
    least 16): ``conv1`` 5x5 to 6 channels (padding 2), ReLU, 2x2 max pool, ``conv2`` 5x5 to
    16, ReLU, 2x2 max pool, then ``fc1`` (to 120) ReLU ``fc2`` (84) ReLU ``fc3`` (``classes``)
    over the pooled features, as LeNet-5; ``fc1``'s weight is ``(120, 16, h', w')``, torch's
    ``(120, 16 h' w')`` reshaped."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 16:
        raise DefinitionError(
            f"cnn: size must be an int >= 16 (two 5x5 convolutions and two 2x2 pools), got "
            f"{show(size)}. Fix: pass size=28 (MNIST) or 32 (CIFAR)."
        )
    c0, c1, c2 = Axis("c", size=c_in), Axis("c1", size=6), Axis("c2", size=16)
    h, w = Axis("h", size=size), Axis("w", size=size)
    a = [Axis(f"{n}{k}", size=None) for k in range(1, 5) for n in ("h", "w")]
    hid, hid2, out = Axis("hidden", size=120), Axis("hidden2", size=84), Axis("class", size=classes)

    @trace(inputs=[ArrayType((c0, h, w))], name="cnn", label=label)
    def body(x: Tensor) -> Tensor:
        x = conv2d(
            c0, c1, 5, padding=2, height=h, width=w, height_out=a[0], width_out=a[1], name="conv1"
        )(x)
        x = max_pool2d(2, height=a[0], width=a[1], height_out=a[2], width_out=a[3])(ops.relu()(x))
        x = conv2d(
            c1, c2, 5, height=a[2], width=a[3], height_out=a[4], width_out=a[5], name="conv2"
        )(x)
        x = max_pool2d(2, height=a[4], width=a[5], height_out=a[6], width_out=a[7])(ops.relu()(x))
        x = ops.relu()(ops.linear([c2, a[6], a[7]], [hid], name="fc1")(x))
        x = ops.relu()(ops.linear([hid], [hid2], name="fc2")(x))
        y: Tensor = ops.linear([hid2], [out], name="fc3")(x)
        return y

    return body
