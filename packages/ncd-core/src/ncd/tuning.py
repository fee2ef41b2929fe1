"""``ncd.tune(model, target)``: search a target's schedule space for each distinct kernel, on the
device, and keep the winners in a persistent tuning cache.

A target declares its space as data: a backend with the ``"tune"`` capability (``TUNES``)
implements ``Backend.candidates`` (the schedules its templates can render for one planned
kernel, each a ``Candidate``: a label and the full choices, the plan's default first),
``kernel_keys`` (a digest per kernel, equal for identical kernels such as a model's layers),
``measure`` (outputs and seconds per kernel of one plan on the device) and ``device_key`` (the
device and driver a measurement holds for). ``tune``:

1. plans the model (``ncd.plan(model, target=...)``) and groups identical kernels by key;
2. looks each group up in the cache (a hit skips the search; a corrupted or foreign entry is
   ignored with a ``TuningCacheWarning``);
3. ranks each remaining group's candidates by the cost model (``perf``, through the plugin
   registry, when one is installed) and keeps the best ``candidates`` of them, the default
   always among them;
4. measures in rounds: round ``r`` renders every group's ``r``-th candidate at once, so one
   program build serves every group; each round's outputs are checked against the reference
   interpreter before its times count (a round that disagrees is measured again group by
   group, and the candidates that disagree are dropped), until the ``budget`` in seconds is
   spent;
5. takes each group's fastest candidate that agreed, then measures the winners and the
   defaults alternately (``CONFIRM`` times each: head to head, on programs already built) and
   keeps a winner only when it beats its default by ``MARGIN`` there (a lucky round on a noisy
   host never wins alone); those runs check the combined plan against the reference too; the
   winners are stored.

Tuning needs every size bound (the tiles depend on them).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ncd.errors import ScheduleError
from ncd.kernel import FusionPlan, Partition
from ncd.plugins.interfaces import TUNES

__all__ = [
    "TUNES",
    "Candidate",
    "TunedGroup",
    "Tuning",
    "TuningCacheWarning",
    "agrees",
    "cache_dir",
    "tunable",
    "tune",
]

_FORMAT = 1  # the cache entries' layout
#: a candidate must beat the default by this fraction to replace it
MARGIN = 0.03
#: head-to-head rounds of the winners against the defaults before a winner is kept
CONFIRM = 2


class TuningCacheWarning(UserWarning):
    """A tuning cache entry was ignored (unreadable, corrupted, or written for another kernel,
    device or schedule space); the kernel is tuned again."""


@attrs.frozen
class Candidate:
    """One schedule a target can render for a kernel: ``label`` names it the same way for every
    identical kernel (``"chunk=32 rows=4"``), ``choices`` are the kernel's full choices."""

    label: str
    choices: tuple[Partition, ...]


@attrs.frozen
class TunedGroup:
    """The outcome for one group of identical kernels."""

    key: str
    kernels: tuple[str, ...]  # plan kernel names
    default: str  # the default candidate's label
    winner: str
    default_seconds: float | None  # per call, the group's kernels together (None: not measured)
    winner_seconds: float | None
    tried: tuple[tuple[str, float | None], ...]  # (label, seconds or None: disagreed/failed)
    cached: bool = False

    @property
    def speedup(self) -> float | None:
        if not self.default_seconds or not self.winner_seconds:
            return None
        return self.default_seconds / self.winner_seconds


@attrs.frozen
class Tuning:
    """What ``tune`` returns: the tuned ``plan`` (pass it as ``plan=`` to ``ncd.compile``) and
    a row per group of identical kernels."""

    plan: FusionPlan
    groups: tuple[TunedGroup, ...]
    seconds: float  # wall time of the tuning
    rounds: int  # program builds measured
    pruned_by: str | None  # the cost model that ranked candidates, if any

    def __str__(self) -> str:
        lines = [
            f"tuned {len(self.plan.kernels)} kernel(s) in {len(self.groups)} group(s): "
            f"{self.rounds} round(s), {self.seconds:.1f} s"
            + (f", candidates ranked by {self.pruned_by}" if self.pruned_by else "")
        ]
        for g in self.groups:
            if len(g.tried) <= 1 and not g.cached:
                continue
            how = "cache" if g.cached else f"{len(g.tried)} tried"
            gain = f" x{g.speedup:.2f}" if g.speedup else ""
            lines.append(
                f"  {g.kernels[0]:<36} x{len(g.kernels):<2} {g.default:<18} "
                f"{_ms(g.default_seconds):>11} -> {g.winner:<18} {_ms(g.winner_seconds):>11}"
                f"{gain} ({how})"
            )
        return "\n".join(lines)


