"""The NumPy reference interpreter: the ground truth every backend is tested against.

Each op's rule works on core axes at the end of its arrays (like a gufunc): the interpreter
moves each input's loop axes to the front, in the node's loop order, with size-1 dimensions
where an input lacks one, so NumPy broadcasting performs the lift.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from ncd.axis import Axis, dtype_bytes
from ncd.dtypes import DType, float64
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DTypeError, IndexRangeError, ParameterError, SizeError
from ncd.graph import Graph, Node
from ncd.op import Op, registrar
from ncd.primitives import library as L
from ncd.sizes import check_bytes, memory_limit
from ncd.walk import forward, rule_for

__all__ = [
    "INDEX_RULES",
    "REFERENCE_RULES",
    "Casting",
    "Context",
    "check_dtype",
    "check_indices",
    "check_memory",
    "evaluate",
    "index_rule",
    "prepare",
    "reference_rule",
    "run",
    "to_wire",
]

Array = np.ndarray
Rule = Callable[[Any, list[Array], dict[str, Array], "Context"], list[Array]]

#: op class -> rule(op, inputs, params, ctx) -> outputs. Plugins add rules for their ops.
REFERENCE_RULES: dict[type[Op], Rule] = {}


#: ``@reference_rule(OpClass)`` registers a rule in ``REFERENCE_RULES``.
reference_rule = registrar(REFERENCE_RULES)


@attrs.frozen
class Context:
    """What a rule may need beyond its arrays: sizes, training mode, a seeded generator."""

    graph: Graph
    training: bool = False
    rng: np.random.Generator = attrs.field(factory=lambda: np.random.default_rng(0))
    #: the loop axes of the node being run (its arrays' layout): seeded dropout's positions
    loop: tuple[Axis, ...] = ()

    def size(self, axis: Axis) -> int:
        s = self.graph.size(axis)
        if s is None:
            raise SizeError(f"{axis.describe()} has no size")
        return s


_erf = np.vectorize(math.erf, otypes=[np.float64])

UNARY: dict[str, Callable[[Array], Array]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype),
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "square": np.square,
    "recip": lambda x: 1.0 / x,
    "cos": np.cos,
    "sin": np.sin,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "erf": lambda x: _erf(x).astype(x.dtype),
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even, as torch.round
    "trunc": np.trunc,
    "sign": np.sign,  # NaN stays NaN (torch.sign gives 0; the export keeps the NaN)
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "atanh": np.arctanh,
    "acosh": np.arccosh,
    "expm1": np.expm1,
    "log1p": np.log1p,
    "selu": lambda x: np.where(x > 0, L.SELU_SCALE * x, L.SELU_SCALE * L.SELU_ALPHA * np.expm1(x)),
    "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "hardsigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "softsign": lambda x: x / (1 + np.abs(x)),
    "logsigmoid": lambda x: np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x))),
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "stop_gradient": lambda x: x,
}


def _activation_fn(op: L.Activation, x: Array) -> Array:
    a = op.alpha
    if op.fn == "leaky_relu":
        y = np.where(x > 0, x, a * x)
    elif op.fn == "elu":
        y = np.where(x > 0, x, a * np.expm1(x))
    elif op.fn == "celu":
        y = np.maximum(x, 0) + np.minimum(0, a * np.expm1(x / a))
    else:  # softplus: beta, threshold = alpha, beta
        bx = a * x
        y = np.where(bx > op.beta, x, np.logaddexp(0, bx) / a)
    return np.asarray(y)


def _quietly(fn: Callable[[Any, Any], Array], a: Any, b: Any) -> Array:
    """Python's ``//`` and ``%`` (NumPy's): an integer divided by 0 gives 0 (torch raises), a
    float ``x // 0`` is ``x / 0`` and ``x % 0`` NaN; without NumPy's warnings for them."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return fn(a, b)


BINARY: dict[str, Callable[[Any, Any], Array]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "floordiv": lambda a, b: _quietly(np.floor_divide, a, b),
    "mod": lambda a, b: _quietly(np.remainder, a, b),
}


# comparisons: bool arrays (IEEE: NaN compares false, but unequal)
BINARY.update(
    lt=np.less, le=np.less_equal, gt=np.greater, ge=np.greater_equal, eq=np.equal, ne=np.not_equal
)
REDUCE: dict[str, Callable[..., Array]] = {
    "sum": np.sum,
    "max": np.max,
    "min": np.min,
    "mean": np.mean,
    "prod": np.prod,
    "logsumexp": lambda x, axis: _logsumexp(x, axis),  # (defined below)
}


