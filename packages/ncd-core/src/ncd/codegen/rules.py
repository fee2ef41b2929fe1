"""Per-op code generation rules, keyed by op class.

``rule(gen, node, index) -> Expr``: the loop-IR expression (``ncd.codegen.ir``) of the node's
output at ``index`` (one index expression per axis of the output value). Rules read inputs
with ``gen.load`` and may emit IR statements (loops with accumulators) first; a plugin adds a
rule for its own op with ``ncd_register_lowerings`` (``Lowering(target, kind, rule)``) or
``codegen_rule``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ncd.axis import Axis
from ncd.codegen import ir
from ncd.codegen.ir import Expr
from ncd.codegen.layout import Size
from ncd.codegen.lower import Index, KernelGen
from ncd.dtypes import DType
from ncd.dtypes import dtype as to_dtype
from ncd.graph import Node
from ncd.primitives import batchnorm as BN
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import random as RND
from ncd.primitives import window as W

__all__ = ["BINARY_C", "CODEGEN_RULES", "UNARY_C", "Rule", "codegen_rule"]

#: ``rule(gen, node, index) -> Expr``: the IR expression of the node's output at ``index``
#: (a plugin's rule may still return C text, which is kept as it is).
Rule = Callable[[KernelGen, Node, Index], Expr]

#: op class -> rule. Backends copy this table and add their plugins' lowerings.
CODEGEN_RULES: dict[type, Rule] = {}


def codegen_rule(cls: type) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        CODEGEN_RULES[cls] = fn
        return fn

    return deco


F = Callable[[KernelGen, Expr], Expr]


def _softplus(g: KernelGen, x: Expr) -> Expr:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return g.call("fmax", x, g.lit(0.0)) + g.call("log1p", g.call("exp", -g.call("fabs", x)))


def _relu6(g: KernelGen, x: Expr) -> Expr:
    return g.call("fmin", g.call("fmax", x, g.lit(0.0)), g.lit(6.0))


# constants through ``g.lit`` (decimal text kept digit for digit, typed by the kernel's format)
UNARY_C: dict[str, F] = {
    "exp": lambda g, x: g.call("exp", x),
    "log": lambda g, x: g.call("log", x),
    "sqrt": lambda g, x: g.call("sqrt", x),
    "rsqrt": lambda g, x: g.call("rsqrt", x),
    "abs": lambda g, x: g.call("fabs", x),
    "neg": lambda g, x: -x,
    "relu": lambda g, x: g.call("fmax", x, g.lit(0.0)),
    "gelu": lambda g, x: (
        g.lit(0.5) * x * (g.lit(1.0) + g.call("erf", x * g.lit("0.70710678118654752")))
    ),
    "gelu_tanh": lambda g, x: (
        g.lit(0.5)
        * x
        * (
            g.lit(1.0)
            + g.call("tanh", g.lit("0.79788456080286536") * (x + g.lit("0.044715") * x * x * x))
        )
    ),
    "silu": lambda g, x: x / (g.lit(1.0) + g.call("exp", -x)),
    "sigmoid": lambda g, x: g.lit(1.0) / (g.lit(1.0) + g.call("exp", -x)),
    "tanh": lambda g, x: g.call("tanh", x),
    "square": lambda g, x: x * x,
    "recip": lambda g, x: g.lit(1.0) / x,
    "cos": lambda g, x: g.call("cos", x),
    "sin": lambda g, x: g.call("sin", x),
    "atan": lambda g, x: g.call("atan", x),
    "asinh": lambda g, x: g.call("asinh", x),
    "erf": lambda g, x: g.call("erf", x),
    "floor": lambda g, x: g.call("floor", x),
    "ceil": lambda g, x: g.call("ceil", x),
    "round": lambda g, x: g.call("rint", x),  # half to even in the default rounding mode
    "trunc": lambda g, x: g.call("trunc", x),
    # not C's sign builtins: a NaN stays NaN and a zero keeps its sign, as in the reference
    "sign": lambda g, x: ir.Select(
        x.cmp(">", g.lit(0.0)), g.lit(1.0), ir.Select(x.cmp("<", g.lit(0.0)), g.lit(-1.0), x)
    ),
    "tan": lambda g, x: g.call("tan", x),
    "asin": lambda g, x: g.call("asin", x),
    "acos": lambda g, x: g.call("acos", x),
    "sinh": lambda g, x: g.call("sinh", x),
    "cosh": lambda g, x: g.call("cosh", x),
    "atanh": lambda g, x: g.call("atanh", x),
    "acosh": lambda g, x: g.call("acosh", x),
    "expm1": lambda g, x: g.call("expm1", x),
    "log1p": lambda g, x: g.call("log1p", x),
    "selu": lambda g, x: ir.Select(
        x.cmp(">", g.lit(0.0)),
        g.lit(repr(L.SELU_SCALE)) * x,
        g.lit(repr(L.SELU_SCALE * L.SELU_ALPHA)) * g.call("expm1", x),
    ),
    "mish": lambda g, x: x * g.call("tanh", _softplus(g, x)),
    "hardswish": lambda g, x: x * _relu6(g, x + g.lit(3.0)) / g.lit(6.0),
    "hardsigmoid": lambda g, x: _relu6(g, x + g.lit(3.0)) / g.lit(6.0),
    "softsign": lambda g, x: x / (g.lit(1.0) + g.call("fabs", x)),
    "logsigmoid": lambda g, x: (
        g.call("fmin", x, g.lit(0.0)) - g.call("log1p", g.call("exp", -g.call("fabs", x)))
    ),
    "relu6": lambda g, x: _relu6(g, x),
    "stop_gradient": lambda g, x: x,
}
B = Callable[[KernelGen, Expr, Expr], Expr]
BINARY_C: dict[str, B] = {
    "add": lambda g, a, b: a + b,
    "sub": lambda g, a, b: a - b,
    "mul": lambda g, a, b: a * b,
    "div": lambda g, a, b: a / b,
    "max": lambda g, a, b: g.call("fmax", a, b),
    "min": lambda g, a, b: g.call("fmin", a, b),
    "pow": lambda g, a, b: g.call("pow", a, b),
    "floordiv": lambda g, a, b: _divmod(g, a, b)[0],
    "mod": lambda g, a, b: _divmod(g, a, b)[1],
}


def _either(a: Expr, b: Expr) -> Expr:
    return ir.Bin("||", a, b, "int32")


def _both(a: Expr, b: Expr) -> Expr:
    return ir.Bin("&&", a, b, "int32")


def _divmod(gen: KernelGen, a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """NumPy's divmod of floats, Python's semantics: ``(floor(a / b), a - b floor(a / b))``,
    the remainder with the divisor's sign (``fmod`` corrected), the quotient rounded as
    NumPy's so that ``-1 // inf`` is -1; ``b == 0``: ``a / b`` and NaN."""
    zero = gen.lit(0.0)
    m = gen.let(gen.call("fmod", a, b))
    fix = gen.let(
        _both(m.cmp("!=", zero), b.cmp("<", zero).cmp("!=", m.cmp("<", zero))), "fix", "int32"
    )
    rem = ir.Select(fix, m + b, ir.Select(m.cmp("!=", zero), m, gen.call("copysign", zero, b)))
    d = gen.let(ir.Select(fix, (a - m) / b - gen.lit(1.0), (a - m) / b))
    f = gen.let(gen.call("floor", d))
    rounded = ir.Select((d - f).cmp(">", gen.lit(0.5)), f + gen.lit(1.0), f)
    q = ir.Select(d.cmp("!=", zero), rounded, gen.call("copysign", zero, a / b))
    return ir.Select(b.cmp("==", zero), a / b, q), rem


