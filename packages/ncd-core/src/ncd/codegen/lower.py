"""The generator: one ``Kernel`` of a fusion plan -> one C-like kernel function.

Values are *pulled*: ``KernelGen.load(value, index)`` reads a buffer when the value comes from
outside the kernel, and otherwise asks the rule of the node producing it (``CODEGEN_RULES``, by
op class) for an expression at that index, so elementwise prologues and epilogues, views and
reductions fuse by construction. Work shared along an axis (a normaliser's statistics) is
hoisted to the loop level where its index is fixed and cached per block. Axes the kernel keeps
parallel become the NDRange (one work-item per index, flattened); the others become loops.
A size bound before compiling is a literal; one still free is a ``Dim`` (``size`` returns it):
the kernel takes it as an argument and every loop, stride and grid count is written for it.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs

from ncd.axis import Axis
from ncd.codegen import ir
from ncd.codegen.dialect import Dialect
from ncd.codegen.ir import Expr
from ncd.codegen.layout import Buffer, Dim, Layouts, Size, ceil_div, row_major
from ncd.codegen.render import render_expr
from ncd.codegen.source import Writer, kind_hint, names_in, sanitize
from ncd.dtypes import dtype as to_dtype
from ncd.errors import ScheduleError
from ncd.graph import Node
from ncd.kernel import Kernel
from ncd.sizes import WindowSize
from ncd.walk import rule_for

__all__ = ["Index", "KernelGen", "KernelSource", "render_kernel"]

#: an index expression by axis: IR, or a template's C text
Index = Mapping[Axis, Expr | str]
T = TypeVar("T")


@attrs.frozen
class KernelSource:
    """A rendered kernel: its function text, arguments in order, and launch shape. With
    run-time sizes, ``sizes`` names the size arguments (C name, axis uid) that follow the
    buffers, and ``global_size`` may hold ``Dim`` expressions the host evaluates per call."""

    name: str
    text: str
    buffers: tuple[Buffer, ...]
    global_size: tuple[Size, ...]
    local_size: tuple[int, ...] | None
    kernel: Kernel = attrs.field(eq=False, repr=False)
    style: str = "pointwise"  # which renderer produced it: pointwise | streamed | tiled
    sizes: tuple[tuple[str, str], ...] = ()
    #: the element formats the kernel stores and computes in (the program's preamble adds
    #: each one's conversion functions or extension once)
    dtypes: tuple[str, ...] = ()


def lit(x: float | str, dialect: Dialect, dtype: str = "float32") -> str:
    """A literal of arithmetic type ``dtype`` (``1.5f`` for float32), as the dialect spells it."""
    return dialect.literal(x, dtype)


def arith_dtype(kernel: Kernel, dialect: Dialect) -> str:
    """The arithmetic format of a kernel: float64 when a float array its nodes touch is float64
    (in the dialect's ``compute`` table), else float32; ``DTypeError`` (naming the format) for
    a float format the dialect cannot store."""
    g, wide = kernel.graph, False
    for i in kernel.nodes:
        node = g.nodes[i]
        formats = [g.values[v].dtype for v in (*node.inputs, *node.outputs)]
        formats += [p.dtype for p in node.op.params()]
        for f in formats:
            if to_dtype(f).kind == "float":
                dialect.ctype(f)  # refuses a format the dialect has no storage for
                wide = wide or dialect.arith(f) == "float64"
    return "float64" if wide else "float32"


class KernelGen:
    """State of one kernel being rendered; rules call its helpers."""

    def __init__(
        self,
        kernel: Kernel,
        dialect: Dialect,
        rules: Mapping[type, Any],
        layouts: Layouts | None = None,
        wide: bool = False,
    ) -> None:
        self.kernel = kernel
        self.graph = kernel.graph
        self.dialect = dialect
        self.rules = rules
        self.layouts = dict(layouts or {})
        self.members = set(kernel.nodes)
        self.made_here = {v: i for i in kernel.nodes for v in self.graph.nodes[i].outputs}
        self.w = Writer()
        self.buffers: dict[tuple[str, Any], Buffer] = {}
        self._names: set[str] = set()
        # value id -> index -> expression, supplied by a template (a finished accumulator)
        self.bound: dict[int, Any] = {}
        self.alias = kernel.aliases if kernel.partitions else {}
        # vector mode (``ncd.codegen.vector``): loops over ``vec`` step by the vector width
        self.vec: Axis | None = None
        self.vec_vars: set[str] = set()
        # lane mode (``ncd.codegen.lanes``): (axis, lane variable, warp width): loops over
        # ``axis`` start at the lane and step by the width; sums over it end in a shuffle
        self.lanes: tuple[Axis, str, int] | None = None
        #: an array of the kernel holds more elements than ``int`` indexes: 64-bit indices
        #: (``wide``: forced, for a run-time-size build serving arrays past 2^31 - 1)
        self.wide = wide or _largest_array(kernel) > INT_MAX
        #: size class -> the size argument standing for it (run-time sizes only)
        self.size_args: dict[str, Dim] = {}
        self._free: dict[str, tuple[str, str]] | None = None
        #: arithmetic format and its C type (float16/bfloat16 storage computes in float32)
        self.cdtype = arith_dtype(kernel, dialect)
        self.ctype = dialect.ctype(self.cdtype)
        #: the IR type of index variables (``itype`` is its C spelling)
        self.ityp = "int64" if self.wide else "int32"
        self.rounded: set[str] = set()  # formats whose rounding the kernel's text calls

    @property
    def itype(self) -> str:
        """The C type of index variables: ``int``, or the dialect's 64-bit type when an element
        offset can exceed 2^31 - 1 (an ``int`` would wrap silently)."""
        return self.dialect.index64 if self.wide else "int"

    def index_lit(self, n: Size) -> str:
        """An index constant of type ``itype`` (so ``min(i, n)`` picks one overload)."""
        return f"({self.itype}){n}" if self.wide else str(n)

    def index_const(self, n: Size) -> Expr:
        """``index_lit`` as an expression: a size of type ``itype`` (cast when 64-bit)."""
        return ir.Convert(self.ix(n), self.ityp) if self.wide else self.ix(n)

    @property
    def vt(self) -> str:
        """The IR type of the arithmetic vector (vector mode)."""
        return ir.vector_of(self.cdtype, self.dialect.vector_width)

    def ix(self, n: Size | Expr | str) -> Expr:
        """An index expression of type ``ityp``: a size (bound: a constant; run time: its size
        argument's expression), an expression, or a template's text."""
        if isinstance(n, Expr):
            return n
        if isinstance(n, int):
            return ir.Const(n, self.ityp)
        return ir.Raw(str(n), self.ityp)

    def c(self, e: Expr | str) -> str:
        """The text of ``e`` in this kernel's dialect (for templates written as text)."""
        return e if isinstance(e, str) else render_expr(e, self.dialect)

    # -- names and buffers -------------------------------------------------------------------------
    def unique(self, hint: str, prefix: str = "v") -> str:
        base = sanitize(hint, prefix)
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def reserve(self, *names: str) -> None:
        """Names a template writes literally: ``unique`` never returns them afterwards."""
        self._names.update(names)

    def size(self, axis: Axis) -> Size:
        """The size of ``axis``: an int when bound before compiling, else the ``Dim`` of the
        size argument of its size class (an axis of a view that is no size class of its own:
        from the view's product constraint)."""
        s = self.graph.size(axis)
        if s is not None:
            return s
        return self._run_time_size(axis, ())

    def split(self, axes: Sequence[Axis], flat: Expr | str) -> dict[Axis, Expr]:
        """Index expressions of ``axes`` (row-major) from one flattened index expression."""
        env: dict[Axis, Expr] = {}
        step: Size = 1
        total = math.prod(self.size(a) for a in axes)
        whole = self.ix(flat)
        for a in reversed(axes):
            n = self.size(a)
            q = whole if isinstance(step, int) and step == 1 else whole / self.ix(step)
            env[a] = q if step * n == total else q % self.ix(n)
            step *= n
        return env

    def known(self, axis: Axis) -> int | None:
        """The size of ``axis`` when it is bound before compiling (for choices that depend on
        a value: vector mode, tiles, blocking), ``None`` when it is left to run time."""
        return self.graph.size(axis)

    def _run_time_size(self, axis: Axis, seen: tuple[str, ...]) -> Size:
        free = self._free_classes()
        root = _class_of(self.graph, axis.uid)
        if root in free:
            if root not in self.size_args:
                label, uid = free[root]
                self.size_args[root] = Dim.arg(self.unique(f"n_{label}", "n"), uid)
            return self.size_args[root]
        if root not in seen:  # an axis of a view: from its product constraint
            inner = (*seen, root)
            for n in self.graph.nodes:
                for c in n.op.constraints():
                    if isinstance(c, WindowSize):
                        if _class_of(self.graph, c.out.uid) == root:  # window positions
                            n_in, k_in = self._size_in(c.n, inner), self._size_in(c.k, inner)
                            return _positions(c, n_in, k_in)
                        continue
                    if _class_of(self.graph, c.result.uid) == root:  # a merge: the product
                        out: Size = 1
                        for f in c.factors:
                            out = out * self._size_in(f, inner)
                        return out
                    mine = [f for f in c.factors if _class_of(self.graph, f.uid) == root]
                    if len(mine) == 1:  # a split: the whole over the other factors
                        rest: Size = 1
                        for f in c.factors:
                            if f is not mine[0]:
                                rest = rest * self._size_in(f, inner)
                        return self._size_in(c.result, inner) // rest
        raise ScheduleError(
            f"axis {axis.describe()} has no size and none follows from the model's free sizes. "
            "Fix: bind it before compiling (model.bind(...))"
        )

    def _size_in(self, axis: Axis, seen: tuple[str, ...]) -> Size:
        s = self.graph.size(axis)
        return s if s is not None else self._run_time_size(axis, seen)

    def _free_classes(self) -> dict[str, tuple[str, str]]:
        """Size class root -> (config label, uid of a member) for each free size."""
        if self._free is None:
            self._free = {}
            for var in self.graph.config().free:
                root = _class_of(self.graph, var.axes[0].uid)
                self._free[root] = (var.label, var.axes[0].uid)
        return self._free

    def recip(self, n: Size) -> Expr:
        """The float ``1 / n`` of a size (a literal when bound)."""
        if isinstance(n, int):
            return self.lit(1.0 / n)
        return self.lit(1.0) / ir.Convert(self.ix(n), self.cdtype)

    def _sizes(self, axes: Sequence[Axis]) -> dict[Axis, Size]:
        return {a: self.size(a) for a in axes}

    def value_buffer(self, v: int, *, output: bool = False) -> Buffer:
        key = ("out" if output else "in", v)
        if key not in self.buffers:
            t = self.graph.values[v]
            axes = self.layouts.get(v, t.axes)
            prefix = "out" if output else "in"
            name = self.unique(f"{prefix}{v}")
            self.buffers[key] = Buffer(
                name,
                axes,
                row_major(axes, self._sizes(axes)),
                self.dialect.ctype(t.dtype),
                value=v,
                output=output,
                dtype=t.dtype,
            )
        return self.buffers[key]

    def param_buffer(self, node: Node, pname: str) -> Buffer:
        full = node.param_name(pname)
        key = ("param", full)
        if key not in self.buffers:
            p = next(p for p in node.op.params() if p.name == pname)
            name = self.unique(f"w_{full}")
            self.buffers[key] = Buffer(
                name,
                p.axes,
                row_major(p.axes, self._sizes(p.axes)),
                self.dialect.ctype(p.dtype),
                param=full,
                dtype=p.dtype,
            )
        return self.buffers[key]

    def panel_buffer(self, node: Node, pname: str, columns: int, leading: int) -> Buffer:
        """Parameter ``pname`` as column panels of ``columns`` over its first ``leading`` axes
        (``Buffer.panel``), an argument the kernel addresses itself."""
        full = node.param_name(pname)
        key = ("panel", full)
        if key not in self.buffers:
            p = next(p for p in node.op.params() if p.name == pname)
            self.buffers[key] = Buffer(
                self.unique(f"p_{full}"),
                p.axes,
                row_major(p.axes, self._sizes(p.axes)),
                self.dialect.ctype(p.dtype),
                param=full,
                dtype=p.dtype,
                panel=columns,
                panel_axes=leading,
            )
        return self.buffers[key]

    def param(self, node: Node, pname: str, index: Index) -> Expr:
        return self.read(self.param_buffer(node, pname), index)

    def param_at(self, node: Node, pname: str, exprs: Sequence[Expr | str]) -> Expr:
        """Parameter ``pname`` at one index expression per axis position (for a table whose
        axes repeat, as the ``(d, d)`` weight of ``linear("d -> d")``)."""
        b = self.param_buffer(node, pname)
        return self.read_addr(b, b.address_at(exprs))

    @property
    def vtype(self) -> str:
        return self.dialect.vector(self.ctype, self.dialect.vector_width)

    def in_vector(self, e: Expr | str | None = None) -> bool:
        """Inside a vector loop (or: ``e`` reads a vector loop's index)."""
        if not self.vec_vars:
            return False
        if e is None:
            return any(b.var in self.vec_vars for b in self.w.stack)
        return not self.vec_vars.isdisjoint(names_in(e))

    def store(self, b: Buffer, index: Index, value: Expr | str) -> None:
        """Write ``value`` (arithmetic type) to ``b`` at ``index``, converted to ``b``'s format
        (a vector store inside a vector loop along ``b``)."""
        addr = b.address(index)
        lanes = self.dialect.vector_width if self.in_vector(addr) else 1
        self.w.line(ir.Store(b.name, addr, ir.as_expr(value, self.cdtype), b.dtype, lanes))

    def in_arith(self, dtype: str) -> bool:
        """Values of ``dtype`` are computed in the arithmetic type: floats, and bools (as 0.0 /
        1.0, stored as one byte each); integers are computed as they are."""
        return dtype in self.dialect.compute or dtype == "bool"

    def read(self, b: Buffer, index: Index) -> Expr:
        return self.read_addr(b, b.address(index))

    def read_addr(self, b: Buffer, addr: Expr) -> Expr:
        """``b`` at element offset ``addr`` (a vector inside a vector loop along ``b``, unit
        stride there: the vector template checked it), in its arithmetic type."""
        arith = self.cdtype if self.in_arith(b.dtype) else str(b.dtype)
        if self.in_vector(addr):
            lanes = self.dialect.vector_width
            return ir.Load(b.name, addr, b.dtype, self.vt, lanes, const=not b.output)
        if self.in_vector() and self.in_arith(b.dtype):
            return ir.Load(b.name, addr, b.dtype, self.vt)  # one element in every lane
        if b.dtype == "bool":  # a byte, made a float explicitly (a builtin's overloads need it)
            return ir.Convert(ir.Load(b.name, addr, b.dtype, arith), arith)
        return ir.Load(b.name, addr, b.dtype, arith)

    def accumulate(
        self,
        axes: tuple[Axis, ...],
        index: Index,
        kind: str,
        term: Any,
        hint: str = "acc",
        nan: bool = True,
    ) -> Expr:
        """``kind`` (sum | max | min | prod) of ``term(index)`` over ``axes``; a scalar variable.
        ``nan=False``: a max/min that may drop NaN operands (``fmax_any``)."""
        init = {
            "sum": self.lit(0.0),
            "max": self.lit(-math.inf),
            "min": self.lit(math.inf),
            "prod": self.lit(1.0),
        }[kind]
        fn = "f" + kind + ("" if nan else "_any")

        def step(acc: ir.Var, t: Expr | str) -> ir.Stmt:
            value = ir.as_expr(t, acc.type)
            if kind == "sum":
                return ir.Assign(acc, value, "+=")
            if kind == "prod":
                return ir.Assign(acc, value, "*=")
            return ir.Assign(acc, self.call(fn, acc, value))

        if self.vec is not None and tuple(axes) == (self.vec,):
            vec = self.vec
            acc = self.var(ir.Broadcast(init, self.vt), f"{hint}v", self.vt)
            if self.known(vec) is None:  # whole vectors, then the scalar tail
                whole, tail = self.vector_loops(vec)
                with whole as i:
                    self.w.line(step(acc, term({**index, vec: i})))
                total = self.var(self.across_lanes(acc, kind, nan), hint)
                with tail as i:
                    self.w.line(step(total, term({**index, vec: i})))
                return total
            with self.loop(vec) as i:
                self.w.line(step(acc, term({**index, vec: i})))
            return self.let(self.across_lanes(acc, kind, nan), hint, self.cdtype)
        acc = self.var(init, hint)

        def go(env: dict[Axis, Expr | str], rest: tuple[Axis, ...]) -> None:
            if not rest:
                self.w.line(step(acc, term(env)))
                return
            with self.loop(rest[0]) as i:
                go({**env, rest[0]: i}, rest[1:])

        go(dict(index), tuple(axes))
        if self.lanes is not None and tuple(axes) == (self.lanes[0],):
            # each lane holds a partial result: a butterfly over the warp gives all the total
            # (the shuffle is bound to a variable first: every lane must run it exactly once,
            # and a step such as NCD_FMAX names its operand several times)
            o, other = self.unique("i_xor", "i"), ir.Var(self.unique("lane_v", "v"), self.cdtype)
            shuffle = self.dialect.shuffle_xor.format(value=acc.name, offset=o)
            width = self.lanes[2]
            folded = self.c_stmt(step(acc, other))
            self.w.line(
                f"for (int {o} = {width // 2}; {o} > 0; {o} >>= 1) {{ {self.ctype} {other.name} "
                f"= {shuffle}; {folded} }}"
            )
        return acc

    def c_stmt(self, s: ir.Stmt) -> str:
        from ncd.codegen.render import render_stmt

        return render_stmt(s, self.dialect)

    def across_lanes(self, vec: Expr, kind: str, nan: bool = True) -> Expr:
        """The scalar ``kind`` (sum | max | min | prod) of the lanes of vector ``vec``."""
        lanes: list[Expr] = [ir.Lane(vec, k) for k in range(self.dialect.vector_width)]
        total = lanes[0]
        for lane in lanes[1:]:
            if kind == "sum":
                total = total + lane
            elif kind == "prod":
                total = total * lane
            else:
                total = self.call("f" + kind + ("" if nan else "_any"), total, lane)
        return total

    # -- emitting ----------------------------------------------------------------------------------
    def let(
        self, expr: Expr | str, hint: str = "t", type: str | None = None, const: bool = False
    ) -> Expr:
        """A variable holding ``expr``; ``type`` (an IR type) defaults to the kernel's
        arithmetic type (its vector in a vector loop). A variable is returned as it is."""
        text = expr.text if isinstance(expr, ir.Raw) else expr
        if isinstance(expr, ir.Var) or (isinstance(text, str) and text.isidentifier()):
            return ir.as_expr(expr, type or self.cdtype)  # a name already
        type = self.cdtype if type is None else type
        if type == self.cdtype and self.in_vector():
            type = self.vt
        var = ir.Var(self.unique(hint, "t"), type)
        self.w.line(ir.Decl(var, ir.as_expr(expr, type), const))
        return var

    def var(self, init: Expr | str, hint: str = "acc", type: str | None = None) -> ir.Var:
        """A mutable variable (an accumulator) starting at ``init``."""
        type = self.cdtype if type is None else type
        var = ir.Var(self.unique(hint, "t"), type)
        self.w.line(ir.Decl(var, ir.as_expr(init, type)))
        return var

    def loop(self, axis: Axis, hint: str | None = None) -> Any:
        """``with gen.loop(a) as i:`` -- a for loop over all indices of ``axis``."""
        i = ir.Var(self.unique(f"i_{hint or axis.name}", "i"), self.ityp)
        stop = self.ix(self.size(axis))
        if self.lanes is not None and axis == self.lanes[0]:
            _, lane, width = self.lanes
            return _Loop(self, ir.For(i, ir.Var(lane, "int32"), stop, width), i)
        if axis == self.vec:
            self.vec_vars.add(i.name)
            return _Loop(self, ir.For(i, self.ix(0), stop, self.dialect.vector_width), i)
        return _Loop(self, ir.For(i, self.ix(0), stop), i)

    def vector_loops(self, axis: Axis) -> tuple[Any, Any]:
        """For a vector axis of run-time length: a loop over its whole vectors (indices step
        by the vector width; reads and writes there are vectors) and the scalar loop over
        the rest, in this order (``with whole as i: ...`` then ``with tail as i: ...``)."""
        n, width = self.ix(self.size(axis)), self.dialect.vector_width
        end = self.shared(  # once per kernel: it depends on the size argument only
            ("vend", axis.uid),
            [],
            lambda: self.let(n - n % width, "vend", self.ityp, const=True),
        )
        i = ir.Var(self.unique(f"i_{axis.name}", "i"), self.ityp)
        self.vec_vars.add(i.name)
        j = ir.Var(self.unique(f"i_{axis.name}", "i"), self.ityp)
        whole = _Loop(self, ir.For(i, self.ix(0), end, width), i)
        tail = _Loop(self, ir.For(j, end, n), j)
        return whole, tail

    def lit(self, x: float | str) -> Expr:
        """A literal in the kernel's arithmetic type (``x`` a number or its decimal text)."""
        return ir.Const(x, self.cdtype)

    def fn(self, name: str) -> str:
        """The builtin spelling of ``name`` at the arithmetic type (for templates)."""
        return self.dialect.intrinsic(name, self.cdtype)

    def call(self, name: str, *args: Expr | str) -> Expr:
        """The intrinsic ``name`` on ``args`` (at the type of its first float operand: a vector
        in a vector loop)."""
        exprs = tuple(ir.as_expr(a, self.cdtype) for a in args)
        floats = [e.type for e in exprs if e.type.startswith("float")]
        return ir.Call(name, exprs, floats[0] if floats else self.cdtype)

    # -- values ------------------------------------------------------------------------------------
    def load(self, v: int, index: Index) -> Expr:
        """An expression for value ``v`` at ``index`` (an index expression per axis)."""
        axes = self.graph.values[v].axes
        missing = [a for a in axes if a not in index]
        if missing:
            raise ScheduleError(
                f"value {v} {self.graph.values[v]} is needed at an index missing "
                f"{', '.join(a.describe() for a in missing)} in kernel {self.kernel.name}"
            )
        env = {a: self.ix(index[a]) for a in axes}
        if v in self.bound:  # a template's finished accumulator (text or IR)
            return ir.as_expr(self.bound[v](env), self.cdtype)
        if v not in self.made_here:
            return self.read(self.value_buffer(v), env)
        key = ("value", v, tuple(env[a] for a in axes))
        hit = self.w.lookup(key)
        if hit is not None:
            return cast(Expr, hit)
        node = self.graph.nodes[self.made_here[v]]
        rule = self.rule_for(node)
        dt = self.graph.values[v].dtype  # float values in the arithmetic type, ids as they are
        typ = self.cdtype if self.in_arith(dt) else str(dt)
        # a value depends only on its index: compute it in the outermost loop that fixes it
        with self.w.at_depth(self.w.depth_for(list(env.values()))):
            # a plugin's rule may still return C text: it is kept as such
            expr = ir.as_expr(rule(self, node, env), self.vt if self.in_vector() else typ)
            read_here = any(c in self.members for c in self.graph.consumers[v])
            if dt in self.dialect.compute and dt != self.cdtype and read_here:
                # a value of a narrower format than the arithmetic holds what its format holds
                # (as the reference rounds each wire), also when it is never stored (a value
                # only stored is rounded by its store)
                expr = ir.Round(expr, str(dt))
                self.rounded.add(str(dt))
            name = self.let(expr, kind_hint(node.op.kind), typ)  # not value id: layers match
            self.w.remember(key, name)
        return name

    def rule_for(self, node: Node) -> Any:
        rule = rule_for(self.rules, node.op)
        if rule is not None:
            return rule
        raise ScheduleError(
            f"no {self.dialect.name} code generation rule for op {node.op.label!r} (kind "
            f"{node.op.kind!r}); register one with ncd_register_lowerings(target="
            f"{self.dialect.name!r})"
        )

    def shared(self, key: Any, index_exprs: Sequence[Expr | str], make: Callable[[], T]) -> T:
        """Compute ``make()`` once at the outermost loop level where ``index_exprs`` are fixed
        (a normaliser's statistics), cached there."""
        hit = self.w.lookup(key)
        if hit is not None:
            return cast(T, hit)
        depth = self.w.depth_for(list(index_exprs))
        with self.w.at_depth(depth):
            out = make()
            self.w.remember(key, out)
        return out

    # -- the pointwise driver ----------------------------------------------------------------------
    def serial_axes(self) -> set[Axis]:
        """Axes a work-item must walk itself: normalised/streamed axes of member nodes, and
        the vector axis in vector mode."""
        out: set[Axis] = set(self.kernel.streamed)
        if self.vec is not None:
            out.add(self.vec)
        for i in self.kernel.nodes:
            op = self.graph.nodes[i].op
            if op.category == "normaliser":
                out.update(a for g in op.signature()[0] for a in g)
        return out

    def grid(self) -> list[Axis]:
        """The axes one work-item fixes: the plan's group partitions (one axis per rename
        class), else the last output's axes that no member normalises or streams."""
        serial = self.serial_axes()
        grouped = [a for a in self.kernel.grouped if a not in serial]
        if grouped:
            roots: dict[Axis, None] = {}
            for a in grouped:
                roots.setdefault(self.root(a))
            return list(roots)
        last = self.graph.values[self.kernel.outputs[-1]].axes
        return [a for a in last if a not in serial]

    def root(self, a: Axis) -> Axis:
        while a in self.alias:
            a = self.alias[a]
        return a

    def open_grid(
        self, par: list[Axis], block: Mapping[Axis, int] | None = None, lanes: int = 0
    ) -> tuple[dict[Axis, Expr], Size]:
        """Declare the work-item's indices (the NDRange is flattened to one dimension). An axis
        in ``block`` gives each work-item that many consecutive indices: its index is the first
        of them (``block[a] * k``) and the grid holds ``ceil(size / block[a])`` along it."""
        block = block or {}
        counts = [ceil_div(self.size(a), block.get(a, 1)) for a in par]
        total: Size = math.prod(counts)
        rows = total  # the indices the grid's axes take (times ``lanes`` work-items each)
        gid = ir.Var(self.unique("gid"), self.ityp)
        self.w.line(ir.Decl(gid, ir.Raw(self.dialect.gid(0, self.wide), self.ityp), const=True))
        if lanes:  # a warp per index: ``lanes`` work-items share it (``self.lanes`` names them)
            assert self.lanes is not None
            total = total * lanes
            self.w.line(f"if ({gid.name} >= {total}) return;")  # whole warps: a multiple
            lane = ir.Var(self.lanes[1], "int32")
            self.w.line(ir.Decl(lane, ir.Convert(gid % lanes, "int32"), const=True))
            row = ir.Var(self.unique("row"), self.ityp)
            self.w.line(ir.Decl(row, gid / lanes, const=True))
            gid = row
        else:
            self.w.line(f"if ({gid.name} >= {total}) return;")
        env: dict[Axis, Expr] = {}
        step: Size = 1
        for a, n in zip(reversed(par), reversed(counts), strict=True):
            i = ir.Var(self.unique(f"i_{a.name}", "i"), self.ityp)
            q: Expr = gid if isinstance(step, int) and step == 1 else gid / self.ix(step)
            expr = q if step * n == rows else q % self.ix(n)
            if block.get(a, 1) > 1:
                expr = expr * block[a]
            self.w.line(ir.Decl(i, expr, const=True))
            env[a] = i
            step *= n
        streamed = set(self.kernel.streamed)
        for a in self.kernel.axes():  # renamed axes share their source's index
            if a not in env and a not in streamed and self.root(a) in env:
                env[a] = env[self.root(a)]
        return env, total

    def render(self, style: str = "pointwise") -> KernelSource:
        if not self.kernel.outputs:
            raise ScheduleError(f"kernel {self.kernel.name} writes nothing")
        par = self.grid()
        env, total = self.open_grid(par)
        for v in self.kernel.outputs:
            self.write(v, env, par)
        return self.launch(total, style)

    def launch(self, total: Size, style: str, local: int = 64) -> KernelSource:
        # a run-time count takes whole work-groups (the kernel returns past ``total``)
        lsize = local if not isinstance(total, int) or total >= local else None
        gsize = total if lsize is None else ceil_div(total, lsize) * lsize
        return self.source((gsize,), None if lsize is None else (lsize,), style)

    def write(self, v: int, env: Mapping[Axis, Expr | str], par: Sequence[Axis]) -> None:
        axes = self.graph.values[v].axes
        covered = {self.root(a) for a in axes}
        guards = [
            self.ix(env[a]).cmp("==", 0)
            for a in par
            if a not in axes and self.root(a) not in covered
        ]
        if self.lanes is not None and self.lanes[0] not in axes:
            # every lane holds the value: one stores it
            guards.append(ir.Var(self.lanes[1], "int32").cmp("==", 0))
        loops = [a for a in axes if a not in env]
        out = self.value_buffer(v, output=True)

        def body(index: dict[Axis, Expr | str], rest: list[Axis]) -> None:
            if not rest:
                self.store(out, index, self.load(v, index))
                return
            if rest[0] == self.vec and self.known(rest[0]) is None:
                for part in self.vector_loops(rest[0]):  # whole vectors, then the tail
                    with part as i:
                        body({**index, rest[0]: i}, rest[1:])
                return
            with self.loop(rest[0]) as i:
                body({**index, rest[0]: i}, rest[1:])

        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = ir.Bin("&&", cond, g, "int32")
            with self.w.block(ir.If(cond)):
                body(dict(env), loops)
        else:
            body(dict(env), loops)

    def source(
        self, gsize: tuple[Size, ...], lsize: tuple[int, ...] | None, style: str
    ) -> KernelSource:
        name = sanitize(self.kernel.name or "kernel", "k")
        bufs = sorted(self.buffers.values(), key=lambda b: (b.output, b.param is not None))
        args = ",\n    ".join(
            [f"{self.dialect.pointer(b.ctype, const=not b.output)} {b.name}" for b in bufs]
            + [f"const {self.itype} {d}" for d in self.size_args.values()]
        )
        decl = self.dialect.declaration(name, lsize)
        head = f"// {comment(str(self.kernel))}\n{decl}\n    {args})\n{{"
        text = f"{head}\n{self.w.render(1, self.dialect)}\n}}\n"
        sizes = tuple((str(d.args[0]), str(d.args[1])) for d in self.size_args.values())
        dtypes = tuple(sorted({str(b.dtype) for b in bufs} | {self.cdtype} | self.rounded))
        return KernelSource(
            name, text, tuple(bufs), gsize, lsize, self.kernel, style, sizes, dtypes
        )


INT_MAX = 2**31 - 1


_ROOTS: list[tuple[Any, dict[str, str]]] = []  # the last few graphs' size classes (weakly)


def _class_of(graph: Any, uid: str) -> str:
    """The size class (union-find root) of an axis of ``graph`` (cached for the last few
    graphs, without keeping them alive: every kernel of one generation asks)."""
    for ref, roots in _ROOTS:
        if ref() is graph:
            return roots[uid]
    roots = {a.uid: root for root, members in graph._classes for a in members}
    _ROOTS.insert(0, (weakref.ref(graph), roots))
    del _ROOTS[4:]
    return roots[uid]


def _largest_array(kernel: Kernel) -> int:
    """Elements of the largest value or parameter a kernel's nodes touch (every element offset
    and flattened work-item index is below it)."""
    g, most = kernel.graph, 1
    for i in kernel.nodes:
        node = g.nodes[i]
        arrays = [g.values[v].axes for v in (*node.inputs, *node.outputs)]
        arrays += [p.axes for p in node.op.params()]
        for axes in arrays:
            most = max(most, math.prod(g.size(a) or 1 for a in axes))
    return most


def comment(text: str) -> str:
    """Text safe inside a ``//`` comment: one line, printable characters only."""
    return re.sub(r"[^A-Za-z0-9_ ,.:;/()\[\]|^@#=+-]", "?", text)[:200]


class _Loop:
    def __init__(self, gen: KernelGen, header: ir.For, var: ir.Var) -> None:
        self.gen, self.header, self.var = gen, header, var
        self._cm: Any = None

    def __enter__(self) -> ir.Var:
        self._cm = self.gen.w.block(self.header, self.var.name)
        self._cm.__enter__()
        return self.var

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)


def render_kernel(
    kernel: Kernel,
    dialect: Dialect,
    rules: Mapping[type, Any] | None = None,
    layouts: Layouts | None = None,
    templates: Sequence[Any] = (),
    wide: bool = False,
) -> KernelSource:
    """Render one planned kernel. ``templates`` are tried first (each returns a ``KernelSource``
    or ``None`` when the kernel does not fit it); the pointwise driver is the fallback.
    ``wide``: 64-bit indices whatever the sizes (a run-time-size build for large arrays)."""
    from ncd.codegen.rules import CODEGEN_RULES

    table = dict(CODEGEN_RULES) if rules is None else dict(rules)
    with ir.rendering(dialect):
        for template in templates:
            gen = KernelGen(kernel, dialect, table, layouts, wide)
            out = template(gen)
            if out is not None:
                return out  # type: ignore[no-any-return]
        return KernelGen(kernel, dialect, table, layouts, wide).render()


def _positions(c: WindowSize, n: Size, k: Size) -> Size:
    """``floor(((n - 1) u + 1 + 2p + e - d (k - 1) - 1) / s) + 1`` on sizes: the host has
    checked before the launch (``Graph.bind``) that the window fits, so C's truncating division
    is the floor."""
    if isinstance(n, int) and isinstance(k, int):
        return c.positions(n, k)
    span = (n - 1) * c.upsample + 1 + 2 * c.padding + c.extra
    return (span - (k * c.dilation - c.dilation + 1)) // c.stride + 1