def _logsumexp(x: Array, axis: tuple[int, ...]) -> Array:
    """``log sum exp`` with the maximum shifted out; a row of -inf gives -inf, one holding
    +inf gives inf and NaN propagates (torch's ``logsumexp``)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if not x.size:  # an empty sum: log 0
            return np.asarray(np.log(np.sum(np.exp(x), axis=axis)), dtype=x.dtype)
        m = np.max(x, axis=axis, keepdims=True)
        shift = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
        total = np.sum(np.exp(x - shift), axis=axis)
        return np.asarray(np.log(total) + np.squeeze(shift, axis=axis), dtype=x.dtype)


def _trailing(n: int) -> tuple[int, ...]:
    return tuple(range(-n, 0))


@reference_rule(L.Einsum)
def _einsum(op: L.Einsum, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    letters: dict[Axis, str] = {}
    for a in (*[a for g in op.inputs for a in g], *op.output):
        letters.setdefault(
            a,
            chr(ord("a") + len(letters))
            if len(letters) < 26
            else chr(ord("A") + len(letters) - 26),
        )
    lhs = ",".join("..." + "".join(letters[a] for a in g) for g in op.inputs)
    rhs = "..." + "".join(letters[a] for a in op.output)
    return [np.einsum(f"{lhs}->{rhs}", *xs, optimize=len(xs) > 2)]


@reference_rule(L.Linear)
def _linear(op: L.Linear, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    k = len(op.in_axes)
    w = p["weight"]
    y = np.tensordot(xs[0], w, axes=(_trailing(k), _trailing(k)))
    return [y + p["bias"] if op.bias else y]


@reference_rule(L.Unary)
def _unary(op: L.Unary, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    return [UNARY[op.fn](xs[0])]


@reference_rule(L.Activation)
def _activation(
    op: L.Activation, xs: list[Array], p: dict[str, Array], ctx: Context
) -> list[Array]:
    x = xs[0]
    return [_activation_fn(op, x).astype(x.dtype, copy=False)]


@reference_rule(L.Binary)
def _binary(op: L.Binary, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    return [BINARY[op.fn](xs[0], xs[1])]


@reference_rule(L.Scalar)
def _scalar(op: L.Scalar, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    fn = BINARY[op.fn]
    c: float | int = op.const
    if xs[0].dtype.kind in "iu" and op.whole is not None:
        c = op.whole  # integer arithmetic stays exact (NumPy 2 keeps the array's type)
    return [fn(c, xs[0]) if op.reverse else fn(xs[0], c)]


@reference_rule(L.Scale)
def _scale(op: L.Scale, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    factor = float(math.prod(ctx.size(a) for a in op.by)) ** op.power
    return [xs[0] * factor]


@reference_rule(L.Reduce)
def _reduce(op: L.Reduce, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    return [REDUCE[op.fn](xs[0], axis=_trailing(len(op.axes_)))]


@reference_rule(L.Softmax)
def _softmax(op: L.Softmax, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return [e / np.sum(e, axis=-1, keepdims=True)]


@reference_rule(L.L2Norm)
def _l2norm(op: L.L2Norm, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    return [x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + op.eps)]


@reference_rule(L.LayerNorm)
def _layernorm(op: L.LayerNorm, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    ax = _trailing(len(op.axes_))
    mu = np.mean(x, axis=ax, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=ax, keepdims=True)
    y = (x - mu) / np.sqrt(var + op.eps)
    if op.affine:
        y = y * p["weight"]
        if op.bias:
            y = y + p["bias"]
    return [y]


@reference_rule(L.RMSNorm)
def _rmsnorm(op: L.RMSNorm, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    y = x / np.sqrt(np.mean(x * x, axis=_trailing(len(op.axes_)), keepdims=True) + op.eps)
    return [y * p["weight"] if op.affine else y]


@reference_rule(L.CausalMask)
def _causal(op: L.CausalMask, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    nq, nx = x.shape[-2], x.shape[-1]
    keep = np.arange(nx)[None, :] <= np.arange(nq)[:, None] + (nx - nq)
    fill = -np.inf if op.fill == "-inf" else 0.0
    return [np.where(keep, x, np.array(fill, dtype=x.dtype))]


@reference_rule(L.Embedding)
def _embedding(op: L.Embedding, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    ids = xs[0]
    w = p["weight"]
    check_dtype(ids, "int64", f"{op.label}: the token ids", "same_kind")
    check_indices(op, op.vocab, w.shape[0], ids, "token ids")
    return [w[ids]]


@reference_rule(L.Dropout)
def _dropout(op: L.Dropout, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    if op.seed is not None:  # counter-based: a function of the position, as in every backend
        from ncd import counter_rng

        sizes = {a: ctx.size(a) for a in ctx.loop}
        keep = counter_rng.keep_mask(ctx.loop, sizes, op.p, op.seed)
        return [np.where(keep, x * np.asarray(counter_rng.scale(op.p), x.dtype), 0).astype(x.dtype)]
    if not ctx.training or op.p == 0.0:
        return [x]
    keep = ctx.rng.random(x.shape) >= op.p
    return [np.where(keep, x / (1.0 - op.p), 0.0).astype(x.dtype)]


@reference_rule(L.View)
def _view(op: L.View, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    lead = x.shape[: x.ndim - len(op.in_axes)]
    elems = op.elementary
    y = x.reshape(*lead, *(ctx.size(a) for a in elems))
    order = [a for g in op.out_parts for a in g]
    perm = [*range(len(lead)), *(len(lead) + elems.index(a) for a in order)]
    y = y.transpose(perm)
    return [y.reshape(*lead, *(ctx.size(a) for a in op.out_axes))]


@reference_rule(L.Constant)
def _constant(op: L.Constant, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    shape = tuple(ctx.size(a) for a in op.axes_)
    return [np.full(shape, op.value, dtype=op.format.accumulate.numpy)]


@reference_rule(L.Cast)
def _cast(op: L.Cast, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    x = xs[0]
    if op.to.kind == "int" and x.dtype.kind == "f":
        return [truncate(x, op.to)]
    with np.errstate(over="ignore", invalid="ignore"):
        return [x.astype(op.to.numpy)]


def truncate(x: Array, to: DType) -> Array:
    """Floats as the integer format ``to``: truncated toward zero, saturating at its range, NaN
    giving 0 (``ops.cast``'s definition; every backend computes the same)."""
    wide = np.asarray(x, dtype=np.float64)
    info = np.iinfo(to.numpy)
    top = float(2 ** (8 * to.itemsize - 1))  # exact in float64: the first value past the range
    over, under = wide >= top, wide < -top
    inside = np.where(np.isnan(wide) | over | under, 0.0, wide)
    y = np.trunc(inside).astype(to.numpy)
    return np.where(over, info.max, np.where(under, info.min, y)).astype(to.numpy)


@reference_rule(L.Learned)
def _learned(op: L.Learned, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    return [p["weight"]]


@reference_rule(L.Parameter)
def _parameter(op: L.Parameter, xs: list[Array], p: dict[str, Array], ctx: Context) -> list[Array]:
    return [p[op.param]]


def _arrange(x: Array, axes: Sequence[Axis], loop: Sequence[Axis], core: Sequence[Axis]) -> Array:
    """Transpose ``x`` to (loop..., core...) with size-1 dims for loop axes it lacks."""
    pos = {a: i for i, a in enumerate(axes)}
    present = [a for a in loop if a in pos]
    perm = [pos[a] for a in present] + [pos[a] for a in core]
    if perm != list(range(len(perm))):
        x = x.transpose(perm)
    if len(present) != len(loop):
        shape = [x.shape[present.index(a)] if a in pos else 1 for a in loop]
        x = x.reshape(*shape, *x.shape[len(present) :])
    return x


def check_memory(graph: Graph, limit: int | None = None) -> None:
    """Raise ``SizeError`` naming the first value (its axes and bytes) too large for the host,
    before anything is allocated."""
    limit = memory_limit() if limit is None else limit
    for v, t in enumerate(graph.values):
        where = f"value {v} {t}"
        producer = graph.producers.get(v)
        if producer is not None:
            where += f" (the output of {graph.nodes[producer].op.label})"
        check_bytes(where, t.axes, graph.shape(v), math.ceil(dtype_bytes(t.dtype)), limit)


def evaluate(
    graph: Graph,
    inputs: Sequence[Array],
    params: Mapping[str, Array],
    *,
    training: bool = False,
    seed: int = 0,
    rules: Mapping[type[Op], Rule] | None = None,
    node_hook: Callable[[int, Node, list[Array], dict[str, Array], Context], list[Array] | None]
    | None = None,
) -> list[Array]:
    """Run a fully sized graph on arrays laid out as its input types; returns its outputs.

    ``node_hook`` lets another backend take over some nodes (return ``None`` to decline).
    """
    table = REFERENCE_RULES if rules is None else rules
    check_memory(graph)
    ctx = Context(graph, training, np.random.default_rng(seed))

    def step(i: int, node: Node, arrays: list[Array]) -> list[Array]:
        xs = [
            _upcast(_arrange(x, graph.values[v].axes, node.loop, core), graph.values[v].dtype)
            for x, v, core in zip(arrays, node.inputs, node.core_in, strict=True)
        ]
        _promote(node, xs, tuple(graph.values[v].dtype for v in node.inputs))
        ps = {p.name: _upcast(params[name], p.dtype) for name, p in node.params()}
        outs = node_hook(i, node, xs, ps, ctx) if node_hook is not None else None
        if outs is None:
            rule = rule_for(table, node.op)
            if rule is None:
                raise NotImplementedError(f"no reference rule for op kind {node.op.kind!r}")
            outs = rule(node.op, xs, ps, attrs.evolve(ctx, loop=node.loop) if node.loop else ctx)
        ys = []
        for v, y in zip(node.outputs, outs, strict=True):
            shape = graph.shape(v)
            y = _round(np.asarray(y), graph.values[v].dtype)
            ys.append(y if y.shape == shape else np.broadcast_to(y, shape))
        return ys

    return forward(graph, inputs, step)


def _promote(node: Node, xs: list[Array], dtypes: tuple[str, ...]) -> None:
    """Each input as ``Op.promotions`` says, the same in every backend: a bool where the op
    takes a float as 0.0 / 1.0, an integer where it gives a float as that float (in float64
    when another input is, else float32), a bool beside integers as 0 / 1 of the integer."""
    floats = [x.dtype for x in xs if x.dtype.kind == "f"]
    wide = np.float64 if any(d == np.float64 for d in floats) else np.float32
    for k, to in enumerate(node.op.promotions(dtypes)):
        if to is not None:
            xs[k] = xs[k].astype(wide if to == "float" else to_dtype(to).numpy)


def _upcast(x: Array, fmt: DType) -> Array:
    """An array of a reduced format (bf16, fp16, fp8) in its accumulation type: every op
    computes there, as hardware does."""
    if fmt.reduced and x.dtype != fmt.accumulate.numpy:
        return x.astype(fmt.accumulate.numpy)
    return x


def _round(y: Array, fmt: DType) -> Array:
    """An op's result in its wire's format: reduced formats round to nearest even (ml_dtypes;
    overflow gives inf, or NaN where the format has no inf); a float64 wire holds float64. A
    float32 wire keeps what the op computed, so float64 arrays fed to a float32 model still run
    in float64 (the ground truth of ``ncd.testing``)."""
    if fmt.reduced:
        if y.dtype != fmt.numpy:
            with np.errstate(over="ignore", invalid="ignore"):
                return y.astype(fmt.numpy)
        return y
    if fmt == float64 and y.dtype != fmt.numpy and y.dtype.kind in "fiub":
        return y.astype(np.float64)
    if fmt.kind == "int" and y.dtype != fmt.numpy:  # NumPy's int32 * int32 stays int32
        return y.astype(fmt.numpy)
    return y


Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]

#: op class -> fn(op) -> ((input slot, table axis), ...): the inputs an op reads as indices into
#: an axis of one of its tables. ``prepare`` range-checks each such input that is a graph input
#: before anything runs; a gather op registers its rule here the same way.
INDEX_RULES: dict[type[Op], Callable[[Any], tuple[tuple[int, Axis], ...]]] = {}

#: ``@index_rule(OpClass)`` registers a rule in ``INDEX_RULES``.
index_rule = registrar(INDEX_RULES)


@index_rule(L.Embedding)
def _embedding_ids(op: L.Embedding) -> tuple[tuple[int, Axis], ...]:
    return ((0, op.vocab),)


#: numpy kinds no wire takes whatever the casting rule: complex, object, bytes, str, void,
#: datetime, timedelta.
_NEVER_KINDS = {
    "c": "complex",
    "O": "object",
    "S": "bytes",
    "U": "str",
    "V": "void",
    "M": "datetime",
    "m": "timedelta",
}


def _format_of(dt: np.dtype[Any]) -> DType | None:
    """The ncd format of an array's dtype, or ``None`` (ml_dtypes' bfloat16 and float8 have NumPy
    kind "V", so the kind alone cannot tell them from void data)."""
    try:
        return to_dtype(dt)
    except DTypeError:
        return None


def check_dtype(array: Array, wire: str, what: str, cast: Casting) -> None:
    """Raise ``DTypeError`` unless ``array`` may feed a wire of dtype ``wire`` under ``cast``.

    Complex, object, string and void arrays, and floats fed to integer wires, are refused
    whatever ``cast`` says (they would lose their imaginary part, become NaN, or be truncated).
    Otherwise ``numpy.can_cast`` decides, with ml_dtypes' rules for bfloat16 and float8: a
    bfloat16 array fits a float32 wire even under ``"safe"``, while a float32 array on a
    bfloat16 wire is refused under ``"safe"`` and rounded (``to_wire``) under ``"same_kind"``.
    """
    dt = array.dtype
    fmt = to_dtype(wire)
    target = fmt.numpy
    src = _format_of(dt)
    integral = fmt.kind != "float"
    if src is None and dt.kind in _NEVER_KINDS:
        reason = f"{_NEVER_KINDS[dt.kind]} data has no {wire} value"
    elif integral and (dt.kind == "f" or (src is not None and src.kind == "float")):
        reason = "float ids would be truncated"
    elif src is None and dt.kind not in "fiub":
        reason = f"{dt} is not numeric"
    elif not np.can_cast(dt, target, casting=cast):
        reason = f"casting {dt} to {wire} is not {cast!r}"
    else:
        return
    fix = (
        "pass integer ids, e.g. np.asarray(ids).astype(np.int64) after checking they are whole"
        if integral
        else f"convert it with np.asarray(x, dtype=np.{wire})"
        if fmt.numpy.kind == "f" and fmt.numpy.type.__module__ == "numpy"
        else f"convert it with x.astype(ml_dtypes.{fmt.numpy.name}) (rounds to nearest even)"
    )
    raise DTypeError(f"{what} has dtype {dt}, but its wire is {wire}: {reason}. Fix: {fix}.")


def to_wire(array: Array, wire: str) -> Array:
    """``array`` as a float wire takes it: integers, bools and narrower floats become the wire's
    dtype (so every backend computes in it, not in NumPy's promotion of the input); a wider
    float, e.g. float64 on a float32 wire, runs as given. A reduced wire (bf16, fp16, fp8) holds
    its own format only: anything else is rounded to it (``check_dtype`` under ``"safe"``
    refuses what would round). Other arrays are returned as they are."""
    fmt = to_dtype(wire)
    target = fmt.numpy
    if fmt.kind != "float" or array.dtype == target:
        return array
    if fmt.reduced:
        with np.errstate(over="ignore", invalid="ignore"):
            return array.astype(target)
    if array.dtype.kind == "f" and array.dtype.itemsize >= target.itemsize:
        return array
    return array.astype(target)


def check_indices(op: Op, axis: Axis, size: int, ids: Array, what: str) -> None:
    """Raise ``IndexRangeError`` unless every entry of ``ids`` lies in ``[0, size)``."""
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= size)
    if not bad.any():
        return
    pos = tuple(int(i) for i in np.argwhere(bad)[0])
    raise IndexRangeError(
        f"{op.label}: {what} must lie in [0, {size}) along {axis.with_size(size).describe()}; "
        f"{ids[pos]} at position {pos} does not ({int(bad.sum())} of {ids.size} out of range, "
        f"min {ids.min()}, max {ids.max()}). Fix: map the ids into the table's range (or "
        f"enlarge {axis.name}) before calling."
    )


