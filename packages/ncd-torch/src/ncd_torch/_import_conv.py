"""Import rules for convolution and pooling (``aten.conv1d/2d/3d``, ``aten.conv_transpose1d``,
``aten.max_pool1d/2d/3d``, ``aten.avg_pool1d/2d/3d``, ``aten.adaptive_avg_pool*``): each
spatial dim becomes an ``ops.window`` (positions x offsets), a convolution then one einsum
with the weight (kept in PyTorch's layout, so the checkpoint loads as it is) and a pooling one
reduction over the offsets; and eval-mode ``aten.batch_norm``, one ``BatchNorm`` over the
channel dim."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ncd import ops as L
from ncd.ops import _shape
from ncd.primitives.batchnorm import BatchNorm
from ncd.primitives.library import Parameter
from ncd_torch._dtypes import to_numpy
from ncd_torch._import_index import _pieces
from ncd_torch._import_reduce import _emit
from ncd_torch._import_rules import import_rule
from ncd_torch._import_shape import edge_pad

if TYPE_CHECKING:
    from ncd_torch._capture import Capture

__all__: list[str] = []

_SPATIAL = {1: ("l",), 2: ("h", "w"), 3: ("d", "h", "w")}


def _arg(node: Any, k: int, name: str, default: Any) -> Any:
    if len(node.args) > k:
        return node.args[k]
    return node.kwargs.get(name, default)


def _ints(value: Any, nd: int, default: tuple[int, ...]) -> tuple[int, ...]:
    """An int or a list of ints as ``nd`` ints (an empty list: ``default``, torch's stride)."""
    if value is None or (isinstance(value, Sequence) and len(value) == 0):
        return default
    vals = (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)
    return vals * nd if len(vals) == 1 else vals


def _windows(
    c: Capture,
    node: Any,
    x: str,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    fill: float,
    extra: Sequence[int] = (),
) -> tuple[str, list[Any], list[int], list[int]]:
    """One window per spatial dim of ``x`` (its last ``len(kernel)`` dims; ``extra`` padding
    at each dim's end): the value read, the dims before them, and the position and offset
    variables."""
    lead, spatial, outs, offsets = _window_axes(c, node, x, kernel, c.shape(node))
    cur = x
    for i, (a, o, k) in enumerate(zip(spatial, outs, offsets, strict=True)):
        e = extra[i] if extra else 0
        op = L.Window(
            c.axis(a), c.axis(o), c.axis(k), stride[i], padding[i], dilation[i], fill, extra=e
        )
        cur = c.op(node, op, [cur], names=[])
    return cur, lead, outs, offsets


def _window_axes(
    c: Capture, node: Any, x: str, kernel: Sequence[int], shape: Sequence[int]
) -> tuple[list[Any], list[int], list[int], list[int]]:
    """The dims of ``x`` before its last ``len(kernel)``, and the variables of those (the
    windowed dims), of the positions (sized as the end of ``shape``, the output's) and of the
    offsets."""
    nd = len(kernel)
    dims = c.dims[x]
    lead, spatial = list(dims[:-nd]), list(dims[-nd:])
    if any(not isinstance(d, int) for d in spatial):
        raise c.unsupported(node, "a window over a broadcast or folded dim")
    shape = shape[-nd:]
    outs, offsets = [], []
    for i, name in enumerate(_SPATIAL[nd]):
        c.axes.hint(spatial[i], name, 0.3)
        outs.append(c.axes.new(shape[i], f"{name}_out", 0.3))
        offsets.append(c.axes.new(kernel[i], f"k{name}", 1))
    return lead, spatial, outs, offsets


def _conv(c: Capture, node: Any, nd: int) -> None:
    x = c.plain(node.args[0])
    weight = c.param(node.args[1])
    bias_arg = _arg(node, 2, "bias", None)
    bias = c.param(bias_arg) if bias_arg is not None else None
    names = c.take_pending()
    padding_arg = _arg(node, 4, "padding", 0)
    if isinstance(padding_arg, str):
        if padding_arg != "valid":
            raise c.unsupported(node, f"padding={padding_arg!r} (pass the padding as ints)")
        padding_arg = 0
    stride = _ints(_arg(node, 3, "stride", 1), nd, (1,) * nd)
    padding = _ints(padding_arg, nd, (0,) * nd)
    dilation = _ints(_arg(node, 5, "dilation", 1), nd, (1,) * nd)
    groups = int(_arg(node, 6, "groups", 1))
    co, cg, *kernel = weight.shape
    cur, lead, outs, offsets = _windows(c, node, x, kernel, stride, padding, dilation, 0.0)
    ci = lead.pop()
    c.axes.hint(ci, "channels", 0.2)
    co_v = c.axes.new(co, "channels", 0.3)
    leaf = c.leaf(node) or "conv"
    ax = c.axis
    if groups == 1:
        w = c.op(
            node,
            Parameter((ax(co_v), ax(ci), *map(ax, offsets)), param="weight", name=leaf),
            [],
            {"weight": weight},
            names=names[:1],
        )
        x_core = (ax(ci), *(a for o, k in zip(outs, offsets, strict=True) for a in (ax(o), ax(k))))
        spec = L.Einsum((x_core, (ax(co_v), ax(ci), *map(ax, offsets))), (ax(co_v), *map(ax, outs)))
        y = c.op(node, spec, [cur, w], names=[])
    else:
        g = c.axes.new(groups, "groups", 1)
        cg_v = c.axes.new(cg, "c_group", 1)
        og_v = c.axes.new(co // groups, "c_group_out", 1)
        w = c.op(
            node,
            Parameter((ax(co_v), ax(cg_v), *map(ax, offsets)), param="weight", name=leaf),
            [],
            {"weight": weight},
            names=names[:1],
        )
        xg = c.op(node, L.Window(ax(ci), ax(g), ax(cg_v), cg), [cur], names=[])
        wg = c.op(node, L.Window(ax(co_v), ax(g), ax(og_v), co // groups), [w], names=[])
        pairs = (a for o, k in zip(outs, offsets, strict=True) for a in (ax(o), ax(k)))
        spec = L.Einsum(
            ((ax(g), ax(cg_v), *pairs), (ax(g), ax(og_v), ax(cg_v), *map(ax, offsets))),
            (ax(g), ax(og_v), *map(ax, outs)),
        )
        y = c.op(node, spec, [xg, wg], names=[])
        parts = (ax(g), ax(og_v), *map(ax, outs))
        merge = L.View(
            parts,
            (ax(co_v), *map(ax, outs)),
            tuple((a,) for a in parts),
            ((ax(g), ax(og_v)), *((ax(o),) for o in outs)),
        )
        y = c.op(node, merge, [y], names=[])
    if bias is not None:
        b = c.op(
            node,
            Parameter((ax(co_v),), "zeros", param="bias", name=leaf),
            [],
            {"bias": bias},
            names=names[1:],
        )
        y = c.op(node, L.Binary("add"), [y, b], names=[])
    c.set(node, [*lead, co_v, *outs], recorded=True)


@import_rule("aten.conv1d")
def _conv1d(c: Capture, node: Any) -> None:
    _conv(c, node, 1)


@import_rule("aten.conv2d")
def _conv2d(c: Capture, node: Any) -> None:
    _conv(c, node, 2)


@import_rule("aten.conv3d")
def _conv3d(c: Capture, node: Any) -> None:
    _conv(c, node, 3)


@import_rule("aten.conv_transpose1d")
def _conv_transpose1d(c: Capture, node: Any) -> None:
    """``conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation)``:
    one window (the input spread ``stride`` apart, padded by ``dilation (k - 1) - padding``, its
    offsets reversed) then one einsum with the weight ``(in, out/groups, k)`` as torch has it."""
    x = c.plain(node.args[0])
    weight = c.param(node.args[1])
    bias_arg = _arg(node, 2, "bias", None)
    bias = c.param(bias_arg) if bias_arg is not None else None
    names = c.take_pending()
    (s,) = _ints(_arg(node, 3, "stride", 1), 1, (1,))
    (p,) = _ints(_arg(node, 4, "padding", 0), 1, (0,))
    (extra,) = _ints(_arg(node, 5, "output_padding", 0), 1, (0,))
    groups = int(_arg(node, 6, "groups", 1))
    (d,) = _ints(_arg(node, 7, "dilation", 1), 1, (1,))
    ci_n, og_n, k = weight.shape
    if p > d * (k - 1):
        raise c.unsupported(node, "padding larger than dilation * (kernel_size - 1)")
    *lead, ci, length = c.dims[x]
    if not isinstance(length, int) or not isinstance(ci, int):
        raise c.unsupported(node, "a window over a broadcast or folded dim")
    c.axes.hint(length, "l", 0.3)
    c.axes.hint(ci, "channels", 0.2)
    o = c.axes.new(c.shape(node)[-1], "l_out", 0.3)
    kv = c.axes.new(k, "kl", 1)
    co_v = c.axes.new(og_n * groups, "channels", 0.3)
    ax = c.axis
    view = L.Window(ax(length), ax(o), ax(kv), 1, d * (k - 1) - p, d, 0.0, s, extra, True)
    cur = c.op(node, view, [x], names=[])
    og_v = c.axes.new(og_n, "c_group_out", 1) if groups > 1 else co_v
    w = c.op(
        node,
        Parameter((ax(ci), ax(og_v), ax(kv)), param="weight", name=c.leaf(node) or "conv"),
        [],
        {"weight": weight},
        names=names[:1],
    )
    if groups == 1:
        spec = L.Einsum(((ax(ci), ax(o), ax(kv)), (ax(ci), ax(co_v), ax(kv))), (ax(co_v), ax(o)))
        y = c.op(node, spec, [cur, w], names=[])
    else:
        g = c.axes.new(groups, "groups", 1)
        cg = c.axes.new(ci_n // groups, "c_group", 1)
        xg = c.op(node, L.Window(ax(ci), ax(g), ax(cg), ci_n // groups), [cur], names=[])
        wg = c.op(node, L.Window(ax(ci), ax(g), ax(cg), ci_n // groups), [w], names=[])
        spec = L.Einsum(
            ((ax(g), ax(cg), ax(o), ax(kv)), (ax(g), ax(cg), ax(og_v), ax(kv))),
            (ax(g), ax(og_v), ax(o)),
        )
        y = c.op(node, spec, [xg, wg], names=[])
        parts = (ax(g), ax(og_v), ax(o))
        merge = L.View(
            parts, (ax(co_v), ax(o)), tuple((a,) for a in parts), ((ax(g), ax(og_v)), (ax(o),))
        )
        y = c.op(node, merge, [y], names=[])
    if bias is not None:
        b = c.op(
            node,
            Parameter((ax(co_v),), "zeros", param="bias", name=c.leaf(node) or "conv"),
            [],
            {"bias": bias},
            names=names[1:],
        )
        c.op(node, L.Binary("add"), [y, b], names=[])
    c.set(node, [*lead, co_v, o], recorded=True)


def _pool(c: Capture, node: Any, nd: int, fn: str) -> None:
    x, (k, s, p, d, e) = _pool_geometry(c, node, nd, fn, c.shape(node))
    fill = -math.inf if fn == "max" else 0.0
    cur, lead, outs, offsets = _windows(c, node, x, k, s, p, d, fill, e)
    c.op(node, L.Reduce(fn, tuple(c.axis(k) for k in offsets)), [cur], names=[])
    c.set(node, [*lead, *outs], recorded=True)


#: a pooling's kernel, stride, padding, dilation and extra end padding, per windowed dim
_Geometry = tuple[
    tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]
]


def _pool_geometry(
    c: Capture, node: Any, nd: int, fn: str, out: Sequence[int]
) -> tuple[str, _Geometry]:
    """A pooling's input and its windows: kernel, stride, padding, dilation and the extra end
    padding of ``ceil_mode``'s last partial window (``out``: the output's shape)."""
    x = c.plain(node.args[0])
    kernel = _ints(node.args[1], nd, ())
    stride = _ints(_arg(node, 2, "stride", []), nd, kernel)
    padding = _ints(_arg(node, 3, "padding", 0), nd, (0,) * nd)
    if fn == "max":
        dilation = _ints(_arg(node, 4, "dilation", 1), nd, (1,) * nd)
    else:
        dilation = (1,) * nd
        if not _arg(node, 5, "count_include_pad", True) and any(padding):
            raise c.unsupported(node, "count_include_pad=False with padding")
        if _arg(node, 6, "divisor_override", None) is not None:
            raise c.unsupported(node, "divisor_override")
    n_in = c.shape(node.args[0])[-nd:]
    want = [
        (n + 2 * p - d * (k - 1) - 1) // s + 1
        for n, k, s, p, d in zip(n_in, kernel, stride, padding, dilation, strict=True)
    ]
    got = list(out[-nd:])
    extra = (0,) * nd
    if got != want:  # ceil_mode: a last, partial window; the end padded for it
        if fn != "max":
            raise c.unsupported(node, "ceil_mode=True where it adds a partial window (avg)")
        extra = tuple(
            max((m - 1) * s + d * (k - 1) + 1 - (n + 2 * p), 0)
            for m, n, k, s, p, d in zip(got, n_in, kernel, stride, padding, dilation, strict=True)
        )
    return x, (kernel, stride, padding, dilation, extra)


def _pool_with_indices(c: Capture, node: Any, nd: int) -> None:
    """``max_pool(..., return_indices=True)``: the values as ``max_pool``'s, and the indices
    as ``ncd.conv.pool_indices`` (int64 positions in each input plane, torch's)."""
    from ncd.conv import pool_indices

    out = tuple(int(n) for n in node.meta["val"][0].shape)
    x, (kernel, stride, padding, dilation, extra) = _pool_geometry(c, node, nd, "max", out)
    for g in _pieces(c, node):
        if int(g.args[1]) == 0:
            cur, lead, outs, offsets = _windows(
                c, g, x, kernel, stride, padding, dilation, -math.inf, extra
            )
            c.op(g, L.Reduce("max", tuple(c.axis(k) for k in offsets)), [cur], names=[])
        else:
            lead, spatial, outs, offsets = _window_axes(c, g, x, kernel, out)
            windows = [
                (c.axis(a), c.axis(o), c.axis(k), s, p, d, e)
                for a, o, k, s, p, d, e in zip(
                    spatial, outs, offsets, stride, padding, dilation, extra, strict=True
                )
            ]
            _emit(c, g, x, pool_indices(windows, name=c.leaf(g)))
        c.set(g, [*lead, *outs], recorded=True)


@import_rule("aten.max_pool1d_with_indices")
def _max_pool1d_indices(c: Capture, node: Any) -> None:
    _pool_with_indices(c, node, 1)


@import_rule("aten.max_pool2d_with_indices")
def _max_pool2d_indices(c: Capture, node: Any) -> None:
    _pool_with_indices(c, node, 2)


@import_rule("aten.max_pool3d_with_indices")
def _max_pool3d_indices(c: Capture, node: Any) -> None:
    _pool_with_indices(c, node, 3)


@import_rule("aten.max_pool1d")
def _max_pool1d(c: Capture, node: Any) -> None:
    _pool(c, node, 1, "max")


@import_rule("aten.max_pool2d")
def _max_pool2d(c: Capture, node: Any) -> None:
    _pool(c, node, 2, "max")


@import_rule("aten.avg_pool1d")
def _avg_pool1d(c: Capture, node: Any) -> None:
    _pool(c, node, 1, "mean")


@import_rule("aten.avg_pool2d")
def _avg_pool2d(c: Capture, node: Any) -> None:
    _pool(c, node, 2, "mean")


@import_rule("aten.max_pool3d")
def _max_pool3d(c: Capture, node: Any) -> None:
    _pool(c, node, 3, "max")


@import_rule("aten.avg_pool3d")
def _avg_pool3d(c: Capture, node: Any) -> None:
    _pool(c, node, 3, "mean")


@import_rule("aten.batch_norm")
def _batch_norm(c: Capture, node: Any) -> None:
    """``batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)`` in
    eval mode: the running statistics (buffers) are read as parameters of one ``BatchNorm``."""
    x, weight, bias, mean, var = node.args[:5]
    if _arg(node, 5, "training", False):
        _batch_norm_train(c, node)
        return
    if mean is None or var is None:
        raise c.unsupported(node, "no running statistics (track_running_stats=False)")
    key = c.plain(x)
    dims = c.dims[key]
    if len(dims) < 2 or not isinstance(dims[1], int):
        raise c.unsupported(node, "an input without a channel dim at dim 1")
    params: dict[str, Any] = {}
    names = []
    if weight is not None and bias is not None:
        params["weight"], params["bias"] = c.param(weight), c.param(bias)
        names = c.take_pending()
    elif weight is not None or bias is not None:
        raise c.unsupported(node, "a weight without a bias (or the reverse)")
    for stat, arg in (("running_mean", mean), ("running_var", var)):
        if getattr(arg, "name", None) not in c.const_of:
            raise c.unsupported(node, f"a {stat} that is not a buffer")
        params[stat] = np.array(to_numpy(c._stored(arg.name)))
        names.append(c.const_of[arg.name])
    c.axes.hint(dims[1], "channels", 0.3)
    eps = float(_arg(node, 7, "eps", 1e-5))
    op = BatchNorm(c.axis(dims[1]), eps, "weight" in params, name=c.leaf(node) or "bn")
    c.op(node, op, [key], params, names=names)
    c.set(node, list(dims), recorded=True)


def _batch_norm_train(c: Capture, node: Any) -> None:
    """Training mode: each channel normalised by the statistics of the batch (over dim 0 and
    the spatial dims), then the affine weight and bias: ``ops.batch_norm(over=...)``'s ops.
    The running statistics are not read in this mode; torch updates them in place, which the
    imported model (a function of its inputs) does not: ``running=True`` in ncd gives them."""
    x, weight, bias = node.args[:3]
    key = c.plain(x)
    dims = c.dims[key]
    if len(dims) < 2 or not all(isinstance(d, int) for d in dims):
        raise c.unsupported(node, "an input without its own batch, channel and spatial dims")
    if (weight is None) != (bias is None):
        raise c.unsupported(node, "a weight without a bias (or the reverse)")
    ch, over = dims[1], [dims[0], *dims[2:]]
    count = math.prod(c.axes.size[d] or 0 for d in over)
    if count == 1:
        raise c.unsupported(node, "one value per channel (torch refuses it too)")
    ax = c.axis
    c.axes.hint(ch, "channels", 0.3)
    leaf = c.leaf(node) or "bn"
    eps = float(_arg(node, 7, "eps", 1e-5))
    norm = L.LayerNorm(tuple(ax(d) for d in over), eps, affine=False, name=leaf)
    y = c.op(node, norm, [key], names=[])
    c.dims[y] = list(dims)
    _channel_affine(c, node, y, dims, ch, weight, bias, leaf)


def _channel_affine(
    c: Capture, node: Any, y: Any, dims: list[Any], ch: int, weight: Any, bias: Any, leaf: str
) -> None:
    """``y * weight[ch] + bias[ch]`` (either may be absent), the node's value."""
    for fn, arg, init in (("mul", weight, "ones"), ("add", bias, "zeros")):
        if arg is None:
            continue
        pname = "weight" if fn == "mul" else "bias"
        array = c.param(arg)
        p = c.op(node, Parameter((c.axis(ch),), init, param=pname, name=leaf), [], {pname: array})
        c.dims[p] = [ch]
        y = c.op(node, L.Binary(fn), [y, p], names=[])
        c.dims[y] = list(dims)
    c.set(node, list(dims), recorded=True)


@import_rule("aten.group_norm", "aten.instance_norm")
def _group_norm(c: Capture, node: Any) -> None:
    """``group_norm(x, groups, weight, bias, eps)`` and ``instance_norm`` without running
    statistics (a group per channel): the channels split into groups (a window read in place),
    a LayerNorm without affine over each group's channels and the spatial dims, the channels
    joined back, then the per-channel weight and bias (``nn.group_norm``'s ops)."""
    instance = c.aten(node) == "aten.instance_norm"
    if instance:
        x, weight, bias, mean, var = node.args[:5]
        if mean is not None or var is not None or not _arg(node, 5, "use_input_stats", True):
            raise c.unsupported(node, "instance norm with running statistics")
        eps = float(_arg(node, 7, "eps", 1e-5))
    else:
        x = node.args[0]
        weight, bias = _arg(node, 2, "weight", None), _arg(node, 3, "bias", None)
        eps = float(_arg(node, 4, "eps", 1e-5))
    key = c.plain(x)
    dims = c.dims[key]
    if len(dims) < 2 or not all(isinstance(d, int) for d in dims[1:]):
        raise c.unsupported(node, "an input without a channel dim at dim 1 and its own dims after")
    ch, rest = dims[1], dims[2:]
    n = c.axes.size[ch]
    groups = n if instance else int(node.args[1])
    if n % groups:
        raise c.unsupported(node, f"{n} channels in {groups} groups")
    ax = c.axis
    c.axes.hint(ch, "channels", 0.3)
    g, member = c.axes.new(groups, "groups", 1), c.axes.new(n // groups, "c_in_group", 1)
    leaf = c.leaf(node) or ("instance_norm" if instance else "gn")
    y = c.op(node, L.Window(ax(ch), ax(g), ax(member), n // groups), [key], names=[])
    c.dims[y] = [*dims[:1], g, member, *rest]
    norm = L.LayerNorm((ax(member), *map(ax, rest)), eps, affine=False, name="norm")
    y = c.op(node, norm, [y], names=[])
    c.dims[y] = [*dims[:1], g, member, *rest]
    parts = (ax(g), ax(member), *map(ax, rest))
    merge = L.View(
        parts,
        (ax(ch), *map(ax, rest)),
        tuple((a,) for a in parts),
        ((ax(g), ax(member)), *((ax(r),) for r in rest)),
    )
    y = c.op(node, merge, [y], names=[])
    c.dims[y] = list(dims)
    _channel_affine(c, node, y, dims, ch, weight, bias, leaf)


@import_rule("aten.adaptive_avg_pool1d", "aten.adaptive_avg_pool2d", "aten.adaptive_avg_pool3d")
def _adaptive_avg_pool(c: Capture, node: Any) -> None:
    """Adaptive average pooling to an output size that divides the input (a ResNet's global
    pooling, output 1): windows with kernel = stride = input // output, then their mean."""
    nd = int(c.aten(node)[-2])
    x = c.plain(node.args[0])
    out = _ints(node.args[1], nd, ())
    n_in = c.shape(node.args[0])[-nd:]
    if any(o is None or n % o for n, o in zip(n_in, out, strict=True)):
        raise c.unsupported(node, f"an output size {list(out)} that does not divide {list(n_in)}")
    if all(o == 1 for o in out):  # global pooling: the mean over the dims, kept as size 1
        dims = c.dims[x]
        spatial = dims[-nd:]
        if any(not isinstance(d, int) for d in spatial):
            raise c.unsupported(node, "a pooling over a broadcast or folded dim")
        c.op(node, L.Reduce("mean", tuple(c.axis(d) for d in spatial)), [x], names=[])
        c.set(node, [*dims[:-nd], *([None] * nd)], recorded=True)
        flat = next(iter(node.users)) if len(node.users) == 1 else None
        views = ("aten.flatten", "aten.view", "aten.reshape")
        # a flatten dropping the size-1 dims (a ResNet's head) reads the same value
        if flat is not None and c.aten(flat) in views and c.shape(flat) == c.shape(node)[:-nd]:
            c.alias(flat, node, list(dims[:-nd]))
            c.done.add(flat.name)
        return
    kernel = tuple(n // o for n, o in zip(n_in, out, strict=True))
    cur, lead, outs, offsets = _windows(c, node, x, kernel, kernel, (0,) * nd, (1,) * nd, 0.0)
    c.op(node, L.Reduce("mean", tuple(c.axis(k) for k in offsets)), [cur], names=[])
    c.set(node, [*lead, *outs], recorded=True)


@import_rule("aten.pad", "aten.constant_pad_nd")
def _pad(c: Capture, node: Any) -> None:
    """``F.pad(x, (l, r, ...), value=v)`` in constant mode: per padded dim a window of one
    offset padded by ``l`` (``extra = r - l`` at the end, ``fill = v``), the offset summed away."""
    x = c.plain(node.args[0])
    pads = [int(p) for p in node.args[1]]
    mode = _arg(node, 2, "mode", "constant") if c.aten(node) == "aten.pad" else "constant"
    if mode not in _shape.PAD_MODES:
        raise c.unsupported(node, f"mode={mode!r} (constant, reflect, replicate, circular import)")
    if any(p < 0 for p in pads):
        raise c.unsupported(node, "negative padding (a crop)")
    if mode != "constant":
        edge_pad(c, node, x, pads, mode)
        return
    value = _arg(node, 3 if c.aten(node) == "aten.pad" else 2, "value", 0.0)
    value = 0.0 if value is None else float(value)
    dims = list(c.dims[x])
    shape = c.shape(node)
    cur = x
    for i in range(len(pads) // 2):
        left, right = pads[2 * i], pads[2 * i + 1]
        pos = len(dims) - 1 - i
        d = dims[pos]
        if not isinstance(d, int):
            raise c.unsupported(node, "padding a broadcast or folded dim")
        if left == right == 0:
            continue
        o = c.axes.new(shape[pos], c.axes.name(d), 0.1)
        one = c.axes.new(1, "k_pad", 1)
        # padded by ``left`` at both ends, then ``right - left`` more (or less) at the end
        op = L.Window(c.axis(d), c.axis(o), c.axis(one), 1, left, 1, value, 1, right - left)
        cur = c.op(node, op, [cur], names=[])
        cur = c.op(node, L.Reduce("sum", (c.axis(one),)), [cur], names=[])
        dims[pos] = o
    if cur == x:
        c.alias(node, x)
        return
    c.set(node, dims, recorded=True)
