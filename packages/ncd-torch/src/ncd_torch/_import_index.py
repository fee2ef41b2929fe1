"""Import rules for indexing an activation: ``x[:, i]`` (``select``), ``x[:, [i]]`` and
``x[:, ids]`` (``index``), ``index_select``, ``gather``, an ``embedding`` of a table that is
not a parameter, and the pieces of ``split``/``chunk``/``unbind``. A constant position is a
one-wide ``Slice`` (summed away where the dim goes: one element, so the sum is that element),
counted from the end when the index is negative (``x[:, -1]`` reads the last position at every
length); ids the model computes or takes as an input are a ``Gather`` along the indexed dim;
each piece of a split read is a ``Slice``.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from ncd import ops as L
from ncd_torch._import_rules import import_rule

if TYPE_CHECKING:
    from ncd_torch._capture import Capture

__all__: list[str] = []


def _at(c: Capture, node: Any, x: str, dim: int, i: int, keep: bool) -> None:
    """``x`` at position ``i`` of dim ``dim`` (from the end when negative): a one-wide slice,
    the dim kept (size 1) or summed away."""
    dims = c.dims[x]
    src = dims[dim]
    if src is None:  # a size-1 broadcast dim: position 0 is the value itself
        c.alias(node, x, dims if keep else [*dims[:dim], *dims[dim + 1 :]])
        return
    _position(c, node, src, i)
    out = c.axes.new(1, f"{c.axes.name(src)}_{f'end{-i}' if i < 0 else i}", 0.3)
    name = c.leaf(node) or "at"
    op = L.Slice(c.axis(src), c.axis(out), -1 - i if i < 0 else i, i < 0, name=name)
    k = c.op(node, op, [x], extra=[out])
    if keep:
        c.set(node, [*dims[:dim], out, *dims[dim + 1 :]], recorded=True)
        return
    c.dims[k] = [*dims[:dim], out, *dims[dim + 1 :]]
    c.op(node, L.Reduce("sum", (c.axis(out),), name=f"{name}_drop"), [k])
    c.set(node, [*dims[:dim], *dims[dim + 1 :]], recorded=True)


def _position(c: Capture, node: Any, src: Any, i: int) -> None:
    n = c.axes.size[src] if src is not None else 1
    if not -n <= i < n:
        raise c.unsupported(node, f"index {i} out of range for a dim of size {n}")


@import_rule("aten.select")
def _select(c: Capture, node: Any) -> None:
    """``x.select(dim, i)``, ``x[:, i]``: the dim goes."""
    x = c.plain(node.args[0])
    dim = int(node.args[1]) % len(c.dims[x])
    _at(c, node, x, dim, int(node.args[2]), keep=False)


def _gather(c: Capture, node: Any, x: str, dim: int, ids: str, *, along: bool = False) -> None:
    """``x`` read along ``dim`` at the integer value ``ids``. ``along`` (``torch.gather``):
    the ids' other dims are ``x``'s, in place; else (``index_select``, ``x[:, ids]``) the ids'
    dims replace ``dim``, and must be new to ``x``."""
    dims, idims = c.dims[x], c.dims[ids]
    src = dims[dim]
    if src is None:
        raise c.unsupported(node, "indexing a size-1 broadcast dim with ids")
    if not c.dtype(node.args[0]).startswith(("float", "bfloat")):
        raise c.unsupported(node, f"indexing a {c.dtype(node.args[0])} tensor (floats only)")
    if along:
        if len(idims) != len(dims):
            raise c.unsupported(node, "torch.gather with ids of another rank than the input")
        for k, (a, b) in enumerate(zip(dims, idims, strict=True)):
            if k == dim or a == b:
                continue
            if a is None or b is None or c.axes.size[a] != c.axes.size[b]:
                raise c.unsupported(node, "torch.gather with ids smaller than the input off dim")
            c.axes.union(a, b)
        out = list(c.dims[ids])
    else:
        mine = {c.axes.find(v) for v in c._vars(dims)}
        if any(c.axes.find(v) in mine for v in c._vars(idims)):
            raise c.unsupported(node, "ids sharing a dim with the tensor they index")
        out = [*dims[:dim], *idims, *dims[dim + 1 :]]
    c.op(node, L.Gather(c.axis(src), name=c.leaf(node) or "gather"), [ids, x])
    c.set(node, out, recorded=True)


def _ids(c: Capture, node: Any, arg: Any) -> str | None:
    """The key of an integer index computed by the model or fed to it; ``None`` for a
    constant (evaluated at import)."""
    if arg.name in c.folded or arg.name in c.const_of:
        return None
    if not c.dtype(arg).startswith("int"):
        raise c.unsupported(node, f"an index of dtype {c.dtype(arg)} (integers only)")
    return c.plain(arg)


def _constant_run(c: Capture, arg: Any) -> tuple[int, int] | None:
    """``(first, count)`` when a constant 1-d index holds consecutive positions."""
    import torch

    tensor = c.folded.get(arg.name)
    if tensor is None:
        tensor = c._stored(arg.name)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or tensor.numel() == 0:
        return None
    values = [int(v) for v in tensor.tolist()]
    if values != list(range(values[0], values[0] + len(values))):
        return None
    return values[0], len(values)


@import_rule("aten.index_select")
def _index_select(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    dim = int(node.args[1]) % len(c.dims[x])
    _index(c, node, x, dim, node.args[2])


@import_rule("aten.index")
def _index_tensor(c: Capture, node: Any) -> None:
    """``x[:, idx]`` with one index tensor (``aten.index.Tensor``), or with several constant
    ones that each run along a dim of their own (``_grid``)."""
    x = c.plain(node.args[0])
    given = [(k, t) for k, t in enumerate(node.args[1]) if t is not None]
    if len(given) > 1:
        _grid(c, node, x, given)
        return
    ((dim, idx),) = given
    _index(c, node, x, dim, idx)


def _grid(c: Capture, node: Any, x: str, given: list[tuple[int, Any]]) -> None:
    """``x[i0, i1, ...]`` with several constant index tensors that broadcast as a grid: each
    varies along one dim of the broadcast shape of its own and holds consecutive positions
    there (``x[b[:, None], k[None, :]]`` with ``b``, ``k`` aranges: how HF's masks read a
    padding mask at ``[batch, kv]``). Each indexed dim becomes a slice of its run (none when
    the run is the whole dim), placed at its tensor's broadcast dim; the other broadcast dims
    have size 1. Torch's placement: the broadcast dims replace the indexed ones when those are
    adjacent, else they come first."""
    import torch

    tensors = []
    for _, idx in given:
        t = None if _ids(c, node, idx) is not None else c.folded.get(idx.name)
        if t is None and idx.name in c.const_of:
            t = c._stored(idx.name)
        if not isinstance(t, torch.Tensor):
            raise c.unsupported(
                node, "indexing with several index tensors that are not all constants"
            )
        tensors.append(t)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    rank, dims = len(shape), list(c.dims[x])
    placed: dict[int, Any] = {}  # broadcast dim -> the axis variable there
    key = x
    for (k, _), t in zip(given, tensors, strict=True):
        t = t.reshape((1,) * (rank - t.dim()) + tuple(t.shape))
        along = [j for j, n in enumerate(t.shape) if n > 1]
        if len(along) != 1 or along[0] in placed:
            raise c.unsupported(
                node,
                f"index tensors of shapes {[list(u.shape) for u in tensors]} that do not each "
                "run along a broadcast dim of their own (only a grid of ranges imports)",
            )
        values = [int(v) for v in t.flatten().tolist()]
        src, n = dims[k], c.axes.size[dims[k]] if dims[k] is not None else 1
        first = values[0] % n if -n <= values[0] < n else n
        if values != [values[0] + i for i in range(len(values))] or first + len(values) > n:
            raise c.unsupported(
                node, f"index positions {values[:4]}... of dim {k} (size {n}) that are not a run"
            )
        if first == 0 and len(values) == n:
            placed[along[0]] = src  # the whole dim: the value itself
            continue
        out = c.axes.new(len(values), f"{c.axes.name(src)}_{first}", 0.3)
        op = L.Slice(c.axis(src), c.axis(out), first, name=c.leaf(node) or "index")
        key = c.op(node, op, [key], extra=[out])
        dims[k] = out
        c.dims[key] = list(dims)
        placed[along[0]] = out
    indexed = [k for k, _ in given]
    grid = [placed.get(j) for j in range(rank)]
    rest = [d for k, d in enumerate(dims) if k not in indexed]
    if indexed == list(range(indexed[0], indexed[-1] + 1)):
        out_dims = [*dims[: indexed[0]], *grid, *dims[indexed[-1] + 1 :]]
    else:
        out_dims = [*grid, *rest]
    if key == x:
        c.alias(node, x, out_dims)
    else:
        c.set(node, out_dims, recorded=True)


def _index(c: Capture, node: Any, x: str, dim: int, idx: Any) -> None:
    ids = _ids(c, node, idx)
    if ids is not None:
        _gather(c, node, x, dim, ids)
        return
    run = _constant_run(c, idx)
    src = c.dims[x][dim]
    if run is None:
        raise c.unsupported(node, "a constant index that is not a run of consecutive positions")
    first, count = run
    if count == 1:
        _at(c, node, x, dim, first, keep=True)
        return
    n = c.axes.size[src] if src is not None else 1
    lo = first % n if -n <= first < n else n
    if lo + count > n or (first < 0 <= first + count - 1):
        raise c.unsupported(node, f"positions {first}..{first + count - 1} of a dim of size {n}")
    out = c.axes.new(count, f"{c.axes.name(src)}_{f'end{-first}' if first < 0 else lo}", 0.3)
    # a run of negative positions counts from the end: the same elements at every length
    start = -(first + count) if first < 0 else first
    op = L.Slice(c.axis(src), c.axis(out), start, first < 0, name=c.leaf(node))
    c.op(node, op, [x], extra=[out])
    dims = c.dims[x]
    c.set(node, [*dims[:dim], out, *dims[dim + 1 :]], recorded=True)


@import_rule("aten.gather")
def _gather_along(c: Capture, node: Any) -> None:
    """``torch.gather(x, dim, ids)``: ``take_along_axis``."""
    x = c.plain(node.args[0])
    dim = int(node.args[1]) % len(c.dims[x])
    ids = _ids(c, node, node.args[2])
    if ids is None:
        raise c.unsupported(node, "torch.gather with constant ids")
    _gather(c, node, x, dim, ids, along=True)


def _pieces(c: Capture, node: Any) -> list[Any]:
    """The ``getitem`` users of a multi-output node, by index; each taken by this rule."""
    users = sorted(node.users, key=lambda g: int(g.args[1]) if len(g.args) > 1 else -1)
    if not all(g.target is operator.getitem for g in users):
        raise c.unsupported(node, "a split whose pieces are not read one by one")
    c.done.update(g.name for g in users)
    return users


@import_rule("aten.split", "aten.split_with_sizes", "aten.chunk")
def _split(c: Capture, node: Any) -> None:
    """``x.split(sizes, dim)``, ``x.chunk(k, dim)``: each piece read is a slice of ``x``."""
    x = c.plain(node.args[0])
    dims = c.dims[x]
    d = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    dim = int(d) % len(dims)
    src = dims[dim]
    if src is None:
        raise c.unsupported(node, "splitting a size-1 broadcast dim")
    sizes = _piece_sizes(c, node, c.shape(node.args[0])[dim])
    for g in _pieces(c, node):
        k = int(g.args[1])
        start, m = sum(sizes[:k]), sizes[k]
        out = c.axes.new(m, f"{c.axes.name(src)}_{start}", 0.3)
        op = L.Slice(c.axis(src), c.axis(out), start, name=c.leaf(g) or f"piece_{k}")
        c.op(g, op, [x], extra=[out])
        c.set(g, [*dims[:dim], out, *dims[dim + 1 :]], recorded=True)


def _piece_sizes(c: Capture, node: Any, n: int) -> list[int]:
    """The sizes of every piece of a split of ``n`` elements (torch's rules)."""
    how = node.args[1]
    if c.aten(node) == "aten.chunk":
        step = -(-n // int(how))
        return [min(step, n - s) for s in range(0, n, step)]
    if isinstance(how, int):
        return [min(how, n - s) for s in range(0, n, how)]
    return [int(v) for v in how]


@import_rule("aten.unbind")
def _unbind(c: Capture, node: Any) -> None:
    """``x.unbind(dim)``: each piece read is ``x`` at one position, the dim gone."""
    x = c.plain(node.args[0])
    dim = (int(node.args[1]) if len(node.args) > 1 else 0) % len(c.dims[x])
    for g in _pieces(c, node):
        _at(c, g, x, dim, int(g.args[1]), keep=False)


def embedding_of_value(c: Capture, node: Any) -> None:
    """``F.embedding(ids, table)`` of a table the model computes: its rows at the ids."""
    table = c.plain(node.args[0])
    ids = _ids(c, node, node.args[1])
    if ids is None or len(c.dims[table]) != 2:
        raise c.unsupported(node, "an embedding of a computed table with constant ids")
    _gather(c, node, table, 0, ids)