def _as_array(x: Any, what: str) -> Array:
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise DTypeError(
            f"{what} is not an array ({e}). Fix: pass a rectangular NumPy array."
        ) from None


def prepare(
    model: Any,
    inputs: Sequence[Any],
    params: Mapping[str, Any] | None,
    *,
    cast: Casting = "same_kind",
) -> tuple[Graph, list[Array], dict[str, Array]]:
    """Bind free sizes from input shapes and check inputs and parameters against the graph.

    Every array is checked against its wire's dtype with ``numpy.can_cast(..., casting=cast)``
    (backends that run only their built dtype pass ``cast="safe"``), and index inputs (see
    ``INDEX_RULES``) against their table's axis: ``DTypeError`` / ``IndexRangeError`` otherwise.
    Parameters are checked against their own format (``Param.dtype``). On a reduced wire
    (bf16, fp16, fp8) an array of that format is taken as it is; under ``"same_kind"`` (the
    default, ``ncd.run``) any other float or integer array is rounded to the wire's format,
    under ``"safe"`` it is refused. Float32 and float64 wires behave as before: a wider float
    array runs as given, a narrower one is widened.
    """
    from ncd.graph import as_graph

    graph = as_graph(model, "running")
    arrays = [_as_array(x, f"input {k}") for k, x in enumerate(inputs)]
    if len(arrays) != len(graph.inputs):
        raise SizeError(f"the model takes {len(graph.inputs)} input(s), got {len(arrays)}")
    sizes: dict[str | Axis, int] = {}
    for k, (v, x) in enumerate(zip(graph.inputs, arrays, strict=True)):
        t = graph.values[v]
        if x.ndim != len(t.axes):
            raise SizeError(
                f"input {k} must have {len(t.axes)} dims {t} "
                f"({', '.join(a.describe() for a in t.axes)}), "
                f"got shape {x.shape}"
            )
        check_dtype(x, t.dtype, f"input {k} {t} ({', '.join(a.describe() for a in t.axes)})", cast)
        arrays[k] = to_wire(x, t.dtype)
        for a, n in zip(t.axes, x.shape, strict=True):
            if graph.size(a) is None:
                if sizes.get(a, n) != n:
                    raise SizeError(
                        f"input {k}: axis {a.describe()} has size {n} here but {sizes[a]} in an "
                        "earlier input"
                    )
                sizes[a] = int(n)
            elif graph.size(a) != n:
                raise SizeError(f"input {k}: axis {a.describe()} has size {graph.size(a)}, got {n}")
    if sizes:
        graph = graph.bind(sizes)
    for v in graph.inputs:
        graph.shape(v)  # every input size is now known
    free = graph.config().free
    if free:
        raise SizeError(
            f"free sizes left after reading input shapes: {', '.join(map(str, free))}; bind them"
        )
    _check_index_inputs(graph, arrays)
    wanted = graph.params()
    if params is not None and not isinstance(params, Mapping):
        raise ParameterError(
            f"params must be a mapping of name to array, got "
            f"{type(params).__name__}. Fix: pass params=ncd.init(model, seed=0)."
        )
    given = dict(params or {})
    missing = [n for n in wanted if n not in given]
    if missing:
        raise ParameterError(
            f"missing parameter(s) {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}. "
            "Fix: pass params=ncd.init(model, seed=0)."
        )
    extra = [n for n in given if n not in wanted]
    if extra:
        raise ParameterError(
            f"unexpected parameter(s) {', '.join(extra[:8])}; this model has {len(wanted)}"
        )
    out_params: dict[str, Array] = {}
    for n, p in wanted.items():
        arr = _as_array(given[n], f"parameter {n}")
        shape = tuple(graph.size(a) for a in p.axes)
        if arr.shape != shape:
            raise ParameterError(
                f"parameter {n} must have shape {shape} (axes {[a.name for a in p.axes]}), "
                f"got {arr.shape}"
            )
        check_dtype(arr, p.dtype, f"parameter {n} ({p.dtype.name})", cast)
        out_params[n] = to_wire(arr, p.dtype)
    return graph, arrays, out_params


