"""Program-level steps every C-like target shares: the storage order of kept intermediates,
unique kernel names, and one function for identical kernels (the layers of a GPT).

A target renders each planned kernel (``render_kernel``) and passes the list to ``assemble``;
``choose_layouts`` decides, before rendering, the order in which intermediates are stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ncd.axis import Axis
from ncd.codegen.lower import KernelSource
from ncd.graph import Graph
from ncd.kernel import FusionPlan
from ncd.primitives import library as L

__all__ = [
    "Generated",
    "assemble",
    "canonical_text",
    "check_given_plan",
    "check_stored_formats",
    "choose_layouts",
    "float_wires",
    "target_rules",
]


@attrs.frozen
class Generated:
    """A target's rendered program: the plan as rendered, its kernels in launch order (a
    shared kernel's later copies carry no text), the layouts, and the target's ``preamble``
    (kernels -> the text the program starts with)."""

    graph: Graph = attrs.field(eq=False, repr=False)
    plan: FusionPlan = attrs.field(eq=False)
    kernels: tuple[KernelSource, ...]
    layouts: Mapping[int, tuple[Any, ...]]
    preamble: Callable[[Sequence[KernelSource]], str] = attrs.field(eq=False, repr=False)

    @property
    def source(self) -> str:
        """The program: the preamble, then each distinct kernel function once."""
        return (
            self.preamble(self.kernels) + "\n" + "\n".join(k.text for k in self.kernels if k.text)
        )


def check_given_plan(plan: FusionPlan, graph: Graph, target: str) -> None:
    """``ScheduleError`` unless a ``plan=`` handed to ``target``'s generator is one it renders:
    made for ``target`` (or ncd's own, ``target=None``) and for ``graph`` itself."""
    from ncd.errors import ScheduleError

    if plan.target not in (None, target):
        raise ScheduleError(
            f"plan= was made for target {plan.target!r}; ncd-{target} renders plans for "
            f"{target!r} (or ncd's own). Fix: ncd.plan(model, target={target!r})."
        )
    if plan.graph is not graph and plan.graph != graph:
        raise ScheduleError(
            "plan= was made for another graph than the one compiled (other sizes or ops). "
            f"Fix: plan the bound model that runs: ncd.plan(model.bind(...), target={target!r})."
        )


def float_wires(graph: Graph) -> list[tuple[str, str]]:
    """``(what, format)`` of every float value a node reads or writes and every float parameter,
    in graph order (``what`` names the value or parameter and its op, for error messages)."""
    from ncd.dtypes import dtype as to_dtype

    where: list[tuple[str, str]] = []
    for n in graph.nodes:
        for v in n.inputs:
            t = graph.values[v]
            where.append((f"value {t} read by {n.op.label}", str(t.dtype)))
        for v in n.outputs:
            t = graph.values[v]
            where.append((f"value {t} written by {n.op.label}", str(t.dtype)))
        for p in n.op.params():
            where.append((f"parameter {n.param_name(p.name)} of {n.op.label}", str(p.dtype)))
    return [(what, fmt) for what, fmt in where if to_dtype(fmt).kind == "float"]


def check_stored_formats(graph: Graph, formats: Sequence[str], target: str) -> None:
    """``DTypeError`` naming the first float value or parameter whose format is not one of
    ``formats`` (what ``target``'s kernels store), its op and the fix; before any work."""
    from ncd.errors import DTypeError

    for what, fmt in float_wires(graph):
        if fmt not in formats:
            raise DTypeError(
                f"{what} is {fmt}; the {target} backend stores {', '.join(formats)}. Fix: cast "
                "the model (or this part, with ops.cast) to bfloat16 or float16 for 16-bit "
                "storage, or to float32."
            )


def target_rules(target: str) -> dict[type, Any]:
    """Core's rule table plus every ``Lowering`` registered for ``target`` (their ``kind``
    names an op kind; the rule has the ``ncd.codegen.Rule`` shape)."""
    from ncd.codegen.rules import CODEGEN_RULES
    from ncd.op import OP_KINDS
    from ncd.plugins import registry

    table: dict[type, Any] = dict(CODEGEN_RULES)
    for kind, lowering in registry().lowerings_for(target).items():
        cls = OP_KINDS.get(kind)
        if cls is not None:
            table[cls] = lowering.rule
    return table


def choose_layouts(plan: FusionPlan) -> dict[int, tuple[Axis, ...]]:
    """Storage order of intermediates: a streamed kernel's inputs keep the axes its inner loops
    walk last (unit stride); a value read by a Linear keeps its contracted axes last and
    contiguous, so a tiled matmul reads rows with unit stride."""
    g = plan.graph
    kept = {v for k in plan.kernels for v in k.outputs} - set(g.outputs)
    out: dict[int, tuple[Axis, ...]] = {}
    for k in plan.kernels:
        # a streamed kernel walks its stream axis outside and loops over the axes a work-item
        # does not fix inside: store its inputs so those inner loops have unit stride
        if not k.streamed:
            continue
        alias = k.aliases
        x = k.streamed[0]
        grid = {alias.get(a, a) for a in k.grouped}
        for v in k.inputs:
            if v not in kept:
                continue
            axes = g.values[v].axes
            xs = [a for a in axes if a == x or alias.get(a, a) == alias.get(x, x)]
            inner = [a for a in axes if a not in xs and alias.get(a, a) not in grid]
            outer = [a for a in axes if a not in xs and a not in inner]
            out[v] = (*outer, *xs, *inner)
    for v in kept:
        if v in out:
            continue
        axes = g.values[v].axes
        for c in g.consumers[v]:
            op = g.nodes[c].op
            if isinstance(op, L.Linear) and set(op.in_axes) <= set(axes):
                out[v] = (*[a for a in axes if a not in op.in_axes], *op.in_axes)
                break
    return out


def assemble(kernels: Sequence[KernelSource]) -> tuple[KernelSource, ...]:
    """The rendered kernels of one program, in launch order: names made unique (a suffix), and
    identical kernels sharing the first one's function (later copies carry no text and launch
    it by name, so build and JIT time do not grow with depth)."""
    named: list[KernelSource] = []
    seen: set[str] = set()
    for src in kernels:
        if src.name in seen:  # kernel names must be unique within one program
            new = f"{src.name}_{len(seen)}"
            src = attrs.evolve(src, name=new, text=src.text.replace(f" {src.name}(", f" {new}(", 1))
        seen.add(src.name)
        named.append(src)
    first: dict[str, str] = {}
    out = []
    for src in named:
        key = canonical_text(src)
        if key in first:
            src = attrs.evolve(src, name=first[key], text="")
        else:
            first[key] = src.name
        out.append(src)
    return tuple(out)


def canonical_text(src: KernelSource) -> str:
    """The kernel's text with its name, comments and argument names abstracted: two kernels
    with the same canonical text are one function launched on different buffers."""
    lines = [ln for ln in src.text.splitlines() if not ln.lstrip().startswith("//")]
    text = "\n".join(lines).replace(f" {src.name}(", " K(", 1)
    for n, b in enumerate(src.buffers):
        text = re.sub(rf"\b{re.escape(b.name)}\b", f"@{n}", text)
    return f"{src.global_size}{src.local_size}{text}"
