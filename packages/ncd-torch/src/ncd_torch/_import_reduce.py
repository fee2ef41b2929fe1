"""Import rules for issue 15's reductions: ``prod``, ``logsumexp``, ``var``/``std``,
``argmax``/``argmin``, ``max``/``min`` along a dim (values and indices) and ``cumsum``/``cumprod``
of activations. Each records the ops of the ``ncd.ops`` composition on the captured axes, so
the import and ``ncd.ops`` agree by construction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ncd import ops
from ncd._term import Term, identity
from ncd_torch._import_index import _pieces
from ncd_torch._import_rules import import_rule

if TYPE_CHECKING:
    from ncd_torch._capture import Capture


def _emit(c: Capture, node: Any, x: str, term: Term, dims: list[Any] | None = None) -> str:
    """Record ``term``'s ops applied to the captured value ``x`` (its axes the stand-ins;
    ``dims``: those of a value recorded within this rule); the key of the last op."""
    axes = [c.axis(v) for v in c._vars(c.dims[x] if dims is None else dims)]
    graph = (identity(axes) >> term).graph
    ref = {graph.inputs[0]: x}
    for n in graph.nodes:
        if len(n.outputs) != 1:
            raise c.unsupported(node, f"a composite op lowering to the multi-output {n.op.kind}")
        ref[n.outputs[0]] = c.op(node, n.op, [ref[v] for v in n.inputs], names=[])
    return ref[graph.outputs[0]]


def _dim(c: Capture, node: Any, x: str, d: Any) -> int:
    dims = c.dims[x]
    if isinstance(d, list | tuple):
        if len(d) != 1:
            raise c.unsupported(node, "this reduction over several dims at once (reduce one dim)")
        d = d[0]
    i = int(d) % len(dims)
    if dims[i] is None or isinstance(dims[i], tuple):
        raise c.unsupported(node, "a reduction over a size-1 broadcast or folded dim")
    return i


def _reduced(c: Capture, node: Any, x: str, i: int, keep: bool) -> None:
    dims = c.dims[x]
    out = [None if k == i else v for k, v in enumerate(dims)] if keep else dims[:i] + dims[i + 1 :]
    c.set(node, list(out), recorded=True)


def _kw(node: Any, k: int, name: str, default: Any) -> Any:
    return node.args[k] if len(node.args) > k else node.kwargs.get(name, default)


@import_rule("aten.prod")
def _prod(c: Capture, node: Any) -> None:
    """``x.prod()`` (every dim) or ``x.prod(dim, keepdim)``."""
    x = c.plain(node.args[0])
    dims = c.dims[x]
    if len(node.args) < 2 and "dim" not in node.kwargs:
        if any(d is None or isinstance(d, tuple) for d in dims):
            raise c.unsupported(node, "a product over a size-1 broadcast or folded dim")
        c.op(node, ops.Reduce("prod", tuple(c.axis(v) for v in dims)), [x])
        c.set(node, [], recorded=True)
        return
    i = _dim(c, node, x, _kw(node, 1, "dim", None))
    c.op(node, ops.Reduce("prod", (c.axis(dims[i]),)), [x])
    _reduced(c, node, x, i, bool(_kw(node, 2, "keepdim", False)))


@import_rule("aten.logsumexp")
def _logsumexp(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    i = _dim(c, node, x, node.args[1])
    _emit(c, node, x, ops.logsumexp(c.axis(c.dims[x][i])))
    _reduced(c, node, x, i, bool(_kw(node, 2, "keepdim", False)))


@import_rule("aten.var", "aten.std")
def _var(c: Capture, node: Any) -> None:
    """``var``/``std`` over one dim: ``correction=`` (var.correction) or ``unbiased`` (var.dim)."""
    x = c.plain(node.args[0])
    d = _kw(node, 1, "dim", None)
    if d is None:
        raise c.unsupported(node, "var/std over every dim (pass the dim)")
    i = _dim(c, node, x, d)
    unbiased = node.args[2] if len(node.args) > 2 and isinstance(node.args[2], bool) else None
    corr = node.kwargs.get("correction")
    correction = int(unbiased) if unbiased is not None else (1 if corr is None else corr)
    if isinstance(correction, float) and correction.is_integer():
        correction = int(correction)
    if not isinstance(correction, int):
        raise c.unsupported(node, f"var/std with a fractional correction {correction!r}")
    keep = bool(node.kwargs.get("keepdim", node.args[3] if len(node.args) > 3 else False))
    make = ops.var if c.aten(node) == "aten.var" else ops.std
    _emit(c, node, x, make(c.axis(c.dims[x][i]), correction=correction))
    _reduced(c, node, x, i, keep)


@import_rule("aten.argmax", "aten.argmin")
def _arg(c: Capture, node: Any) -> None:
    """The first index of the extreme along a given dim, ``int64`` as torch's."""
    x = c.plain(node.args[0])
    d = _kw(node, 1, "dim", None)
    if d is None:
        raise c.unsupported(node, "argmax/argmin over the flattened tensor (pass the dim)")
    i = _dim(c, node, x, d)
    make = ops.argmax if c.aten(node) == "aten.argmax" else ops.argmin
    _emit(c, node, x, make(c.axis(c.dims[x][i])))
    _reduced(c, node, x, i, bool(_kw(node, 2, "keepdim", False)))


@import_rule("aten.max", "aten.min")
def _extreme(c: Capture, node: Any) -> None:
    """``x.max()`` (every dim), or ``x.max(dim, keepdim)``: values and indices, each read."""
    fn = "max" if c.aten(node) == "aten.max" else "min"
    x = c.plain(node.args[0])
    dims = c.dims[x]
    if len(node.args) < 2 and "dim" not in node.kwargs:
        if any(d is None or isinstance(d, tuple) for d in dims):
            raise c.unsupported(node, f"a {fn} over a size-1 broadcast or folded dim")
        c.op(node, ops.Reduce(fn, tuple(c.axis(v) for v in dims)), [x])
        c.set(node, [], recorded=True)
        return
    if len(node.args) > 1 and c.is_tensor(node.args[1]):
        raise c.unsupported(node, f"an elementwise {fn} of two tensors (use torch.maximum)")
    i = _dim(c, node, x, _kw(node, 1, "dim", None))
    keep = bool(_kw(node, 2, "keepdim", False))
    a = c.axis(dims[i])
    for g in _pieces(c, node):
        if int(g.args[1]) == 0:
            c.op(g, ops.Reduce(fn, (a,), name=c.leaf(g)), [x])
        else:
            _emit(c, g, x, ops.argmax(a) if fn == "max" else ops.argmin(a))
        _reduced(c, g, x, i, keep)


@import_rule("aten.cumsum", "aten.cumprod")
def _cumulative(c: Capture, node: Any) -> None:
    """Running sums or products along a dim, on the same dim."""
    x = c.plain(node.args[0])
    i = _dim(c, node, x, node.args[1])
    make = ops.cumsum if c.aten(node) == "aten.cumsum" else ops.cumprod
    term = make(c.axis(c.dims[x][i]))
    if c.dtype(node.args[0]) in ("int32", "int64", "bool"):
        # a running count (positions from a padding mask): summed in float32, exact to 2^24,
        # then torch's integer type
        term = ops.cast("float32") >> term >> ops.cast(c.dtype(node))
    _emit(c, node, x, term)
    c.set(node, list(c.dims[x]), recorded=True)
