"""Tile choice: minimise a level's transfers H(t) subject to its capacity M(t) <= C.

Tiles H does not depend on are set to 1 (they only cost memory). With unbounded capacity every
tile is its whole axis. Otherwise, for symbolic sizes or capacity, the closed form comes from
the Lagrange conditions ``dH/dt + lambda dM/dt = 0, M = C`` (the napkin paper's derivation; for
matmul it gives ``t_a = t_c = sqrt(M)``), assuming the capacity binds and tiles stay below
their axes (the regime where the bound matters). For numbers, a search over powers of two and
the whole axis, nested inside the level above's tiles, picks the feasible minimum.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import sympy as sp

__all__ = ["TileChoice", "choose_tiles"]


class TileChoice:
    """Tiles for one level: ``values`` (symbol -> expression), ``fits`` (False when even the
    smallest tiles exceed the capacity), ``method`` (how they were found)."""

    def __init__(self, values: dict[sp.Symbol, sp.Expr], fits: bool, method: str) -> None:
        self.values, self.fits, self.method = values, fits, method

    def __repr__(self) -> str:
        return f"TileChoice({self.values}, fits={self.fits}, {self.method})"


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) or (isinstance(x, sp.Basic) and x.is_number)


def choose_tiles(
    h: sp.Expr,
    m: sp.Expr,
    sizes: Mapping[sp.Symbol, sp.Expr],
    capacity: object,
    upper: Mapping[sp.Symbol, sp.Expr] | None = None,
    min_blocks: int = 1,
    split: int = 1,
) -> TileChoice:
    """Tiles minimising ``h`` under ``m <= capacity`` (``None``: unbounded); ``upper`` caps
    each tile (the enclosing level's tile). ``min_blocks``: the units of a level that has
    several (SMs, cores); with numbers the search then minimises ``h`` over the share of units
    the instances (``prod(size / tile)``) keep busy, so one big tile on one SM of 132 loses to
    132 smaller ones. ``split``: how many slices a tile's work may be cut into besides (the
    output features of routed weights, ``KernelFormulas.split``), filling units without new
    tiles."""
    tiles = list(sizes)
    if capacity is None or capacity == sp.oo:
        return TileChoice({t: (upper or sizes).get(t, sizes[t]) for t in tiles}, True, "whole")
    free = [t for t in tiles if h.has(t)]
    fixed: dict[sp.Symbol, sp.Expr] = {t: sp.Integer(1) for t in tiles if t not in free}
    numeric = (
        _is_number(capacity)
        and all(_is_number(sizes[t]) for t in tiles)
        and not (m.free_symbols - set(tiles))
    )
    if numeric:
        return _search(h, m, sizes, float(capacity), fixed, free, upper or {}, min_blocks, split)  # type: ignore[arg-type]
    if not free:
        return TileChoice(fixed, True, "constant")
    free = _merge_products(h, m.subs(fixed), free, fixed)
    try:
        return _lagrange(h.subs(fixed), m.subs(fixed), free, sp.sympify(capacity), fixed)
    except ValueError:
        # no closed form: the tiles stay symbols (H and M remain exact in them)
        return TileChoice({**fixed, **{t: t for t in free}}, True, "symbolic (no closed form)")


def _merge_products(
    h: sp.Expr, m: sp.Expr, free: list[sp.Symbol], fixed: dict[sp.Symbol, sp.Expr]
) -> list[sp.Symbol]:
    """Tiles that only ever appear as a product (``t_heads * t_d_head``) are one degree of
    freedom: keep the first, set the others to 1 (any split of the product is optimal)."""
    s = sp.Symbol("s_", positive=True)
    out = list(free)
    for i, ti in enumerate(free):
        for tj in free[i + 1 :]:
            if ti not in out or tj not in out:
                continue
            swap = {ti: ti * s, tj: tj / s}
            if all(sp.simplify(e.subs(swap, simultaneous=True) - e) == 0 for e in (h, m)):
                fixed[tj] = sp.Integer(1)
                out.remove(tj)
    return out


def _lagrange(
    h: sp.Expr, m: sp.Expr, free: list[sp.Symbol], cap: sp.Expr, fixed: dict[sp.Symbol, sp.Expr]
) -> TileChoice:
    if len(free) == 1:
        (t,) = free
        roots = [r for r in sp.solve(sp.Eq(m, cap), t) if r.is_positive is not False]
        if roots:
            return TileChoice({**fixed, t: sp.simplify(roots[0])}, True, "closed form (capacity)")
    lam = sp.Symbol("lambda_", positive=True)
    eqs = [sp.diff(h, t) + lam * sp.diff(m, t) for t in free] + [m - cap]
    try:
        sols = sp.solve(eqs, [*free, lam], dict=True)
    except NotImplementedError:
        sols = []
    for sol in sols:
        vals = [sol.get(t) for t in free]
        if all(v is not None and v.is_positive is not False for v in vals):
            return TileChoice(
                {**fixed, **{t: sp.simplify(sol[t]) for t in free}}, True, "closed form (Lagrange)"
            )
    raise ValueError(f"no closed-form tiles for H={h} under M={m} <= {cap}; bind sizes to search")


def _candidates(n: int, cap: int) -> list[int]:
    hi = min(n, cap)
    vals = {1 << k for k in range(hi.bit_length()) if (1 << k) <= hi}
    vals.add(hi)
    return sorted(vals)


def _search(
    h: sp.Expr,
    m: sp.Expr,
    sizes: Mapping[sp.Symbol, sp.Expr],
    cap: float,
    fixed: dict[sp.Symbol, sp.Expr],
    free: list[sp.Symbol],
    upper: Mapping[sp.Symbol, sp.Expr],
    min_blocks: int = 1,
    split: int = 1,
) -> TileChoice:
    whole = {t: sp.Integer(int(upper.get(t, sizes[t]))) for t in sizes}
    if float(m.subs(whole)) <= cap and min_blocks <= 1:
        return TileChoice(whole, True, "whole (fits)")
    if not free:
        return TileChoice(fixed, float(m.subs(fixed)) <= cap, "constant")
    hf = sp.lambdify(free, h.subs(fixed), "numpy")
    mf = sp.lambdify(free, m.subs(fixed), "numpy")
    axes = [
        np.array(_candidates(int(sizes[t]), int(upper.get(t, sizes[t]))), dtype=np.float64)
        for t in free
    ]
    if np.prod([len(a) for a in axes]) > 2_000_000:  # keep the search bounded
        axes = [a[:: max(1, len(a) // 8)] for a in axes]
    grid = np.meshgrid(*axes, indexing="ij")
    hv = np.broadcast_to(np.asarray(hf(*grid), dtype=np.float64), grid[0].shape)
    mv = np.broadcast_to(np.asarray(mf(*grid), dtype=np.float64), grid[0].shape)
    ok = mv <= cap
    if min_blocks > 1 and free:
        # transfers over the busy share of the units: fewer instances than units leave some
        # idle, and a last partial wave idles the rest of its units
        blocks = np.ones(grid[0].shape)
        for t, g in zip(free, grid, strict=True):
            blocks = blocks * np.ceil(float(sizes[t]) / g)
        blocks = blocks * np.clip(min_blocks // blocks, 1, split)
        busy = blocks / (np.ceil(blocks / min_blocks) * min_blocks)
        hv = hv / busy
    if not ok.any():
        return TileChoice(
            {**fixed, **{t: sp.Integer(1) for t in free}}, False, "search (nothing fits)"
        )
    # least transfers; among equals, least memory
    order = np.lexsort((mv[ok], hv[ok]))
    idx = np.argwhere(ok)[order[0]]
    return TileChoice(
        {**fixed, **{t: sp.Integer(int(axes[j][idx[j]])) for j, t in enumerate(free)}},
        True,
        "search",
    )
