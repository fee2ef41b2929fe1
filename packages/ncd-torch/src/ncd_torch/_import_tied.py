"""Tied weights on import: a parameter read by two ops (nanoGPT's and HF GPT-2's ``lm_head``
sharing the token embedding's table) stays one ncd parameter. The table is one ``Learned``
source; the embedding reads it through a one-hot contraction and the unembedding contracts
with it, both parameter-free ops, so import, run, gradients and export all see one array.

The one-hot rows come from core ops only (no gather of a value exists): the ids cast to float
against an index ramp ``0 .. |vocab| - 1``, built in O(|vocab|) as ``hi * |lo| + lo`` from two
short ramps over about ``sqrt(|vocab|)`` entries each, merged by a view and cut to size.
"""

from __future__ import annotations

import math
from typing import Any

from ncd import ops as L

__all__ = ["lookup", "table", "tied_params", "unembed"]

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


def _count(c: Any, node: Any, n: int, name: str) -> tuple[int, str]:
    """A new axis of size ``n`` and the ramp ``0 .. n - 1`` over it (row sums of a
    lower-triangular ``n x n`` of ones, minus one)."""
    A = c.axis
    v, j = c.axes.new(n, name, 0.2), c.axes.new(n, f"{name}_j", 0.2)
    k = c.op(node, L.Constant(1.0, (A(v), A(j)), name="ones"), [])
    c.dims[k] = [v, j]
    k = c.op(node, L.CausalMask(A(v), A(j), "0", name="lower"), [k])
    c.dims[k] = [v, j]
    k = c.op(node, L.Reduce("sum", (A(j),), name="count"), [k])
    c.dims[k] = [v]
    k = c.op(node, L.Scalar("sub", 1.0, name="from_zero"), [k])
    c.dims[k] = [v]
    return v, k


def _ramp(c: Any, node: Any, vocab: int) -> str:
    """The index ramp over the axis variable ``vocab``."""
    A = c.axis
    n = c.axes.size[vocab]
    lo_n = math.isqrt(n - 1) + 1 if n > 1 else 1  # ceil(sqrt(n))
    hi_n = -(-n // lo_n)
    lo, lo_k = _count(c, node, lo_n, "vocab_lo")
    hi, hi_k = _count(c, node, hi_n, "vocab_hi")
    hi_k = c.op(node, L.Scalar("mul", float(lo_n), name="stride"), [hi_k])
    c.dims[hi_k] = [hi]
    k = c.op(node, L.Binary("add", name="index"), [hi_k, lo_k])
    c.dims[k] = [hi, lo]
    flat = vocab if hi_n * lo_n == n else c.axes.new(hi_n * lo_n, "vocab_pad", 0.2)
    view = L.View((A(hi), A(lo)), (A(flat),), ((A(hi),), (A(lo),)), ((A(hi), A(lo)),), name="flat")
    k = c.op(node, view, [k])
    c.dims[k] = [flat]
    if flat != vocab:
        k = c.op(node, L.Slice(A(flat), A(vocab), 0, name="first"), [k])
        c.dims[k] = [vocab]
    return str(k)


def lookup(c: Any, node: Any, key: str, ids: str) -> None:
    """``aten.embedding`` of the tied table ``key``: one-hot rows of ``ids`` times the table."""
    A = c.axis
    vocab, width = c.dims[key]
    with c.scope(node, "one_hot"):
        ramp = _ramp(c, node, vocab)
        k = c.op(node, L.Cast("float32", name="ids"), [ids])
        c.dims[k] = list(c.dims[ids])
        k = c.op(node, L.Binary("sub", name="gap"), [k, ramp])
        c.dims[k] = [*c.dims[ids], vocab]
        for step in (
            L.Unary("abs", name="distance"),
            L.Scalar("sub", 1.0, reverse=True, name="closeness"),
            L.Unary("relu", name="hot"),
        ):
            k = c.op(node, step, [k])
            c.dims[k] = [*c.dims[ids], vocab]
    op = L.Einsum(((A(vocab),), (A(vocab), A(width))), (A(width),), name=c.leaf(node) or "rows")
    c.op(node, op, [k, key])
    c.set(node, [*c.dims[ids], width], recorded=True)


def unembed(c: Any, node: Any, x: str, key: str, bias: Any) -> None:
    """``aten.linear`` with the tied table ``key`` as its weight ``(vocab, d_model)``."""
    A = c.axis
    vocab, width = c.dims[key]
    *lead, last = c.dims[x]
    if not isinstance(last, int) or c.axes.size[last] != c.axes.size[width]:
        raise c.unsupported(node, "a tied weight read by a Linear of another input width")
    c.axes.union(last, width)
    name = c.leaf(node) or "unembed"
    op = L.Einsum(((A(last),), (A(vocab), A(last))), (A(vocab),), name=name)
    out = c.op(node, op, [x, key])
    if bias is not None:
        c.dims[out] = [*lead, vocab]
        b = c.key(bias)
        c.axes.union(c.dims[b][0], vocab)
        c.op(node, L.Binary("add", name=f"{name}_bias"), [out, b])
    c.set(node, [*lead, vocab], recorded=True)
