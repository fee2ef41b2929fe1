"""Recurrence as a scan (issue 15): ``ncd.scan(cell, over=axis)`` carries a state along an
axis whose length is known when the model is built, as plain repeats of the cell.

The cell maps ``(state_1 .. state_k, x_1 .. x_m)`` to ``(state_1' .. state_k', y_1 .. y_r)``;
the scan maps ``(initial states, sequences)`` to ``(final states, stacked outputs)``: each
sequence is read one position of ``over`` at a time (the position's slice, the axis gone),
the cell runs once per position (first to last, or last to first with ``reverse``) and each
output is written back at that position along ``over``, which leads its axes. Unrolling is
what the user's notes ask for loops of a known length: every interpretation (reference, torch
export, OpenCL and CUDA kernels, FLOPs, the diagram, JSON, gradients) sees ordinary ops, so
none of them needs a loop construct, and the fusion planner streams each step's kernels.

A cell is a term, or a Python function over ``ncd.Tensor`` values that may close over tensors
of the enclosing ``ncd.trace`` (its weights: ``nn.lstm`` reads its matrices so, once, outside
the loop). A cell must not hold parameters of its own (every unrolled step would learn its
own copy), and it must return each state with the axes it receives: both are typed errors
naming the cell, the state and the axes, raised while the model is built. The first step may
broadcast an initial state over axes the sequence brings (a zero state ``[hidden]`` meeting a
batch axis becomes ``[batch hidden]``); after it a state's axes are fixed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ncd._lower import Builder, Ref
from ncd._term import Term, call_site
from ncd._trace import call_on
from ncd.axis import Axis, AxisLike, show
from ncd.errors import AlignmentError, DefinitionError, SizeError
from ncd.primitives.indexing import Concat, Slice
from ncd.primitives.library import Binary, Constant, Reduce, View

__all__ = ["MAX_STEPS", "scan"]

#: The longest scan unrolled: each step is a copy of the cell in the graph.
MAX_STEPS = 65536
#: Outputs are joined in groups of this many positions (a concat of thousands of inputs would
#: pass every one to one kernel).
_JOIN = 16

Cell = Term | Callable[..., Any]


def scan(
    cell: Cell,
    over: AxisLike,
    *,
    states: int = 1,
    outputs: int | None = None,
    reverse: bool = False,
    name: str = "scan",
) -> Term:
    """``cell`` repeated along ``over``, carrying ``states`` values from step to step.

    ``cell`` takes the states then one slice of each sequence (``over`` removed) and returns
    the new states then the per-step outputs. The result takes the initial states then the
    sequences (each with ``over``) and returns the final states then each output stacked
    along ``over`` (leading). ``outputs``: how many per-step outputs a cell *function*
    returns (a term's count is its own; default 1). ``reverse``: walk from the last position
    to the first (a backward RNN direction); outputs stay at their positions."""
    if isinstance(states, bool) or not isinstance(states, int) or states < 0:
        raise DefinitionError(
            f"scan: states must be an int >= 0, got {show(states)}. Fix: pass how many values "
            "the cell carries from step to step."
        )
    if not isinstance(reverse, bool):
        raise DefinitionError(f"scan: reverse must be True or False, got {show(reverse)}.")
    axis = over if isinstance(over, Axis) else Axis(str(over)) if isinstance(over, str) else None
    if axis is None:
        raise DefinitionError(
            f"scan: over must be an axis or an axis name, got {show(over)}. Fix: "
            "ncd.scan(cell, over='seq')."
        )
    if isinstance(cell, Term):
        if outputs is not None and outputs != cell.n_out - states:
            raise DefinitionError(
                f"scan {name!r}: outputs={outputs} but the cell returns {cell.n_out} values, "
                f"{states} of them states. Fix: leave outputs out for a term cell."
            )
        n_in, n_out = cell.n_in, cell.n_out
    elif callable(cell):
        params = inspect.signature(cell).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            raise DefinitionError(
                f"scan {name!r}: the cell function takes *args, so its inputs cannot be counted. "
                "Fix: name one parameter per state and per sequence."
            )
        n_in = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        count = 1 if outputs is None else outputs
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise DefinitionError(f"scan: outputs must be an int >= 0, got {show(outputs)}.")
        n_out = states + count
    else:
        raise DefinitionError(
            f"scan: the cell must be a term or a function over tensors, got {show(cell)}. "
            "Fix: pass e.g. ops.add() or a function (h, x) -> (h2, y)."
        )
    if n_in < states or n_out < states:
        raise DefinitionError(
            f"scan {name!r}: the cell takes {n_in} and returns {n_out} values, fewer than its "
            f"{states} states. Fix: the cell takes the states first and returns them first."
        )
    if n_in == states:
        raise DefinitionError(
            f"scan {name!r}: the cell reads no sequence (it takes only its {states} states), so "
            f"nothing fixes how long the scan over {axis.describe()} runs. Fix: pass the "
            "sequence the cell reads one position of at each step."
        )
    return _Scan(cell, axis, states, n_in, n_out, reverse, name)


class _Scan(Term):
    __slots__ = ("axis", "cell", "name", "reverse", "states")

    def __init__(
        self, cell: Cell, axis: Axis, states: int, n_in: int, n_out: int, reverse: bool, name: str
    ) -> None:
        super().__init__(n_in, n_out, call_site())
        self.cell, self.axis, self.states = cell, axis, states
        self.reverse, self.name = reverse, name

    def __repr__(self) -> str:
        return f"scan({self.name!r} over {self.axis.name!r})"

    # -- lowering -------------------------------------------------------------------------------
    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        k = self.states
        state, seqs = list(ins[:k]), list(ins[k:])
        over = [self._over(b, i, ref) for i, ref in enumerate(seqs)]
        n = self._length(b, over)
        steps = range(n - 1, -1, -1) if self.reverse else range(n)
        ys: list[list[Ref]] = []
        held = 0  # parameters in the graph after the first step
        for t, step in enumerate(steps):
            xs = [self._at(b, ref, a, step) for ref, a in zip(seqs, over, strict=True)]
            outs = self._cell(b, [*state, *xs])
            before = [self._axes_of(b, ref) for ref in state]
            state, y = outs[:k], outs[k:]
            after = [self._axes_of(b, ref) for ref in state]
            self._check_state(b, t, before, after)
            if t == 0:
                held = _param_count(b)
            elif t == 1:
                self._refuse_new_params(b, held)
            ys.append(y)
        if self.reverse:
            ys.reverse()
        stacked = [self._stack(b, [y[j] for y in ys], over[0]) for j in range(self.n_out - k)]
        return [*state, *stacked]

    def _over(self, b: Builder, i: int, ref: Ref) -> Axis:
        v = b.value_of(ref)
        if v is None:
            raise AlignmentError(
                f"scan {self.name!r} (built at {self.site}): sequence {i} has no type yet, so "
                f"its {self.axis.name!r} axis cannot be found. Fix: trace the scan with typed "
                "inputs (ncd.trace(inputs=[...])) or give the sequence a type first "
                "(ncd.identity([seq, d]) >> scan)."
            )
        axes = b.values[v].axes
        want = b.resolve(self.axis)
        hits = [a for a in axes if b.resolve(a) == want]
        hits = hits or [a for a in axes if a.name == self.axis.name]
        if len(hits) != 1:
            raise AlignmentError(
                f"scan {self.name!r} (built at {self.site}): sequence {i} "
                f"{b.describe_value(v)} has {'no' if not hits else 'two'} axis "
                f"{self.axis.name!r} to scan over. Fix: scan over one of its axes "
                f"({', '.join(a.name for a in axes) or 'none: it is a scalar'})."
            )
        return hits[0]

    def _length(self, b: Builder, over: Sequence[Axis]) -> int:
        sizes = {b.sizes.size(b.resolve(a).uid) for a in over}
        if None in sizes:
            raise SizeError(
                f"scan {self.name!r} (built at {self.site}) unrolls its cell once per position "
                f"of {over[0].describe()}, so it needs that size when the model is built. Fix: "
                f"size the axis (ncd.Axis({over[0].name!r}, size=256)) or bind it first."
            )
        if len(sizes) > 1:
            raise SizeError(
                f"scan {self.name!r}: its sequences have different lengths along "
                f"{self.axis.name!r} ({sorted(s for s in sizes if s is not None)}). Fix: pass "
                "sequences of one length."
            )
        (n,) = sizes
        assert n is not None
        if n > MAX_STEPS:
            raise SizeError(
                f"scan {self.name!r}: {over[0].describe()} has {n} positions, more than the "
                f"{MAX_STEPS} steps a scan unrolls. Fix: a shorter sequence, or chunk it."
            )
        return n

    def _at(self, b: Builder, ref: Ref, over: Axis, step: int) -> Ref:
        """The sequence at position ``step`` of ``over``: a one-wide slice, summed away (one
        element: the sum is that element)."""
        one = Axis(f"{over.name}_{step}", size=1)
        (piece,) = b.apply(Slice(over, one, step, False, name=f"{self.name}_in"), [ref], self.site)
        (x,) = b.apply(Reduce("sum", (one,), name=f"{self.name}_at"), [piece], self.site)
        return x

    def _cell(self, b: Builder, ins: list[Ref]) -> list[Ref]:
        cell = self.cell
        if isinstance(cell, Term):
            outs = list(cell.lower(b, ins))
        else:
            what = f"scan {self.name!r}: the cell must return the new states then the outputs"
            outs = call_on(b, cell, ins, what + ", tensors of the enclosing trace")
        if len(outs) != self.n_out:
            raise DefinitionError(
                f"scan {self.name!r}: the cell returned {len(outs)} values, expected "
                f"{self.n_out} ({self.states} states, then {self.n_out - self.states} "
                "outputs). Fix: return the states first, or pass outputs= to ncd.scan."
            )
        return outs

    @staticmethod
    def _axes_of(b: Builder, ref: Ref) -> frozenset[str]:
        v = b.value_of(ref)
        if v is None:
            return frozenset()
        return frozenset(b.resolve(a).uid for a in b.values[v].axes)

    def _check_state(
        self,
        b: Builder,
        t: int,
        before: list[frozenset[str]],
        after: list[frozenset[str]],
    ) -> None:
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            # step 0 may broadcast an initial state over new axes (or type an untyped one)
            if old == new or (t == 0 and old <= new):
                continue

            def names(uids: frozenset[str]) -> str:
                found = {b.resolve(a).uid: b.resolve(a) for v in b.values for a in v.axes}
                return "[" + " ".join(sorted(found[u].describe() for u in uids if u in found)) + "]"

            raise AlignmentError(
                f"scan {self.name!r} (built at {self.site}): the cell changes the axes of state "
                f"{i} at step {t}: it receives {names(old)} and returns {names(new)}. A scan "
                "carries each state with fixed axes. Fix: return the state with the axes it "
                "came in with (sum or rename what the cell adds, ops.rename an axis back)."
            )

    def _refuse_new_params(self, b: Builder, seen: int) -> None:
        """The second step added parameters the first already made: the cell holds its own."""
        now = _param_count(b)
        if now > seen:
            held = [name for node in b.nodes for name, _ in node.params()][-(now - seen) :]
            raise DefinitionError(
                f"scan {self.name!r} (built at {self.site}): the cell holds learned parameters "
                f"({', '.join(held[:4])}{' ...' if len(held) > 4 else ''}); unrolled, every step "
                "would learn a copy of its own. Fix: make them once outside the cell and let it "
                "read them: inside ncd.trace, w = ops.learned([...], name='w')() and a cell "
                "function closing over w (as nn.lstm does)."
            )

    def _stack(self, b: Builder, ys: list[Ref], over: Axis) -> Ref:
        """The per-step values joined along ``over`` (the sequences' own axis), which leads
        the result's axes: each lifted by a one-wide axis (times a constant 1: exact), joined
        in groups of ``_JOIN``, the groups joined again."""
        parts: list[tuple[Axis, Ref]] = []
        for step, y in enumerate(ys):
            one = Axis(f"{over.name}_out{step}", size=1)
            v = b.value_of(y)
            fmt = b.values[v].dtype if v is not None and b.values[v].is_float else None
            (c,) = b.apply(Constant(1.0, (one,), dtype=fmt), [], self.site)
            (v,) = b.apply(Binary("mul", name=f"{self.name}_out"), [y, c], self.site)
            parts.append((one, v))
        level = 0
        while True:
            last = len(parts) <= _JOIN
            joined: list[tuple[Axis, Ref]] = []
            for g in range(0, len(parts), _JOIN):
                group = parts[g : g + _JOIN]
                size = sum(a.size or 0 for a, _ in group)
                out = over if last else Axis(f"{over.name}_part{level}_{g // _JOIN}", size=size)
                op = Concat(tuple(a for a, _ in group), out, name=f"{self.name}_stack")
                (v,) = b.apply(op, [r for _, r in group], self.site)
                joined.append((out, v))
            parts, level = joined, level + 1
            if last:
                break
        ((_, ref),) = parts
        v = b.value_of(ref)
        assert v is not None
        axes = b.values[v].axes
        at = next(a for a in axes if b.resolve(a) == b.resolve(over))
        first = (at, *(a for a in axes if a != at))
        if axes == first:
            return ref
        view = View(
            axes, first, tuple((a,) for a in axes), tuple((a,) for a in first), name="order"
        )
        (moved,) = b.apply(view, [ref], self.site)
        return moved


def _param_count(b: Builder) -> int:
    return sum(1 for node in b.nodes for _ in node.params())
