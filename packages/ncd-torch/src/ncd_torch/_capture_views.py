"""How ``Capture`` follows reshapes: views split and merge axes, and a split of an
``nn.Linear``'s output (or a merge feeding one) folds into the Linear, so ``q`` maps
``d_model -> heads d_head`` as in ``ncd.nn`` instead of going through an anonymous wide axis.

A dim in ``Capture.dims`` is an axis variable, a tuple of them while a fold is pending, or a
``Grouped`` dim: grouped-query attention's key or value repeated over the query heads of a
group (HF's ``repeat_kv``) without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ncd import ops
from ncd_torch._import_axes import Grouped
from ncd_torch._import_rules import ACTIVATIONS, VIEWS

__all__ = ["ViewsMixin"]


class ViewsMixin:
    """Reshape handling for ``Capture`` (which provides dims, axes, op and alias)."""

    dims: dict[str, list[Any]]
    axes: Any
    #: a var made by merging others in a reshape -> those vars (a reshape splitting it back
    #: into the same sizes gives the same axes again)
    merges: dict[int, tuple[int, ...]]

    if TYPE_CHECKING:  # provided by Capture

        def key(self, arg: Any) -> str: ...
        def alias(self, node: Any, src: Any, dims: list[Any] | None = None) -> None: ...
        def op(
            self,
            node: Any,
            op: Any,
            inputs: list[str],
            params: Any = None,
            extra: Sequence[int] = (),
        ) -> str: ...
        def unsupported(self, node: Any, what: str = "") -> Exception: ...
        def aten(self, node: Any) -> str: ...
        def shape(self, node: Any) -> tuple[int, ...]: ...
        def axis(self, v: int) -> Any: ...

    def plain(self, arg: Any) -> str:
        """The key of ``arg`` with any folded (heads, d_head) dim merged back into one axis."""
        key = self.key(arg)
        dims = self.dims[key]
        if not any(isinstance(d, tuple) for d in dims):
            return key
        new: list[Any] = []
        in_parts: list[Any] = []
        out_parts: list[Any] = []
        ins: list[int] = []
        outs: list[int] = []
        for d in dims:
            if isinstance(d, tuple):
                merged = self.axes.new(
                    int(np.prod([self.axes.size[v] for v in d])),
                    "_".join(self.axes.name(v) for v in d),
                    0.5,
                )
                ins.extend(d)
                in_parts.extend((v,) for v in d)
                outs.append(merged)
                out_parts.append(d)
                d = merged
            new.append(d)
        return self._view(arg, key, ins, outs, in_parts, out_parts, new)

    def _view(
        self,
        node: Any,
        key: str,
        ins: list[int],
        outs: list[int],
        in_parts: list[Any],
        out_parts: list[Any],
        dims: list[Any],
    ) -> str:
        A = self.axis
        op = ops.View(
            tuple(A(v) for v in ins),
            tuple(A(v) for v in outs),
            tuple(tuple(A(v) for v in p) for p in in_parts),
            tuple(tuple(A(v) for v in p) for p in out_parts),
        )
        out = self.op(node, op, [key])
        self.dims[out] = dims
        return out

    def rename(self, node: Any, key: str, old: int, new: int) -> str:
        dims = [
            new if d == old or (isinstance(d, int) and self.axes.same(d, old)) else d
            for d in self.dims[key]
        ]
        return self._view(node, key, [old], [new], [(old,)], [(old,)], dims)

    def broadcast(self, node: Any, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """Right-aligned broadcasting: equal dims become one axis."""
        out = list(a if len(a) >= len(b) else b)
        for i in range(1, min(len(a), len(b)) + 1):
            x, y = a[-i], b[-i]
            if x is None or y is None:  # a size-1 broadcast dim meets whatever is there
                out[-i] = y if x is None else x
                continue
            if self.axes.size[x] != self.axes.size[y]:
                raise self.unsupported(node, "broadcasting a size-1 dim against a larger one")
            self.axes.union(x, y)
            out[-i] = x
        return out

    # -- the rules' view helpers ------------------------------------------------------------------
    def users_are(self, node: Any, names: Sequence[str]) -> bool:
        return bool(node.users) and all(self.aten(u) in names for u in node.users)

    def feeds_activation(self, node: Any) -> bool:
        return self.users_are(node, (*ACTIVATIONS, "aten.gelu"))

    def flattens_into_addmm(self, node: Any) -> bool:
        """``node`` is ``x.view(-1, d)`` read only by an ``addmm`` (HF's ``Conv1D``) whose
        only user views the result back to ``x``'s leading dims."""
        if self.aten(node) not in VIEWS or not node.args or not hasattr(node.args[0], "meta"):
            return False
        shape, src = self.shape(node), self.shape(node.args[0])
        if len(src) <= 2 or len(shape) != 2 or shape[-1] != src[-1] or len(node.users) != 1:
            return False
        mm = next(iter(node.users))
        if self.aten(mm) != "aten.addmm" or mm.args[1] is not node or len(mm.users) != 1:
            return False
        back = next(iter(mm.users))
        return self.aten(back) in VIEWS and self.shape(back) == (*src[:-1], self.shape(mm)[-1])

    def split_by_view(self, node: Any, features: int) -> tuple[int, int] | None:
        if len(node.users) != 1 or not self.users_are(node, VIEWS):
            return None
        shape, new = self.shape(node), self.shape(next(iter(node.users)))
        if (
            len(new) == len(shape) + 1
            and new[:-2] == shape[:-1]
            and new[-2] * new[-1] == features
            and min(new[-2:]) > 1
        ):
            return new[-2], new[-1]
        return None

    def reshape(self, node: Any, src: Any, shape: tuple[int, ...]) -> None:
        key = self.key(src)
        dims = self.dims[key]
        if None in dims:
            grouped = self._repeat_kv(src, dims, shape)
            if grouped is None:
                raise self.unsupported(
                    node, "a reshape of a size-1 broadcast dim (keepdim=True, unsqueeze)"
                )
            self.alias(node, src, grouped)
            return
        if (
            dims
            and isinstance(dims[-1], tuple)
            and tuple(self.axes.size[v] for v in dims[-1]) == shape[len(dims) - 1 :]
        ):
            self.alias(node, src, [*dims[:-1], *dims[-1]])  # the split folded into nn.Linear
            return
        flat = [v for d in dims for v in (d if isinstance(d, tuple) else (d,))]
        if len(flat) > len(dims) and tuple(self.axes.size[v] for v in flat) == shape:
            self.alias(node, src, flat)  # a pending merge split back as it was made
            return
        sizes = tuple(self.axes.size[d] for d in dims if isinstance(d, int))
        if (
            len(dims) >= 2
            and len(shape) == len(dims) - 1
            and shape[:-1] == sizes[:-2]
            and (
                (
                    self.users_are(node, ("aten.linear",))
                    and all(u.args[0] is node for u in node.users)
                )
                or (bool(node.users) and all(self.flattens_into_addmm(u) for u in node.users))
            )
        ):
            self.alias(node, src, [*dims[:-2], (dims[-2], dims[-1])])  # folds into nn.Linear
            return
        key = self.plain(src)
        self._segments(node, key, shape)

    def _repeat_kv(self, src: Any, dims: list[Any], shape: tuple[int, ...]) -> list[Any] | None:
        """The dims after ``x[:, :, None].expand(b, kv, g, s, d).reshape(b, kv * g, s, d)``
        (HF's ``repeat_kv``): the merged dim is ``Grouped``; ``None`` for any other reshape
        of a broadcast dim."""
        before = self.shape(src)
        for i in range(len(dims) - 1):
            kv, rep = dims[i], dims[i + 1]
            if not isinstance(kv, int) or rep is not None or before[i + 1] < 2:
                continue
            merged = (*before[:i], before[i] * before[i + 1], *before[i + 2 :])
            rest = [*dims[:i], *dims[i + 2 :]]
            if tuple(shape) == merged and None not in rest:
                group = self.axes.new(before[i + 1], "group", 1)
                return [*dims[:i], Grouped(kv, group), *dims[i + 2 :]]
        return None

    def ungroup(self, node: Any, key: str, at: int, grouped: Grouped) -> str:
        """The value ``key`` with its dim ``at`` (the query heads, ``|kv| * |group|`` of them)
        split into the ``grouped`` kv-head and group axes, read by grouped-query attention."""
        heads = self.dims[key][at]
        sizes = self.axes.size
        if not isinstance(heads, int) or sizes[heads] != sizes[grouped.kv] * sizes[grouped.group]:
            raise self.unsupported(node, "grouped keys and values against other query heads")
        dims = [*self.dims[key][:at], (grouped.kv, grouped.group), *self.dims[key][at + 1 :]]
        return self._view(
            node,
            key,
            [heads],
            [grouped.kv, grouped.group],
            [(grouped.kv, grouped.group)],
            [(grouped.kv,), (grouped.group,)],
            dims,
        )

    def _refine(
        self,
        node: Any,
        si: list[int],
        sj: list[int],
        ins: list[int],
        outs: list[int],
        in_parts: list[Any],
        out_parts: list[Any],
        new: list[Any],
    ) -> None:
        """The vars ``si`` reshaped to the sizes ``sj`` by splitting vars and merging pieces
        (``nn.MultiheadAttention``'s ``(seq, batch, E) -> (seq, batch * heads, d_head)``): each
        var is cut where either side has a boundary; a target dim made of several pieces is a
        pending merge (a tuple), read by the reshape that splits it back, or merged by ``plain``.
        """

        def cuts(sizes: list[int]) -> list[int]:
            out, acc = [], 1
            for n in sizes:
                acc *= n
                out.append(acc)
            return out

        src, dst = cuts([self.axes.size[v] for v in si]), cuts(sj)
        bounds = sorted(set(src) | set(dst))
        if any(b % a for a, b in zip([1, *bounds], bounds, strict=False)):
            raise self.unsupported(node, f"the reshape to {sj} (split and merge at once)")
        pieces: list[int] = []
        low = 1
        for v, high in zip(si, src, strict=True):
            inner = [b for b in bounds if low < b <= high]
            if len(inner) == 1:
                pieces.append(v)
            else:
                names = ("heads", "d_head") if len(inner) == 2 else ()
                parts = []
                prev = low
                for k, b in enumerate(inner):
                    name = names[k] if names else f"{self.axes.name(v)}_{k}"
                    parts.append(self.axes.new(b // prev, name, 1))
                    prev = b
                ins.append(v)
                in_parts.append(tuple(parts))
                outs.extend(parts)
                out_parts.extend((p,) for p in parts)
                pieces.extend(parts)
            low = high
        low = 1
        at = 0
        for high in dst:
            group = []
            while at < len(bounds) and bounds[at] <= high:
                group.append(pieces[at])
                at += 1
            new.append(group[0] if len(group) == 1 else tuple(group))
            low = high

    def _segments(self, node: Any, key: str, shape: tuple[int, ...]) -> None:
        dims = self.dims[key]
        i = j = 0
        new: list[Any] = []
        ins: list[int] = []
        outs: list[int] = []
        in_parts: list[Any] = []
        out_parts: list[Any] = []
        while i < len(dims) and j < len(shape):
            si, sj = [dims[i]], [shape[j]]
            while int(np.prod([self.axes.size[v] for v in si])) != int(np.prod(sj)):
                if int(np.prod([self.axes.size[v] for v in si])) < int(np.prod(sj)):
                    i += 1
                    if i >= len(dims):
                        raise self.unsupported(node, f"the reshape to {list(shape)}")
                    si.append(dims[i])
                else:
                    j += 1
                    if j >= len(shape):
                        raise self.unsupported(node, f"the reshape to {list(shape)}")
                    sj.append(shape[j])
            i, j = i + 1, j + 1
            if len(si) == 1 and len(sj) == 1:
                new.append(si[0])
            elif len(si) == 1 and [self.axes.size[v] for v in self.merges.get(si[0], ())] == sj:
                parts = list(self.merges[si[0]])  # a merge split back: the same axes again
                ins.append(si[0])
                in_parts.append(tuple(parts))
                new.extend(parts)
                outs.extend(parts)
                out_parts.extend((p,) for p in parts)
            elif len(si) == 1:
                names = (
                    ("heads", "d_head")
                    if len(sj) == 2
                    else tuple(f"{self.axes.name(si[0])}_{k}" for k in range(len(sj)))
                )
                parts = [self.axes.new(n, nm, 1) for n, nm in zip(sj, names, strict=True)]
                ins.append(si[0])
                in_parts.append(tuple(parts))
                new.extend(parts)
                outs.extend(parts)
                out_parts.extend((p,) for p in parts)
            elif len(sj) == 1:
                merged = self.axes.new(sj[0], "_".join(self.axes.name(v) for v in si), 0.5)
                self.merges[merged] = tuple(si)
                ins.extend(si)
                in_parts.extend((v,) for v in si)
                outs.append(merged)
                out_parts.append(tuple(si))
                new.append(merged)
            else:  # splits and merges at once: cut both sides at every boundary of either
                self._refine(node, si, sj, ins, outs, in_parts, out_parts, new)
        if i != len(dims) or j != len(shape):
            raise self.unsupported(
                node, f"the reshape to {list(shape)} (adds or drops size-1 dims)"
            )
        if not ins:
            self.alias(node, key, new)
            return
        self.alias(node, self._view(node, key, ins, outs, in_parts, out_parts, new), new)