def tune(
    model: Any,
    target: str,
    *,
    budget: float = 60.0,
    candidates: int = 6,
    reps: int = 5,
    cache: bool = True,
    progress: bool | None = None,
    seed: int = 0,
    inputs: Sequence[np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    **options: Any,
) -> Tuning:
    """Search ``target``'s schedules for ``model`` (see the module docstring). ``budget``:
    seconds of measuring after the default round; ``candidates``: per group, at most this many
    measured; ``reps``: launches per kernel and candidate (the median counts); ``cache``: read
    and write the tuning cache (``cache_dir``); ``progress``: a progress line on stderr
    (default: when stderr is a terminal); ``inputs``/``params``: what to run on (default:
    seeded random inputs and ``ncd.init(model, seed)``); ``options``: the target's compile
    options (its plan options shape the plan, the rest the measuring build)."""
    from ncd.params import init
    from ncd.planning import plan as plan_of
    from ncd.reference import run as reference_run

    t_start = time.perf_counter()
    if not isinstance(budget, int | float) or budget < 0 or not isinstance(candidates, int):
        raise ScheduleError(
            f"ncd.tune: budget={budget!r}, candidates={candidates!r}. Fix: a budget in seconds "
            ">= 0 and a whole number of candidates >= 1."
        )
    graph, backend = tunable(model, target, "ncd.tune", "declares no schedule space to tune")
    plan_opts = {k: v for k, v in options.items() if k in backend.plan_options}
    base = plan_of(graph, target, **plan_opts)
    keys = backend.kernel_keys(base, **options)
    groups: dict[str, list[int]] = {}
    for n, key in enumerate(keys):
        groups.setdefault(key, []).append(n)
    spaces = {n: backend.candidates(k, **options) for n, k in enumerate(base.kernels)}
    labels = {key: [c.label for c in spaces[idx[0]]] for key, idx in groups.items()}
    device = backend.device_key(**options)
    show = sys.stderr.isatty() if progress is None else progress

    chosen: dict[str, str] = {}
    cached: set[str] = set()
    times: dict[str, dict[str, float | None]] = {k: {} for k in groups}
    for key, names in labels.items():
        if len(names) > 1 and cache:
            hit = _load(target, device, key, names)
            if hit is not None:
                chosen[key], seconds = hit
                cached.add(key)
                times[key][chosen[key]] = seconds
    search = [k for k, names in labels.items() if len(names) > 1 and k not in cached]
    ranked, pruned_by = _rank(base, groups, spaces, search, candidates, backend, target)

    if inputs is None:
        from ncd.testing import random_inputs

        inputs = random_inputs(graph, seed)
    ps = dict(init(model, seed=seed)) if params is None else dict(params)
    want = [np.asarray(w) for w in _flat(reference_run(graph, *inputs, params=ps))]

    def plan_with(pick: Mapping[str, str]) -> FusionPlan:
        kernels = list(base.kernels)
        for key, label in pick.items():
            for n in groups[key]:
                cand = next(c for c in spaces[n] if c.label == label)
                kernels[n] = attrs.evolve(kernels[n], choices=cand.choices)
        return attrs.evolve(base, kernels=kernels)

    def measure(pick: Mapping[str, str]) -> tuple[bool, list[float]]:
        outs, secs = backend.measure(graph, plan_with(pick), inputs, ps, reps, **options)
        return all(agrees(o, w) for o, w in zip(_flat(outs), want, strict=True)), secs

    rounds = 0
    depth = max((len(ranked[k]) for k in search), default=0)
    t_measure = time.perf_counter()
    for r in range(depth):
        if r > 0 and time.perf_counter() - t_measure > budget:
            break
        pick = {k: ranked[k][r] for k in search if r < len(ranked[k])}
        if show:
            print(f"\rncd tune: round {r + 1}/{depth} ...", end="", file=sys.stderr, flush=True)
        ok, secs = _safe(measure, pick)
        rounds += 1
        if not ok:  # find which candidates disagree: each alone, the others at their defaults
            for key, label in pick.items():
                alone_ok, alone = _safe(measure, {key: label})
                rounds += 1
                times[key][label] = _group_time(alone, groups[key]) if alone_ok else None
            continue
        for key, label in pick.items():
            times[key][label] = _group_time(secs, groups[key])
        if r == 0:  # the defaults of groups with one candidate (shown, never searched)
            for key in groups:
                if key not in pick:
                    times[key][labels[key][0]] = _group_time(secs, groups[key])
    if show:
        print(file=sys.stderr)

    for key in search:
        default = labels[key][0]
        good = {lab: s for lab, s in times[key].items() if s is not None}
        chosen[key] = min(good, key=lambda lab: good[lab]) if good else default
    # Confirmation, head to head: the winners and the defaults measured alternately (the
    # programs are built by now), each group keeping its winner only when that is faster
    # than its default by MARGIN in the best of these runs; a first round runs cold, and a
    # timing on a loaded host is noisy, so one lucky round never wins alone. The winners'
    # runs also check the combined plan against the reference.
    winners = {k: v for k, v in chosen.items() if v != labels[k][0]}
    fresh = [k for k in winners if k in search]  # cached winners are not raced again
    held = {k: v for k, v in winners.items() if k not in fresh}
    best_win: dict[str, float] = {}
    best_def: dict[str, float] = {}
    for _ in range(CONFIRM if fresh else 1 if winners else 0):
        for pick, best in ((winners, best_win), (held, best_def)):
            if best is best_def and not fresh:
                continue
            ok, secs = _safe(measure, pick)
            rounds += 1
            if not ok and pick is winners:
                warnings.warn(
                    "ncd.tune: the combined tuned plan disagrees with the reference although each "
                    "candidate agreed alone; keeping the default plan.",
                    TuningCacheWarning,
                    stacklevel=2,
                )
                winners, fresh = {}, []
                break
            for key in groups:
                t_ = _group_time(secs, groups[key])
                if t_ is not None:
                    best[key] = min(best.get(key, math.inf), t_)
        if not winners:
            break
    for key in fresh:
        label, default = winners[key], labels[key][0]
        win_t, def_t = best_win.get(key), best_def.get(key)
        if win_t is None or def_t is None or win_t * (1 + MARGIN) >= def_t:
            del winners[key]
        if win_t is not None:
            times[key][label] = win_t
        if def_t is not None:
            times[key][default] = def_t
    chosen.update({k: labels[k][0] for k in chosen if k not in winners})
    tuned = plan_with(winners)
    if cache:
        for key in search:
            if chosen[key] in times[key]:
                _store(target, device, key, chosen[key], labels[key], times[key])
    rows = []
    for key, idx in groups.items():
        default = labels[key][0]
        win = chosen.get(key, default)
        rows.append(
            TunedGroup(
                key,
                tuple(base.kernels[n].name for n in idx),
                default,
                win,
                times[key].get(default),
                times[key].get(win),
                tuple(times[key].items()),
                key in cached,
            )
        )
    return Tuning(tuned, tuple(rows), time.perf_counter() - t_start, rounds, pruned_by)


def tunable(model: Any, target: str, what: str, refusal: str) -> tuple[Any, Any]:
    """(graph, backend) of a bound ``model`` for a ``target`` that declares ``"tune"``;
    ``ScheduleError`` naming ``what`` was asked otherwise (``refusal``: what the backend
    lacks)."""
    from ncd.graph import as_graph
    from ncd.plugins import registry

    graph = as_graph(model, what)
    free = [v.label for v in graph.config().free]
    if free:
        raise ScheduleError(
            f"{what}: the sizes {', '.join(free)} are still free; tiles depend on every size. "
            "Fix: bind them (model.bind(...)) for the sizes to run."
        )
    backend = registry().backend(target)
    if TUNES not in backend.capabilities:
        raise ScheduleError(
            f"backend {target!r} {refusal} (its capabilities: "
            f"{', '.join(sorted(backend.capabilities)) or 'none'}). Fix: a target whose backend "
            "declares 'tune' (opencl)."
        )
    return graph, backend


def agrees(got: Any, want: Any) -> bool:
    """``got`` matches the reference ``want`` as a correct schedule must: the same shape, the
    same non-finite entries, and finite entries within the tolerance of ``want``'s format (a
    candidate only reorders sums, so the bound is loose against rounding, tight against a
    wrong tile: a missed or repeated element moves the result by a whole term)."""
    from ncd.dtypes import dtype as to_dtype

    g = np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        return False
    if w.dtype.kind in "iub":
        return bool(np.array_equal(g, w))
    gf, wf = g.astype(np.float64), w.astype(np.float64)
    finite = np.isfinite(wf)
    if not np.array_equal(np.isfinite(gf), finite) or not np.array_equal(
        np.isnan(gf), np.isnan(wf)
    ):
        return False
    if not np.array_equal(gf[~finite & ~np.isnan(wf)], wf[~finite & ~np.isnan(wf)]):
        return False
    try:
        eps = float(np.finfo(to_dtype(str(w.dtype)).numpy).eps)
    except Exception:
        eps = float(np.finfo(np.float32).eps)
    scale = float(np.max(np.abs(wf[finite]), initial=0.0)) or 1.0
    return bool(np.all(np.abs(gf[finite] - wf[finite]) <= 2e3 * eps * scale + 1e-30))


def cache_dir() -> str:
    """``NCD_TUNING_CACHE``, else ``$XDG_CACHE_HOME/ncd/tuning``, else ``~/.cache/ncd/tuning``."""
    given = os.environ.get("NCD_TUNING_CACHE")
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ncd", "tuning")


# -- helpers ---------------------------------------------------------------------------------


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def _flat(outs: Any) -> list[Any]:
    return list(outs) if isinstance(outs, tuple | list) else [outs]


def _safe(fn: Callable[[Any], tuple[bool, list[float]]], arg: Any) -> tuple[bool, list[float]]:
    """A candidate the device fails to build or run loses; it never fails the tuning."""
    from ncd.errors import NcdError

    try:
        return fn(arg)
    except (NcdError, RuntimeError, MemoryError) as e:
        warnings.warn(f"ncd.tune: a candidate failed and is skipped: {e}", stacklevel=3)
        return False, []


def _group_time(secs: Sequence[float], idx: Sequence[int]) -> float | None:
    if not secs:
        return None
    return float(sum(secs[n] for n in idx))


def _rank(
    base: FusionPlan,
    groups: Mapping[str, list[int]],
    spaces: Mapping[int, list[Candidate]],
    search: Sequence[str],
    keep: int,
    backend: Any,
    target: str,
) -> tuple[dict[str, list[str]], str | None]:
    """Per group, the labels to measure: the default first, then the rest by predicted time
    (the registry's ``perf`` cost model on the backend's ``tuning_machine``), at most ``keep``."""
    from ncd.plugins import registry

    keep = max(1, keep)
    order = {k: [c.label for c in spaces[groups[k][0]]] for k in search}
    machine = getattr(backend, "tuning_machine", None)
    reg = registry()
    if machine is None or "perf" not in reg.cost_models or not search:
        return {k: v[:keep] for k, v in order.items()}, None
    model = reg.cost_model("perf")
    predicted: dict[str, dict[str, float]] = {k: {} for k in search}
    depth = max(len(v) for v in order.values())
    try:
        for r in range(depth):
            kernels = list(base.kernels)
            for k in search:
                if r < len(order[k]):
                    for n in groups[k]:
                        cand = spaces[n][r]
                        kernels[n] = attrs.evolve(kernels[n], choices=cand.choices)
            priced = model.cost(base.graph, machine, plan=attrs.evolve(base, kernels=kernels))
            for k in search:
                if r < len(order[k]):
                    t = [priced.kernels[n].time for n in groups[k]]
                    predicted[k][order[k][r]] = math.fsum(float(x or 0.0) for x in t)
    except Exception as e:  # a prediction only orders candidates: measure them unranked
        warnings.warn(f"ncd.tune: cost model unavailable for ranking ({e})", stacklevel=3)
        return {k: v[:keep] for k, v in order.items()}, None
    out = {}
    for k, labels in order.items():
        rest = sorted(labels[1:], key=lambda lab: predicted[k].get(lab, math.inf))
        out[k] = [labels[0], *rest][:keep]
    return out, f"perf on {machine!r}"


def _path(target: str, device: str, key: str) -> tuple[str, str]:
    ident = "\0".join([target, device, key])
    digest = hashlib.sha256(ident.encode()).hexdigest()
    return os.path.join(cache_dir(), f"{digest}.json"), ident


def _checksum(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _load(
    target: str, device: str, key: str, labels: Sequence[str]
) -> tuple[str, float | None] | None:
    path, ident = _path(target, device, key)
    if not os.path.exists(path):
        return None
    why = None
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if not isinstance(entry, dict) or entry.get("checksum") != _checksum(entry):
            why = "its checksum does not match its contents (corrupted)"
        elif entry.get("format") != _FORMAT or entry.get("ident") != ident:
            why = "it was written for another kernel, device or target (foreign)"
        elif entry.get("space") != list(labels) or entry.get("winner") not in labels:
            why = "its schedule space differs from this target's (stale)"
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = f"it cannot be read ({type(e).__name__})"
    if why is not None:
        warnings.warn(
            f"ncd.tune: ignored the tuning cache entry {path}: {why}; tuning again.",
            TuningCacheWarning,
            stacklevel=3,
        )
        return None
    seconds = entry.get("seconds")
    return str(entry["winner"]), (float(seconds) if isinstance(seconds, int | float) else None)


def _store(
    target: str,
    device: str,
    key: str,
    winner: str,
    labels: Sequence[str],
    times: Mapping[str, float | None],
) -> None:
    path, ident = _path(target, device, key)
    entry: dict[str, Any] = {
        "format": _FORMAT,
        "ident": ident,
        "space": list(labels),
        "winner": winner,
        "seconds": times.get(winner),
        "measured": {k: v for k, v in times.items()},
    }
    entry["checksum"] = _checksum(entry)
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, path)  # atomic: a reader sees the old entry or the new one
    except OSError as e:  # a cache that cannot be written costs a re-tune, never a failure
        warnings.warn(f"ncd.tune: could not write the tuning cache ({e})", stacklevel=3)