def _check_index_inputs(graph: Graph, arrays: Sequence[Array]) -> None:
    """Range-check every graph input that an op of ``INDEX_RULES`` reads as indices."""
    position = {v: k for k, v in enumerate(graph.inputs)}
    for node in graph.nodes:
        rule = INDEX_RULES.get(type(node.op))
        if rule is None:
            continue
        for slot, axis in rule(node.op):
            k = position.get(node.inputs[slot])
            size = graph.size(axis)
            if k is not None and size is not None:
                check_indices(node.op, axis, size, arrays[k], f"the token ids of input {k}")


def run(
    model: Any,
    *inputs: Any,
    params: Mapping[str, Any] | None = None,
    training: bool = False,
    seed: int = 0,
) -> Any:
    """Run a model on NumPy arrays with the reference interpreter.

    Free sizes are read from the input shapes. Returns one array, or a tuple for several outputs.
    """
    from ncd.axis import check_seed

    check_seed(seed, "ncd.run")
    graph, arrays, ps = prepare(model, inputs, params)
    outs = evaluate(graph, arrays, ps, training=bool(training), seed=seed)
    pack = getattr(model, "pack_outputs", None)  # a model whose outputs have a structure
    if callable(pack):
        return pack(outs)
    return outs[0] if len(outs) == 1 else tuple(outs)
