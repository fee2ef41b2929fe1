"""The cost of a kernel and of a whole model on a machine: ``cost`` and ``optimise``.

For every kernel of the fusion plan (``ncd.fuse``, or one kernel per op with ``fuse=False``)
and every memory level below the backing store, tiles are chosen for that level's capacity
(``tiles.py``) and the kernel's formulas (``formulas.py``) give the level's transfers H and
resident memory M. FLOPs come by kind from ``flops.py``. With numbers, the roofline time of a
kernel is its launch latency plus the largest of: FLOPs of each kind over that kind's rate, the
bytes of each level over its fill bandwidth, and its collective communication (``distributed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import sympy as sp

from ncd.fusion import fuse as plan_fusion
from ncd.graph import Graph, as_graph
from ncd.kernel import FusionPlan, Kernel, unfused
from ncd.primitives import library as L
from ncd_perf.distributed import SEQUENCE, Collective, collectives, sequence_keys
from ncd_perf.flops import flops
from ncd_perf.formulas import KernelFormulas, size_function
from ncd_perf.machine import OVERLAPS, Machine, load_machine
from ncd_perf.occupancy import Occupancy, occupancy
from ncd_perf.tiles import TileChoice, choose_tiles

__all__ = ["KernelCost", "LevelCost", "ModelCost", "cost", "optimise"]


@attrs.define
class LevelCost:
    """One level of one kernel: tiles, transfers H (elements and bytes), resident M."""

    level: int
    name: str
    tiles: dict[sp.Symbol, sp.Expr]
    transfers: sp.Expr
    bytes: sp.Expr
    resident: sp.Expr
    fits: bool
    method: str
    time: float | None = None
    #: the bytes of ``bytes`` that are written (charged the level's ``write_factor``)
    written: sp.Expr = sp.Integer(0)


@attrs.define
class KernelCost:
    kernel: Kernel
    formulas: KernelFormulas
    flops: dict[str, sp.Expr]
    dtype: str
    levels: list[LevelCost]
    collectives: list[Collective]
    time: float | None = None
    bottleneck: str = ""
    parts: dict[str, float] = attrs.field(factory=dict)
    #: residency per SM from the target's compiled resources (``cost(resources=)``); reported,
    #: not yet part of ``time`` (that needs a calibration on the GPU)
    occupancy: Occupancy | None = None
    #: efficiency terms applied to the compute times, e.g. ``{"waves": 0.97}``: the share of
    #: the GPU's block slots the last wave of instances leaves busy (wave quantisation)
    efficiency: dict[str, float] = attrs.field(factory=dict)

    @property
    def transfers(self) -> sp.Expr:
        """Transfers at level 1 (the backing store to the first fast level), in elements."""
        return self.levels[0].transfers if self.levels else sp.Integer(0)

    def tiled(self, level: int = -1) -> Kernel:
        """The kernel with the tiles chosen for machine level ``level`` (a ``levels`` index;
        default the innermost) as its level-0 partitions, ready for a code generator:
        grouped axes (renamed copies included) with int tiles, the streamed axis."""
        from ncd.kernel import Partition

        f, chosen = self.formulas, self.levels[level].tiles
        parts = []
        for a in self.kernel.axes():
            root = f.root(a)
            if root in f.tiles:
                t = chosen.get(f.tiles[root], f.tiles[root])
                parts.append(Partition(a, "group", int(t) if t.is_Integer else str(t)))
        if f.stream is not None:
            parts.append(Partition(f.stream, "stream", None))
        return attrs.evolve(self.kernel, partitions=parts)

    def schedule_text(self) -> str:
        f = self.formulas
        parts = [f"group {g.name} ({f.tiles[g]} = {self._tile(f.tiles[g])})" for g in f.groups]
        if f.stream is not None:
            parts.append(f"stream {f.stream.name}")
        ops = ", ".join(n.op.label for n in self.kernel.ops)
        return f"{self.kernel.name}: [{ops}] " + ", ".join(parts or ["one instance"])

    def _tile(self, sym: sp.Symbol) -> str:
        vals = [str(lv.tiles.get(sym, "?")) for lv in self.levels]
        return " / ".join(vals) if vals else str(sym)


@attrs.define
class ModelCost:
    """The priced plan: ``kernels`` (each a ``KernelCost``), totals, and printable views."""

    plan: FusionPlan
    machine: Machine
    kernels: list[KernelCost]

    @property
    def transfers(self) -> sp.Expr:
        """Total level-1 transfers in elements (a sympy expression in config labels)."""
        return sp.simplify(sp.Add(*(k.transfers for k in self.kernels)))

    def transfers_at(self, level: int, unit: str = "elements") -> sp.Expr:
        out = sp.Integer(0)
        for k in self.kernels:
            for lv in k.levels:
                if lv.level == level:
                    out += lv.transfers if unit == "elements" else lv.bytes
        return sp.simplify(out)

    @property
    def flops(self) -> dict[str, sp.Expr]:
        total: dict[str, sp.Expr] = {}
        for k in self.kernels:
            for kind, n in k.flops.items():
                total[kind] = total.get(kind, sp.Integer(0)) + n
        return {kind: sp.simplify(n) for kind, n in total.items()}

    @property
    def time(self) -> float | None:
        times = [k.time for k in self.kernels]
        return None if any(t is None for t in times) else float(sum(times))  # type: ignore[arg-type]

    @property
    def schedule(self) -> str:
        return "\n".join(k.schedule_text() for k in self.kernels)

    def __str__(self) -> str:
        from ncd_perf.report import table

        return table(self)


def _key(kernel: Kernel) -> tuple[Any, ...]:
    """Kernels of identical ops, types and partitions (the layers of a GPT) cost the same."""
    g = kernel.graph
    return (
        tuple((n.op, n.loop, tuple(g.values[v] for v in n.inputs)) for n in kernel.ops),
        tuple(g.values[v] for v in kernel.inputs),
        tuple(g.values[v] for v in kernel.outputs),
        kernel.schedule.partitions,
    )


def _graph(model: Any, bind: Mapping[str, int] | None) -> Graph:
    graph = as_graph(model, "ncd_perf.cost")
    return graph.bind(**bind) if bind else graph


def cost(
    model: Any,
    machine: Machine | str = "h100",
    *,
    fuse: bool = True,
    bind: Mapping[str, int] | None = None,
    dtype: str | None = None,
    parallel: Mapping[str, int] | None = None,
    plan: FusionPlan | None = None,
    resources: Mapping[str, Mapping[str, int]] | None = None,
    precision: str = "ieee",
    overlap: str | None = None,
    sequence: str = "all-gather",
) -> ModelCost:
    """Price ``model`` on ``machine``.

    ``fuse=False`` prices one kernel per op; ``bind`` binds sizes; ``dtype`` re-types every
    float wire (quantisation: ``"bfloat16"``, ``"float8"``); ``parallel`` spans config labels
    over devices (``{"heads": 8}`` is tensor parallel attention, ``{"experts": 8}`` expert
    parallel MoE). ``plan``: price that plan (``ncd.plan(model, target=...)``: what a target
    renders); ``resources``: its compiled kernels' ``threads``/``registers``/``shared_bytes`` by
    kernel name (``Backend.resources``), for each kernel's ``occupancy``; ``precision="tf32"``:
    float32 matmuls run on the tensor cores' TF32 path (the machine's ``tfloat32`` matrix rate,
    as torch's ``allow_tf32`` and cuBLAS do), ``"ieee"`` (default): full float32.
    ``overlap``: how a kernel's per-level and per-op-class times combine, ``"max"`` (they
    overlap, the roofline) or ``"sum"`` (they serialise, the napkin paper's sum); default the
    machine's ``overlap``; ``"compute-sum"``: op classes add, memory overlaps them (a CPU).
    ``sequence``: how a sequence-parallel kernel (a label in ``parallel`` on both its queries
    and its keys, ``{"seq": 8}``) brings each device every key: ``"all-gather"`` of K and V
    before the kernel, or ``"ring"``, passed around the devices while it computes."""
    from ncd.axis import dtype_bytes
    from ncd.errors import DefinitionError

    if precision not in PRECISIONS:
        raise DefinitionError(
            f"ncd_perf.cost(precision={precision!r}): unknown precision. Fix: one of "
            f"{', '.join(PRECISIONS)}."
        )
    if overlap is not None and overlap not in OVERLAPS:
        raise DefinitionError(
            f"ncd_perf.cost(overlap={overlap!r}): unknown overlap policy. Fix: one of "
            f"{', '.join(OVERLAPS)} (max: levels and op classes overlap; sum: they add up; "
            "compute-sum: op classes add, memory overlaps them)."
        )
    if sequence not in SEQUENCE:
        raise DefinitionError(
            f"ncd_perf.cost(sequence={sequence!r}): unknown way to move a sequence-parallel "
            f"kernel's keys. Fix: one of {', '.join(SEQUENCE)} (all-gather: K and V gathered "
            "before the kernel; ring: passed around the devices while it computes)."
        )
    if dtype is not None:
        dtype_bytes(dtype)  # an unknown format is an UnknownDTypeError naming the formats
    machine = load_machine(machine)
    target = plan.target if plan is not None else None
    if target and machine.name == "host" and target not in machine.targets:
        from ncd_perf.host import with_target

        machine = with_target(machine, target)  # the target's achieved rates, measured once
    if overlap is not None:
        machine = attrs.evolve(machine, overlap=overlap)
    graph = _graph(model, bind)
    if plan is None:
        plan = plan_fusion(graph) if fuse else unfused(graph)
    split = _per_device(graph, dict(parallel or {}))
    cache: dict[tuple[Any, ...], tuple[KernelFormulas, list[LevelCost]]] = {}
    kernels = []
    for kernel in plan.kernels:
        key = _key(kernel)
        # a sequence-parallel kernel's keys stay whole: every device needs all of them
        size = size_function(graph, split, set(sequence_keys(kernel, split)))
        if key not in cache:
            f = KernelFormulas(kernel, size, dtype)
            masked = _causal_share(kernel, size)
            if masked is not None and masked[2].is_number:
                f.masked = (f.root(masked[0]), masked[2])  # the keys' re-reads shrink too
            cache[key] = (f, _levels(f, machine, plan.target is not None))
        f, levels = cache[key]
        kc = KernelCost(
            kernel,
            f,
            _flops(kernel, size),
            _dtype(kernel, dtype),
            levels,
            collectives(kernel, size, dict(parallel or {}), dtype, sequence),
        )
        _roofline(kc, machine, precision, target)
        used = (resources or {}).get(kernel.name)
        if used:
            kc.occupancy = occupancy(
                machine, used["threads"], used["registers"], used.get("shared_bytes", 0)
            )
        kernels.append(kc)
    return ModelCost(plan, machine, kernels)


def optimise(model: Any, machine: Machine | str = "h100", **options: Any) -> ModelCost:
    """``cost`` with fusion: the planner's kernels (streamed where streamable) with tiles that
    minimise every level's transfers under its capacity. ``.schedule`` prints them."""
    return cost(model, machine, fuse=True, **options)


def _per_device(graph: Graph, parallel: dict[str, int]) -> dict[str, int]:
    """The labels divided per device: ``parallel``, and under expert parallelism the tokens
    too. An expert-parallel group also shares the batch (GShard, Lepikhin et al. 2020, sec.
    3.2; Switch, Fedus et al. 2021, sec. 2.2): each device routes its own tokens and the
    all-to-all brings every expert the ones routed to it, so the token axes of ``Experts``
    (its loop axes) are split over as many devices as its ``experts`` axis, unless
    ``parallel`` already splits them."""
    from ncd.fusion import axis_labels
    from ncd.primitives import routing as R

    out = dict(parallel)
    labels = axis_labels(graph)
    for n in graph.nodes:
        if isinstance(n.op, R.Experts):
            p = parallel.get(labels.get(n.op.experts.uid, n.op.experts.name), 1)
            for a in n.loop if p > 1 else ():
                out.setdefault(labels.get(a.uid, a.name), p)
    return out


def _dtype(kernel: Kernel, override: str | None) -> str:
    if override:
        return override
    g = kernel.graph
    floats = [g.values[v].dtype for v in kernel.outputs if g.values[v].is_float]
    return floats[0] if floats else "float32"


def _flops(kernel: Kernel, size: Any) -> dict[str, sp.Expr]:
    total: dict[str, sp.Expr] = {}
    masked = _causal_share(kernel, size)
    for n in kernel.ops:
        share = sp.Integer(1)
        if masked is not None:
            q, x, frac = masked
            roots = {
                kernel.aliases.get(a, a)
                for v in (*n.inputs, *n.outputs)
                for a in kernel.graph.values[v].axes
            }
            share = frac if {q, x} <= roots else share
        for kind, c in flops(n, size).items():
            total[kind] = total.get(kind, sp.Integer(0)) + c * share
    return total


def _causal_share(kernel: Kernel, size: Any) -> tuple[Any, Any, sp.Expr] | None:
    """``(q, x, share)`` for a kernel streaming a causally masked key axis ``x`` against a query
    axis ``q``: the generated streamed kernels stop each query row at its diagonal (key ``j <=
    i + |x| - |q|``), so every op over both axes does ``share`` of its work: ``1 - (Q - 1)/2X``
    for ``Q <= X`` (about half), ``(X + 1)/2Q`` past it. ``None`` for any other kernel (a
    pointwise kernel computes every score, then masks)."""
    if not kernel.streamed:
        return None
    alias = kernel.aliases
    stream = alias.get(kernel.streamed[0], kernel.streamed[0])
    for n in kernel.ops:
        if isinstance(n.op, L.CausalMask) and alias.get(n.op.x, n.op.x) == stream:
            q, x = alias.get(n.op.q, n.op.q), stream
            big_q, big_x = size(q), size(x)
            share = sp.Piecewise(
                (1 - (big_q - 1) / (2 * big_x), big_q <= big_x), ((big_x + 1) / (2 * big_q), True)
            )
            return q, x, share
    return None


def _given_tiles(
    f: KernelFormulas, level: int, levels: int, widen: int = 1
) -> dict[sp.Symbol, sp.Expr]:
    """Int group tiles the kernel's schedule fixes for machine level ``level`` (1 = the first
    below the backing store, of ``levels``): priced as given instead of chosen. The schedule's
    innermost level (a work-item's block) prices the machine's innermost level, its level 0 (a
    work-group) the levels outside; a kernel with level-0 tiles only is priced with them at
    every level. Tiles the schedule leaves open are ``choose_tiles``'s. ``widen`` > 1 (a GPU,
    ``_widen``) multiplies the first int tile, up to its enclosing tile and its axis: units
    that run at once and read the same data are served by one transfer."""
    sched = f.kernel.schedule
    ints = [
        (p, p.tile)
        for p in sched.partitions
        if p.kind == "group" and isinstance(p.tile, int) and f.root(p.axis) in f.tiles
    ]
    deepest = max((p.level for p, _ in ints), default=0)
    want = max(0, deepest - (levels - level))
    out: dict[sp.Symbol, sp.Expr] = {}
    for lv in range(want + 1):  # an outer level's tile holds where the inner one is open
        here: dict[sp.Symbol, sp.Expr] = {}
        for p, tile in sorted(ints, key=lambda pt: pt[0].axis == f.root(pt[0].axis)):
            if p.level == lv:  # sorted: the root's own partition last, so it wins
                root = f.root(p.axis)
                here[f.tiles[root]] = sp.Min(sp.Integer(tile), f.size(root))
        if lv == want and widen > 1 and here:
            first = next(iter(here))
            outer = out.get(first)
            wide = here[first] * widen
            wide = sp.Min(wide, outer) if outer is not None else wide
            here[first] = sp.Min(wide, f.size(next(a for a, t in f.tiles.items() if t == first)))
        out.update(here)
    return out


def _widen(machine: Machine, level: int) -> int:
    """How many of a GPU plan's units read the same operands together at machine ``level``:
    at the innermost level the threads of a warp (a shared-memory word read by several lanes
    is one access, a broadcast: CUDA C++ Programming Guide, shared memory); at a level shared
    by every SM (L2) the blocks resident at once, one per SM (blocks of neighbouring tiles
    run together and hit the same lines in L2). 1 on machines without SM limits."""
    if not machine.sm:
        return 1
    if level == len(machine.levels) - 1:
        return int(machine.sm.get("warp", 1))
    if machine.levels[level].instances == 1:
        return max(lv.instances for lv in machine.levels)
    return 1


def _levels(f: KernelFormulas, machine: Machine, rendered: bool = False) -> list[LevelCost]:
    """Each level's tiles, transfers and residency; ``rendered``: the plan is a target's, its
    level-0 tiles blocks and level-1 tiles threads (widened on a GPU, ``_widen``)."""
    h, hb = f.transfers("elements"), f.transfers("bytes")
    hw = f.transfers("bytes", ("out",))
    out = []
    upper: dict[sp.Symbol, sp.Expr] | None = None
    n = len(machine.levels) - 1
    for i, lv in enumerate(machine.levels[1:], start=1):
        given = _given_tiles(f, i, n, _widen(machine, i) if rendered else 1)
        sizes = {t: s for t, s in f.group_sizes().items() if t not in given}
        m = f.resident(lv.unit)
        if given:
            h_, m_ = h.subs(given), m.subs(given)
            choice: TileChoice = choose_tiles(
                h_, m_, sizes, lv.capacity, upper, lv.instances, f.split
            )
            vals = {**given, **choice.values}
            fits = (
                bool(m.subs(vals) <= lv.capacity)
                if lv.capacity is not None and _number(m.subs(vals)) is not None
                else choice.fits
            )
            choice = TileChoice(vals, fits, "given" + (f" + {choice.method}" if sizes else ""))
        else:
            choice = choose_tiles(h, m, sizes, lv.capacity, upper, lv.instances, f.split)
        vals = choice.values
        out.append(
            LevelCost(
                i,
                lv.name,
                vals,
                sp.simplify(h.subs(vals)),
                hb.subs(vals),
                sp.simplify(m.subs(vals)),
                choice.fits,
                choice.method,
                written=hw.subs(vals),
            )
        )
        if all(isinstance(v, sp.Integer) for v in vals.values()):
            upper = dict(vals)  # inner tiles nest inside the outer ones
    return out


def _number(x: sp.Expr) -> float | None:
    try:
        return float(x)
    except TypeError:
        return None


#: ``cost(precision=)``: float32 matmuls in full IEEE float32, or on the TF32 tensor-core path
PRECISIONS = ("ieee", "tf32")


def _waves(kc: KernelCost, machine: Machine) -> float:
    """Wave quantisation on a GPU (a machine with ``sm`` limits): a kernel's ``N`` instances
    (blocks, from the tiles at the first per-SM level) run in ``ceil(N / slots)`` waves of
    ``slots = SMs x blocks per SM`` (``occupancy`` when known, else 1), so the compute units
    are busy ``N / (waves x slots)`` of the time. 1 on other machines or with symbolic tiles."""
    if not machine.sm:
        return 1.0
    per_sm = next((i for i, lv in enumerate(machine.levels) if lv.instances > 1), None)
    if per_sm is None:
        return 1.0
    sms = machine.levels[per_sm].instances
    level = next((lv for lv in kc.levels if lv.level == per_sm), None)
    if level is None:
        return 1.0
    blocks = 1
    for tile, size in kc.formulas.group_sizes().items():
        t, n = _number(level.tiles.get(tile, size)), _number(size)
        if t is None or n is None or t <= 0:
            return 1.0
        blocks *= -(-int(n) // max(1, int(t)))
    slots = sms * max(1, kc.occupancy.blocks if kc.occupancy else 1)
    blocks *= min(max(1, slots // blocks), kc.formulas.split)  # column slices of routed weights
    waves = -(-blocks // slots)
    return blocks / (waves * slots) if waves else 1.0


def _roofline(
    kc: KernelCost, machine: Machine, precision: str = "ieee", target: str | None = None
) -> None:
    parts: dict[str, float] = {}
    waves = _waves(kc, machine)
    if waves < 1.0:
        kc.efficiency["waves"] = waves
    for kind, n in kc.flops.items():
        fmt = kc.dtype
        if precision == "tf32" and kind == "matrix" and fmt == "float32":
            fmt = "tfloat32"
        # a streamed kernel's contractions run as its chunk loop, not as a tiled GEMM: the
        # machine may price them apart ("streamed", falling back to "matrix")
        rated = "streamed" if kind == "matrix" and kc.kernel.streamed else kind
        rate, count = machine.rate(rated, fmt, target), _number(n)
        if rate is None or count is None:
            return
        parts[f"{kind} compute"] = count / rate / waves
    for lv, above, level in zip(kc.levels, machine.levels, machine.levels[1:], strict=False):
        nbytes, written = _number(lv.bytes), _number(lv.written)
        if nbytes is None or written is None:
            return
        if level.bandwidth is not None:
            # a written byte costs write_factor bytes of the level's bandwidth (write-allocate)
            lv.time = (nbytes + (level.write_factor - 1) * written) / float(level.bandwidth)
            parts[f"{above.name}->{level.name} bandwidth"] = lv.time
    comm = ring = 0.0
    for c in kc.collectives:
        t = c.time(machine)
        if t is None:
            return
        if c.overlaps:
            ring += t
        else:
            comm += t
    if not parts:
        return
    # "max": compute and memory traffic overlap (the roofline); "sum": they serialise (the
    # napkin paper's sum of the levels' times). Collectives sit on the critical path between
    # kernels (tensor-parallel all-reduce, MoE all-to-all), so they add either way.
    kc.parts = dict(parts)
    local = max(parts, key=lambda k: parts[k])
    if machine.overlap == "sum":
        busy = sum(parts.values())
    elif machine.overlap == "compute-sum":
        compute = sum(t for k, t in parts.items() if k.endswith(" compute"))
        memory = max((t for k, t in parts.items() if not k.endswith(" compute")), default=0.0)
        busy = max(compute, memory)
        if compute >= memory:
            local = max((k for k in parts if k.endswith(" compute")), key=lambda k: parts[k])
    else:
        busy = parts[local]
    if ring > busy:  # a ring pass hides behind the compute, or the compute behind it
        link = machine.interconnect.name if machine.interconnect else "link"
        local, busy = f"ring pass ({link})", ring
        kc.parts[local] = ring
    if comm > busy:
        link = machine.interconnect.name if machine.interconnect else "link"
        kc.parts[f"collectives ({link})"] = comm
        kc.bottleneck = f"collectives ({link})"
    else:
        kc.bottleneck = local
    kc.time = machine.launch_latency + busy + comm
