"""Import rules: one per ATen op of the documented set, keyed by the op's name.

A rule reads a captured node, records the ncd ops it stands for (``Capture.op``) and gives
each output's dims as axis variables. Transposes and permutes record nothing: ncd values are
indexed by axis, so only the bookkeeping of dim order changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ncd import ops as L
from ncd.errors import NcdError

if TYPE_CHECKING:
    from ncd_torch._import import Capture

__all__ = ["IMPORT_RULES", "TorchImportError", "import_rule"]


class TorchImportError(NcdError, ValueError):
    """A PyTorch module uses an op (or a form of one) that ``from_torch`` cannot express."""


Rule = Callable[["Capture", Any], None]

#: ATen op name (``aten.linear``) -> rule(capture, fx_node).
IMPORT_RULES: dict[str, Rule] = {}


def import_rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(rule: Rule) -> Rule:
        for n in names:
            IMPORT_RULES[n] = rule
        return rule

    return deco


ACTIVATIONS = {
    "aten.relu": "relu",
    "aten.silu": "silu",
    "aten.tanh": "tanh",
    "aten.sigmoid": "sigmoid",
    "aten.exp": "exp",
    "aten.neg": "neg",
    "aten.sqrt": "sqrt",
    "aten.rsqrt": "rsqrt",
    "aten.abs": "abs",
    "aten.log": "log",
}
ARITH = {
    "aten.add": "add",
    "aten.sub": "sub",
    "aten.mul": "mul",
    "aten.div": "div",
    "aten.rsub": "sub",
    "aten.maximum": "max",
    "aten.minimum": "min",
    "aten.pow": "pow",
}
ALIASES = ("aten.contiguous", "aten.clone", "aten.alias", "aten.detach", "aten.lift_fresh_copy")
VIEWS = ("aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten", "aten.unflatten")


@import_rule(*ACTIVATIONS)
def _activation(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Unary(ACTIVATIONS[c.aten(node)]), [x])
    c.set(node, c.dims[x])


@import_rule("aten.gelu")
def _gelu(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    tanh = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none") == "tanh"
    c.op(node, L.Unary("gelu_tanh" if tanh else "gelu"), [x])
    c.set(node, c.dims[x])


@import_rule(*ALIASES)
def _alias(c: Capture, node: Any) -> None:
    c.alias(node, node.args[0])


@import_rule("aten.dropout")
def _dropout(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Dropout(float(node.args[1])), [x])
    c.set(node, c.dims[x])


@import_rule(*ARITH)
def _arith(c: Capture, node: Any) -> None:
    fn = ARITH[c.aten(node)]
    a, b = node.args[0], node.args[1]
    if node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("rounding_mode") is not None:
        raise c.unsupported(node, "alpha or rounding_mode")
    reverse = c.aten(node) == "aten.rsub"
    if c.is_tensor(a) and c.is_tensor(b):
        x, y = c.plain(a), c.plain(b)
        out = c.broadcast(node, c.dims[x], c.dims[y])
        c.op(node, L.Binary(fn), [y, x] if reverse else [x, y])
        c.set(node, out)
        return
    if c.is_tensor(b):
        a, b, reverse = b, a, not reverse
    x = c.plain(a)
    if not isinstance(b, int | float) or isinstance(b, bool):
        raise c.unsupported(node, f"a {type(b).__name__} operand")
    c.op(node, L.Scalar(fn, float(b), reverse), [x])
    c.set(node, c.dims[x])


@import_rule("aten.transpose", "aten.t")
def _transpose(c: Capture, node: Any) -> None:
    dims = list(c.dims[c.key(node.args[0])])
    i, j = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
    dims[i], dims[j] = dims[j], dims[i]
    c.alias(node, node.args[0], dims)


@import_rule("aten.permute")
def _permute(c: Capture, node: Any) -> None:
    dims = c.dims[c.key(node.args[0])]
    c.alias(node, node.args[0], [dims[int(p)] for p in node.args[1]])


@import_rule(*VIEWS)
def _view(c: Capture, node: Any) -> None:
    c.reshape(node, node.args[0], tuple(c.shape(node)))


@import_rule("aten.softmax", "aten._softmax")
def _softmax(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Softmax(c.axis(c.dims[x][node.args[1]])), [x])
    c.set(node, c.dims[x])


@import_rule("aten.sum", "aten.mean", "aten.amax", "aten.amin")
def _reduce(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    dims = c.dims[x]
    which = node.args[1] if len(node.args) > 1 else list(range(len(dims)))
    which = [which] if isinstance(which, int) else list(which)
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if keep:
        raise c.unsupported(node, "keepdim=True")
    fn = {"aten.sum": "sum", "aten.mean": "mean", "aten.amax": "max", "aten.amin": "min"}
    gone = [dims[int(d)] for d in which]
    c.op(node, L.Reduce(fn[c.aten(node)], tuple(c.axis(v) for v in gone)), [x])
    c.set(node, [v for v in dims if v not in gone])


@import_rule("aten.layer_norm")
def _layer_norm(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    k = len(node.args[1])
    weight, bias = (node.args[i] if len(node.args) > i else None for i in (2, 3))
    eps = float(node.args[4]) if len(node.args) > 4 else 1e-5
    if weight is None and bias is not None:
        raise c.unsupported(node, "a bias without a weight")
    axes = c.dims[x][-k:]
    for v in axes:
        c.axes.hint(v, "d_model", 3)
    params = {"weight": c.param(weight)} if weight is not None else {}
    if bias is not None:
        params["bias"] = c.param(bias)
    op = L.LayerNorm(
        tuple(c.axis(v) for v in axes), eps, weight is not None, bias is not None, name=c.leaf(node)
    )
    c.op(node, op, [x], params)
    c.set(node, c.dims[x])


@import_rule("aten.rms_norm")
def _rms_norm(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    k = len(node.args[1])
    weight = node.args[2] if len(node.args) > 2 else None
    eps = node.args[3] if len(node.args) > 3 else None
    if eps is None:  # PyTorch's default: the dtype's machine epsilon
        eps = float(np.finfo(np.float32 if c.dtype(node) == "float32" else np.float64).eps)
    axes = c.dims[x][-k:]
    for v in axes:
        c.axes.hint(v, "d_model", 3)
    params = {"weight": c.param(weight)} if weight is not None else {}
    op = L.RMSNorm(
        tuple(c.axis(v) for v in axes), float(eps), weight is not None, name=c.leaf(node)
    )
    c.op(node, op, [x], params)
    c.set(node, c.dims[x])


@import_rule("aten.embedding")
def _embedding(c: Capture, node: Any) -> None:
    weight, ids = node.args[0], c.plain(node.args[1])
    table = c.param(weight)
    vocab = c.axes.new(table.shape[0], "vocab", 3)
    out = c.axes.new(table.shape[1], "d_model", 2)
    c.op(
        node,
        L.Embedding(c.axis(vocab), (c.axis(out),), name=c.leaf(node)),
        [ids],
        {"weight": table},
        extra=[vocab],
    )
    c.set(node, [*c.dims[ids], out])


@import_rule("aten.linear")
def _linear(c: Capture, node: Any) -> None:
    x = c.key(node.args[0])
    weight = c.param(node.args[1])
    has_bias = len(node.args) > 2 and node.args[2] is not None
    bias = c.param(node.args[2]) if has_bias else None
    names = c.take_pending()
    *lead, last = c.dims[x]
    ins = last if isinstance(last, tuple) else (last,)
    if len(ins) == 1:  # the width a Linear reads is the model width, unless named better
        c.axes.hint(ins[0], "d_model", 0.5)
    w = weight.reshape(weight.shape[0], *(c.axes.size[v] for v in ins))
    name = c.leaf(node) or "linear"
    chunks = _split_users(c, node)
    if chunks is None:
        _one_linear(c, node, node, x, lead, ins, w, bias, name, names)
        return
    # nn.Linear(d, 3 * d) then .split(d, dim=-1) (GPT-2's c_attn): one Linear per chunk
    start = 0
    for k, (size, user) in enumerate(chunks):
        rows = slice(start, start + size)
        chunk_names = [f"{n}[{start}:{start + size}]" for n in names]
        _one_linear(
            c,
            node,
            user,
            x,
            lead,
            ins,
            w[rows],
            None if bias is None else bias[rows],
            f"{name}_{k}",
            chunk_names,
        )
        start += size


def _split_users(c: Capture, node: Any) -> list[tuple[int, Any]] | None:
    """(size, getitem node) per chunk when the Linear's only user splits its last dim."""
    if len(node.users) != 1 or not c.users_are(node, ("aten.split", "aten.split_with_sizes")):
        return None
    split = next(iter(node.users))
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if dim not in (-1, len(c.shape(node)) - 1):
        return None
    sizes = [c.shape(g)[-1] for g in sorted(split.users, key=lambda g: g.args[1])]
    if len(sizes) != len(split.users) or sum(sizes) != c.shape(node)[-1]:
        return None
    c.done.add(split.name)
    users = sorted(split.users, key=lambda g: g.args[1])
    c.done.update(g.name for g in users)
    return list(zip(sizes, users, strict=True))


