"""``ncd.plan(model, target=...)``: the kernels a target renders, each with its schedule.

``target=None`` is ncd's own plan (``ncd.fuse``). A target whose backend declares the
``"plan"`` capability (``ncd.plugins.interfaces.PLANS``) plans for itself: its ``plan`` method
returns the fusion plan it renders, with the tiles its templates use recorded as
``Kernel.choices``, so that what ncd-perf prices, ncd-diagram draws and the code generator
renders is one value. ``tiles=`` overrides chosen tiles (``apply_tiles``); the backend then
refuses what its templates cannot render.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.errors import ScheduleError
from ncd.kernel import FusionPlan, Kernel, Partition

__all__ = ["TileKey", "apply_tiles", "plan"]

#: a key of ``tiles=``: an axis (or its name, config label or tile symbol ``t_<name>``), or
#: ``(axis, level)``, or ``(kernel name pattern, axis, level)`` (``fnmatch``: ``"k*_einsum*"``)
TileKey = Axis | str | tuple[Any, ...]


def plan(
    model: Any,
    target: str | None = None,
    *,
    tiles: Mapping[TileKey, int] | None = None,
    **options: Any,
) -> FusionPlan:
    """The kernels ``target`` renders for ``model`` (``None``: ``ncd.fuse``); ``options`` go to
    the backend's planner (ncd-opencl: ``fuse``, ``tiled``, ``local_memory``). A target no
    plugin provides is the registry's ``TargetNotFoundError``; one whose backend does not plan
    is a ``ScheduleError``."""
    from ncd.fusion import fuse
    from ncd.graph import as_graph
    from ncd.plugins import registry
    from ncd.plugins.interfaces import PLANS

    graph = as_graph(model, "ncd.plan")
    if target is None:
        if options:
            raise ScheduleError(
                f"ncd.plan(target=None) takes no options (got {', '.join(sorted(options))}). "
                "Fix: name the target they are for."
            )
        simple = {k: v for k, v in (tiles or {}).items() if not isinstance(k, tuple)}
        if len(simple) != len(tiles or {}):
            raise ScheduleError(
                "ncd.plan(target=None) tiles are keyed by axis, name, label or tile symbol "
                "(ncd.fuse's level-0 tiles); per-level keys are for a target's choices. Fix: "
                "drop the level, or give a target."
            )
        return fuse(graph, tiles=simple or None)
    backend = registry().backend(target)
    if PLANS not in backend.capabilities:
        raise ScheduleError(
            f"backend {target!r} does not plan kernels (its capabilities: "
            f"{', '.join(sorted(backend.capabilities)) or 'none'}). Fix: ncd.plan(model) for "
            "ncd's own plan, or a target whose backend declares 'plan'."
        )
    out = backend.plan(graph, tiles=tiles, **options)
    if not isinstance(out, FusionPlan) or out.target != target:
        raise ScheduleError(
            f"backend {target!r}: plan() returned {type(out).__name__} for target "
            f"{getattr(out, 'target', None)!r}, not a FusionPlan for {target!r} (a plugin bug)."
        )
    return out


def _key(key: TileKey) -> tuple[str | None, Axis | str, int | None]:
    """(kernel pattern, axis key, level) of a ``tiles=`` key."""
    if isinstance(key, tuple):
        if len(key) == 2 and isinstance(key[1], int) and not isinstance(key[1], bool):
            return None, key[0], key[1]
        if len(key) == 3 and isinstance(key[0], str) and isinstance(key[2], int):
            return key[0], key[1], key[2]
        raise ScheduleError(
            f"tiles= key {key!r} is not (axis, level) or (kernel pattern, axis, level). Fix: "
            "e.g. tiles={('seq_k', 0): 16} or tiles={('k*_einsum*', 'seq', 1): 2}."
        )
    if isinstance(key, Axis | str):
        return None, key, None
    raise ScheduleError(
        f"tiles= key {key!r} ({type(key).__name__}) names no axis. Fix: an Axis, an axis name, "
        "a config label or a tile symbol, optionally with a level."
    )


def _matches(p: Partition, key: Axis | str, labels: Mapping[str, str]) -> bool:
    if isinstance(key, Axis):
        return p.axis == key
    from ncd.fusion import tile_symbol

    return key in (p.axis.name, labels.get(p.axis.uid), tile_symbol(p.axis.name))


def apply_tiles(plan: FusionPlan, tiles: Mapping[TileKey, int]) -> FusionPlan:
    """``plan`` with the user's tiles replacing the matching choices of its kernels. Each key
    must match at least one choice; without a level it must match one level per axis and
    kernel; each tile is an int between 1 and its axis's size (or the target's own tile, where
    that overhangs the axis). Anything else: ``ScheduleError``
    naming the key, the tiles there are, and the fix."""
    from ncd.fusion import axis_labels

    graph = plan.graph
    labels = axis_labels(graph)
    kernels = list(plan.kernels)
    for key, tile in tiles.items():
        pattern, axis, level = _key(key)
        hits = 0
        for n, k in enumerate(kernels):
            if pattern is not None and not fnmatch.fnmatchcase(k.name, pattern):
                continue
            found = [
                p
                for p in k.choices
                if _matches(p, axis, labels) and (level is None or p.level == level)
            ]
            by_axis: dict[Axis, list[int]] = {}
            for p in found:
                by_axis.setdefault(p.axis, []).append(p.level)
            for a, levels in by_axis.items():
                if len(levels) > 1:
                    raise ScheduleError(
                        f"tiles= key {key!r} matches {a.describe()} at levels "
                        f"{', '.join(map(str, sorted(levels)))} of kernel {k.name}. Fix: give "
                        f"the level, e.g. tiles={{({a.name!r}, {min(levels)}): {tile!r}}}."
                    )
            if found:
                kernels[n] = k.with_choices(_checked(k, p, tile, key) for p in found)
                hits += len(found)
        if not hits:
            raise ScheduleError(
                f"tiles= key {key!r} matches no tile the plan chose. Tiles there are: "
                f"{_tunable(kernels)}. Fix: key one of them by axis name, label or Axis, "
                "with its level where an axis has several."
            )
    return attrs.evolve(plan, kernels=kernels)


def _checked(k: Kernel, p: Partition, tile: Any, key: TileKey) -> Partition:
    size = k.graph.size(p.axis)
    if not isinstance(tile, int) or isinstance(tile, bool) or tile < 1:
        raise ScheduleError(
            f"tiles= {key!r}: {tile!r} for {p.axis.describe()} in kernel {k.name} is no "
            "positive int. Fix: an int tile between 1 and the axis size."
        )
    # a target may let a tile overhang its axis (a work-group of 32 rows over 7, the tail
    # masked); the user may shrink such a tile, and otherwise stays within the axis
    most = max(size, p.tile) if size is not None and isinstance(p.tile, int) else size
    if most is not None and tile > most:
        raise ScheduleError(
            f"tiles= {key!r}: a tile of {tile} does not fit {p.axis.describe()} "
            f"at level {p.level} in kernel {k.name}. Fix: a tile between 1 and {most}."
        )
    return attrs.evolve(p, tile=tile)


def _tunable(kernels: list[Kernel]) -> str:
    seen: dict[str, None] = {}
    for k in kernels:
        for p in k.choices:
            seen.setdefault(f"({p.axis.name!r}, {p.level}) {p.kind} {p.tile}")
    return "; ".join(seen) or "none (this plan records no choices)"
