"""Import rules for what Llama-family attention adds to a GPT: slices and concatenations of
activations, rotary embeddings (``x * cos + rotate_half(x) * sin`` with the cos/sin tables
evaluated at import, read back as one ``Rotary`` op), and grouped-query attention (keys and
values shared by a group of query heads: ``repeat_kv`` or SDPA's ``enable_gqa``), whose query
heads are split into (kv head, group) around the attention so K and V are never copied.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ncd import ops as L
from ncd.primitives.indexing import rotary_angles
from ncd_torch._import_axes import Grouped
from ncd_torch._import_rules import import_rule

if TYPE_CHECKING:
    from ncd_torch._capture import Capture

__all__ = ["merge_groups", "rotary_embedding", "split_groups"]

#: how far a table evaluated at import may sit from cos/sin of the angles it is read as
_TABLE_TOL = 1e-4


def _dim(c: Capture, node: Any, default: int = 0) -> int:
    d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", default)
    return int(d) % len(c.shape(node.args[0] if c.is_tensor(node.args[0]) else node))


@import_rule("aten.slice")
def _slice(c: Capture, node: Any) -> None:
    """``x[..., a:b]`` along one dim: an ``ops.slice`` onto a new axis (a full slice vanishes)."""
    x = c.plain(node.args[0])
    dims = c.dims[x]
    dim = _dim(c, node)
    args = [*node.args[2:], None, None, 1][:3]
    start, end, step = (node.kwargs.get(k, v) for k, v in zip(("start", "end", "step"), args))
    if step not in (None, 1):
        raise c.unsupported(node, f"a slice with step {step} (only step 1)")
    src = dims[dim]
    if src is None:
        raise c.unsupported(node, "slicing a size-1 broadcast dim")
    n = c.axes.size[src]
    lo, hi, _ = slice(start, end).indices(n)
    open_end = end is None or end >= 2**62  # x[a:] (torch writes sys.maxsize)
    if (start is not None and not -n <= start <= n) or (
        not open_end and not -n <= end <= n
    ):  # clamped to this length (x[:, -10:] of 8 positions reads all 8, of 13 the last 10)
        c.pinned.add(src)
    if (lo, hi) == (0, n):
        c.alias(node, x)
        return
    if hi <= lo:
        raise c.unsupported(node, "an empty slice")
    # x[..., -k:] and x[..., -k:-j] count from the end: the same elements at every length
    tail = start is not None and -n <= start < 0 and (open_end or -n <= end < 0)
    out = c.axes.new(hi - lo, f"{c.axes.name(src)}_{f'end{n - lo}' if tail else lo}", 0.3)
    op = L.Slice(c.axis(src), c.axis(out), n - hi if tail else lo, tail)
    c.op(node, op, [x], extra=[out])
    c.set(node, [*dims[:dim], out, *dims[dim + 1 :]], recorded=True)


@import_rule("aten.cat")
def _cat(c: Capture, node: Any) -> None:
    """``torch.cat(xs, dim)``: an ``ops.concat`` onto a new axis; the other dims broadcast."""
    parts = list(node.args[0])
    if not all(c.is_tensor(p) for p in parts):
        raise c.unsupported(node, "a non-tensor operand")
    keys = [c.plain(p) for p in parts]
    rank = len(c.shape(node))
    dim = int(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % rank
    if any(len(c.dims[k]) != rank for k in keys):
        raise c.unsupported(node, "operands of different ranks")
    joined: list[int] = []
    for k, key in enumerate(keys):
        v = c.dims[key][dim]
        if v is None:
            raise c.unsupported(node, "joining along a size-1 broadcast dim")
        if any(c.axes.same(v, u) for u in joined):  # cat([x, x]): the copy is its own axis
            fresh = c.axes.new(c.axes.size[v], f"{c.axes.name(v)}_{k}", 0.3)
            keys[k] = c.rename(node, key, v, fresh)
            v = fresh
        joined.append(v)
    rest = [d for i, d in enumerate(c.dims[keys[0]]) if i != dim]
    for key in keys[1:]:
        rest = c.broadcast(node, rest, [d for i, d in enumerate(c.dims[key]) if i != dim])
    out = c.axes.new(c.shape(node)[dim], "joined", 0.3)
    op = L.Concat(tuple(c.axis(v) for v in joined), c.axis(out))
    c.op(node, op, keys, extra=[out])
    c.set(node, [*rest[:dim], out, *rest[dim:]], recorded=True)


@import_rule("aten.stack")
def _stack(c: Capture, node: Any) -> None:
    """``torch.stack(xs, dim)``: each operand given a one-wide axis of its own (a product with
    a constant 1 over it, fused away), then joined along the new dim by an ``ops.concat``."""
    parts = list(node.args[0])
    if not all(c.is_tensor(p) for p in parts):
        raise c.unsupported(node, "a non-tensor operand")
    rank = len(c.shape(node))
    dim = int(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % rank
    keys, ones = [], []
    for k, p in enumerate(parts):
        key = c.plain(p)
        if len(c.dims[key]) != rank - 1:
            raise c.unsupported(node, "operands of different ranks")
        one = c.axes.new(1, f"stacked_{k}", 0.1)
        unit = c.op(node, L.Constant(1.0, (c.axis(one),), name="unit"), [], extra=[one])
        c.dims[unit] = [one]
        dims = list(c.dims[key])
        k_out = c.op(node, L.Binary("mul", name="lift"), [key, unit])
        c.dims[k_out] = [*dims[:dim], one, *dims[dim:]]
        keys.append(k_out)
        ones.append(one)
    rest = [d for i, d in enumerate(c.dims[keys[0]]) if i != dim]
    for key in keys[1:]:
        rest = c.broadcast(node, rest, [d for i, d in enumerate(c.dims[key]) if i != dim])
    out = c.axes.new(len(parts), "stacked", 0.3)
    c.op(node, L.Concat(tuple(c.axis(v) for v in ones), c.axis(out)), keys, extra=[out])
    c.set(node, [*rest[:dim], out, *rest[dim:]], recorded=True)


# -- rotary embeddings ------------------------------------------------------------------------
def _slice_of(c: Capture, node: Any, x: Any, lo: int, hi: int) -> bool:
    """``node`` is ``x[..., lo:hi]`` along the last dim."""
    if not hasattr(node, "op") or c.aten(node) != "aten.slice" or node.args[0] is not x:
        return False
    n = c.shape(x)[-1]
    if _dim(c, node) != len(c.shape(x)) - 1:
        return False
    args = [*node.args[2:], None, None, 1][:3]
    start, end, step = args
    return step in (None, 1) and slice(start, end).indices(n)[:2] == (lo, hi)


def _table(tensor: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """The (positions, features) table a cos or sin constant of ``shape`` holds, when every
    leading index holds the same one."""
    import torch

    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return None
    try:
        whole = tensor.detach().broadcast_to(shape).reshape(-1, *shape[-2:]).double()
    except RuntimeError:
        return None
    if not bool((whole == whole[:1]).all()):
        return None
    return np.asarray(whole[0].numpy())


def _rope_base(cos: np.ndarray, sin: np.ndarray) -> float | None:
    """The base whose rotary angles give the tables ``cos`` and ``sin`` (HF's default RoPE:
    ``inv_freq = base ** (-2j / d)``, duplicated over both halves), else ``None``."""
    n, d = cos.shape
    if n < 2:
        return None
    base = 10000.0
    if d > 2:
        # the slowest frequency, read at the last position (the best-conditioned angle)
        f = math.atan2(sin[n - 1, d // 2 - 1], cos[n - 1, d // 2 - 1]) / (n - 1)
        if not 0 < f < 1:
            return None
        base = f ** (-d / (d - 2))
        if abs(base - round(base)) < 1e-4 * base:
            base = float(round(base))
    angles = rotary_angles(n, d, base)
    worst = max(np.abs(np.cos(angles) - cos).max(), np.abs(np.sin(angles) - sin).max())
    return base if worst < _TABLE_TOL else None


def _rope_table(cos: np.ndarray, sin: np.ndarray) -> tuple[float, tuple[float, ...], float] | None:
    """A scaled RoPE's tables (Llama 3's or YaRN's ``inv_freq``, YaRN's attention factor on
    both): ``(10000.0, freqs, scale)`` with ``cos = scale cos(t f)`` and ``sin = scale sin(t
    f)``, one frequency per pair read at position 1 (every ``inv_freq`` is below pi), checked
    at every position; else ``None``."""
    n, d = cos.shape
    scale = float(cos[0, 0])
    if n < 2 or not scale > 0 or np.abs(cos[0] - scale).max() > _TABLE_TOL * scale:
        return None
    freqs = np.arctan2(sin[1, : d // 2], cos[1, : d // 2])
    if (freqs < 0).any():
        return None
    table = tuple(float(f) for f in freqs)
    angles = rotary_angles(n, d, 10000.0, table)
    worst = max(
        np.abs(scale * np.cos(angles) - cos).max(), np.abs(scale * np.sin(angles) - sin).max()
    )
    return (10000.0, table, scale) if worst < _TABLE_TOL * max(scale, 1.0) else None


def rotary_embedding(c: Capture, node: Any, a: Any, b: Any) -> bool:
    """``x * cos + cat([-x[..., h:], x[..., :h]], -1) * sin`` (HF's ``apply_rotary_pos_emb``)
    read from its first product ``node``: one ``Rotary`` over (seq, d_head), the rest of the
    expression consumed. ``False``: ``node`` does not start that form."""
    folded = [t for t in (a, b) if getattr(t, "name", None) in c.folded]
    if len(folded) != 1 or not all(c.is_tensor(t) for t in (a, b)) or len(node.users) != 1:
        return False
    cos, x = folded[0], (b if folded[0] is a else a)
    add = next(iter(node.users))
    if c.aten(add) != "aten.add" or add.kwargs.get("alpha", 1) != 1:
        return False
    other = add.args[1] if add.args[0] is node else add.args[0]
    if not hasattr(other, "op") or c.aten(other) != "aten.mul" or len(other.users) != 1:
        return False
    p, q = other.args[:2]
    sin, cat = (p, q) if getattr(p, "name", None) in c.folded else (q, p)
    if getattr(sin, "name", None) not in c.folded or not hasattr(cat, "op"):
        return False
    shape = c.shape(x)
    d = shape[-1]
    if c.aten(cat) != "aten.cat" or len(cat.users) != 1 or d % 2 or len(shape) < 2:
        return False
    if _dim(c, cat) != len(c.shape(cat)) - 1 or len(cat.args[0]) != 2:
        return False
    neg, low = cat.args[0]
    if not hasattr(neg, "op") or c.aten(neg) != "aten.neg" or len(neg.users) != 1:
        return False
    high = neg.args[0]
    if not (_slice_of(c, high, x, d // 2, d) and _slice_of(c, low, x, 0, d // 2)):
        return False
    if len(high.users) != 1 or len(low.users) != 1 or c.shape(add) != shape:
        return False
    tables = (_table(c.folded[cos.name], shape), _table(c.folded[sin.name], shape))
    if tables[0] is None or tables[1] is None:
        return False
    base = _rope_base(tables[0], tables[1])
    found = (base, (), 1.0) if base is not None else _rope_table(tables[0], tables[1])
    if found is None:
        raise c.unsupported(
            node,
            "cos/sin tables that are not a rotary embedding of positions 0, 1, ... (one "
            "frequency per pair, both halves alike, cos and sin scaled alike)",
        )
    key = c.plain(x)
    dims = c.dims[key]
    if None in dims[-2:]:
        return False
    c.axes.hint(dims[-2], "seq", 2)
    c.axes.hint(dims[-1], "d_head", 2)
    rope = L.Rotary(c.axis(dims[-2]), c.axis(dims[-1]), found[0], freqs=found[1], scale=found[2])
    c.op(node, rope, [key])
    c.done.update(n.name for n in (high, low, neg, cat, other, add))
    c.set(add, list(dims), recorded=True)
    return True


# -- grouped-query attention ------------------------------------------------------------------
def split_groups(
    c: Capture, node: Any, a: str, batch: list[Any], others: list[list[Any]]
) -> tuple[str, list[Any], list[list[Any]], list[tuple[int, Grouped]], list[Any]]:
    """Where an operand in ``others`` (batch dims) holds a ``Grouped`` dim, split the query
    heads of ``a`` at that position into (kv head, group): returns ``a``'s new key, the batch
    dims with both axes in place of the grouped dim (``None`` for the group where a value is
    broadcast over it), ``(heads, grouped)`` per split, for ``merge_groups``, and the batch
    dims as torch counts them, a split dim a ``(kv head, group)`` pair (what a mask over the
    scores aligns with)."""
    batch = list(batch)
    others = [list(o) for o in others]
    splits: list[tuple[int, Grouped]] = []
    for i in range(1, len(batch) + 1):
        found = [o[-i] for o in others if len(o) >= i and isinstance(o[-i], Grouped)]
        if not found:
            continue
        g = found[0]
        c.axes.hint(g.kv, "kv_heads", 4)
        for f in found[1:]:
            c.axes.union(f.kv, g.kv)
            c.axes.union(f.group, g.group)
        heads = batch[-i]
        at = len(c.dims[a]) - 2 - i
        a = c.ungroup(node, a, at, g)
        splits.append((heads, g))
        batch[-i] = (g.kv, g.group)
        for o in others:
            if len(o) >= i:
                if isinstance(o[-i], Grouped):
                    o[-i] = (o[-i].kv, None)
                elif o[-i] is None:
                    o[-i] = (None, None)
                else:
                    raise c.unsupported(node, "grouped and ungrouped keys and values at once")

    def flat(dims: list[Any]) -> list[Any]:
        return [v for d in dims for v in (d if isinstance(d, tuple) else (d,))]

    return a, flat(batch), [flat(o) for o in others], splits, batch


def merge_groups(c: Capture, node: Any, splits: list[tuple[int, Grouped]], dims: list[Any]) -> None:
    """The value just recorded for ``node``, over kv-head and group axes, viewed back as the
    query heads; ``dims`` are its torch dims (with the query-head axes)."""
    out = c.ref.get(f"last:{node.name}")
    assert out is not None
    for heads, g in splits:
        out = c._view(
            node, out, [g.kv, g.group], [heads], [(g.kv,), (g.group,)], [(g.kv, g.group)], dims
        )
    c.set(node, dims, recorded=True)


def gqa_keys(c: Capture, node: Any, q: list[Any], k: list[Any], v: list[Any]) -> None:
    """SDPA's ``enable_gqa``: the key and value heads (fewer than the query heads) become
    ``Grouped`` dims, as ``repeat_kv`` would have made them."""
    if len(q) < 3 or len(k) < 3 or len(v) < 3:
        raise c.unsupported(node, "enable_gqa without a head dim")
    hq, hk, hv = q[-3], k[-3], v[-3]
    if isinstance(hk, Grouped) or hk is None or hv is None:
        return
    nq, nk = c.axes.size[hq], c.axes.size[hk]
    if nq == nk:
        return
    if nq % nk or c.axes.size[hv] != nk:
        raise c.unsupported(node, f"enable_gqa with {nq} query heads and {nk} key heads")
    group = c.axes.new(nq // nk, "group", 1)
    c.axes.union(hk, hv)
    k[-3] = Grouped(hk, group)
    v[-3] = Grouped(hv, group)