def _one_linear(
    c: Capture,
    node: Any,
    out: Any,
    x: str,
    lead: list[Any],
    ins: tuple[int, ...],
    w: np.ndarray,
    bias: np.ndarray | None,
    name: str,
    names: list[str],
) -> None:
    """Record one Linear of ``node`` whose result is the value ``out`` (the node or a chunk)."""
    features = w.shape[0]
    split = c.split_by_view(out, features)
    if split is not None:  # out_features viewed as (heads, d_head): fold the view
        outs: tuple[int, ...] = (
            c.axes.new(split[0], "heads", 3),
            c.axes.new(split[1], "d_head", 3),
        )
        w = w.reshape(*split, *w.shape[1:])
        bias = None if bias is None else bias.reshape(split)
    else:
        hint = "d_ff" if c.feeds_activation(out) else (name.split(".")[-1] or "features")
        if hint != "d_ff" and features in c.axes.sizes_named("vocab"):
            hint = "vocab"  # an unembedding back to the embedding's vocabulary
        outs = (c.axes.new(features, hint, 2 if hint in ("d_ff", "vocab") else 0.4),)
    params = {"weight": w} if bias is None else {"weight": w, "bias": bias}
    op = L.Linear(
        tuple(c.axis(v) for v in ins), tuple(c.axis(v) for v in outs), bias is not None, name=name
    )
    c.op(node, op, [x], params, extra=list(outs), names=names)
    c.set(out, [*lead, outs if split is not None else outs[0]], recorded=True)