def _int_divmod(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """Floor division and remainder of integers (Python's, NumPy's): C's truncating ``/`` and
    ``%`` corrected where the remainder's sign differs from the divisor's. A divisor of 0
    gives 0 and 0 (NumPy's; torch raises), and -1 is taken apart (``x / -1`` may trap), so no
    division traps."""
    t = a.type
    zero, one = ir.Const(0, t), ir.Const(1, t)
    none, minus = b.cmp("==", zero), b.cmp("==", ir.Const(-1, t))
    safe = ir.Select(_either(none, minus), one, b)
    q, r = a / safe, a % safe
    fix = _both(r.cmp("!=", zero), r.cmp("<", zero).cmp("!=", safe.cmp("<", zero)))
    q = ir.Select(fix, q - one, q)
    r = ir.Select(fix, r + safe, r)
    return (
        ir.Select(none, zero, ir.Select(minus, zero - a, q)),
        ir.Select(_either(none, minus), zero, r),
    )


def _comparison(c: str) -> B:
    """1.0 where ``a c b`` holds, else 0.0 (C's comparisons are IEEE's: NaN compares false,
    but unequal)."""
    return lambda g, a, b: ir.Select(a.cmp(c, b), g.lit(1.0), g.lit(0.0))


BINARY_C.update({fn: _comparison(c) for fn, c in L.COMPARISONS.items()})


def _ins(gen: KernelGen, node: Node, index: Index, k: int = 0) -> Expr:
    return gen.load(node.inputs[k], index)


def _operands(gen: KernelGen, node: Node, index: Index) -> tuple[list[Expr], str | None]:
    """The node's inputs converted as ``Op.promotions`` says (an integer where the op gives a
    float, to the arithmetic type; a bool beside integers, to the integer), and the integer
    type the node computes in (integer arithmetic, exact in C's ``long``/``int``), else
    ``None``."""
    g = gen.graph
    dts = tuple(g.values[v].dtype for v in node.inputs)
    xs = [_ins(gen, node, index, k) for k in range(len(node.inputs))]
    for k, to in enumerate(node.op.promotions(dts)):
        want = gen.cdtype if to == "float" else None if to is None else str(to)
        if want is not None and not (want == gen.cdtype and xs[k].type.startswith("float")):
            xs[k] = ir.Convert(xs[k], want)  # a bool load is already in arithmetic type
    out = g.values[node.outputs[0]].dtype
    return xs, (str(out) if out.kind == "int" else None)


def _int_binary(fn: str, a: Expr, b: Expr) -> Expr:
    """``a fn b`` of two integers of one type (``L.INTEGER_FNS``)."""
    if fn == "max":
        return ir.Select(a.cmp(">", b), a, b)
    if fn == "min":
        return ir.Select(a.cmp("<", b), a, b)
    if fn in ("floordiv", "mod"):
        return _int_divmod(a, b)[fn == "mod"]
    return {"add": a + b, "sub": a - b, "mul": a * b}[fn]


@codegen_rule(L.Unary)
def _unary(gen: KernelGen, node: Node, index: Index) -> Expr:
    (x,), whole = _operands(gen, node, index)
    fn = node.op.fn  # type: ignore[attr-defined]
    if whole is not None:  # -ids, |offsets|
        return -x if fn == "neg" else ir.Select(x.cmp("<", ir.Const(0, whole)), -x, x)
    return UNARY_C[fn](gen, x)


@codegen_rule(L.Activation)
def _activation(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Activation = node.op  # type: ignore[assignment]
    x, a = _ins(gen, node, index), gen.lit(op.alpha)
    positive = x.cmp(">", gen.lit(0.0))
    if op.fn == "leaky_relu":
        return ir.Select(positive, x, a * x)
    if op.fn == "elu":
        return ir.Select(positive, x, a * gen.call("expm1", x))
    if op.fn == "celu":
        below = gen.call("fmin", gen.lit(0.0), a * gen.call("expm1", x / a))
        return gen.call("fmax", x, gen.lit(0.0)) + below
    bx = a * x  # softplus: beta, threshold = alpha, beta
    return ir.Select(bx.cmp(">", gen.lit(op.beta)), x, _softplus(gen, bx) / a)


@codegen_rule(L.Binary)
def _binary(gen: KernelGen, node: Node, index: Index) -> Expr:
    (a, b), whole = _operands(gen, node, index)
    if whole is not None:
        return _int_binary(node.op.fn, a, b)  # type: ignore[attr-defined]
    return BINARY_C[node.op.fn](gen, a, b)  # type: ignore[attr-defined]


@codegen_rule(L.Scalar)
def _scalar(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Scalar = node.op  # type: ignore[assignment]
    (x,), whole = _operands(gen, node, index)
    if whole is not None:
        k = ir.Const(int(op.const), whole)
        return _int_binary(op.fn, k, x) if op.reverse else _int_binary(op.fn, x, k)
    c = gen.lit(op.const)
    if op.fn == "pow" and op.const == 0.5 and not op.reverse:
        # NumPy and torch take x ** 0.5 as sqrt(x): NaN at -inf, where C's pow gives +inf
        return UNARY_C["sqrt"](gen, x)
    return BINARY_C[op.fn](gen, c, x) if op.reverse else BINARY_C[op.fn](gen, x, c)


@codegen_rule(L.Scale)
def _scale(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Scale = node.op  # type: ignore[assignment]
    n = math.prod(gen.size(a) for a in op.by)
    if not isinstance(n, int):  # a run-time size: the power at run time
        size = ir.Convert(gen.ix(n), gen.cdtype)
        return _ins(gen, node, index) * gen.call("pow", size, gen.lit(op.power))
    return _ins(gen, node, index) * gen.lit(float(n) ** op.power)


def _u32(e: Expr | int) -> Expr:
    return ir.Const(e, "uint32") if isinstance(e, int) else ir.Convert(e, "uint32")


def _counter_bits(gen: KernelGen, node: Node, index: Index, k: int) -> Expr:
    """``ncd.counter_rng.bits`` of the element at ``index`` of the node's output under key
    ``k``: its position (row-major over the canonical axes, mod 2^32), two fmix32 rounds."""
    from ncd import counter_rng as R

    pos: Expr = _u32(0)
    for a in R.canonical(gen.graph.values[node.outputs[0]].axes):  # Horner, mod 2^32
        pos = pos * _u32(gen.ix(gen.size(a))) + _u32(gen.ix(index[a]))
    h = gen.var(ir.Bin("^", pos, _u32(k)), "h", "uint32")

    def shift(n: int) -> None:
        gen.w.line(ir.Assign(h, ir.Bin(">>", h, ir.Const(n, "int32")), "^="))

    for rnd in range(2):  # two fmix32 rounds
        shift(16)
        gen.w.line(ir.Assign(h, _u32(R.M1), "*="))
        shift(13)
        gen.w.line(ir.Assign(h, _u32(R.M2), "*="))
        shift(16)
        if rnd == 0:
            gen.w.line(ir.Assign(h, _u32(k), "+="))
    return h


@codegen_rule(L.Dropout)
def _dropout(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Dropout = node.op  # type: ignore[assignment]
    x = _ins(gen, node, index)
    if op.seed is None:
        return x  # inference: the identity (unseeded training dropout is not compiled)
    from ncd import counter_rng as R

    h = _counter_bits(gen, node, index, R.key(op.seed))
    keep = h.cmp(">=", _u32(R.threshold(op.p)))
    return ir.Select(keep, x * gen.lit(repr(R.scale(op.p))), gen.lit(0.0))


@codegen_rule(RND.Random)
def _random(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: RND.Random = node.op  # type: ignore[assignment]
    from ncd import counter_rng as R

    k1, k2 = RND.stream_keys(op.seed)
    h = _counter_bits(gen, node, index, k1)
    if op.dist == "bernoulli":
        return ir.Select(h.cmp("<", _u32(R.threshold(op.a))), gen.lit(1.0), gen.lit(0.0))

    def uniform(bits: Expr) -> Expr:
        top = ir.Convert(ir.Bin(">>", bits, ir.Const(8, "int32"), "uint32"), gen.cdtype)
        return (top + gen.lit(0.5)) * gen.lit(repr(2.0**-24))

    u = uniform(h)
    if op.dist == "uniform":
        return gen.lit(op.a) + gen.lit(op.b - op.a) * u
    v = uniform(_counter_bits(gen, node, index, k2))
    radius = gen.call("sqrt", gen.lit(-2.0) * gen.call("log", u))
    turn = gen.call("cos", gen.lit(repr(2.0 * math.pi)) * v)
    return gen.lit(op.a) + gen.lit(op.b) * radius * turn


@codegen_rule(L.Cast)
def _cast(gen: KernelGen, node: Node, index: Index) -> Expr:
    # Floats and bools compute in the arithmetic type; a format is how a wire is stored, so a
    # cast between them is the identity here and the rounding happens where the value is
    # stored. Integers and bools are made explicitly, as the reference makes them.
    op: L.Cast = node.op  # type: ignore[assignment]
    x = _ins(gen, node, index)
    source = to_dtype(gen.graph.values[node.inputs[0]].dtype)
    if op.to.kind == "bool":
        return ir.Select(x.cmp("!=", ir.Const(0, x.type)), gen.lit(1.0), gen.lit(0.0))
    if op.to.kind == "int" and source.kind != "int":
        return _truncate(gen, x, op.to)
    return x


def _truncate(gen: KernelGen, x: Expr, to: DType) -> Expr:
    """``ncd.reference.truncate``: toward zero, saturating at the range of ``to``, NaN as 0."""
    t = str(to)
    top = 2.0 ** (8 * to.itemsize - 1)  # the first value past the range, exact in any float
    most = ir.Const(2 ** (8 * to.itemsize - 1) - 1, t)
    least = ir.Const(-(2 ** (8 * to.itemsize - 1)) + 1, t) - ir.Const(1, t)
    inside = ir.Select(x.cmp("<", gen.lit(-top)), least, ir.Convert(x, t))
    capped = ir.Select(x.cmp(">=", gen.lit(top)), most, inside)
    return ir.Select(x.cmp("!=", x), ir.Const(0, t), capped)


@codegen_rule(L.CausalMask)
def _causal(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.CausalMask = node.op  # type: ignore[assignment]
    offset = gen.ix(gen.size(op.x) - gen.size(op.q))
    fill = gen.lit(-math.inf if op.fill == "-inf" else 0.0)
    x = _ins(gen, node, index)
    return ir.Select(gen.ix(index[op.x]).cmp("<=", gen.ix(index[op.q]) + offset), x, fill)


def _reduce_loops(
    gen: KernelGen,
    axes: tuple[Axis, ...],
    index: Index,
    body: Callable[[dict[Axis, Expr | str]], None],
) -> None:
    def go(env: dict[Axis, Expr | str], rest: tuple[Axis, ...]) -> None:
        if not rest:
            body(env)
            return
        with gen.loop(rest[0]) as i:
            go({**env, rest[0]: i}, rest[1:])

    go(dict(index), axes)


@codegen_rule(L.Reduce)
def _reduce(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Reduce = node.op  # type: ignore[assignment]
    if op.fn == "logsumexp":
        return _logsumexp(gen, node, index)
    kind = "sum" if op.fn == "mean" else op.fn
    acc = gen.accumulate(op.axes_, index, kind, lambda env: _ins(gen, node, env), "red")
    if op.fn == "mean":
        n = math.prod(gen.size(a) for a in op.axes_)
        return acc * gen.recip(n)
    return acc


def finite_shift(gen: KernelGen, m: Expr) -> Expr:
    """``m`` where it is finite, else 0: a logsumexp's shift (a row of -inf then sums
    exp(-inf) = 0, one holding +inf sums inf, a NaN stays NaN; as the reference)."""
    return gen.let(ir.Select(gen.call("fabs", m).cmp("<", gen.lit(math.inf)), m, gen.lit(0.0)))


def _logsumexp(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Reduce = node.op  # type: ignore[assignment]

    def term(env: Index) -> Expr:
        return _ins(gen, node, env)

    m = finite_shift(gen, gen.accumulate(op.axes_, index, "max", term, "mx"))
    total = gen.accumulate(op.axes_, index, "sum", lambda env: gen.call("exp", term(env) - m))
    return gen.let(m + gen.call("log", total), "lse")


def _product(gen: KernelGen, factors: list[Expr]) -> Expr:
    out = factors[0] if factors else gen.lit(1.0)
    for f in factors[1:]:
        out = out * f
    return out


@codegen_rule(L.Einsum)
def _einsum(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Einsum = node.op  # type: ignore[assignment]
    if not op.contracted:
        return _product(gen, [_ins(gen, node, index, k) for k in range(len(op.inputs))])
    acc = gen.var(gen.lit(0.0), "dot")

    def body(env: dict[Axis, Expr | str]) -> None:
        prod = _product(gen, [_ins(gen, node, env, k) for k in range(len(op.inputs))])
        gen.w.line(ir.Assign(acc, prod, "+="))

    _reduce_loops(gen, op.contracted, index, body)
    return acc


def linear_weight(gen: KernelGen, node: Node, out: Index, inp: Index) -> Expr:
    """The weight ``(*out_axes, *in_axes)`` of a Linear at output index ``out`` and input index
    ``inp``, by position: in ``linear("d -> d")`` both halves are the axis ``d``, with different
    indices (the output's and the contracted one)."""
    op: L.Linear = node.op  # type: ignore[assignment]
    exprs = [out[a] for a in op.out_axes] + [inp[a] for a in op.in_axes]
    return gen.param_at(node, "weight", exprs)


@codegen_rule(L.Linear)
def _linear(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Linear = node.op  # type: ignore[assignment]
    acc = gen.var(gen.lit(0.0), "dot")

    def body(env: dict[Axis, Expr | str]) -> None:
        # ``env`` rebinds the contracted axes; an output axis that is also contracted keeps
        # its output index in ``index`` (the weight's first half)
        term = _ins(gen, node, env) * linear_weight(gen, node, index, env)
        gen.w.line(ir.Assign(acc, term, "+="))

    _reduce_loops(gen, op.in_axes, index, body)
    return acc + gen.param(node, "bias", index) if op.bias else acc


def _row_key(node: Node, index: Index, core: tuple[Axis, ...]) -> tuple[Any, ...]:
    return (id(node), tuple((a.uid, e) for a, e in index.items() if a not in core))


def _outer(index: Index, core: tuple[Axis, ...]) -> list[Expr | str]:
    return [e for a, e in index.items() if a not in core]


@codegen_rule(L.Softmax)
def _softmax(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Softmax = node.op  # type: ignore[assignment]
    core = (op.axis,)

    out = _scratch(gen, node)

    def weight(env: Index, m: Expr) -> Expr:
        e = gen.call("exp", _ins(gen, node, env) - m)
        if out is None:
            return e
        e = gen.let(e, "e")  # kept in the output, so the final pass needs no second exp
        gen.store(out, env, e)
        return e

    def stats() -> tuple[Expr, Expr]:
        # the maximum may drop a NaN: exp(NaN - m) makes the row NaN (as the reference)
        m = gen.accumulate(core, index, "max", lambda env: _ins(gen, node, env), "mx", nan=False)
        s = gen.accumulate(core, index, "sum", lambda env: weight(env, m), "den")
        return m, gen.let(gen.lit(1.0) / s, "inv")

    m, inv = gen.shared(("softmax", *_row_key(node, index, core)), _outer(index, core), stats)
    if out is not None:
        return gen.read(out, index) * inv
    return gen.call("exp", _ins(gen, node, index) - m) * inv


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
def _l2norm(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.L2Norm = node.op  # type: ignore[assignment]
    core = (op.axis,)

    def square(env: Index) -> Expr:
        x = _ins(gen, node, env)
        return x * x

    def stats() -> Expr:
        s = gen.accumulate(core, index, "sum", square, "ss")
        return gen.let(gen.call("rsqrt", s + gen.lit(op.eps)), "rn")

    r = gen.shared(("l2", *_row_key(node, index, core)), _outer(index, core), stats)
    return _ins(gen, node, index) * r


def _moments(
    gen: KernelGen,
    node: Node,
    index: Index,
    core: tuple[Axis, ...],
    eps: float,
    centred: bool,
) -> tuple[Expr, Expr]:
    n = math.prod(gen.size(a) for a in core)
    mu = gen.lit(0.0)
    if centred:
        s = gen.accumulate(core, index, "sum", lambda env: _ins(gen, node, env), "sum")
        mu = gen.let(s * gen.recip(n), "mu")

    def sq(env: Index) -> Expr:
        x = _ins(gen, node, env)
        d = gen.let(x - mu, "d") if centred else x
        return d * d

    q = gen.accumulate(core, index, "sum", sq, "sq")
    return mu, gen.let(gen.call("rsqrt", q * gen.recip(n) + gen.lit(eps)), "rstd")


@codegen_rule(L.LayerNorm)
def _layernorm(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.LayerNorm = node.op  # type: ignore[assignment]
    core = op.axes_
    mu, r = gen.shared(
        ("ln", *_row_key(node, index, core)),
        _outer(index, core),
        lambda: _moments(gen, node, index, core, op.eps, True),
    )
    y = (_ins(gen, node, index) - mu) * r
    if op.affine:
        y = y * gen.param(node, "weight", index)
        if op.bias:
            y = y + gen.param(node, "bias", index)
    return y


@codegen_rule(L.RMSNorm)
def _rmsnorm(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.RMSNorm = node.op  # type: ignore[assignment]
    core = op.axes_
    _, r = gen.shared(
        ("rms", *_row_key(node, index, core)),
        _outer(index, core),
        lambda: _moments(gen, node, index, core, op.eps, False),
    )
    y = _ins(gen, node, index) * r
    return y * gen.param(node, "weight", index) if op.affine else y


@codegen_rule(L.Embedding)
def _embedding(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.Embedding = node.op  # type: ignore[assignment]
    # clamped into the table: the host refuses ids out of range before launch
    # (IndexRangeError); inside the kernel no id, whatever its value, reads outside the table
    last = gen.ix(gen.size(op.vocab) - 1)
    raw = gen.let(_ins(gen, node, index), "id", str(gen.graph.values[node.inputs[0]].dtype))
    ids = gen.let(ir.Convert(_clamp(raw, 0, last), gen.ityp), "tok", gen.ityp)
    return gen.param_at(node, "weight", [ids, *(index[a] for a in op.out_axes)])


@codegen_rule(L.View)
def _view(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: L.View = node.op  # type: ignore[assignment]
    elem: dict[Axis, Expr] = {}
    for axis, parts in zip(op.out_axes, op.out_parts, strict=True):
        step: Size = 1
        whole = gen.ix(index[axis])
        for p in reversed(parts):
            n = gen.size(p)
            e = whole if isinstance(step, int) and step == 1 else whole / gen.ix(step)
            elem[p] = e if len(parts) == 1 else e % gen.ix(n)
            step *= n
    env: dict[Axis, Expr | str] = {a: e for a, e in index.items() if a not in op.out_axes}
    for axis, parts in zip(op.in_axes, op.in_parts, strict=True):
        flat: Expr | None = None
        step = 1
        for p in reversed(parts):
            t = elem[p] if isinstance(step, int) and step == 1 else elem[p] * gen.ix(step)
            flat = t if flat is None else t + flat
            step *= gen.size(p)
        assert flat is not None
        env[axis] = flat
    return _ins(gen, node, env)


@codegen_rule(L.Constant)
def _constant(gen: KernelGen, node: Node, index: Index) -> Expr:
    return gen.lit(node.op.value)  # type: ignore[attr-defined]


@codegen_rule(L.Learned)
def _learned(gen: KernelGen, node: Node, index: Index) -> Expr:
    return gen.param(node, "weight", index)


@codegen_rule(L.Parameter)
def _parameter(gen: KernelGen, node: Node, index: Index) -> Expr:
    return gen.param(node, node.op.param, index)  # type: ignore[attr-defined]


@codegen_rule(X.Where)
def _where(gen: KernelGen, node: Node, index: Index) -> Expr:
    (c, x, y), _ = _operands(gen, node, index)
    # NaN != 0 holds in C as in NumPy: a NaN condition selects x
    return ir.Select(c.cmp("!=", ir.Const(0, "int32")), x, y)


def _clamp(i: Expr, low: Expr | int, high: Expr | int) -> Expr:
    """``i`` clamped into ``[low, high]``: a select's unselected operand still reads in bounds."""
    lo, hi = ir.as_expr(low, i.type), ir.as_expr(high, i.type)
    return ir.Select(i.cmp("<", lo), lo, ir.Select(i.cmp(">", hi), hi, i))


@codegen_rule(X.Gather)
def _gather(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: X.Gather = node.op  # type: ignore[assignment]
    # clamped into the table as an embedding's ids are: the host refuses out-of-range ids of a
    # model input before launch; a computed id, whatever its value, reads inside the table
    last = gen.ix(gen.size(op.axis) - 1)
    raw = gen.let(_ins(gen, node, index, 0), "id", str(gen.graph.values[node.inputs[0]].dtype))
    at = gen.let(ir.Convert(_clamp(raw, 0, last), gen.ityp), "at", gen.ityp)
    return _ins(gen, node, {**index, op.axis: at}, 1)


@codegen_rule(X.Arange)
def _arange(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: X.Arange = node.op  # type: ignore[assignment]
    i = ir.Convert(gen.ix(index[op.axis]), gen.cdtype)
    y = i if op.step == 1.0 else i * gen.lit(op.step)
    return y if op.start == 0.0 else y + gen.lit(op.start)


@codegen_rule(X.Slice)
def _slice(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: X.Slice = node.op  # type: ignore[assignment]
    env: dict[Axis, Expr | str] = {a: e for a, e in index.items() if a != op.out}
    if op.from_end:  # n - start - m, n possibly a run-time size
        first = gen.ix(gen.size(op.axis)) - gen.ix(gen.size(op.out))
        env[op.axis] = gen.ix(index[op.out]) + (first - op.start if op.start else first)
    else:
        env[op.axis] = gen.ix(index[op.out]) + op.start if op.start else index[op.out]
    return _ins(gen, node, env)


@codegen_rule(X.Concat)
def _concat(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: X.Concat = node.op  # type: ignore[assignment]
    i = gen.let(gen.ix(index[op.out]), "cat", gen.ityp)
    rest = {a: e for a, e in index.items() if a != op.out}
    parts: list[tuple[Expr, Expr]] = []
    start: Expr = gen.ix(0)
    for k, a in enumerate(op.axes_):
        n = gen.ix(gen.size(a))
        first = isinstance(start, ir.Const) and start.value == 0
        local = i if first else i - start
        value = _ins(gen, node, {**rest, a: _clamp(local, 0, n - 1)}, k)
        parts.append((i.cmp("<", n if first else start + n), value))
        start = n if first else start + n
    expr = parts[-1][1]
    for cond, value in reversed(parts[:-1]):
        expr = ir.Select(cond, value, expr)
    return expr


@codegen_rule(X.Rotary)
def _rotary(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: X.Rotary = node.op  # type: ignore[assignment]
    d = gen.size(op.d)
    h = gen.ix(d // 2) if isinstance(d, int) else gen.ix(d) / 2
    j = gen.let(gen.ix(index[op.d]), "j", gen.ityp)
    low = gen.let(j.cmp("<", h), "low", "int32")
    partner = gen.let(ir.Select(low, j + h, j - h), "pair", gen.ityp)
    position = ir.Convert(gen.ix(index[op.seq]), gen.cdtype)
    if op.freqs:  # a scaled RoPE's table, one frequency per pair, made once per work-item
        freq: Expr = ir.Elem(_frequency_table(gen, op.freqs), ir.Select(low, j, j - h), gen.cdtype)
    else:
        # f_j = base ** (-2 (j mod h) / |d|) = exp((j mod h) * (-2 ln(base) / |d|))
        step = (
            gen.lit(-2.0 * math.log(op.base) / d)
            if isinstance(d, int)
            else gen.lit(-2.0 * math.log(op.base)) / ir.Convert(gen.ix(d), gen.cdtype)
        )
        freq = gen.call("exp", ir.Convert(ir.Select(low, j, j - h), gen.cdtype) * step)
    angle = gen.let(position * freq, "angle")
    x = _ins(gen, node, index)
    other = _ins(gen, node, {**index, op.d: partner})
    turned = gen.let(ir.Select(low, -other, other), "turn")
    # the inverse rotation: minus the angles
    sin = turned * gen.call("sin", angle)
    cos = x * gen.call("cos", angle)
    out = cos - sin if op.inverse else cos + sin
    return out if op.scale == 1.0 else out * gen.lit(op.scale)


def _frequency_table(gen: KernelGen, freqs: tuple[float, ...]) -> str:
    """A local array holding ``freqs`` (as literals), declared once at the kernel's top."""

    def make() -> str:
        name = gen.unique("freqs", "t")
        gen.w.line(ir.Array(name, gen.cdtype, len(freqs)))
        for k, f in enumerate(freqs):
            gen.w.line(ir.Assign(ir.Elem(name, ir.Const(k, "int32"), gen.cdtype), gen.lit(f)))
        return name

    return gen.shared(("rotary_freqs", freqs), [], make)


@codegen_rule(W.Window)
def _window(gen: KernelGen, node: Node, index: Index) -> Expr:
    # read in place: element (o, j) is x[o*stride + j*dilation - padding]; no im2col array
    op: W.Window = node.op  # type: ignore[assignment]
    rest = {a: e for a, e in index.items() if a not in (op.out, op.k)}
    o = gen.ix(index[op.out]) if op.stride == 1 else gen.ix(index[op.out]) * op.stride
    kk = gen.ix(index[op.k])
    j = gen.ix(gen.size(op.k)) - 1 - kk if op.reverse else kk
    j = j if op.dilation == 1 else j * op.dilation
    if not op.padding and not op.extra and op.upsample == 1:
        # the size rule keeps every tap inside [0, n): |out| was derived so
        return _ins(gen, node, {**rest, op.axis: o + j})
    # the tap stays an expression of loop indices (not a let): a value read at it is hoisted
    # by the loop indices its index names
    i = o + j - op.padding
    n = gen.ix(gen.size(op.axis))
    ok = i.cmp(">=", 0)
    if op.upsample > 1:  # on the input's lattice: every upsample-th position is an element
        ok = ir.Bin("&&", ok, (i % op.upsample).cmp("==", 0), "int32")
        i = i / op.upsample
    x = _ins(gen, node, {**rest, op.axis: _clamp(i, 0, n - 1)})
    out = gen.graph.values[node.outputs[0]].dtype
    fill = ir.Const(int(op.fill), str(out)) if out.kind == "int" else gen.lit(op.fill)
    return ir.Select(ir.Bin("&&", ok, i.cmp("<", n), "int32"), x, fill)


@codegen_rule(BN.BatchNorm)
def _batch_norm(gen: KernelGen, node: Node, index: Index) -> Expr:
    op: BN.BatchNorm = node.op  # type: ignore[assignment]
    BN.channel_dim(op, tuple(index))  # the channel axis is one of the value's
    x = _ins(gen, node, index)
    mean, var = gen.param(node, "running_mean", index), gen.param(node, "running_var", index)
    y = (x - mean) * gen.call("rsqrt", var + gen.lit(op.eps))
    if op.affine:
        y = y * gen.param(node, "weight", index) + gen.param(node, "bias", index)
    return y
