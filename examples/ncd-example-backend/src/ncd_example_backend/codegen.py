"""Render a graph as one Python function of NumPy calls, a line per node.

Every value gets a variable ``v<id>``; each node's inputs are first arranged as (loop...,
core...) with size-1 dimensions for loop axes they lack, the lifting convention of
``ncd.reference``, so rules only ever see core axes at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

import ncd
from ncd import ops
from ncd.plugins import Backend, Executable, registry
from ncd.reference import REFERENCE_RULES, Context, prepare

Rule = Callable[[Any, list[str]], str]

NUMPY_UNARY = {
    "exp": "np.exp({})",
    "log": "np.log({})",
    "sqrt": "np.sqrt({})",
    "rsqrt": "1.0 / np.sqrt({})",
    "abs": "np.abs({})",
    "neg": "-{}",
    "relu": "np.maximum({}, 0)",
    "tanh": "np.tanh({})",
    "square": "np.square({})",
    "sigmoid": "1.0 / (1.0 + np.exp(-{}))",
    "silu": "{0} / (1.0 + np.exp(-{0}))",
    "recip": "1.0 / {}",
}
NUMPY_BINARY = {
    "add": "{} + {}",
    "sub": "{} - {}",
    "mul": "{} * {}",
    "div": "{} / {}",
    "max": "np.maximum({}, {})",
    "min": "np.minimum({}, {})",
    "pow": "{} ** {}",
    "floordiv": "np.floor_divide({}, {})",
    "mod": "np.remainder({}, {})",
    # comparisons: bool arrays, as ncd's
    **{
        fn: f"np.{name}({{0}}, {{1}})"
        for fn, name in (
            ("lt", "less"),
            ("le", "less_equal"),
            ("gt", "greater"),
            ("ge", "greater_equal"),
            ("eq", "equal"),
            ("ne", "not_equal"),
        )
    },
}


def _const(op: ops.Scalar) -> float | int:
    """A whole constant of integer arithmetic as an int (NumPy keeps an integer array one)."""
    return op.const if op.whole is None else op.whole


def _einsum(op: ops.Einsum, xs: list[str]) -> str:
    letters: dict[ncd.Axis, str] = {}
    for a in (*[a for g in op.inputs for a in g], *op.output):
        letters.setdefault(a, "abcdefghijklmnopqrstuvwxyz"[len(letters)])
    lhs = ",".join("..." + "".join(letters[a] for a in g) for g in op.inputs)
    rhs = "..." + "".join(letters[a] for a in op.output)
    return f"np.einsum('{lhs}->{rhs}', {', '.join(xs)})"


def _softmax(op: ops.Softmax, xs: list[str]) -> str:
    x = xs[0]
    return (
        f"(_e := np.exp({x} - np.max({x}, axis=-1, keepdims=True)))"
        " / np.sum(_e, axis=-1, keepdims=True)"
    )


RULES: dict[type, Rule] = {
    ops.Einsum: _einsum,
    ops.Softmax: _softmax,
    ops.Binary: lambda op, xs: NUMPY_BINARY[op.fn].format(*xs),
    # the constant parenthesised: "-1.5 ** x" would be -(1.5 ** x)
    ops.Scalar: lambda op, xs: NUMPY_BINARY[op.fn].format(
        *((f"({_const(op)!r})", xs[0]) if op.reverse else (xs[0], f"({_const(op)!r})"))
    ),
}


def _unary(op: ops.Unary, xs: list[str]) -> str | None:
    template = NUMPY_UNARY.get(op.fn)
    return None if template is None else template.format(xs[0])


def generate(graph: ncd.Graph) -> tuple[str, dict[int, Any]]:
    """Source of ``def forward(inputs, params, ctx)`` and the ops it defers to the reference."""
    extra = {kind: lw.rule for kind, lw in registry().lowerings_for("pysource").items()}
    lines = ["def forward(inputs, params, ctx):"]
    lines += [f"    v{v} = inputs[{k}]" for k, v in enumerate(graph.inputs)]
    deferred: dict[int, Any] = {}
    for i, node in enumerate(graph.nodes):
        xs = []
        for k, (v, core) in enumerate(zip(node.inputs, node.core_in)):
            axes = graph.values[v].axes
            present = [a for a in node.loop if a in axes]
            perm = [axes.index(a) for a in (*present, *core)]
            missing = [j for j, a in enumerate(node.loop) if a not in axes]
            lines.append(f"    a{k} = np.expand_dims(v{v}.transpose({perm}), {missing})")
            xs.append(f"a{k}")
        # a bool counts as 0.0 / 1.0 (0 / 1 beside integers), an integer beside a float is a
        # float: ncd's promotions, in float64 where another input is
        dts = tuple(graph.values[v].dtype for v in node.inputs)
        floats = [f"a{k}" for k, d in enumerate(dts) if d.kind == "float"]
        for k, to in enumerate(node.op.promotions(dts)):
            if to is not None:
                wide = (
                    f"np.result_type(np.float32, {', '.join(floats)})" if floats else "np.float32"
                )
                lines.append(f"    a{k} = a{k}.astype({wide if to == 'float' else f'np.{to}'})")
        rule = extra.get(node.op.kind) or RULES.get(type(node.op))
        expr = (
            rule(node.op, xs)
            if rule
            else (_unary(node.op, xs) if isinstance(node.op, ops.Unary) else None)
        )
        outs = ", ".join(f"v{v}" for v in node.outputs)
        if expr is not None and len(node.outputs) == 1:
            lines.append(f"    {outs} = {expr}")
        else:
            deferred[i] = REFERENCE_RULES[type(node.op)]
            ps = (
                "{"
                + ", ".join(
                    f"{p.name!r}: params[{node.param_name(p.name)!r}]" for p in node.op.params()
                )
                + "}"
            )
            lines.append(
                f"    {outs}, = deferred[{i}](nodes[{i}].op, [{', '.join(xs)}], {ps}, ctx)"
            )
        for v in node.outputs:
            if graph.values[v].dtype.kind in ("int", "bool"):  # NumPy may widen or float them
                lines.append(f"    v{v} = np.asarray(v{v}).astype(np.{graph.values[v].dtype})")
            lines.append(f"    v{v} = np.broadcast_to(v{v}, {graph.shape(v)})")
    lines.append(f"    return [{', '.join(f'v{v}' for v in graph.outputs)}]")
    return "\n".join(lines) + "\n", deferred


class PySourceExecutable(Executable):
    def __init__(self, model: Any) -> None:
        self.model = model
        self._compiled: dict[str, Any] = {}
        self.source = ""

    def __call__(self, *inputs: Any, params: Any = None) -> Any:
        graph, arrays, ps = prepare(self.model, inputs, params)
        key = ncd.to_json(graph)
        if key not in self._compiled:
            self.source, deferred = generate(graph)
            scope: dict[str, Any] = {"np": np, "deferred": deferred, "nodes": graph.nodes}
            exec(compile(self.source, "<ncd-pysource>", "exec"), scope)  # source we generated
            self._compiled[key] = scope["forward"]
        outs = self._compiled[key](arrays, ps, Context(graph))
        return outs[0] if len(outs) == 1 else tuple(outs)


class PySourceBackend(Backend):
    name = "pysource"
    capabilities: ClassVar[frozenset[str]] = frozenset({"float32", "float64"})
    description = "example third-party backend: straight-line NumPy source"

    def compile(self, model: Any, **options: Any) -> Executable:
        return PySourceExecutable(model)
