"""Import rules for issue 15's shape ops: ``flip``, ``roll``, ``F.pad`` in its reflect,
replicate and circular modes, ``repeat``/``tile`` and ``repeat_interleave`` of activations.
Each records the ops of the ``ncd.ops`` composition on the captured axes (``_emit``), so the
import and ``ncd.ops`` agree by construction; a dim that grows gets an axis of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ncd import ops
from ncd_torch._import_reduce import _emit, _kw
from ncd_torch._import_rules import import_rule

if TYPE_CHECKING:
    from ncd_torch._capture import Capture


def _own(c: Capture, node: Any, x: str, d: Any, what: str) -> int:
    """The position of dim ``d`` of ``x``, refused where it is not an axis of its own."""
    dims = c.dims[x]
    i = int(d) % len(dims)
    if dims[i] is None or isinstance(dims[i], tuple):
        raise c.unsupported(node, f"{what} of a size-1 broadcast or folded dim")
    return i


def _ints(v: Any) -> list[int]:
    return [int(e) for e in (v if isinstance(v, list | tuple) else [v])]


@import_rule("aten.flip")
def _flip(c: Capture, node: Any) -> None:
    """``torch.flip(x, dims)``: one ``ops.flip`` per dim, in place."""
    x = c.plain(node.args[0])
    dims = list(c.dims[x])
    cur = x
    for d in _ints(_kw(node, 1, "dims", [])):
        i = _own(c, node, x, d, "flip")
        if c.axes.size[dims[i]] > 1:
            cur = _emit(c, node, cur, ops.flip(c.axis(dims[i])), dims)
    _done(c, node, x, cur, dims)


@import_rule("aten.roll")
def _roll(c: Capture, node: Any) -> None:
    """``torch.roll(x, shifts, dims)``: one ``ops.roll`` per dim (a roll of the flattened
    tensor, no dims, is refused)."""
    x = c.plain(node.args[0])
    shifts, dims_arg = _ints(_kw(node, 1, "shifts", [])), _kw(node, 2, "dims", [])
    along = _ints(dims_arg) if dims_arg not in (None, []) else []
    if not along:
        raise c.unsupported(node, "a roll of the flattened tensor (pass dims)")
    if len(along) != len(shifts):
        raise c.unsupported(node, "shifts and dims of different lengths")
    dims = list(c.dims[x])
    cur = x
    for s, d in zip(shifts, along):
        i = _own(c, node, x, d, "roll")
        if s % c.axes.size[dims[i]]:
            cur = _emit(c, node, cur, ops.roll(c.axis(dims[i]), s), dims)
    _done(c, node, x, cur, dims)


def edge_pad(c: Capture, node: Any, x: str, pads: list[int], mode: str) -> None:
    """``F.pad(x, pads, mode)`` for the modes that read the input: per padded dim (the last
    first, as torch lists them) an ``ops.pad`` onto an axis of its own."""
    dims = list(c.dims[x])
    shape = c.shape(node)
    cur = x
    for k in range(len(pads) // 2):
        before, after = pads[2 * k], pads[2 * k + 1]
        if before == after == 0:
            continue
        i = _own(c, node, x, len(dims) - 1 - k, "padding")
        d = dims[i]
        o = c.axes.new(shape[i], c.axes.name(d), 0.1)
        term = ops.pad(c.axis(d), c.axis(o), before=before, after=after, mode=mode)
        cur = _emit(c, node, cur, term, dims)
        dims[i] = o
    _done(c, node, x, cur, dims)


def _grown(c: Capture, node: Any, x: str, dims: list[Any], i: int, make: Any, r: int) -> str:
    """Dim ``i`` of ``x`` (recorded here, of ``dims``) grown ``r`` times by ``make`` onto a new
    axis, which replaces it in ``dims``."""
    d = dims[i]
    o = c.axes.new(c.axes.size[d] * r, c.axes.name(d), 0.1)
    out = _emit(c, node, x, make(c.axis(d), c.axis(o), r), dims)
    dims[i] = o
    return out


def _done(c: Capture, node: Any, x: str, cur: str, dims: list[Any]) -> None:
    """``node`` is ``cur`` of ``dims`` (recorded by this rule), or ``x`` where nothing was."""
    if cur == x:
        c.alias(node, x)
    else:
        c.set(node, dims, recorded=True)


@import_rule("aten.repeat", "aten.tile")
def _repeat(c: Capture, node: Any) -> None:
    """``x.repeat(r0, r1, ..)`` or ``torch.tile``: each dim repeated end to end, an
    ``ops.tile`` per dim repeated more than once (new leading dims are refused)."""
    x = c.plain(node.args[0])
    reps = _ints(node.args[1])
    rank = len(c.dims[x])
    if c.aten(node) == "aten.tile" and len(reps) < rank:
        reps = [1] * (rank - len(reps)) + reps
    if len(reps) != rank:
        raise c.unsupported(node, "a repeat that adds leading dims")
    cur, dims = x, list(c.dims[x])
    for i, r in enumerate(reps):
        if r != 1:
            _own(c, node, x, i, "repeat")
            cur = _grown(c, node, cur, dims, i, ops.tile, r)
    _done(c, node, x, cur, dims)


@import_rule("aten.repeat_interleave")
def _repeat_interleave(c: Capture, node: Any) -> None:
    """``x.repeat_interleave(r, dim)`` by an int: each element repeated in place."""
    x = c.plain(node.args[0])
    r = _kw(node, 1, "repeats", None)
    d = _kw(node, 2, "dim", None)
    if not isinstance(r, int) or isinstance(r, bool):
        raise c.unsupported(node, "repeat_interleave by a tensor of counts (an int only)")
    if d is None:
        raise c.unsupported(node, "repeat_interleave of the flattened tensor (pass dim)")
    i = _own(c, node, x, d, "repeat_interleave")
    dims = list(c.dims[x])
    cur = x if r == 1 else _grown(c, node, x, dims, i, ops.repeat_interleave, r)
    _done(c, node, x, cur, dims)
