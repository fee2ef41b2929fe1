"""Sizes: a union-find over axes, product constraints from views, window constraints from
sliding windows, and the configuration.

Every axis belongs to a size class; classes merge when composition identifies axes or a view
renames one. ``config()`` lists the classes left free, under unique labels: an axis's name,
and for later free classes whose axes share that name, ``name_2``, ``name_3``... in order of
first appearance in the graph.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.errors import SizeError

__all__ = ["Config", "SizeSolver", "SizeVar", "WindowSize", "check_bytes", "memory_limit"]


@attrs.frozen
class WindowSize:
    """A size constraint of a sliding window over ``n`` with ``k`` offsets: ``size(out) ==
    floor((m + 2 padding + extra - dilation (size(k) - 1) - 1) / stride) + 1`` over the
    ``m = (size(n) - 1) upsample + 1`` elements of the input spread ``upsample`` apart (torch's
    ``Conv1d`` / ``MaxPool1d`` length; with ``upsample`` the stride and ``extra`` its output
    padding, ``ConvTranspose1d``'s), derived once ``n`` and ``k`` are known."""

    out: Axis
    n: Axis
    k: Axis
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    upsample: int = 1
    extra: int = 0

    def span(self, n: int) -> int:
        """The padded length the window slides over."""
        return (n - 1) * self.upsample + 1 + 2 * self.padding + self.extra

    def positions(self, n: int, k: int) -> int:
        """The number of window positions over ``n`` elements (< 1: the window does not fit)."""
        return (self.span(n) - self.dilation * (k - 1) - 1) // self.stride + 1

    def misfit(self, n: int, k: int) -> str:
        """Why ``k`` offsets do not fit ``n`` elements, naming the axes and the fix."""
        span = self.dilation * (k - 1) + 1
        return (
            f"the window {self.k.ref} of {k} offsets (dilation {self.dilation}, span {span}) "
            f"does not fit {self.n.ref} of {n} elements padded by {self.padding} on each side "
            f"({self.span(n)} < {span}), so {self.out.ref} would have "
            f"{self.positions(n, k)} positions. Fix: a longer input, more padding, or a "
            "smaller kernel or dilation"
        )


def memory_limit() -> int:
    """The most bytes one host array may take: ``NCD_MAX_BYTES`` if set, else the machine's
    physical memory (``os.sysconf``), else unlimited."""
    env = os.environ.get("NCD_MAX_BYTES", "").strip()
    if env:
        try:
            value = int(float(env))
        except (ValueError, OverflowError):
            raise SizeError(
                f"NCD_MAX_BYTES={env!r} is not a number of bytes. Fix: set it to an "
                "int such as 8e9, or unset it."
            ) from None
        if value > 0:
            return value
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1


def _bytes_text(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def check_bytes(
    what: str, axes: Sequence[Axis], sizes: Sequence[int], itemsize: int, limit: int | None = None
) -> None:
    """Raise ``SizeError`` before allocating when an array over ``axes`` (of ``sizes``) would
    take more than ``limit`` bytes (default ``memory_limit()``)."""
    limit = memory_limit() if limit is None else limit
    nbytes = math.prod(sizes) * itemsize
    if nbytes <= limit:
        return
    shown = ", ".join(f"{a.name}#{a.uid}={n}" for a, n in zip(axes, sizes, strict=True))
    raise SizeError(
        f"{what} over ({shown}) would take {_bytes_text(nbytes)} ({nbytes} bytes), more than the "
        f"{_bytes_text(limit)} this machine allows (NCD_MAX_BYTES or physical memory). Fix: bind "
        "smaller sizes, or raise NCD_MAX_BYTES if the memory really is there."
    )


class SizeSolver:
    """Union-find of axis sizes with product constraints; collects every conflict."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}
        self._size: dict[str, int] = {}
        self._origin: dict[str, str] = {}
        self.axes: dict[str, Axis] = {}
        self.products: list[tuple[str, tuple[str, ...], str]] = []
        self.windows: list[tuple[WindowSize, str]] = []
        self.conflicts: list[str] = []

    def add(self, axis: Axis, origin: str = "") -> None:
        if axis.uid in self._parent:
            return
        self._parent[axis.uid] = axis.uid
        self.axes[axis.uid] = axis
        if axis.size is not None:
            self._size[axis.uid] = axis.size
            self._origin[axis.uid] = origin or f"declared on {axis.ref}"

    def find(self, uid: str) -> str:
        parent = self._parent
        root = uid
        while parent[root] != root:
            root = parent[root]
        while parent[uid] != root:
            parent[uid], uid = root, parent[uid]
        return root

    def size(self, uid: str) -> int | None:
        return self._size.get(self.find(uid))

    def union(self, a: Axis, b: Axis, origin: str) -> None:
        self.add(a)
        self.add(b)
        ra, rb = self.find(a.uid), self.find(b.uid)
        if ra == rb:
            return
        sa, sb = self._size.get(ra), self._size.get(rb)
        if sa is not None and sb is not None and sa != sb:
            self.conflicts.append(
                f"{a.ref} has size {sa} ({self._origin[ra]}) but {b.ref} has size {sb} "
                f"({self._origin[rb]}); {origin} requires them equal"
            )
            return
        self._parent[ra] = rb
        if sb is None and sa is not None:
            self._size[rb] = sa
            self._origin[rb] = self._origin[ra]

    def set(self, axis: Axis, size: int, origin: str) -> None:
        self.add(axis)
        root = self.find(axis.uid)
        old = self._size.get(root)
        if old is not None and old != size:
            self.conflicts.append(
                f"{axis.ref} is set to {size} ({origin}) but has size {old} ({self._origin[root]})"
            )
            return
        self._size[root] = size
        self._origin[root] = origin

    def add_product(self, result: Axis, factors: Iterable[Axis], origin: str) -> None:
        fs = tuple(factors)
        for a in (result, *fs):
            self.add(a)
        if len(fs) == 1:
            self.union(fs[0], result, origin)
        else:
            self.products.append((result.uid, tuple(f.uid for f in fs), origin))

    def add_constraint(self, c: Any, origin: str) -> None:
        """An op's constraint: a ``WindowSize``, else a product (``result``, ``factors``)."""
        if isinstance(c, WindowSize):
            for a in (c.out, c.n, c.k):
                self.add(a)
            self.windows.append((c, origin))
        else:
            self.add_product(c.result, c.factors, origin)

    def _windows(self, pending: list[tuple[WindowSize, str]]) -> bool:
        """Derive window outputs whose input and kernel sizes are known; keep the rest."""
        changed = False
        rest = []
        for c, origin in pending:
            n, k = self.size(c.n.uid), self.size(c.k.uid)
            if n is None or k is None:
                rest.append((c, origin))
                continue
            m = c.positions(n, k)
            if m < 1:
                self.conflicts.append(f"{c.misfit(n, k)} ({origin})")
                continue
            old = self.size(c.out.uid)
            if old is None:
                self.set(c.out, m, origin)
                changed = True
            elif old != m:
                self.conflicts.append(
                    f"{c.out.ref} has size {old} but a window of {c.k.ref}={k} (stride "
                    f"{c.stride}, padding {c.padding}, dilation {c.dilation}) over {c.n.ref}={n} "
                    f"has {m} positions ({origin})"
                )
        pending[:] = rest
        return changed

    def solve(self) -> None:
        """Propagate products and windows to a fixpoint, recording every violated one."""
        changed = True
        pending = list(self.products)
        windows = list(self.windows)
        while changed:
            changed = self._windows(windows)
            rest = []
            for res, fs, origin in pending:
                known = [self.size(f) for f in fs]
                total = self.size(res)
                unknown = [f for f, s in zip(fs, known, strict=True) if s is None]
                prod = 1
                for s in known:
                    prod *= s or 1
                if not unknown:
                    if total is None:
                        self.set(self.axes[res], prod, origin)
                        changed = True
                    elif total != prod:
                        self.conflicts.append(
                            f"{self.axes[res].ref} has size {total} but its parts "
                            f"{' * '.join(self.axes[f].ref for f in fs)} make {prod} ({origin})"
                        )
                elif len(unknown) == 1 and total is not None:
                    if total % prod:
                        self.conflicts.append(
                            f"{self.axes[res].ref} of size {total} cannot split into "
                            f"{' * '.join(self.axes[f].ref for f in fs)} ({origin}): "
                            f"{total} is not a multiple of {prod}"
                        )
                    else:
                        self.set(self.axes[unknown[0]], total // prod, origin)
                        changed = True
                else:
                    rest.append((res, fs, origin))
            pending = rest

    def check(self, what: str) -> None:
        if self.conflicts:
            lines = "\n".join(f"  - {c}" for c in self.conflicts)
            raise SizeError(
                f"{len(self.conflicts)} size conflict(s) in {what}:\n{lines}\n"
                "Fix: give the listed axes consistent sizes (bind one label, not each axis)."
            )


@attrs.frozen
class SizeVar:
    """One configurable size: its label, the axes that share it, and its size if bound."""

    label: str
    axes: tuple[Axis, ...]
    size: int | None = None

    def __str__(self) -> str:
        refs = ", ".join(a.ref for a in self.axes)
        return f"{self.label} = {'?' if self.size is None else self.size}  [{refs}]"


@attrs.frozen
class Config(Mapping[str, SizeVar]):
    """The free sizes a model exposes (a read-only mapping label -> SizeVar), plus bound ones."""

    free: tuple[SizeVar, ...]
    bound: tuple[SizeVar, ...] = ()

    def __getitem__(self, key: str) -> SizeVar:
        for v in self.free:
            if v.label == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (v.label for v in self.free)

    def __len__(self) -> int:
        return len(self.free)

    def __str__(self) -> str:
        lines = [f"{len(self.free)} free size(s):"] + [f"  {v}" for v in self.free]
        if self.bound:
            lines += [f"{len(self.bound)} bound size(s):"] + [f"  {v}" for v in self.bound]
        return "\n".join(lines)

    __repr__ = __str__


def unique_labels(names: list[str]) -> list[str]:
    """``name`` for the first of each name, then ``name_2``, ``name_3``... (never colliding)."""
    taken: set[str] = set(names)
    seen: dict[str, int] = {}
    out = []
    for n in names:
        count = seen.get(n, 0) + 1
        seen[n] = count
        if count == 1:
            out.append(n)
            continue
        k = count
        while f"{n}_{k}" in taken:
            k += 1
        label = f"{n}_{k}"
        taken.add(label)
        out.append(label)
    return out
