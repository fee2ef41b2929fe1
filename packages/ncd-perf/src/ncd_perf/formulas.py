"""Transfers H and resident memory M of one kernel, as sympy formulas in sizes and tiles.

The napkin model (Abbott & Zardini, *FlashAttention on a Napkin*, sec. 4): a kernel groups some
axes into tiles ``t_g`` and streams at most one axis ``s``. Each instance reads its tile of every
input and parameter and writes its tile of every output, so a value ``v`` moves
``|v| * prod(n_g / t_g for grouped g not in v)`` elements: it is re-read once per tile of each
grouped axis it lacks. Resident memory is the tile extent of every value that does not carry
the streamed axis (chunks of ``s`` are lower order, the paper's leading-order model), plus the
accumulator state of normalised contractions (running max and sum per row for softmax, the
running sum of squares for L2). Nothing here knows about attention or matmul: the formulas
follow from the partitions and from ``ncd.streaming``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy as sp

from ncd.axis import Axis, dtype_bytes
from ncd.errors import ScheduleError
from ncd.fusion import axis_labels, groupable_axes
from ncd.graph import Graph
from ncd.kernel import Kernel
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import routing as R
from ncd.streaming import REDUCING, analyse_stream, is_rename, role

__all__ = ["KernelFormulas", "size_function"]

#: accumulator kind -> state values per output row (running max and sum; sum of squares).
ACCUMULATOR_STATE = {"online_softmax": 2, "l2": 1}


def _gathered(node: Any, axes: tuple[Axis, ...]) -> tuple[Axis, ...]:
    # a lookup reads one table row per id, not the whole table
    return (*node.loop, *node.op.out_axes)


def _read_axes(graph: Any, nodes: Any, v: int) -> tuple[Axis, ...]:
    """The axes of what a kernel reads of its input ``v``: all of it, but a table that only
    gathers read (``Gather``'s second input), which reads one row per id."""
    readers = [graph.nodes[i] for i in nodes if v in graph.nodes[i].inputs]
    if len(readers) == 1 and isinstance(readers[0].op, X.Gather):
        ids, table = readers[0].inputs
        if table == v != ids:
            return tuple(readers[0].loop)
    return tuple(graph.values[v].axes)


#: op class -> (node, parameter axes) -> the axes of what the op actually reads of it.
PARAM_ACCESS: dict[type, Callable[[Any, tuple[Axis, ...]], tuple[Axis, ...]]] = {
    L.Embedding: _gathered,
}


def _routed_experts(node: Any, size: Callable[[Axis], sp.Expr]) -> tuple[sp.Expr, sp.Expr]:
    op = node.op
    return sp.Integer(op.k) / size(op.experts), sp.Min(size(op.d_model), size(op.d_ff))


#: op class -> (node, size) -> ``(share, columns)`` for ops that route rows to slices of their
#: parameters: the share of the kernel's rows that reads each slice, and the output columns
#: a tile's work may be cut into (``Experts``: each token runs ``k`` of
#: the ``E`` experts, so an expert's weights serve ``k/E`` of the tokens). A routed parameter
#: streams through once per tile of the rows routed to it (at least once) and is not resident:
#: the grouped-GEMM schedule holds a token tile and its output, streaming each expert's
#: weights and its hidden layer (``d_ff``) in chunks, lower order like any stream's chunks.
PARAM_ROUTED: dict[type, Callable[[Any, Callable[[Axis], sp.Expr]], tuple[sp.Expr, sp.Expr]]] = {
    R.Experts: _routed_experts,
}


def size_function(
    graph: Graph,
    per_device: dict[str, int] | None = None,
    whole: frozenset[Axis] | set[Axis] = frozenset(),
) -> Callable[[Axis], sp.Expr]:
    """axis -> its size: an Integer when bound, else a positive Symbol named by config label;
    labels in ``per_device`` are divided among that many devices, except the axes in
    ``whole`` (a sequence-parallel kernel's keys, gathered from every device)."""
    labels = axis_labels(graph)
    split = per_device or {}

    def size(a: Axis) -> sp.Expr:
        n = graph.size(a) if a.uid in graph.axis_by_uid else a.size
        label = labels.get(a.uid, a.name)
        expr = sp.Integer(n) if n is not None else sp.Symbol(label, positive=True)
        return expr / split[label] if label in split and a not in whole else expr

    return size


class KernelFormulas:
    """Symbolic H and M of a kernel under its partition structure (groups + one stream)."""

    def __init__(
        self,
        kernel: Kernel,
        size: Callable[[Axis], sp.Expr],
        dtype: str | None = None,
        optional_stream: bool = True,
    ) -> None:
        self.kernel, self.size = kernel, size
        graph = self.graph = kernel.graph
        self.alias = {a: kernel.aliases.get(a, a) for a in kernel.axes()}
        root = self.root
        level0 = kernel.schedule.at(0)  # the partitions in force (a target's choices too)
        if level0:
            self.groups = list(dict.fromkeys(root(p.axis) for p in level0 if p.kind == "group"))
            streams = [p.axis for p in level0 if p.kind == "stream"]
        else:
            self.groups = list(groupable_axes(graph, kernel.nodes, None))
            streams = []
        self.stream: Axis | None = streams[0] if streams else None
        if self.stream is None and optional_stream:
            self.stream = self._optional_stream()
        if self.stream is not None and self.stream == kernel.schedule.streamed:
            self.kinds = dict(kernel.schedule.accumulators)  # analysed once, by the kernel
        elif self.stream is not None:
            self.kinds = analyse_stream(graph, kernel.nodes, self.stream, kernel.outputs).kinds
        else:
            self.kinds = {}
        names: dict[str, int] = {}
        self.tiles: dict[Axis, sp.Symbol] = {}
        for g in self.groups:
            k = names[g.name] = names.get(g.name, 0) + 1
            self.tiles[g] = sp.Symbol(f"t_{g.name}" + (f"_{k}" if k > 1 else ""), positive=True)
        self.dtype = dtype
        #: ``(query axis, share)`` of a causally masked streamed kernel (set by ``cost``):
        #: values carrying the streamed axis but not the query axis (keys and values) are
        #: re-read per query tile only up to its diagonal, ``share`` of them
        self.masked: tuple[Axis, sp.Expr] | None = None
        self._values()

    def root(self, a: Axis) -> Axis:
        while a in self.alias and self.alias[a] != a:
            a = self.alias[a]
        return a

    def _optional_stream(self) -> Axis | None:
        """A contracted axis of a value read from memory: streaming it keeps only the output
        tile resident (the matmul schedule). ``None`` when there is none, or it cannot stream."""
        graph, k = self.graph, self.kernel
        reads = set(k.inputs)
        for i in k.nodes:
            n = graph.nodes[i]
            for v, core in zip(n.inputs, n.core_in, strict=True):
                for a in core:
                    if v in reads and role(n, a) in REDUCING and self.root(a) not in self.groups:
                        try:
                            analyse_stream(graph, k.nodes, a, k.outputs)
                        except ScheduleError:
                            continue
                        return a
        return None

    def _bytes(self, dtype: str) -> float:
        return float(
            dtype_bytes(
                self.dtype if self.dtype and dtype.startswith(("float", "bfloat")) else dtype
            )
        )

    def _values(self) -> None:
        """(axes, bytes per element, role) of inputs, parameters, outputs and internal values."""
        graph, k = self.graph, self.kernel
        entries: list[tuple[tuple[Axis, ...], float, str]] = []
        #: entry index -> the share of the kernel's rows reading it, for routed parameters
        self.routed: dict[int, sp.Expr] = {}
        #: slices a tile's work may be cut into besides its tiles: the routed weights' output
        #: features (a grouped GEMM's column tiles); 1 without routed ops
        self.split = 1
        for v in k.inputs:
            t = graph.values[v]
            entries.append((_read_axes(graph, k.nodes, v), self._bytes(t.dtype), "in"))
        for i in k.nodes:
            n = graph.nodes[i]
            access = PARAM_ACCESS.get(type(n.op))
            routed = PARAM_ROUTED.get(type(n.op))
            share = None
            if routed is not None:
                share, cols = routed(n, self.size)
                if cols.is_Integer:
                    self.split = max(self.split, int(cols))
            for _, p in n.params():  # each parameter in its own format (a cast model's tables)
                axes = access(n, p.axes) if access is not None else p.axes
                if share is not None:
                    self.routed[len(entries)] = share
                entries.append((axes, self._bytes(p.dtype), "in"))
        outs = set(k.outputs)
        for i in k.nodes:
            n = graph.nodes[i]
            for v in n.outputs:
                t = graph.values[v]
                # a rename's output is its input under a new name: no new storage
                kind = "out" if v in outs else ("alias" if is_rename(n.op) else "internal")
                entries.append((t.axes, self._bytes(t.dtype), kind))
        self.entries = entries

    def _extent(self, axes: tuple[Axis, ...], tiles: dict[Axis, sp.Expr]) -> sp.Expr:
        return sp.Mul(
            *(tiles[self.root(a)] if self.root(a) in tiles else self.size(a) for a in axes)
        )

    def _reuse(self, axes: tuple[Axis, ...], tiles: dict[Axis, sp.Expr]) -> sp.Expr:
        have = {self.root(a) for a in axes}
        return sp.Mul(*(self.size(g) / tiles[g] for g in tiles if g not in have))

    def transfers(self, unit: str = "elements", kinds: tuple[str, ...] = ("in", "out")) -> sp.Expr:
        """H: elements (or bytes) moved between the level above and this one, in the tiles;
        ``kinds=("out",)`` counts only what is written."""
        tiles: dict[Axis, sp.Expr] = dict(self.tiles)
        total = sp.Integer(0)
        for i, (axes, nbytes, kind) in enumerate(self.entries):
            if kind in kinds:
                reuse = self._reuse(axes, tiles)
                if i in self.routed:  # once per tile of the rows routed to it, at least once
                    reuse = sp.Max(1, self.routed[i] * reuse)
                if self.masked is not None and self.stream is not None:
                    roots = {self.root(a) for a in axes}
                    if self.root(self.stream) in roots and self.masked[0] not in roots:
                        reuse = reuse * self.masked[1]
                n = sp.Mul(*(self.size(a) for a in axes)) * reuse
                total += n * (sp.Float(nbytes) if unit == "bytes" and nbytes != 1 else 1)
        return sp.expand(total) if unit == "elements" else total

    def resident(self, unit: str = "elements") -> sp.Expr:
        """M: the leading-order footprint of one instance (see the module docstring)."""
        tiles: dict[Axis, sp.Expr] = dict(self.tiles)
        s = self.root(self.stream) if self.stream is not None else None
        total = sp.Integer(0)
        for i, (axes, nbytes, kind) in enumerate(self.entries):
            if kind == "alias" or (s is not None and any(self.root(a) == s for a in axes)):
                continue
            if i in self.routed:  # streamed through in chunks, one slice at a time
                continue
            total += self._extent(axes, tiles) * (nbytes if unit == "bytes" else 1)
        for i, kind in self.kinds.items():
            if kind in ACCUMULATOR_STATE and self.graph.nodes[i].op.category == "normaliser":
                (v,) = self.graph.nodes[i].outputs
                rows = tuple(a for a in self.graph.values[v].axes if self.root(a) != s)
                total += (
                    ACCUMULATOR_STATE[kind]
                    * self._extent(rows, tiles)
                    * (4 if unit == "bytes" else 1)
                )
        return total

    def group_sizes(self) -> dict[sp.Symbol, sp.Expr]:
        """tile symbol -> the size of its axis (the largest tile)."""
        return {t: self.size(g) for g, t in self.tiles.items()}
