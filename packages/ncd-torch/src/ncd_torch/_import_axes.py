"""Axis variables for import: PyTorch dims are positional, ncd axes are identities.

Every dim of every captured tensor gets a variable; ops that force two dims to be the same axis
(broadcasting, contraction) unite them (union-find). Each class collects name hints with a
priority (a LayerNorm's axis is ``d_model``, a split feeding attention is ``heads d_head``...);
the best hint names the class. Finally classes that share a name and a size and never meet in
one op are merged, so the layers of a network share their axes, as ``ncd.nn.gpt``'s do.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ncd.axis import Axis

__all__ = ["AxisTable", "Grouped"]


@attrs.frozen
class Grouped:
    """A torch dim of ``|kv| * |group|`` entries over which the value has only its kv-head axis
    ``kv``: entry ``i`` is kv head ``i // |group|`` (``repeat_kv``'s expand and reshape), so the
    ncd value is broadcast over the ``group`` axis instead of copied."""

    kv: int
    group: int


class AxisTable:
    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []
        self.hints: list[list[tuple[float, int, str]]] = []
        self.meets: list[set[int]] = []  # groups of vars seen together in one op
        self._axes: dict[int, Axis] = {}
        self._seq = 0

    def new(self, size: int, name: str = "", priority: float = 0.0) -> int:
        v = len(self.parent)
        self.parent.append(v)
        self.size.append(int(size))
        self.hints.append([])
        if name:
            self.hint(v, name, priority)
        return v

    def find(self, v: int) -> int:
        while self.parent[v] != v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def same(self, a: int, b: int) -> bool:
        return self.find(a) == self.find(b)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.hints[ra].extend(self.hints[rb])

    def hint(self, v: int, name: str, priority: float) -> None:
        # Earlier hints win ties: a global sequence number breaks them.
        self._seq += 1
        self.hints[self.find(v)].append((priority, -self._seq, name))

    def name(self, v: int) -> str:
        hints = self.hints[self.find(v)]
        return max(hints)[2] if hints else "dim"

    def sizes_named(self, name: str) -> set[int]:
        """Sizes of the classes currently named ``name``."""
        return {
            self.size[r]
            for r in {self.find(v) for v in range(len(self.parent))}
            if self.name(r) == name
        }

    def meet(self, vs: Iterable[int]) -> None:
        self.meets.append(set(vs))

    # -- final axes ------------------------------------------------------------------------------
    def finish(self) -> None:
        """Merge same-name, same-size classes that never meet, then fix one Axis per class."""
        roots = sorted({self.find(v) for v in range(len(self.parent))})
        # root -> the meet groups it is in (kept up to date as classes merge)
        seen: dict[int, set[int]] = {}
        for g, group in enumerate(self.meets):
            for r in {self.find(v) for v in group}:
                seen.setdefault(r, set()).add(g)
        groups: dict[tuple[str, int], list[int]] = {}
        for r in roots:
            groups.setdefault((self.name(r), self.size[r]), []).append(r)
        for members in groups.values():
            for r in members[1:]:
                target = self.find(members[0])
                if not seen.get(target, set()) & seen.get(r, set()):
                    self.union(target, r)  # target stays the root
                    seen.setdefault(target, set()).update(seen.pop(r, set()))
        for v in range(len(self.parent)):
            root = self.find(v)
            if root not in self._axes:
                self._axes[root] = Axis(self.name(root), size=self.size[root])

    def free(self, uids: set[str]) -> dict[int, Axis]:
        """Make the final axes with these uids free (size ``None``), keeping their names;
        returns the axes replaced (``restore`` puts them back)."""
        replaced = {}
        for root, a in list(self._axes.items()):
            if a.uid in uids:
                replaced[root] = a
                self._axes[root] = Axis(a.name, size=None)
        return replaced

    def restore(self, replaced: dict[int, Axis]) -> None:
        self._axes.update(replaced)

    def axis(self, v: int) -> Axis:
        return self._axes[self.find(v)]