def _contract(c: Capture, node: Any, a: str, b: str) -> None:
    """``a @ b`` over the last two dims, batch dims broadcast (matmul, bmm)."""
    da, db = c.dims[a], c.dims[b]
    if len(da) < 2 or len(db) < 2:
        raise c.unsupported(node, "a 1-d operand (use 2-d or more)")
    n, k = da[-2], da[-1]
    kb, m = db[-2], db[-1]
    batch = c.broadcast(node, da[:-2], db[:-2])
    if not c.axes.same(k, kb):
        if any(c.axes.same(kb, v) for v in (*batch, n)):  # self-attention: keys are their own axis
            b = c.rename(node, b, kb, k)
        else:
            c.axes.union(k, kb)
    if any(c.axes.same(m, v) for v in (*batch, n, k)):
        fresh = c.axes.new(c.axes.size[m], c.axes.name(m) + "_k", 2)
        b = c.rename(node, b, m, fresh)
        m = fresh
    op = L.Einsum(((c.axis(n), c.axis(k)), (c.axis(k), c.axis(m))), (c.axis(n), c.axis(m)))
    c.op(node, op, [a, b])
    c.set(node, [*batch, n, m])


@import_rule("aten.matmul", "aten.bmm")
def _matmul(c: Capture, node: Any) -> None:
    _contract(c, node, c.plain(node.args[0]), c.plain(node.args[1]))


@import_rule("aten.einsum")
def _einsum(c: Capture, node: Any) -> None:
    spec = str(node.args[0]).replace(" ", "")
    if "..." in spec or "->" not in spec:
        raise c.unsupported(node, f"the equation {spec!r} (write it explicit, without '...')")
    lhs, rhs = spec.split("->")
    keys = [c.plain(t) for t in node.args[1]]
    letters: dict[str, int] = {}
    for n, term in enumerate(lhs.split(",")):
        for ch, v in zip(term, list(c.dims[keys[n]]), strict=True):
            taken = [d for d, u in letters.items() if d != ch and c.axes.same(u, v)]
            if ch in letters and c.axes.same(letters[ch], v):
                continue
            if taken or (
                ch in letters and any(c.axes.same(letters[ch], u) for u in c.dims[keys[n]])
            ):
                # another letter already stands for this dim's axis: this one is its own axis
                fresh = letters.get(ch) or c.axes.new(c.axes.size[v], c.axes.name(v) + "_2", 1)
                keys[n] = c.rename(node, keys[n], v, fresh)
                letters[ch] = fresh
            elif ch in letters:
                c.axes.union(letters[ch], v)
            else:
                letters[ch] = v
    groups = tuple(tuple(c.axis(letters[ch]) for ch in term) for term in lhs.split(","))
    c.op(node, L.Einsum(groups, tuple(c.axis(letters[ch]) for ch in rhs)), keys)
    c.set(node, [letters[ch] for ch in rhs])


