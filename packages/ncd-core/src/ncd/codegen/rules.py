"""Per-op code generation rules, keyed by op class.

``rule(gen, node, index) -> expr``: the C expression of the node's output at ``index`` (one
index expression per axis of the output value). Rules read inputs with ``gen.load`` and may
emit statements (loops with accumulators) first; a plugin adds a rule for its own op with
``ncd_register_lowerings`` (``Lowering(target, kind, rule)``) or ``codegen_rule``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ncd.axis import Axis
from ncd.codegen.layout import Size
from ncd.codegen.lower import KernelGen
from ncd.graph import Node
from ncd.primitives import batchnorm as BN
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import window as W

__all__ = ["BINARY_C", "CODEGEN_RULES", "UNARY_C", "Rule", "codegen_rule"]

Rule = Callable[[KernelGen, Node, Mapping[Axis, str]], str]

#: op class -> rule. Backends copy this table and add their plugins' lowerings.
CODEGEN_RULES: dict[type, Rule] = {}


def codegen_rule(cls: type) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        CODEGEN_RULES[cls] = fn
        return fn

    return deco


F = Callable[[KernelGen, str], str]
# constants through ``g.lit`` (decimal text kept digit for digit, typed by the kernel's format)
UNARY_C: dict[str, F] = {
    "exp": lambda g, x: f"{g.fn('exp')}({x})",
    "log": lambda g, x: f"{g.fn('log')}({x})",
    "sqrt": lambda g, x: f"{g.fn('sqrt')}({x})",
    "rsqrt": lambda g, x: f"{g.fn('rsqrt')}({x})",
    "abs": lambda g, x: f"{g.fn('fabs')}({x})",
    "neg": lambda g, x: f"(-{x})",
    "relu": lambda g, x: f"{g.fn('fmax')}({x}, {g.lit(0.0)})",
    "gelu": lambda g, x: (
        f"({g.lit(0.5)} * {x} * ({g.lit(1.0)} + {g.fn('erf')}({x} * "
        f"{g.lit('0.70710678118654752')})))"
    ),
    "gelu_tanh": lambda g, x: (
        f"({g.lit(0.5)} * {x} * ({g.lit(1.0)} + {g.fn('tanh')}({g.lit('0.79788456080286536')} * "
        f"({x} + {g.lit('0.044715')} * {x} * {x} * {x}))))"
    ),
    "silu": lambda g, x: f"({x} / ({g.lit(1.0)} + {g.fn('exp')}(-{x})))",
    "sigmoid": lambda g, x: f"({g.lit(1.0)} / ({g.lit(1.0)} + {g.fn('exp')}(-{x})))",
    "tanh": lambda g, x: f"{g.fn('tanh')}({x})",
    "square": lambda g, x: f"({x} * {x})",
    "recip": lambda g, x: f"({g.lit(1.0)} / {x})",
    "cos": lambda g, x: f"{g.fn('cos')}({x})",
    "sin": lambda g, x: f"{g.fn('sin')}({x})",
    "atan": lambda g, x: f"{g.fn('atan')}({x})",
    "asinh": lambda g, x: f"{g.fn('asinh')}({x})",
}
B = Callable[[KernelGen, str, str], str]
BINARY_C: dict[str, B] = {
    "add": lambda g, a, b: f"({a} + {b})",
    "sub": lambda g, a, b: f"({a} - {b})",
    "mul": lambda g, a, b: f"({a} * {b})",
    "div": lambda g, a, b: f"({a} / {b})",
    "max": lambda g, a, b: f"{g.fn('fmax')}({a}, {b})",
    "min": lambda g, a, b: f"{g.fn('fmin')}({a}, {b})",
    "pow": lambda g, a, b: f"{g.fn('pow')}({a}, {b})",
}


def _ins(gen: KernelGen, node: Node, index: Mapping[Axis, str], k: int = 0) -> str:
    return gen.load(node.inputs[k], index)


@codegen_rule(L.Unary)
def _unary(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    return UNARY_C[node.op.fn](gen, _ins(gen, node, index))  # type: ignore[attr-defined]


@codegen_rule(L.Binary)
def _binary(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    a, b = _ins(gen, node, index, 0), _ins(gen, node, index, 1)
    return BINARY_C[node.op.fn](gen, a, b)  # type: ignore[attr-defined]


@codegen_rule(L.Scalar)
def _scalar(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Scalar = node.op  # type: ignore[assignment]
    x, c = _ins(gen, node, index), gen.lit(op.const)
    if op.fn == "pow" and op.const == 0.5 and not op.reverse:
        # NumPy and torch take x ** 0.5 as sqrt(x): NaN at -inf, where C's pow gives +inf
        return UNARY_C["sqrt"](gen, x)
    return BINARY_C[op.fn](gen, c, x) if op.reverse else BINARY_C[op.fn](gen, x, c)


@codegen_rule(L.Scale)
def _scale(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Scale = node.op  # type: ignore[assignment]
    n = math.prod(gen.size(a) for a in op.by)
    if not isinstance(n, int):  # a run-time size: the power at run time
        return f"({_ins(gen, node, index)} * {gen.fn('pow')}((float){n}, {gen.lit(op.power)}))"
    factor = float(n) ** op.power
    return f"({_ins(gen, node, index)} * {gen.lit(factor)})"


@codegen_rule(L.Dropout)
def _dropout(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Dropout = node.op  # type: ignore[assignment]
    x = _ins(gen, node, index)
    if op.seed is None:
        return x  # inference: the identity (unseeded training dropout is not compiled)
    from ncd import counter_rng as R

    u = "unsigned int"
    pos = "0u"
    for a in R.canonical(gen.graph.values[node.outputs[0]].axes):  # Horner, mod 2^32
        pos = f"({pos} * ({u})({gen.size(a)}) + ({u})({index[a]}))"
    k = R.key(op.seed)
    h = gen.var(f"{pos} ^ {k}u", "h", u)
    for rnd in range(2):
        gen.w.line(f"{h} ^= {h} >> 16; {h} *= {R.M1}u; {h} ^= {h} >> 13;")
        gen.w.line(f"{h} *= {R.M2}u; {h} ^= {h} >> 16;" + (f" {h} += {k}u;" if rnd == 0 else ""))
    return (
        f"(({h} >= {R.threshold(op.p)}u) ? {x} * {gen.lit(repr(R.scale(op.p)))} : {gen.lit(0.0)})"
    )


@codegen_rule(L.Cast)
def _cast(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    # Arithmetic runs in float32; a format is how a wire is stored, so converting a value is
    # the identity here and the rounding happens where the value is stored.
    return _ins(gen, node, index)


@codegen_rule(L.CausalMask)
def _causal(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.CausalMask = node.op  # type: ignore[assignment]
    offset = gen.size(op.x) - gen.size(op.q)
    fill = gen.lit(-math.inf if op.fill == "-inf" else 0.0)
    x = _ins(gen, node, index)
    return f"(({index[op.x]}) <= ({index[op.q]}) + {offset} ? {x} : {fill})"


def _reduce_loops(
    gen: KernelGen,
    axes: tuple[Axis, ...],
    index: Mapping[Axis, str],
    body: Callable[[dict[Axis, str]], None],
) -> None:
    def go(env: dict[Axis, str], rest: tuple[Axis, ...]) -> None:
        if not rest:
            body(env)
            return
        with gen.loop(rest[0]) as i:
            go({**env, rest[0]: i}, rest[1:])

    go(dict(index), axes)


@codegen_rule(L.Reduce)
def _reduce(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Reduce = node.op  # type: ignore[assignment]
    kind = "sum" if op.fn == "mean" else op.fn
    acc = gen.accumulate(op.axes_, index, kind, lambda env: _ins(gen, node, env), "red")
    if op.fn == "mean":
        n = math.prod(gen.size(a) for a in op.axes_)
        return f"({acc} * {gen.recip(n)})"
    return acc


@codegen_rule(L.Einsum)
def _einsum(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Einsum = node.op  # type: ignore[assignment]
    if not op.contracted:
        return " * ".join(_ins(gen, node, index, k) for k in range(len(op.inputs))) or gen.lit(1.0)
    acc = gen.var(gen.lit(0.0), "dot")

    def body(env: dict[Axis, str]) -> None:
        prod = " * ".join(_ins(gen, node, env, k) for k in range(len(op.inputs)))
        gen.w.line(f"{acc} += {prod};")

    _reduce_loops(gen, op.contracted, index, body)
    return acc


def linear_weight(
    gen: KernelGen, node: Node, out: Mapping[Axis, str], inp: Mapping[Axis, str]
) -> str:
    """The weight ``(*out_axes, *in_axes)`` of a Linear at output index ``out`` and input index
    ``inp``, by position: in ``linear("d -> d")`` both halves are the axis ``d``, with different
    indices (the output's and the contracted one)."""
    op: L.Linear = node.op  # type: ignore[assignment]
    exprs = [out[a] for a in op.out_axes] + [inp[a] for a in op.in_axes]
    return gen.param_at(node, "weight", exprs)


@codegen_rule(L.Linear)
def _linear(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Linear = node.op  # type: ignore[assignment]
    acc = gen.var(gen.lit(0.0), "dot")

    def body(env: dict[Axis, str]) -> None:
        # ``env`` rebinds the contracted axes; an output axis that is also contracted keeps
        # its output index in ``index`` (the weight's first half)
        gen.w.line(f"{acc} += {_ins(gen, node, env)} * {linear_weight(gen, node, index, env)};")

    _reduce_loops(gen, op.in_axes, index, body)
    return f"({acc} + {gen.param(node, 'bias', index)})" if op.bias else acc


def _row_key(node: Node, index: Mapping[Axis, str], core: tuple[Axis, ...]) -> tuple[Any, ...]:
    return (id(node), tuple((a.uid, e) for a, e in index.items() if a not in core))


def _outer(index: Mapping[Axis, str], core: tuple[Axis, ...]) -> list[str]:
    return [e for a, e in index.items() if a not in core]


@codegen_rule(L.Softmax)
def _softmax(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Softmax = node.op  # type: ignore[assignment]
    core = (op.axis,)

    out = _scratch(gen, node)

    def weight(env: Mapping[Axis, str], m: str) -> str:
        e = f"{gen.fn('exp')}({_ins(gen, node, env)} - {m})"
        if out is None:
            return e
        e = gen.let(e, "e")  # kept in the output, so the final pass needs no second exp
        gen.w.line(f"{gen.write_target(out, env)} = {e};")
        return e

    def stats() -> tuple[str, str]:
        # the maximum may drop a NaN: exp(NaN - m) makes the row NaN (as the reference)
        m = gen.accumulate(core, index, "max", lambda env: _ins(gen, node, env), "mx", nan=False)
        s = gen.accumulate(core, index, "sum", lambda env: weight(env, m), "den")
        return m, gen.let(f"{gen.lit(1.0)} / {s}", "inv")

    m, inv = gen.shared(("softmax", *_row_key(node, index, core)), _outer(index, core), stats)
    if out is not None:
        return f"({gen.read(out, index)} * {inv})"
    return f"({gen.fn('exp')}({_ins(gen, node, index)} - {m}) * {inv})"


def _scratch(gen: KernelGen, node: Node) -> Any:
    """The output buffer of ``node``'s value when the kernel writes that value and nothing in
    the kernel reads it: a normaliser may keep per-element work there between its passes
    (each element is read back by the write of the same element, before it is overwritten)."""
    v = node.outputs[0]
    if v not in gen.kernel.outputs or any(c in gen.members for c in gen.graph.consumers[v]):
        return None
    if gen.graph.values[v].dtype != gen.cdtype:
        return None  # an output narrower than the arithmetic would round the kept work
    return gen.value_buffer(v, output=True)


@codegen_rule(L.L2Norm)
def _l2norm(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.L2Norm = node.op  # type: ignore[assignment]
    core = (op.axis,)

    def stats() -> str:
        s = gen.accumulate(
            core, index, "sum", lambda env: f"{_ins(gen, node, env)} * {_ins(gen, node, env)}", "ss"
        )
        return gen.let(f"{gen.fn('rsqrt')}({s} + {gen.lit(op.eps)})", "rn")

    r = gen.shared(("l2", *_row_key(node, index, core)), _outer(index, core), stats)
    return f"({_ins(gen, node, index)} * {r})"


def _moments(
    gen: KernelGen,
    node: Node,
    index: Mapping[Axis, str],
    core: tuple[Axis, ...],
    eps: float,
    centred: bool,
) -> tuple[str, str]:
    n = math.prod(gen.size(a) for a in core)
    mu = gen.lit(0.0)
    if centred:
        s = gen.accumulate(core, index, "sum", lambda env: _ins(gen, node, env), "sum")
        mu = gen.let(f"{s} * {gen.recip(n)}", "mu")

    def sq(env: dict[Axis, str]) -> str:
        x = _ins(gen, node, env)
        d = gen.let(f"{x} - {mu}", "d") if centred else x
        return f"{d} * {d}"

    q = gen.accumulate(core, index, "sum", sq, "sq")
    return mu, gen.let(f"{gen.fn('rsqrt')}({q} * {gen.recip(n)} + {gen.lit(eps)})", "rstd")


@codegen_rule(L.LayerNorm)
def _layernorm(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.LayerNorm = node.op  # type: ignore[assignment]
    core = op.axes_
    mu, r = gen.shared(
        ("ln", *_row_key(node, index, core)),
        _outer(index, core),
        lambda: _moments(gen, node, index, core, op.eps, True),
    )
    y = f"(({_ins(gen, node, index)} - {mu}) * {r})"
    if op.affine:
        y = f"{y} * {gen.param(node, 'weight', index)}"
        if op.bias:
            y = f"({y} + {gen.param(node, 'bias', index)})"
    return y


@codegen_rule(L.RMSNorm)
def _rmsnorm(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.RMSNorm = node.op  # type: ignore[assignment]
    core = op.axes_
    _, r = gen.shared(
        ("rms", *_row_key(node, index, core)),
        _outer(index, core),
        lambda: _moments(gen, node, index, core, op.eps, False),
    )
    y = f"({_ins(gen, node, index)} * {r})"
    return f"{y} * {gen.param(node, 'weight', index)}" if op.affine else y


@codegen_rule(L.Embedding)
def _embedding(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.Embedding = node.op  # type: ignore[assignment]
    # clamped into the table: the host refuses ids out of range before launch
    # (IndexRangeError); inside the kernel no id, whatever its value, reads outside the table
    last = gen.size(op.vocab) - 1
    raw = gen.let(
        _ins(gen, node, index), "id", gen.dialect.ctype(gen.graph.values[node.inputs[0]].dtype)
    )
    ids = gen.let(
        f"({gen.itype})({raw} < 0 ? 0 : {raw} > {last} ? {last} : {raw})", "tok", gen.itype
    )
    return gen.param_at(node, "weight", [ids, *(index[a] for a in op.out_axes)])


@codegen_rule(L.View)
def _view(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: L.View = node.op  # type: ignore[assignment]
    elem: dict[Axis, str] = {}
    for axis, parts in zip(op.out_axes, op.out_parts, strict=True):
        step: Size = 1
        for p in reversed(parts):
            n = gen.size(p)
            e = index[axis] if isinstance(step, int) and step == 1 else f"({index[axis]} / {step})"
            elem[p] = e if len(parts) == 1 else f"({e} % {n})"
            step *= n
    env = {a: e for a, e in index.items() if a not in op.out_axes}
    for axis, parts in zip(op.in_axes, op.in_parts, strict=True):
        terms, step = [], 1
        for p in reversed(parts):
            terms.append(elem[p] if isinstance(step, int) and step == 1 else f"{elem[p]} * {step}")
            step *= gen.size(p)
        env[axis] = " + ".join(reversed(terms))
    return _ins(gen, node, env)


@codegen_rule(L.Constant)
def _constant(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    return gen.lit(node.op.value)  # type: ignore[attr-defined]


@codegen_rule(L.Learned)
def _learned(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    return gen.param(node, "weight", index)


@codegen_rule(L.Parameter)
def _parameter(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    return gen.param(node, node.op.param, index)  # type: ignore[attr-defined]


@codegen_rule(X.Where)
def _where(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    c, x, y = (_ins(gen, node, index, k) for k in range(3))
    # NaN != 0 holds in C as in NumPy: a NaN condition selects x
    return f"(({c}) != 0 ? ({x}) : ({y}))"


def _clamp(i: str, low: Size | str, high: Size | str) -> str:
    """``i`` clamped into ``[low, high]``: a select's unselected operand still reads in bounds."""
    return f"(({i}) < {low} ? {low} : ({i}) > {high} ? {high} : ({i}))"


@codegen_rule(X.Slice)
def _slice(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: X.Slice = node.op  # type: ignore[assignment]
    env = {a: e for a, e in index.items() if a != op.out}
    env[op.axis] = f"({index[op.out]} + {op.start})" if op.start else index[op.out]
    return _ins(gen, node, env)


@codegen_rule(X.Concat)
def _concat(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: X.Concat = node.op  # type: ignore[assignment]
    i = gen.let(index[op.out], "cat", gen.itype)
    rest = {a: e for a, e in index.items() if a != op.out}
    parts: list[tuple[str, str]] = []
    start: Size | str = 0
    for k, a in enumerate(op.axes_):
        n = gen.size(a)
        local = i if isinstance(start, int) and start == 0 else f"({i} - {start})"
        parts.append(
            (f"{i} < {start} + {n}", _ins(gen, node, {**rest, a: _clamp(local, 0, f"{n} - 1")}, k))
        )
        start = n if isinstance(start, int) and start == 0 else f"({start} + {n})"
    expr = parts[-1][1]
    for cond, value in reversed(parts[:-1]):
        expr = f"({cond} ? ({value}) : {expr})"
    return expr


@codegen_rule(X.Rotary)
def _rotary(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: X.Rotary = node.op  # type: ignore[assignment]
    d = gen.size(op.d)
    h = d // 2 if isinstance(d, int) else f"({d} / 2)"
    j = gen.let(index[op.d], "j", gen.itype)
    low = gen.let(f"({j} < {h})", "low", "int")
    partner = gen.let(f"({low} ? {j} + {h} : {j} - {h})", "pair", gen.itype)
    # f_j = base ** (-2 (j mod h) / |d|) = exp((j mod h) * (-2 ln(base) / |d|))
    step = (
        gen.lit(-2.0 * math.log(op.base) / d)
        if isinstance(d, int)
        else f"({gen.lit(-2.0 * math.log(op.base))} / ({gen.ctype}){d})"
    )
    angle = gen.let(
        f"({gen.ctype})({index[op.seq]}) * {gen.fn('exp')}(({gen.ctype})({low} ? {j} : {j} - {h})"
        f" * {step})",
        "angle",
    )
    x = _ins(gen, node, index)
    other = _ins(gen, node, {**index, op.d: partner})
    turned = gen.let(f"({low} ? -({other}) : ({other}))", "turn")
    sign = "-" if op.inverse else "+"  # the inverse rotation: minus the angles
    return f"(({x}) * {gen.fn('cos')}({angle}) {sign} {turned} * {gen.fn('sin')}({angle}))"


@codegen_rule(W.Window)
def _window(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    # read in place: element (o, j) is x[o*stride + j*dilation - padding]; no im2col array
    op: W.Window = node.op  # type: ignore[assignment]
    rest = {a: e for a, e in index.items() if a not in (op.out, op.k)}
    o = index[op.out] if op.stride == 1 else f"{index[op.out]} * {op.stride}"
    j = f"({gen.size(op.k)} - 1 - {index[op.k]})" if op.reverse else index[op.k]
    j = j if op.dilation == 1 else f"{j} * {op.dilation}"
    if not op.padding and not op.extra and op.upsample == 1:
        # the size rule keeps every tap inside [0, n): |out| was derived so
        return _ins(gen, node, {**rest, op.axis: f"({o} + {j})"})
    # the tap stays an expression of loop indices (not a let): a value read at it is hoisted
    # by the loop indices its index names
    i = f"({o} + {j} - {op.padding})"
    n = gen.size(op.axis)
    ok = f"({i}) >= 0"
    if op.upsample > 1:  # on the input's lattice: every upsample-th position is an element
        ok = f"{ok} && ({i}) % {op.upsample} == 0"
        i = f"(({i}) / {op.upsample})"
    x = _ins(gen, node, {**rest, op.axis: _clamp(i, 0, f"{n} - 1")})
    return f"({ok} && ({i}) < {n} ? ({x}) : {gen.lit(op.fill)})"


@codegen_rule(BN.BatchNorm)
def _batch_norm(gen: KernelGen, node: Node, index: Mapping[Axis, str]) -> str:
    op: BN.BatchNorm = node.op  # type: ignore[assignment]
    BN.channel_dim(op, tuple(index))  # the channel axis is one of the value's
    x = _ins(gen, node, index)
    mean, var = gen.param(node, "running_mean", index), gen.param(node, "running_var", index)
    y = f"(({x} - {mean}) * {gen.fn('rsqrt')}({var} + {gen.lit(op.eps)}))"
    if op.affine:
        y = f"({y} * {gen.param(node, 'weight', index)} + {gen.param(node, 'bias', index)})"
    return y
