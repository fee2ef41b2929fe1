"""Tied weights on import: a parameter read by two ops (nanoGPT's and HF GPT-2's ``lm_head``
sharing the token embedding's table) stays one ncd parameter. The table is one ``Learned``
source; the embedding reads its rows with a ``Gather`` (one row per id, as ``F.embedding``)
and the unembedding contracts with it, both parameter-free ops, so import, run, gradients and
export all see one array.
"""

from __future__ import annotations

from typing import Any

from ncd import ops as L

__all__ = ["affine", "lookup", "shared", "table", "tied_params", "unembed"]

#: the ops that read a parameter as a whole table, and the argument that holds it
READERS = {"aten.embedding": 0, "aten.linear": 1}


def _aten(node: Any) -> str:
    return str(getattr(node.target, "overloadpacket", node.target))


def tied_params(program: Any) -> set[str]:
    """Placeholders of parameters that more than one embedding or Linear reads."""
    params = set(program.graph_signature.inputs_to_parameters)
    tied = set()
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in params:
            continue
        readers = [
            u
            for u in node.users
            if _aten(u) in READERS and len(u.args) > READERS[_aten(u)]
            if u.args[READERS[_aten(u)]] is node
        ]
        if len(readers) > 1:
            tied.add(node.name)
    return tied


def table(c: Any, node: Any, arg: Any) -> str:
    """The key of the tied parameter ``arg`` as a value ``[vocab d_model]``: a ``Learned``
    source recorded once, at its first reader (named by it: ``wte`` or ``lm_head``)."""
    if arg.name in c.dims:
        return str(arg.name)
    array = c.param(arg)
    (fqn,) = c.take_pending()
    if array.ndim != 2:
        raise c.unsupported(node, f"a tied parameter of shape {list(array.shape)} (only 2-d)")
    dims = [c.axes.new(array.shape[0], "vocab", 3), c.axes.new(array.shape[1], "d_model", 2)]
    op = L.Learned(tuple(c.axis(v) for v in dims), name=c.leaf(node) or "tied")
    c.ref[arg.name] = c._record(node, op, [], {"weight": (array, fqn)})
    c.dims[arg.name] = dims
    return str(arg.name)


def lookup(c: Any, node: Any, key: str, ids: str) -> None:
    """``aten.embedding`` of the tied table ``key``: its rows at ``ids``."""
    vocab, width = c.dims[key]
    c.op(node, L.Gather(c.axis(vocab), name=c.leaf(node) or "rows"), [ids, key])
    c.set(node, [*c.dims[ids], width], recorded=True)


def _only_linears(arg: Any) -> bool:
    """Every reader of the parameter ``arg`` is a Linear with it as its weight (one Linear
    module called more than once, or Linears sharing a weight)."""
    return all(_aten(u) == "aten.linear" and u.args[1] is arg for u in arg.users)


def unembed(c: Any, node: Any, x: str, key: str, bias: Any, arg: Any = None) -> None:
    """``aten.linear`` with the tied table ``key`` as its weight ``(vocab, d_model)``. A square
    weight that only Linears read (a Linear called twice: its output feeds it again, or meets
    its input in a residual add) reads its input renamed onto the table's input axis and
    writes onto the input's own axis, so every call maps one axis to itself."""
    A = c.axis
    vocab, width = c.dims[key]
    *lead, last = c.dims[x]
    if not isinstance(last, int) or c.axes.size[last] != c.axes.size[width]:
        raise c.unsupported(node, "a tied weight read by a Linear of another input width")
    square = arg is not None and c.axes.size[vocab] == c.axes.size[width] and _only_linears(arg)
    if square and not c.axes.same(last, width):
        x = c.rename(node, x, last, width)
    elif not square:
        c.axes.union(last, width)
    name = c.leaf(node) or "unembed"
    op = L.Einsum(((A(width),), (A(vocab), A(width))), (A(vocab),), name=name)
    out = c.op(node, op, [x, key])
    if bias is not None:
        c.dims[out] = [*lead, vocab]
        b = c.key(bias)
        c.axes.union(c.dims[b][0], vocab)
        out = c.op(node, L.Binary("add", name=f"{name}_bias"), [out, b])
    if square and not c.axes.same(last, width):
        c.dims[out] = [*lead, vocab]
        c.rename(node, out, vocab, last)
        c.set(node, [*lead, last], recorded=True)
        return
    c.set(node, [*lead, vocab], recorded=True)


def shared(*args: Any) -> bool:
    """One of the parameters ``args`` (fx placeholders or ``None``) is read by more than one
    op: a module called more than once."""
    return any(a is not None and len(a.users) > 1 for a in args)


def affine(c: Any, node: Any, key: str, weight: Any, bias: Any) -> None:
    """``key * weight + bias`` over its last dims, the parameters as ``Learned`` values that
    every call reads (a normalisation module called more than once keeps one weight)."""
    dims = list(c.dims[key])
    name = c.leaf(node) or "affine"
    for arg, fn in ((weight, "mul"), (bias, "add")):
        if arg is None:
            continue
        p = c.key(arg)
        for a, b in zip(reversed(c.dims[p]), reversed(dims), strict=False):
            c.axes.union(a, b)
        key = c.op(
            node, L.Binary(fn, name=f"{name}_{'weight' if fn == 'mul' else 'bias'}"), [key, p]
        )
        c.dims[key] = list(dims)
    c.set(node, dims, recorded=True)
