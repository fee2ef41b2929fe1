"""ncd-opencl's schedule space, as data for ``ncd.tune`` (``ncd.tuning``).

Per planned kernel, by the template that renders it (``schedule.template_of``):

- streamed attention: the key chunk (``CHUNK_SPACE``) x the query rows per work-item
  (``ROWS_SPACE``), at most ``MAX_SCORES`` private scores, no chunk past the key length nor
  more rows than there are;
- tiled matmul: the work-group shape, work-items along rows x columns (``GROUP_SPACE``), at
  most ``MAX_WORK_GROUP`` per group, the register block per work-item fixed (4 x 2); the panel
  GEMM (8 rows x 32 columns per work-item) takes ``PANEL_SPACE``, groups one panel wide; only
  the default with ``local_memory`` (the staged template has one tile shape);
- any other kernel: its one schedule.

The default (the plan's own choices) always comes first. A kernel's key is the SHA-256 of its
rendered function as ``assemble`` compares them (``canonical_text``: name, comments and buffer
names abstracted, launch shape kept), so identical layers share a key and a later process (or
another model with the same kernel) finds its tuning.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ncd.codegen.plans import spread_tile
from ncd.codegen.program import canonical_text
from ncd.kernel import FusionPlan, Kernel
from ncd.tuning import Candidate

__all__ = ["CHUNK_SPACE", "GROUP_SPACE", "ROWS_SPACE", "candidates", "device_key", "kernel_keys"]

CHUNK_SPACE = (8, 16, 32, 64, 128)
ROWS_SPACE = (1, 2, 4, 8)
GROUP_SPACE = ((4, 4), (4, 8), (8, 4), (8, 8), (8, 16), (16, 8), (16, 16), (4, 32), (32, 4))
PANEL_SPACE = ((4, 1), (8, 1), (16, 1), (32, 1), (8, 2))


def candidates(kernel: Kernel, local: bool = False, lanes: int = 8) -> list[Candidate]:
    from ncd_opencl.schedule import template_of

    kind = template_of(kernel)
    if kind == "streamed":
        return _streamed(kernel)
    if kind == "tiled" and not local:
        return _tiled(kernel, lanes)
    return [Candidate("default", kernel.choices)]


def _first(default: Candidate, rest: Sequence[Candidate]) -> list[Candidate]:
    same = [c for c in rest if set(c.choices) == set(default.choices)]
    head = Candidate(same[0].label, default.choices) if same else default
    return [head, *(c for c in rest if c.label != head.label)]


def _streamed(k: Kernel) -> list[Candidate]:
    from ncd.codegen.stream import stream_choices
    from ncd_opencl.schedule import MAX_SCORES

    g = k.graph
    x = k.streamed[0]
    keys = int(g.size(x) or 1)
    row_axes = {p.axis for p in k.choices if p.level == 1}
    rows_max = max((int(g.size(a) or 1) for a in row_axes), default=1)
    out = []
    for chunk in CHUNK_SPACE:
        if chunk > max(CHUNK_SPACE[0], 2 ** math.ceil(math.log2(max(keys, 1)))):
            continue
        for rows in ROWS_SPACE:
            if chunk * rows > MAX_SCORES or rows > max(1, rows_max):
                continue
            made = stream_choices(k, chunk, rows)
            if made:
                out.append(Candidate(f"chunk={chunk} rows={rows}", tuple(made)))
    return _first(Candidate("default", k.choices), out)


def _tiled(k: Kernel, lanes: int) -> list[Candidate]:
    from ncd_opencl.schedule import MAX_WORK_GROUP, kernel_linear, matmul_tiles, renders_panel

    form = kernel_linear(k)
    if form is None:
        return [Candidate("default", k.choices)]
    g = k.graph
    m_axes, n_axes = form.loop, form.out_axes
    rows = math.prod(int(g.size(a) or 1) for a in m_axes)
    cols = math.prod(int(g.size(a) or 1) for a in n_axes)
    (rm, rn), _ = matmul_tiles(k, False, lanes)
    out = []
    for wm, wn in PANEL_SPACE if renders_panel(k, False, lanes) else GROUP_SPACE:
        if wm * wn > MAX_WORK_GROUP:
            continue
        if rm * wm > 2 * max(rows, rm * 8) or rn * wn > 2 * max(cols, rn * 8):
            continue  # a group far past the output: the same work masked away
        made = (
            spread_tile(g, m_axes, rm * wm, 0)
            + spread_tile(g, m_axes, rm, 1)
            + spread_tile(g, n_axes, rn * wn, 0)
            + spread_tile(g, n_axes, rn, 1)
        )
        out.append(Candidate(f"wg={wm}x{wn}", tuple(made)))
    return _first(Candidate("default", k.choices), out)


def kernel_keys(
    plan: FusionPlan, tiled: bool = True, local: bool = False, lanes: int = 8
) -> list[str]:
    from ncd_opencl.generate import generate

    gen = generate(plan.graph, plan=plan, tiled=tiled, local=local, lanes=lanes)
    by_name: dict[str, str] = {}
    for src in gen.kernels:
        if src.text and src.name not in by_name:  # (a later identical kernel has no text)
            by_name[src.name] = hashlib.sha256(canonical_text(src).encode()).hexdigest()
    return [by_name[src.name] for src in gen.kernels]


def measure(
    graph: Any,
    plan: FusionPlan,
    inputs: Sequence[np.ndarray],
    params: Mapping[str, np.ndarray],
    reps: int,
    options: Mapping[str, Any],
) -> tuple[list[np.ndarray], list[float]]:
    from ncd.reference import prepare
    from ncd_opencl.backend import Compiled

    g, arrays, ps = prepare(graph, list(inputs), dict(params), cast="safe")
    built = Compiled(
        g,
        options.get("device"),
        bool(options.get("fast_math", False)),
        options.get("fuse", True),
        bool(options.get("tiled", True)),
        options.get("local_memory"),
        plan=plan,
        reuse_outputs=False,
        lanes=options.get("lanes"),
    )
    outs = built.run(arrays, ps, None, g)
    secs = built.profile(arrays, ps, max(1, reps), g)
    return outs, [secs[src.name] for _, src in built.launches]


def device_key(options: Mapping[str, Any]) -> str:
    from ncd_opencl.program import default_options, get_context

    _, _, dev = get_context(options.get("device"))
    opts = " ".join(default_options(bool(options.get("fast_math", False))))
    return " | ".join([dev.platform.name, dev.platform.version, dev.name, dev.driver_version, opts])
