"""Lowering terms to the graph IR: the mutable builder and axis alignment.

Alignment binds an op's template axes to the axes of the values it receives, in a fixed order
of rules: same uid (explicit axes passed by the user), then same name, then position (right
aligned). Axes of an input not bound to the template are lifted: they become the node's loop
axes and lead its outputs. Identity of axes is a union-find: binding a template axis makes it
an alias of the concrete axis it met.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ncd.axis import ArrayType, Axis
from ncd.dtypes import dtype as to_dtype
from ncd.errors import AlignmentError, DTypeError
from ncd.graph import Graph, Node, Scope
from ncd.op import Op
from ncd.sizes import SizeSolver

__all__ = ["Builder", "Hole", "Ref"]


class Hole:
    """A model input whose type is not yet known; the first op that reads it fixes the type.

    ``lift`` holds axes added by ``.over()``; lifted copies share one cell, so every use of the
    input sees the same value once it exists.
    """

    __slots__ = ("cell", "lift", "slot")

    def __init__(self, slot: int, lift: tuple[Axis, ...] = (), cell: list[int] | None = None):
        self.slot = slot
        self.lift = lift
        self.cell: list[int] = cell if cell is not None else []

    def lifted(self, axes: Sequence[Axis]) -> Hole:
        return Hole(self.slot, (*axes, *self.lift), self.cell)


Ref = int | Hole


class Builder:
    """Accumulates nodes while terms lower themselves; ``finish`` freezes a ``Graph``."""

    def __init__(self, scope: Scope | None = None) -> None:
        self._parent: dict[str, str] = {}
        self._axis: dict[str, Axis] = {}
        self._live: set[str] = set()
        self.sizes = SizeSolver()
        self.values: list[ArrayType] = []
        self.producer: list[int | None] = []
        self.nodes: list[Node] = []
        self.slots: list[Hole] = []
        self.scopes: list[Scope] = [scope or Scope("model")]
        self.scope = 0
        self._paths: set[str] = set()
        self._shared: dict[str, set[str]] = {}  # paths held by shares_path ops -> their names

    # -- axes ----------------------------------------------------------------------------------
    def resolve(self, axis: Axis) -> Axis:
        """The concrete axis ``axis`` currently stands for."""
        uid = axis.uid
        parent = self._parent
        if uid not in parent:
            parent[uid] = uid
            self._axis[uid] = axis
            self.sizes.add(axis)
            return axis
        root = uid
        while parent[root] != root:
            root = parent[root]
        while parent[uid] != root:
            parent[uid], uid = root, parent[uid]
        return self._axis[root]

    def _bind(self, template: Axis, actual: Axis, origin: str) -> None:
        t = self.resolve(template)
        self._parent[t.uid] = actual.uid
        self.sizes.union(t, actual, origin)

    # -- values and inputs ---------------------------------------------------------------------
    def new_slot(self) -> Hole:
        hole = Hole(len(self.slots))
        self.slots.append(hole)
        return hole

    def _new_value(self, t: ArrayType, producer: int | None) -> int:
        self.values.append(t)
        self.producer.append(producer)
        for a in t.axes:
            self._live.add(a.uid)
        return len(self.values) - 1

    def materialise(self, hole: Hole, t: ArrayType) -> int:
        """Give an input its type (lift axes lead)."""
        if hole.cell:
            return hole.cell[0]
        axes = tuple(self.resolve(a) for a in (*hole.lift, *t.axes))
        hole.cell.append(self._new_value(ArrayType(axes, t.dtype), None))
        return hole.cell[0]

    def value_of(self, ref: Ref) -> int | None:
        if isinstance(ref, Hole):
            return ref.cell[0] if ref.cell else None
        return ref

    def describe_value(self, v: int) -> str:
        p = self.producer[v]
        if p is None:
            slot = next((h.slot for h in self.slots if h.cell and h.cell[0] == v), "?")
            return f"model input {slot} {self.values[v]}"
        node = self.nodes[p]
        return f"the output of {node.op.label} (built at {node.site or '?'}) {self.values[v]}"

    # -- scopes --------------------------------------------------------------------------------
    def enter(self, name: str, label: str) -> int:
        """Open a child scope; returns the previous scope to restore with ``leave``."""
        self.scopes.append(Scope(name, label, self.scope))
        prev, self.scope = self.scope, len(self.scopes) - 1
        return prev

    def leave(self, prev: int) -> None:
        self.scope = prev

    def _path(self, op: Op) -> str:
        parts = []
        s: int | None = self.scope
        while s is not None and s != 0:
            if self.scopes[s].label:
                parts.append(self.scopes[s].label)
            s = self.scopes[s].parent
        base = ".".join(reversed(parts))
        shares = getattr(type(op), "shares_path", False)
        # A parameter of no op at the root keeps its own name (torch's bare ``weight_ih_l0``).
        name = op.name or (op.kind if op.params() and not base and not shares else "")
        if not name and not (shares and op.params()):
            return base
        path = f"{base}.{name}" if base and name else base or name
        if op.params():
            # An op whose class sets ``shares_path`` (``Parameter``: one parameter of another
            # op, as ``ncd.grad`` writes them) may join a path whose parameter names it does not
            # repeat; every other op gets a path of its own.
            names = {p.name for p in op.params()}
            k = 2
            candidate = path
            while candidate in self._paths and (
                not shares or self._shared.get(candidate) is None or names & self._shared[candidate]
            ):
                candidate = f"{path}_{k}"
                k += 1
            path = candidate
            if shares and path not in self._paths:
                self._shared[path] = set()
            if shares:
                self._shared[path] |= names
            self._paths.add(path)
        return path

    # -- the core step: one primitive op --------------------------------------------------------
    def apply(self, op: Op, ins: Sequence[Ref], site: str) -> list[int]:
        """Lower one op on the given inputs; returns the output value ids."""
        core_in, core_out = op.signature()
        if len(ins) != len(core_in):
            raise AlignmentError(
                f"{op.label} (built at {site}) takes {len(core_in)} input(s), got {len(ins)}"
            )
        for k, ref in enumerate(ins):
            v = self.value_of(ref)
            if v is not None:
                self._align(op, site, k, core_in[k], v)
        in_dtypes = op.in_dtypes()
        values = []
        for k, ref in enumerate(ins):
            v = self.value_of(ref)
            if v is None:
                assert isinstance(ref, Hole)
                v = self.materialise(ref, ArrayType(core_in[k], in_dtypes[k]))
            if not op.accepts(k, self.values[v].dtype):
                why, fix = op.refusal(k, self.values[v].dtype)
                raise DTypeError(
                    f"input {k} of {op.label} [{op.core_text()}] (built at {site}) {why}, but "
                    f"receives {self.describe_value(v)} of dtype {self.values[v].dtype}. "
                    f"Fix: {fix}."
                )
            values.append(v)
        self._check_formats(op, site, values)
        bound = op.substitute(self.resolve)
        core_in, core_out = bound.signature()
        loop: list[Axis] = []
        for v, core in zip(values, core_in, strict=True):
            cs = set(core)
            for a in self.values[v].axes:
                if a not in cs and a not in loop:
                    loop.append(a)
        loop_set = set(loop)
        for out in core_out:
            clash = [a for a in out if a in loop_set]
            if clash:
                raise AlignmentError(
                    f"{op.label} (built at {site}) produces axis {clash[0].describe()}, which its "
                    f"input also carries as a lifted axis. Fix: give the op a distinct output axis."
                )
        for c in bound.constraints():
            self.sizes.add_constraint(c, f"{op.label} at {site}")
        index = len(self.nodes)
        dtypes = bound.out_dtypes(tuple(self.values[v].dtype for v in values))
        outs = [
            self._new_value(ArrayType((*loop, *core), dt), index)
            for core, dt in zip(core_out, dtypes, strict=True)
        ]
        for a in bound.axes():
            self._live.add(a.uid)
        self.nodes.append(
            Node(
                bound, tuple(values), tuple(outs), tuple(loop), self.scope, self._path(bound), site
            )
        )
        return outs

    def _check_formats(self, op: Op, site: str, values: Sequence[int]) -> None:
        """Formats meet only at ``ops.cast``: every float input must have the op's format,
        except one in a slot that takes a bool (a select's condition: a mask of any format)."""
        dts = tuple(self.values[v].dtype for v in values)
        want = op.float_format(dts)
        if want is None:
            return
        slots = op.in_dtypes()
        for k, (v, dt) in enumerate(zip(values, dts, strict=True)):
            if dt.kind != "float" or dt == want or to_dtype(slots[k]).kind == "bool":
                continue
            why = (
                f"its format is {want.name}"
                if op.dtype is not None
                else f"its parameters are {want.name}"
                if op.params()
                else f"its first float input is {want.name}"
            )
            others = [
                self.describe_value(u)
                for u, d in zip(values, dts, strict=True)
                if u != v and d.kind == "float"
            ]
            also = f" (its other float input: {', '.join(others)})" if others else ""
            raise DTypeError(
                f"{op.label} [{op.core_text()}] (built at {site}) mixes formats: {why}, but "
                f"input {k} is {self.describe_value(v)} of dtype {dt.name}{also}. Formats meet "
                f"only at a cast. Fix: convert the value with ops.cast(ncd.{want.name}) (or "
                f"ops.cast(ncd.{dt.name}) on the other side), or cast the whole model with "
                f".cast(ncd.{dt.name})."
            )

    def _align(self, op: Op, site: str, k: int, template: tuple[Axis, ...], v: int) -> None:
        actual = self.values[v].axes
        t_axes = [self.resolve(t) for t in template]
        have = set(actual)
        pairs: dict[int, Axis] = {}
        used: set[Axis] = set()
        for i, t in enumerate(t_axes):  # 1. identity (an axis the user passed explicitly)
            if t in have and t not in used:
                pairs[i] = t
                used.add(t)
        for i, t in enumerate(t_axes):  # 2. name hint
            if i in pairs:
                continue
            if t.uid in self._live:
                raise self._error(
                    op,
                    site,
                    k,
                    v,
                    f"template axis {t.describe()} is already bound to an axis of the model, "
                    f"but this input does not carry it",
                    "pass inputs that carry that axis, or build a fresh op for this use",
                )
            named = [a for a in actual if a not in used and a.name == t.name]
            if len(named) == 1:
                pairs[i] = named[0]
                used.add(named[0])
        rest_t = [i for i in range(len(t_axes)) if i not in pairs]  # 3. position, right aligned
        rest_a = [a for a in actual if a not in used]
        if len(rest_t) > len(rest_a):
            missing = ", ".join(t_axes[i].describe() for i in rest_t)
            offered = ", ".join(a.describe() for a in rest_a) or "none"
            raise self._error(
                op,
                site,
                k,
                v,
                f"template axes {missing} are unmatched and the input offers only {offered}",
                "compose with a value that carries these axes, or pass the op the Axis objects "
                "it should use",
            )
        for i, a in zip(reversed(rest_t), reversed(rest_a), strict=False):
            pairs[i] = a
        origin = f"{op.label} (built at {site})"
        for i, a in pairs.items():
            if t_axes[i] != a:
                self._bind(t_axes[i], a, origin)

    def _error(self, op: Op, site: str, k: int, v: int, what: str, fix: str) -> AlignmentError:
        return AlignmentError(
            f"cannot align input {k} of {op.label} [{op.core_text()}] (built at {site}) with "
            f"{self.describe_value(v)}, axes "
            f"{', '.join(a.describe() for a in self.values[v].axes)}: "
            f"{what}. Fix: {fix}."
        )

    # -- freezing --------------------------------------------------------------------------------
    def finish(self, outputs: Sequence[Ref], what: str = "model") -> Graph:
        """Freeze the graph: resolve sizes, check them, and renumber nothing (already SSA)."""
        from ncd.errors import TraceError

        outs = []
        for ref in outputs:
            v = self.value_of(ref)
            if v is None:
                raise TraceError(
                    f"an output of {what} is an input that no op reads, so its type is unknown. "
                    "Fix: give the input a type (ncd.identity(ncd.ArrayType(...)) or "
                    "trace(inputs=...))."
                )
            outs.append(v)
        inputs = []
        for hole in self.slots:
            if not hole.cell:
                raise TraceError(
                    f"input {hole.slot} of {what} is never read, so its type is unknown. "
                    "Fix: drop the input, or give it a type with trace(inputs=...)."
                )
            inputs.append(hole.cell[0])
        self.sizes.solve()
        self.sizes.check(what)
        # Every axis in values and ops, in order of first appearance, with its resolved size.
        order: dict[str, None] = {}
        for t in self.values:
            for a in t.axes:
                order.setdefault(a.uid)
        for n in self.nodes:
            for a in n.op.axes():
                order.setdefault(self.resolve(a).uid)
        final = {uid: self._axis[uid].with_size(self.sizes.size(uid)) for uid in order}

        def fn(a: Axis) -> Axis:
            return final[self.resolve(a).uid]

        # Canonical numbering: inputs first, then node outputs in node order.
        number = {v: i for i, v in enumerate(inputs)}
        for n in self.nodes:
            for v in n.outputs:
                number[v] = len(number)
        old = sorted(number, key=number.__getitem__)
        values = tuple(
            ArrayType(tuple(fn(a) for a in self.values[v].axes), self.values[v].dtype) for v in old
        )
        nodes = tuple(
            attrs.evolve(
                n,
                op=n.op.substitute(fn),
                loop=tuple(fn(a) for a in n.loop),
                inputs=tuple(number[v] for v in n.inputs),
                outputs=tuple(number[v] for v in n.outputs),
            )
            for n in self.nodes
        )
        return Graph(
            tuple(final.values()),
            values,
            nodes,
            tuple(range(len(inputs))),
            tuple(number[v] for v in outs),
            tuple(self.scopes),
        )