@import_rule("aten.scaled_dot_product_attention")
def _sdpa(c: Capture, node: Any) -> None:
    q, k, v = (c.plain(a) for a in node.args[:3])
    args = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), node.args[3:], strict=False))
    args.update(node.kwargs)
    if args.get("attn_mask") is not None or args.get("dropout_p", 0.0) or args.get("enable_gqa"):
        raise c.unsupported(node, "attn_mask, dropout_p or enable_gqa (only is_causal and scale)")
    (*bq, lq, e), (*bk, sk, ek), (*bv, sv, ev) = c.dims[q], c.dims[k], c.dims[v]
    batch = c.broadcast(node, c.broadcast(node, bq, bk), bv)
    c.axes.union(e, ek)
    c.axes.union(sk, sv)
    c.axes.hint(lq, "seq", 2)
    c.axes.hint(e, "d_head", 2)
    c.axes.hint(ev, "d_head", 2)
    if batch:
        c.axes.hint(batch[-1], "heads", 1)
    if c.axes.same(sk, lq):  # self-attention: the key axis is a renamed copy of the query axis
        keys = c.axes.new(c.axes.size[sk], "seq_k", 3)
        k, v = c.rename(node, k, sk, keys), c.rename(node, v, sk, keys)
        sk = keys
    causal = bool(args.get("is_causal", False))
    if causal and c.axes.size[lq] != c.axes.size[sk]:
        raise c.unsupported(node, "is_causal with query and key lengths that differ")
    Q, X, D, V = (c.axis(a) for a in (lq, sk, e, ev))
    with c.scope(node, "attention"):
        scores = c.op(node, L.Einsum(((Q, D), (X, D)), (Q, X)), [q, k], extra=batch)
        scale = args.get("scale")
        scores = c.op(
            node, L.Scale((D,), -0.5) if scale is None else L.Scalar("mul", float(scale)), [scores]
        )
        if causal:
            scores = c.op(node, L.CausalMask(Q, X), [scores])
        weights = c.op(node, L.Softmax(X), [scores])
        c.op(node, L.Einsum(((Q, X), (X, V)), (Q, V)), [weights, v])
    c.set(node, [*batch, lq, ev])


@import_rule("aten.masked_fill")
def _masked_fill(c: Capture, node: Any) -> None:
    """``scores.masked_fill(mask, -inf or 0)`` with a constant causal mask (the usual GPT-2
    code: a registered ``tril`` buffer, sliced and compared with 0) -> ``CausalMask``."""
    import torch

    x, mask, fill = node.args[:3]
    if getattr(mask, "name", None) not in c.folded:
        raise c.unsupported(
            node,
            "a mask computed from the inputs (only constant causal masks "
            "made from buffers are imported)",
        )
    names = {float("-inf"): "-inf", 0.0: "0"}
    if isinstance(fill, torch.fx.Node) or float(fill) not in names:
        raise c.unsupported(node, f"fill value {fill!r} (only -inf and 0)")
    key = c.plain(x)
    *batch, lq, sk = c.dims[key]
    shape = c.shape(node)
    nq, nx = shape[-2:]
    try:
        m = c.folded[mask.name].to(torch.bool).broadcast_to(shape)
    except RuntimeError:
        raise c.unsupported(node, "a mask that does not broadcast to the scores") from None
    causal = torch.ones(nq, nx, dtype=torch.bool).triu(nx - nq + 1)  # True: key after query
    if not bool((m == causal).all()):
        raise c.unsupported(node, "a constant mask that is not causal over the last two dims")
    c.op(node, L.CausalMask(c.axis(lq), c.axis(sk), fill=names[float(fill)]), [key])
    c.set(node, [*batch, lq, sk])
