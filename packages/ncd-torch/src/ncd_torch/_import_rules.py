"""Import rules: one per ATen op of the documented set, keyed by the op's name.

A rule reads a captured node, records the ncd ops it stands for (``Capture.op``) and gives
each output's dims as axis variables. Transposes and permutes record nothing: ncd values are
indexed by axis, so only the bookkeeping of dim order changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ncd import ops as L
from ncd.errors import NcdError
from ncd.primitives.library import COMPARISONS
from ncd_torch import _import_tied

if TYPE_CHECKING:
    from ncd_torch._import import Capture

__all__ = ["IMPORT_RULES", "Refusal", "TorchImportError", "import_rule"]


class TorchImportError(NcdError, ValueError):
    """A PyTorch module uses an op (or a form of one) that ``from_torch`` cannot express.

    ``problems`` lists every unsupported op of the model (``_import_errors.Problem``: ATen op,
    fx node, module path, class and source line, the refused form) when the walk found some.
    """

    def __init__(self, message: str, problems: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)


class Refusal(TorchImportError):
    """A rule refuses the form of one node (``Capture.unsupported``); the walk notes it and
    goes on, so the final error lists every problem."""

    def __init__(self, node: Any, detail: str) -> None:
        super().__init__(f"{node.target} ({detail})" if detail else str(node.target))
        self.node = node
        self.detail = detail


Rule = Callable[["Capture", Any], None]

#: ATen op name (``aten.linear``) -> rule(capture, fx_node).
IMPORT_RULES: dict[str, Rule] = {}


def import_rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(rule: Rule) -> Rule:
        for n in names:
            IMPORT_RULES[n] = rule
        return rule

    return deco


ACTIVATIONS = {
    "aten.relu": "relu",
    "aten.silu": "silu",
    "aten.tanh": "tanh",
    "aten.sigmoid": "sigmoid",
    "aten.exp": "exp",
    "aten.neg": "neg",
    "aten.sqrt": "sqrt",
    "aten.rsqrt": "rsqrt",
    "aten.abs": "abs",
    "aten.log": "log",
    "aten.cos": "cos",
    "aten.sin": "sin",
    "aten.atan": "atan",
    "aten.asinh": "asinh",
    **{
        f"aten.{fn}": fn
        for fn in (
            *("erf", "floor", "ceil", "round", "trunc", "sign", "tan", "asin", "acos"),
            *("sinh", "cosh", "atanh", "acosh", "expm1", "log1p", "selu", "mish"),
            *("hardswish", "hardsigmoid", "relu6"),
        )
    },
    "aten.log_sigmoid": "logsigmoid",
}
#: activations with constants: the aten name -> the Activation fn and its arguments' defaults
#: (``aten.elu``'s ``scale``/``input_scale`` beyond ``alpha`` must be 1: that is SELU's form)
PARAMETRIC = {
    "aten.leaky_relu": ("leaky_relu", (0.01,)),
    "aten.elu": ("elu", (1.0, 1.0, 1.0)),
    "aten.celu": ("celu", (1.0,)),
    "aten.softplus": ("softplus", (1.0, 20.0)),
}
#: torch's keyword names of those arguments
ARGUMENT_NAMES: dict[str, tuple[str, ...]] = {
    "leaky_relu": ("negative_slope",),
    "elu": ("alpha", "scale", "input_scale"),
    "celu": ("alpha",),
    "softplus": ("beta", "threshold"),
}
#: clamps of an activation by constants: (min's position, max's position) among the arguments
CLAMPS = {
    "aten.clamp": (1, 2),
    "aten.hardtanh": (1, 2),
    "aten.clamp_min": (1, None),
    "aten.clamp_max": (None, 1),
}
ARITH = {
    "aten.add": "add",
    "aten.add_": "add",
    "aten.sub_": "sub",
    "aten.mul_": "mul",
    "aten.div_": "div",
    "aten.sub": "sub",
    "aten.mul": "mul",
    "aten.div": "div",
    "aten.rsub": "sub",
    "aten.maximum": "max",
    "aten.minimum": "min",
    "aten.pow": "pow",
    "aten.floor_divide": "floordiv",
    "aten.remainder": "mod",
    # comparisons of activations: 1.0 / 0.0 (torch's bools) for where, masked_fill, casts
    **{f"aten.{fn}": fn for fn in COMPARISONS},
}
#: logic on bools (ncd's bool wires count as 0.0 / 1.0): not is ``m == 0``; and, or: a product,
#: a maximum, then ``!= 0``; xor: ``a != b``
LOGIC = {
    "aten.logical_not": "not",
    "aten.bitwise_not": "not",
    "aten.logical_and": "mul",
    "aten.bitwise_and": "mul",
    "aten.logical_or": "max",
    "aten.bitwise_or": "max",
    "aten.__and__": "mul",
    "aten.__or__": "max",
    "aten.logical_xor": "ne",
    "aten.bitwise_xor": "ne",
    "aten.__xor__": "ne",
}
ALIASES = ("aten.contiguous", "aten.clone", "aten.alias", "aten.lift_fresh_copy")
#: ops that read a size-1 broadcast dim (None in ``Capture.dims``) correctly: elementwise ones
#: and the ones that only move or drop dims
SIZE1_SAFE = {
    *ACTIVATIONS,
    *PARAMETRIC,
    *CLAMPS,
    *ARITH,
    *LOGIC,
    *ALIASES,
    "aten.detach",
    "aten.gelu",
    "aten.dropout",
    "aten.to",
    "aten._to_copy",
    "aten.type_as",
    "aten.transpose",
    "aten.t",
    "aten.permute",
    "aten.unsqueeze",
    "aten.squeeze",
    "aten.expand",
    "aten.sum",
    "aten.any",
    "aten.all",
    "aten.mean",
    "aten.amax",
    "aten.amin",
    "aten.masked_fill",
    "aten.where",
    "aten.scaled_dot_product_attention",  # its attn_mask may broadcast (q, k, v are checked)
}
VIEWS = ("aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten", "aten.unflatten")
# indexing reads one dim and carries the others, size-1 broadcast dims included
SIZE1_SAFE.update({"aten.select", "aten.index", "aten.index_select", "aten.gather"})
SIZE1_SAFE.update(VIEWS)  # a reshape of a broadcast dim imports as repeat_kv or is refused
#: ops that read a ``Grouped`` dim (repeat_kv's keys and values) correctly
GROUPED_SAFE = {
    *ALIASES,
    "aten.transpose",
    "aten.t",
    "aten.permute",
    "aten.to",
    "aten._to_copy",
    "aten.matmul",
    "aten.scaled_dot_product_attention",
}


@import_rule(*ACTIVATIONS)
def _activation(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Unary(ACTIVATIONS[c.aten(node)]), [x])
    c.set(node, c.dims[x])


@import_rule(*PARAMETRIC)
def _parametric(c: Capture, node: Any) -> None:
    fn, defaults = PARAMETRIC[c.aten(node)]
    names = ARGUMENT_NAMES[fn]
    args = [
        float(node.args[1 + k]) if len(node.args) > 1 + k else float(node.kwargs.get(n, d))
        for k, (n, d) in enumerate(zip(names, defaults, strict=True))
    ]
    if fn == "elu" and args[1:] != [1.0, 1.0]:
        raise c.unsupported(node, "elu with scale or input_scale other than 1")
    x = c.plain(node.args[0])
    c.op(node, L.Activation(fn, *args[:2]), [x])
    c.set(node, c.dims[x])


@import_rule(*CLAMPS)
def _clamp(c: Capture, node: Any) -> None:
    """``x`` limited by constant bounds: a maximum with the lower, then a minimum with the
    upper (a NaN stays NaN, as in torch); tensor bounds are ``maximum``/``minimum``."""
    low_at, high_at = CLAMPS[c.aten(node)]
    default = {"aten.hardtanh": (-1.0, 1.0)}.get(c.aten(node), (None, None))
    bounds = []
    for at, name, d in ((low_at, "min_val", default[0]), (high_at, "max_val", default[1])):
        v = None if at is None else (node.args[at] if len(node.args) > at else None)
        if v is None and at is not None:
            v = node.kwargs.get(name if c.aten(node) == "aten.hardtanh" else name[:3], d)
        if v is not None and not isinstance(v, int | float):
            raise c.unsupported(node, "a clamp by tensors (use torch.maximum/torch.minimum)")
        bounds.append(None if v is None else float(v))
    low, high = bounds
    if low is not None and high is not None and low > high:
        raise c.unsupported(node, f"a clamp whose min {low:g} is above its max {high:g}")
    key = c.plain(node.args[0])
    dims = list(c.dims[key])
    for fn, bound in (("max", low), ("min", high)):
        if bound is not None:
            key = c.op(node, L.Scalar(fn, bound), [key])
            c.dims[key] = list(dims)
    c.set(node, dims, recorded=True)


@import_rule("aten.gelu")
def _gelu(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    tanh = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none") == "tanh"
    c.op(node, L.Unary("gelu_tanh" if tanh else "gelu"), [x])
    c.set(node, c.dims[x])


@import_rule("aten.to", "aten._to_copy", "aten.type_as")
def _cast(c: Capture, node: Any) -> None:
    """A cast to the format the value already has vanishes (HF's ``.to(float32)``); any other
    is ``ops.cast``: integers and bools to floats (a padding mask), floats to floats (a float64
    or bfloat16 island), floats to integers (truncated, saturating, NaN as 0 where torch leaves
    them undefined), anything to bool (``!= 0``); a cast to bool read only as a condition
    (``masked_fill``, ``where``) vanishes, since those read nonzero as true. A narrowing integer
    cast (which wraps around) is refused."""
    src = node.args[0]
    have, want = c.dtype(src), c.dtype(node)
    if have == want:
        c.alias(node, src)
        return
    if want == "bool" and node.users and all(_reads_as_condition(c, u, node) for u in node.users):
        c.alias(node, src)
        return
    narrowing = have.startswith("int") and want.startswith("int")  # int64 -> int32 wraps
    if want.startswith(("float", "bfloat", "int", "bool")) and not narrowing:
        x = c.key(src)
        c.op(node, L.Cast(want), [x])
        c.set(node, c.dims[x])
        return
    raise c.unsupported(node, f"a cast from {have} to {want}")


def _reads_as_condition(c: Capture, user: Any, node: Any) -> bool:
    name = c.aten(user)
    return (name == "aten.masked_fill" and user.args[1] is node) or (
        name == "aten.where" and user.args[0] is node and node not in user.args[1:]
    )


@import_rule(*ALIASES)
def _alias(c: Capture, node: Any) -> None:
    c.alias(node, node.args[0])


@import_rule("aten.detach")
def _detach(c: Capture, node: Any) -> None:
    """``x.detach()``: the same value with no gradient through it (``ops.stop_gradient``), so
    ``ncd.grad`` of an import is torch's (a straight-through estimator, a target network's
    output); a detached integer or bool value is the value itself."""
    if not c.dtype(node.args[0]).startswith(("float", "bf")):
        c.alias(node, node.args[0])
        return
    x = c.plain(node.args[0])
    c.op(node, L.Unary("stop_gradient"), [x])
    c.set(node, list(c.dims[x]))


@import_rule("aten.zeros_like", "aten.ones_like", "aten.full_like")
def _filled_like(c: Capture, node: Any) -> None:
    """``torch.zeros_like(x)``, ``ones_like``, ``full_like(x, v)`` of a float activation: an
    ``ops.constant`` over ``x``'s axes."""
    x = c.plain(node.args[0])
    name = c.aten(node)
    value = {"aten.zeros_like": 0.0, "aten.ones_like": 1.0}.get(name)
    if value is None:
        value = node.args[1] if len(node.args) > 1 else node.kwargs.get("fill_value")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise c.unsupported(node, f"a fill value of type {type(value).__name__}")
    if c.dtype(node) != c.dtype(node.args[0]) or not c.dtype(node).startswith(("float", "bf")):
        raise c.unsupported(node, "a fill of another format than its float input's")
    c.op(node, L.Constant(float(value), tuple(c.axis(v) for v in c._vars(c.dims[x]))), [])
    c.set(node, list(c.dims[x]))


@import_rule("aten.dropout")
def _dropout(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Dropout(float(node.args[1])), [x])
    c.set(node, c.dims[x])


@import_rule(*LOGIC)
def _logic(c: Capture, node: Any) -> None:
    fn = LOGIC[c.aten(node)]
    args = [a for a in node.args[:2] if c.is_tensor(a)]
    if any(c.dtype(a) != "bool" for a in args) or len(args) != (1 if fn == "not" else 2):
        raise c.unsupported(node, "logic on integers (bitwise ops of bools only)")
    if fn == "not":
        x = c.plain(args[0])
        c.op(node, L.Scalar("eq", 0.0, name="not"), [x])
        c.set(node, c.dims[x])
        return
    _bools(c, node, fn, c.plain(args[0]), c.plain(args[1]))


def _bools(c: Capture, node: Any, fn: str, x: str, y: str) -> None:
    """``x fn y`` of two bool wires as a bool: ``ne`` (xor) as it is; a product or a maximum
    (and, or) then ``!= 0``, so ``True + True`` is ``True`` as torch's, not 2."""
    out = c.broadcast(node, c.dims[x], c.dims[y])
    if fn == "ne":
        c.op(node, L.Binary(fn), [x, y])
    else:
        both = c.op(node, L.Binary(fn), [x, y], names=[])
        c.op(node, L.Scalar("ne", 0.0), [both])
    c.set(node, out, recorded=fn != "ne")


@import_rule(*ARITH)
def _arith(c: Capture, node: Any) -> None:
    fn = ARITH[c.aten(node)]
    a, b = node.args[0], node.args[1]
    _arith_value(c, node, fn, a, b)
    if c.aten(node).endswith("_") and getattr(a, "name", None) in c.dims:
        c.alias(a, node)  # in place (``x += y``): later readers of ``a`` read the result


def _arith_value(c: Capture, node: Any, fn: str, a: Any, b: Any) -> None:
    if fn == "div" and node.kwargs.get("rounding_mode") == "floor":
        fn = "floordiv"  # torch.div(a, b, rounding_mode="floor") is a // b
    if node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("rounding_mode") not in (None, "floor"):
        raise c.unsupported(node, "alpha or rounding_mode='trunc'")
    reverse = c.aten(node) == "aten.rsub"
    if fn == "add" and _additive_mask(c, node, a, b):
        return
    if fn == "mul" and _import_llama.rotary_embedding(c, node, a, b):
        return
    if c.is_tensor(a) and c.is_tensor(b):
        x, y = c.plain(a), c.plain(b)
        logic = {"add": "max", "max": "max", "mul": "mul", "min": "mul"}
        if c.dtype(a) == c.dtype(b) == "bool" and fn in logic:  # torch: or, and
            _bools(c, node, logic[fn], x, y)
            return
        out = c.broadcast(node, c.dims[x], c.dims[y])
        c.op(node, L.Binary(fn), [y, x] if reverse else [x, y])
        c.set(node, out)
        return
    if c.is_tensor(b):
        a, b, reverse = b, a, not reverse
    x = c.plain(a)
    if not isinstance(b, int | float) or isinstance(b, bool):
        raise c.unsupported(node, f"a {type(b).__name__} operand")
    c.op(node, L.Scalar(fn, float(b), reverse), [x])
    c.set(node, c.dims[x])


@import_rule("aten.transpose", "aten.t")
def _transpose(c: Capture, node: Any) -> None:
    dims = list(c.dims[c.key(node.args[0])])
    i, j = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
    dims[i], dims[j] = dims[j], dims[i]
    c.alias(node, node.args[0], dims)


@import_rule("aten.permute")
def _permute(c: Capture, node: Any) -> None:
    dims = c.dims[c.key(node.args[0])]
    c.alias(node, node.args[0], [dims[int(p)] for p in node.args[1]])


@import_rule(*VIEWS)
def _view(c: Capture, node: Any) -> None:
    if c.flattens_into_addmm(node):  # x.view(-1, d) before a Conv1D: read x as it is
        c.alias(node, node.args[0])
        return
    c.reshape(node, node.args[0], tuple(c.shape(node)))


@import_rule("aten.softmax", "aten._softmax")
def _softmax(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    c.op(node, L.Softmax(c.axis(c.dims[x][node.args[1]])), [x])
    c.set(node, c.dims[x])


@import_rule("aten.log_softmax", "aten._log_softmax")
def _log_softmax(c: Capture, node: Any) -> None:
    """``x - m - log(sum(exp(x - m)))``, ``m`` the row maximum: never ``log(softmax(x))``."""
    x = c.plain(node.args[0])
    dims = c.dims[x]
    d = dims[int(node.args[1]) % len(dims)]
    if d is None:
        raise c.unsupported(node, "a log-softmax over a size-1 broadcast dim")
    rest, a = [v for v in dims if v != d], c.axis(d)

    def step(op: Any, ins: list[str], out: list[Any]) -> str:
        k = c.op(node, op, ins)
        c.dims[k] = out
        return k

    top = step(L.Reduce("max", (a,), name="row_max"), [x], rest)
    z = step(L.Binary("sub", name="shifted"), [x, top], dims)
    e = step(L.Unary("exp"), [z], dims)
    lse = step(L.Unary("log", name="log_sum"), [step(L.Reduce("sum", (a,)), [e], rest)], rest)
    c.op(node, L.Binary("sub", name=c.leaf(node) or "log_softmax"), [z, lse])
    c.set(node, dims, recorded=True)


@import_rule("aten.sum", "aten.mean", "aten.amax", "aten.amin", "aten.any", "aten.all")
def _reduce(c: Capture, node: Any) -> None:
    """A reduction over some dims (all by default). ``any``/``all`` are a maximum/minimum of
    ``x != 0`` (bool, as torch's); a result torch gives as an integer or bool (a count of a
    mask: ``mask.sum()``, ``amax`` of a bool) is cast to that format at the end (a count is
    exact up to 2^24 in the float32 it is summed in)."""
    x = c.plain(node.args[0])
    dims = c.dims[x]
    which = node.args[1] if len(node.args) > 1 else None
    which = list(range(len(dims))) if which is None else which
    which = [which] if isinstance(which, int) else list(which)
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    name = c.aten(node)
    fn = {"aten.sum": "sum", "aten.mean": "mean", "aten.amax": "max", "aten.amin": "min"}
    fn.update({"aten.any": "max", "aten.all": "min"})
    where = sorted({int(d) % len(dims) for d in which})
    gone = [dims[i] for i in where]
    if any(v is None for v in gone):
        raise c.unsupported(node, "a reduction over a size-1 broadcast dim")
    steps: list[Any] = [L.Reduce(fn[name], tuple(c.axis(v) for v in gone))]
    if c.dtype(node.args[0]) in ("int32", "int64"):  # an int64 mask's count: in float32
        steps.insert(0, L.Cast("float32"))
    if name in ("aten.any", "aten.all"):
        steps = [L.Scalar("ne", 0.0), *steps, L.Scalar("ne", 0.0)]
    elif not c.dtype(node).startswith(("float", "bfloat")):
        steps.append(L.Cast(c.dtype(node)))
    for k, op in enumerate(steps):
        x = c.op(node, op, [x], names=None if k == len(steps) - 1 else [])
    if keep:  # the reduced dims stay as size-1 broadcast dims (None): x - x.mean(-1, True)
        c.set(node, [None if i in where else v for i, v in enumerate(dims)], recorded=True)
    else:
        c.set(node, [v for i, v in enumerate(dims) if i not in where], recorded=True)


@import_rule("aten.unsqueeze")
def _unsqueeze(c: Capture, node: Any) -> None:
    """A new size-1 dim is a broadcast dim (None): ncd broadcasts by an axis's absence."""
    dims = list(c.dims[c.key(node.args[0])])
    dims.insert(int(node.args[1]) % (len(dims) + 1), None)
    c.alias(node, node.args[0], dims)


@import_rule("aten.squeeze")
def _squeeze(c: Capture, node: Any) -> None:
    dims = list(c.dims[c.key(node.args[0])])
    shape = c.shape(node.args[0])
    which = node.args[1] if len(node.args) > 1 else [i for i, n in enumerate(shape) if n == 1]
    which = {int(d) % len(dims) for d in ([which] if isinstance(which, int) else which)}
    own = [i for i in which if shape[i] == 1 and dims[i] is not None]
    if any(isinstance(dims[i], tuple) for i in own):
        raise c.unsupported(node, "squeezing a size-1 dim folded with another")
    if own:  # a one-wide axis of its own (a split's piece): summed away, one element each
        x = c.plain(node.args[0])
        c.op(node, L.Reduce("sum", tuple(c.axis(dims[i]) for i in own), name="squeeze"), [x])
        keep = [d for i, d in enumerate(c.dims[x]) if not (i in which and shape[i] == 1)]
        c.set(node, keep, recorded=True)
        return
    c.alias(node, node.args[0], [d for i, d in enumerate(dims) if not (i in which and d is None)])


@import_rule("aten.expand")
def _expand(c: Capture, node: Any) -> None:
    """Expanding broadcast dims (None) keeps them broadcast dims: the op that reads the value
    broadcasts it; expanding an axis of its own to a larger size is refused."""
    dims = list(c.dims[c.key(node.args[0])])
    sizes = list(node.args[1])
    new: list[Any] = [None] * (len(sizes) - len(dims)) + dims
    for d, n in zip(new, sizes, strict=True):
        if d is not None and not isinstance(d, tuple) and int(n) not in (-1, c.axes.size[d]):
            raise c.unsupported(node, "expanding a dim that is an axis of its own")
    c.alias(node, node.args[0], new)


@import_rule("aten.layer_norm")
def _layer_norm(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    k = len(node.args[1])
    weight, bias = (node.args[i] if len(node.args) > i else None for i in (2, 3))
    eps = float(node.args[4]) if len(node.args) > 4 else 1e-5
    if weight is None and bias is not None:
        raise c.unsupported(node, "a bias without a weight")
    axes = c.dims[x][-k:]
    for v in axes:
        c.axes.hint(v, "d_model", 3)
    if _import_tied.shared(weight, bias):  # a LayerNorm called more than once: one weight
        plain = L.LayerNorm(tuple(c.axis(v) for v in axes), eps, False, False, name=c.leaf(node))
        out = c.op(node, plain, [x], {})
        c.dims[out] = list(c.dims[x])
        _import_tied.affine(c, node, out, weight, bias)
        return
    params = {"weight": c.param(weight)} if weight is not None else {}
    if bias is not None:
        params["bias"] = c.param(bias)
    op = L.LayerNorm(
        tuple(c.axis(v) for v in axes), eps, weight is not None, bias is not None, name=c.leaf(node)
    )
    c.op(node, op, [x], params)
    c.set(node, c.dims[x])


@import_rule("aten.rms_norm")
def _rms_norm(c: Capture, node: Any) -> None:
    x = c.plain(node.args[0])
    k = len(node.args[1])
    weight = node.args[2] if len(node.args) > 2 else None
    eps = node.args[3] if len(node.args) > 3 else None
    if eps is None:  # PyTorch's default: the dtype's machine epsilon
        eps = float(np.finfo(np.float32 if c.dtype(node) == "float32" else np.float64).eps)
    axes = c.dims[x][-k:]
    for v in axes:
        c.axes.hint(v, "d_model", 3)
    if _import_tied.shared(weight):  # an RMSNorm called more than once: one weight
        out = c.op(node, L.RMSNorm(tuple(c.axis(v) for v in axes), float(eps), False), [x], {})
        c.dims[out] = list(c.dims[x])
        _import_tied.affine(c, node, out, weight, None)
        return
    params = {"weight": c.param(weight)} if weight is not None else {}
    op = L.RMSNorm(
        tuple(c.axis(v) for v in axes), float(eps), weight is not None, name=c.leaf(node)
    )
    c.op(node, op, [x], params)
    c.set(node, c.dims[x])


@import_rule("aten.embedding")
def _embedding(c: Capture, node: Any) -> None:
    if getattr(node.args[1], "name", None) in c.folded:
        _positions(c, node)
        return
    weight = node.args[0]
    if weight.name not in c.param_of and weight.name not in c.tied:
        _import_index.embedding_of_value(c, node)  # a table the model computes
        return
    ids = c.plain(node.args[1])
    if weight.name in c.tied:  # one parameter with an unembedding (nanoGPT's lm_head)
        _import_tied.lookup(c, node, _import_tied.table(c, node, weight), ids)
        return
    table = c.param(weight)
    vocab = c.axes.new(table.shape[0], "vocab", 3)
    out = c.axes.new(table.shape[1], "d_model", 2)
    c.op(
        node,
        L.Embedding(c.axis(vocab), (c.axis(out),), name=c.leaf(node)),
        [ids],
        {"weight": table},
        extra=[vocab],
    )
    c.set(node, [*c.dims[ids], out])


def _positions(c: Capture, node: Any) -> None:
    """An embedding of constant ids ``start, start + 1, ...`` (``torch.arange`` position ids,
    expanded over the batch or not) is its table's rows read in order: a ``Learned`` table
    over ``(block, d_model)`` sliced to ``seq``, as ``ncd.nn.gpt(block_size=...)``'s ``wpe``."""
    import torch

    weight, ids = node.args[0], c.folded[node.args[1].name]
    if not isinstance(ids, torch.Tensor) or ids.dim() == 0 or ids.is_floating_point():
        raise c.unsupported(node, "constant ids that are not a tensor of positions")
    rows = ids.reshape(-1, ids.shape[-1])
    n = int(ids.shape[-1])
    start = int(rows[0, 0]) if n else 0
    if n and bool((ids == start).all()) and n > 1:  # one row for every position (BERT's types)
        table = c.param(weight)
        (fqn,) = c.take_pending()
        width = c.axes.new(table.shape[1], "d_model", 2)
        op = L.Learned((c.axis(width),), name=c.leaf(node) or "row")
        c.op(node, op, [], {"weight": table[start]}, names=[f"{fqn}[{start}]"])
        c.set(node, [width], recorded=True)
        return
    if not bool((rows == torch.arange(start, start + n, dtype=rows.dtype)).all()):
        raise c.unsupported(
            node, "constant ids that are neither consecutive positions nor all one id"
        )
    table = c.param(weight)
    (fqn,) = c.take_pending()
    if start + n > table.shape[0]:
        raise c.unsupported(node, f"positions {start}..{start + n - 1} beyond the table")
    # the whole table over its own axis, sliced to the positions read: the length stays free
    # (up to the table's), and the checkpoint's table loads as it is
    block = c.axes.new(table.shape[0], "block", 1)
    seq = c.axes.new(n, "seq", 1)
    width = c.axes.new(table.shape[1], "d_model", 2)
    name = c.leaf(node) or "positions"
    op = L.Learned((c.axis(block), c.axis(width)), name=name)
    key = c.op(node, op, [], {"weight": table}, names=[fqn])
    c.dims[key] = [block, width]
    c.op(node, L.Slice(c.axis(block), c.axis(seq), start, name=f"{name}_read"), [key])
    # leading size-1 or batch dims of the ids are dropped: the table broadcasts over them
    c.set(node, [seq, width], recorded=True)


@import_rule("aten.linear")
def _linear(c: Capture, node: Any) -> None:
    x = c.key(node.args[0])
    has_bias = len(node.args) > 2 and node.args[2] is not None
    if node.args[1].name in c.tied:  # the unembedding of a tied token table
        key = _import_tied.table(c, node, node.args[1])
        bias = node.args[2] if has_bias else None
        _import_tied.unembed(c, node, c.plain(node.args[0]), key, bias, node.args[1])
        return
    weight = c.param(node.args[1])
    bias = c.param(node.args[2]) if has_bias else None
    names = c.take_pending()
    _affine(c, node, node, x, weight, bias, names)


@import_rule("aten.addmm")
def _addmm(c: Capture, node: Any) -> None:
    """``addmm(bias, x, weight)`` with a weight stored ``(in, out)`` (HF GPT-2's ``Conv1D``) is a
    Linear; the flatten to 2-d before it and the view back after it vanish."""
    bias, x, weight = node.args[:3]
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        raise c.unsupported(node, "beta or alpha")
    if not all(getattr(a, "name", None) in c.param_of for a in (bias, weight)):
        raise c.unsupported(node, "operands other than (bias, input, weight) parameters")
    key = c.key(x)
    w = np.ascontiguousarray(c.param(weight).T)
    b = c.param(bias)
    wname, bname = c.take_pending()
    out = node
    if len(c.dims[key]) > 2:  # the flatten was skipped: the result is the view back
        out = next(iter(node.users))
        c.done.add(out.name)
    _affine(c, node, out, key, w, b, [f"{wname}.T", bname])


def _affine(
    c: Capture,
    node: Any,
    result: Any,
    x: str,
    weight: np.ndarray,
    bias: np.ndarray | None,
    names: list[str],
) -> None:
    """One Linear of ``node`` reading ``x``, whose result is the node ``result``."""
    *lead, last = c.dims[x]
    ins = last if isinstance(last, tuple) else (last,)
    if len(ins) == 1:  # the width a Linear reads is the model width, unless named better
        c.axes.hint(ins[0], "d_model", 0.5)
    w = weight.reshape(weight.shape[0], *(c.axes.size[v] for v in ins))
    name = c.leaf(node) or "linear"
    chunks = _split_users(c, result)
    if chunks is None:
        _one_linear(c, node, result, x, lead, ins, w, bias, name, names)
        return
    # nn.Linear(d, 3 * d) then .split(d, dim=-1) (GPT-2's c_attn): one Linear, as torch's one
    # parameter, then a slice of its output per chunk
    _fused_linear(c, node, x, lead, ins, w, bias, name, names, chunks)


def _fused_linear(
    c: Capture,
    node: Any,
    x: str,
    lead: list[Any],
    ins: tuple[int, ...],
    w: np.ndarray,
    bias: np.ndarray | None,
    name: str,
    names: list[str],
    chunks: list[tuple[int, Any]],
) -> None:
    """One Linear onto a wide axis (``qkv``), each chunk a slice of it (viewed as ``heads
    d_head`` where the chunk is split so), so the packed weight stays one parameter."""
    A = c.axis
    wide = c.axes.new(w.shape[0], "qkv" if len(chunks) == 3 else "packed", 0.4)
    params = {"weight": w} if bias is None else {"weight": w, "bias": bias}
    op = L.Linear(tuple(A(v) for v in ins), (A(wide),), bias is not None, name=name)
    key = c.op(node, op, [x], params, extra=[wide], names=names)
    c.dims[key] = [*lead, wide]
    start = 0
    for k, (size, user) in enumerate(chunks):
        part = c.axes.new(size, "qkv"[k] if len(chunks) == 3 else f"packed_{k}", 0.3)
        out = c.op(user, L.Slice(A(wide), A(part), start, name=f"{name}_{k}"), [key], extra=[part])
        start += size
        split = c.split_by_view(user, size)
        if split is None:
            c.set(user, [*lead, part], recorded=True)
            continue
        h, d = c.axes.new(split[0], "heads", 3), c.axes.new(split[1], "d_head", 3)
        view = L.View((A(part),), (A(h), A(d)), ((A(h), A(d)),), ((A(h),), (A(d),)))
        c.op(user, view, [out], extra=[h, d])
        c.set(user, [*lead, (h, d)], recorded=True)


def _packed_users(c: Capture, node: Any) -> list[tuple[int, Any]] | None:
    """(size, select node) per projection when the Linear's output is ``nn.MultiheadAttention``'s
    packed in-projection: ``unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
    .contiguous()`` then ``select(0, k)`` for q, k and v."""
    chain: list[Any] = []
    cur = node
    for name in ("aten.unflatten", "aten.unsqueeze", "aten.transpose", "aten.squeeze"):
        if len(cur.users) != 1 or not c.users_are(cur, (name,)):
            return None
        cur = next(iter(cur.users))
        chain.append(cur)
    if len(cur.users) == 1 and c.users_are(cur, ("aten.contiguous", "aten.clone")):
        cur = next(iter(cur.users))
        chain.append(cur)
    n, e = c.shape(chain[0])[-2:]
    if c.shape(chain[0])[:-2] != c.shape(node)[:-1] or c.shape(cur) != (n, *c.shape(node)[:-1], e):
        return None
    selects = sorted(cur.users, key=lambda u: int(u.args[2]) if len(u.args) > 2 else -1)
    if not c.users_are(cur, ("aten.select",)) or [int(u.args[1]) for u in selects] != [0] * n:
        return None
    if [int(u.args[2]) for u in selects] != list(range(n)):
        return None
    c.done.update(x.name for x in (*chain, *selects))
    return [(e, u) for u in selects]


def _split_users(c: Capture, node: Any) -> list[tuple[int, Any]] | None:
    """(size, getitem node) per chunk when the Linear's only user splits its last dim (or is
    ``nn.MultiheadAttention``'s packed in-projection)."""
    packed = _packed_users(c, node)
    if packed is not None:
        return packed
    if len(node.users) != 1 or not c.users_are(node, ("aten.split", "aten.split_with_sizes")):
        return None
    split = next(iter(node.users))
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if dim not in (-1, len(c.shape(node)) - 1):
        return None
    sizes = [c.shape(g)[-1] for g in sorted(split.users, key=lambda g: g.args[1])]
    if len(sizes) != len(split.users) or sum(sizes) != c.shape(node)[-1]:
        return None
    c.done.add(split.name)
    users = sorted(split.users, key=lambda g: g.args[1])
    c.done.update(g.name for g in users)
    return list(zip(sizes, users, strict=True))


def _one_linear(
    c: Capture,
    node: Any,
    out: Any,
    x: str,
    lead: list[Any],
    ins: tuple[int, ...],
    w: np.ndarray,
    bias: np.ndarray | None,
    name: str,
    names: list[str],
) -> None:
    """Record one Linear of ``node`` whose result is the value ``out`` (the node or a chunk)."""
    features = w.shape[0]
    split = c.split_by_view(out, features)
    if split is not None:  # out_features viewed as (heads, d_head): fold the view
        outs: tuple[int, ...] = (
            c.axes.new(split[0], "heads", 3),
            c.axes.new(split[1], "d_head", 3),
        )
        w = w.reshape(*split, *w.shape[1:])
        bias = None if bias is None else bias.reshape(split)
    else:
        hint = "d_ff" if c.feeds_activation(out) else (name.split(".")[-1] or "features")
        priority = 2 if hint == "d_ff" else 0.4
        if hint != "d_ff" and features in c.axes.sizes_named("vocab"):
            hint, priority = "vocab", 2  # an unembedding back to the embedding's vocabulary
        elif hint != "d_ff" and features > int(np.prod(w.shape[1:])):
            hint, priority = "d_ff", 0.6  # a widening Linear (an MLP's, activation written out)
        outs = (c.axes.new(features, hint, priority),)
    params = {"weight": w} if bias is None else {"weight": w, "bias": bias}
    op = L.Linear(
        tuple(c.axis(v) for v in ins), tuple(c.axis(v) for v in outs), bias is not None, name=name
    )
    c.op(node, op, [x], params, extra=list(outs), names=names)
    c.set(out, [*lead, outs if split is not None else outs[0]], recorded=True)


def _contract(c: Capture, node: Any, a: str, b: str) -> None:
    """``a @ b`` over the last two dims, batch dims broadcast (matmul, bmm); keys or values
    grouped over query heads (``repeat_kv``) split the query heads of ``a`` around it."""
    da, db = c.dims[a], c.dims[b]
    if len(da) < 2 or len(db) < 2:
        raise c.unsupported(node, "a 1-d operand (use 2-d or more)")
    if any(isinstance(d, _import_llama.Grouped) for d in da):
        raise c.unsupported(node, "grouped keys or values as the left operand")
    n, k = da[-2], da[-1]
    kb, m = db[-2], db[-1]
    a, ba, (bb,), splits, _ = _import_llama.split_groups(c, node, a, da[:-2], [db[:-2]])
    if splits and len(db) > len(da):
        raise c.unsupported(node, "grouped keys or values with more batch dims than the queries")
    batch = c.broadcast(node, ba, bb)
    if not c.axes.same(k, kb):
        if any(c.axes.same(kb, v) for v in (*batch, n)):  # self-attention: keys are their own axis
            b = c.rename(node, b, kb, k)
        else:
            c.axes.union(k, kb)
    if any(c.axes.same(m, v) for v in (*batch, n, k)):
        fresh = c.axes.new(c.axes.size[m], c.axes.name(m) + "_k", 2)
        b = c.rename(node, b, m, fresh)
        m = fresh
    op = L.Einsum(((c.axis(n), c.axis(k)), (c.axis(k), c.axis(m))), (c.axis(n), c.axis(m)))
    c.op(node, op, [a, b])
    if splits:
        _import_llama.merge_groups(c, node, splits, [*da[:-2], n, m])
        return
    c.set(node, [*batch, n, m])


@import_rule("aten.matmul", "aten.bmm")
def _matmul(c: Capture, node: Any) -> None:
    _contract(c, node, c.plain(node.args[0]), c.plain(node.args[1]))


@import_rule("aten.einsum")
def _einsum(c: Capture, node: Any) -> None:
    spec = str(node.args[0]).replace(" ", "")
    if "..." in spec or "->" not in spec:
        raise c.unsupported(node, f"the equation {spec!r} (write it explicit, without '...')")
    lhs, rhs = spec.split("->")
    keys = [c.plain(t) for t in node.args[1]]
    letters: dict[str, int] = {}
    for n, term in enumerate(lhs.split(",")):
        for ch, v in zip(term, list(c.dims[keys[n]]), strict=True):
            taken = [d for d, u in letters.items() if d != ch and c.axes.same(u, v)]
            if ch in letters and c.axes.same(letters[ch], v):
                continue
            if taken or (
                ch in letters and any(c.axes.same(letters[ch], u) for u in c.dims[keys[n]])
            ):
                # another letter already stands for this dim's axis: this one is its own axis
                fresh = letters.get(ch) or c.axes.new(c.axes.size[v], c.axes.name(v) + "_2", 1)
                keys[n] = c.rename(node, keys[n], v, fresh)
                letters[ch] = fresh
            elif ch in letters:
                c.axes.union(letters[ch], v)
            else:
                letters[ch] = v
    groups = tuple(tuple(c.axis(letters[ch]) for ch in term) for term in lhs.split(","))
    c.op(node, L.Einsum(groups, tuple(c.axis(letters[ch]) for ch in rhs)), keys)
    c.set(node, [letters[ch] for ch in rhs])


@import_rule("aten.scaled_dot_product_attention")
def _sdpa(c: Capture, node: Any) -> None:
    if any(None in c.dims.get(c.key(a), ()) for a in node.args[:3]):
        raise c.unsupported(node, "a size-1 broadcast dim (keepdim=True, unsqueeze) in q, k or v")
    q, k, v = (c.plain(a) for a in node.args[:3])
    args = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), node.args[3:], strict=False))
    args.update(node.kwargs)
    if args.get("dropout_p", 0.0):
        raise c.unsupported(node, "dropout_p (only is_causal, scale, causal masks, enable_gqa)")
    causal = bool(args.get("is_causal", False))
    mask = args.get("attn_mask")
    added = None  # an additive float mask computed from the inputs (a padding mask)
    keep = None  # a bool one: True where a key takes part
    if mask is not None and getattr(mask, "name", None) not in c.folded:
        if c.dtype(mask) == "bool":
            keep = c.key(mask)
        elif c.dtype(mask).startswith(("float", "bfloat")):
            added = c.key(mask)
        else:
            raise c.unsupported(node, f"an attn_mask of dtype {c.dtype(mask)}")
        mask = None
    if mask is not None:
        if getattr(mask, "name", None) not in c.folded:
            raise c.unsupported(
                node, "an attn_mask computed from the inputs (only constant causal masks)"
            )
        import torch

        qs, ks = c.shape(node.args[0]), c.shape(node.args[1])
        shape = (*torch.broadcast_shapes(qs[:-2], ks[:-2]), qs[-2], ks[-2])
        tensor = c.folded[mask.name]
        hidden = ~tensor.to(torch.bool) if tensor.dtype == torch.bool else _hidden(tensor)
        kind = _mask_kind(hidden, shape)
        if kind is None:
            raise c.unsupported(node, "an attn_mask that is not causal (only causal masks)")
        causal = causal or kind == "causal"
    dq, dk, dv = (list(c.dims[x]) for x in (q, k, v))
    if args.get("enable_gqa"):
        _import_llama.gqa_keys(c, node, dq, dk, dv)
    q, bq, (bk, bv), splits, grouped = _import_llama.split_groups(
        c, node, q, dq[:-2], [dk[:-2], dv[:-2]]
    )
    (lq, e), (sk, ek), (sv, ev) = dq[-2:], dk[-2:], dv[-2:]
    batch = c.broadcast(node, c.broadcast(node, bq, bk), bv)
    c.axes.union(e, ek)
    c.axes.union(sk, sv)
    c.axes.hint(lq, "seq", 2)
    c.axes.hint(e, "d_head", 2)
    c.axes.hint(ev, "d_head", 2)
    if dq[:-2]:
        c.axes.hint(dq[-3], "heads", 1)
    if c.axes.same(sk, lq):  # self-attention: the key axis is a renamed copy of the query axis
        keys = c.axes.new(c.axes.size[sk], "seq_k", 3)
        k, v = c.rename(node, k, sk, keys), c.rename(node, v, sk, keys)
        sk = keys
    if args.get("is_causal") and c.axes.size[lq] != c.axes.size[sk]:
        raise c.unsupported(node, "is_causal with query and key lengths that differ")
    Q, X, D, V = (c.axis(a) for a in (lq, sk, e, ev))
    with c.scope(node, "attention"):
        scores = c.op(node, L.Einsum(((Q, D), (X, D)), (Q, X)), [q, k], extra=batch)
        scale = args.get("scale")
        scores = c.op(
            node, L.Scale((D,), -0.5) if scale is None else L.Scalar("mul", float(scale)), [scores]
        )
        # a mask aligns with the scores as torch shapes them: a grouped heads dim is one dim
        over = [*(grouped if splits else batch), lq, sk]
        if added is not None:
            scores = _add_mask(c, node, scores, added, over)
        if keep is not None:
            keep, bias = _bool_mask(c, node, keep, c.dtype(node.args[0]))
            scores = _add_mask(c, node, scores, bias, over)
        if causal:
            scores = c.op(node, L.CausalMask(Q, X), [scores])
        weights = c.op(node, L.Softmax(X), [scores])
        out = c.op(node, L.Einsum(((Q, X), (X, V)), (Q, V)), [weights, v])
        if keep is not None:  # a query no key takes part for gets zeros, as torch's
            c.dims[out] = [*batch, lq, ev]
            kdims = c.dims[keep]
            taken = keep
            if kdims and kdims[-1] is not None:
                taken = c.op(node, L.Reduce("max", (c.axis(kdims[-1]),), name="any_key"), [keep])
                c.dims[taken] = kdims[:-1]
            c.op(node, L.Binary("mul", name="masked_rows"), [out, taken])
        if splits:
            _import_llama.merge_groups(c, node, splits, [*dq[:-2], lq, ev])
    if not splits:
        c.set(node, [*batch, lq, ev])


def _bool_mask(c: Capture, node: Any, keep: str, fmt: str) -> tuple[str, str]:
    """A bool ``attn_mask`` as (1.0 where a key takes part, the additive mask): ``(keep - 1)``
    times float32's largest value, 0 or its lowest (finite: no 0 * inf), as HF's extended masks."""
    dims = c.dims[keep]
    steps = (
        L.Cast(fmt, name="keep"),
        L.Scalar("sub", 1.0, name="dropped"),
        L.Scalar("mul", 3.4028234663852886e38, name="bias"),
    )
    out = []
    for op in steps:
        keep = c.op(node, op, [keep])
        c.dims[keep] = list(dims)
        out.append(keep)
    return out[0], out[-1]


def _add_mask(c: Capture, node: Any, scores: str, mask: str, dims: list[Any]) -> str:
    """``scores + mask`` inside attention, the mask's dims aligned to the scores' ``dims``
    (right-aligned; its broadcast dims broadcast). A mask built from the queries' own tokens
    (its key dim the query axis) is read over the keys' renamed copy."""
    mdims = c.dims[mask]
    if len(mdims) > len(dims) or any(isinstance(d, tuple) for d in mdims):
        raise c.unsupported(node, "an attn_mask of more dims than the scores")
    lq, sk = dims[-2], dims[-1]
    last = mdims[-1] if mdims else None
    if last is not None and not c.axes.same(last, sk) and c.axes.same(last, lq):
        mask = c.rename(node, mask, last, sk)
        mdims = c.dims[mask]
    for d, v in zip(reversed(mdims), reversed(dims), strict=False):
        if d is None:
            continue
        if isinstance(v, tuple):  # query heads split into (kv head, group)
            raise c.unsupported(node, "an attn_mask per head with grouped keys (enable_gqa)")
        if c.axes.size[d] != c.axes.size[v]:
            raise c.unsupported(node, "an attn_mask that broadcasts a size-1 dim")
        c.axes.union(d, v)
    return c.op(node, L.Binary("add"), [scores, mask])


@import_rule("aten.masked_fill")
def _masked_fill(c: Capture, node: Any) -> None:
    """``scores.masked_fill(mask, -inf or 0)`` with a constant causal mask (the usual GPT-2
    code: a registered ``tril`` buffer, sliced and compared with 0) -> ``CausalMask``."""
    import torch

    x, mask, fill = node.args[:3]
    if getattr(mask, "name", None) not in c.folded:
        _select(c, node, mask, fill, x)  # a padding mask computed from an input
        return
    _fill_causal(c, node, x, c.folded[mask.name].to(torch.bool), fill)


@import_rule("aten.where")
def _where(c: Capture, node: Any) -> None:
    """``torch.where(causal, scores, -inf or finfo.min)`` (HF GPT-2's eager attention) with a
    constant condition -> ``CausalMask``."""
    import torch

    cond, a, b = node.args[:3]
    if getattr(cond, "name", None) not in c.folded:
        _select(c, node, cond, a, b)
        return
    keep = c.folded[cond.name].to(torch.bool)
    if c.is_tensor(a) and a.name not in c.folded:
        _fill_causal(c, node, a, ~keep, b)
    elif c.is_tensor(b) and b.name not in c.folded:
        _fill_causal(c, node, b, keep, a)
    else:
        raise c.unsupported(node, "a select between two activations")


def _select(c: Capture, node: Any, cond: Any, a: Any, b: Any) -> None:
    """``where(cond, a, b)`` with a condition computed from the inputs -> ``ops.where``; a
    Python number or a 0-d constant operand is an ``ops.constant``."""
    keys: list[str] = []
    dims: list[Any] = []
    for arg in (cond, a, b):
        if c.is_tensor(arg):
            key = c.plain(arg)
            dims = c.broadcast(node, dims, c.dims[key])
        elif isinstance(arg, int | float) and not isinstance(arg, bool):
            key = c.op(node, L.Constant(float(arg)), [])
            c.dims[key] = []
        else:
            raise c.unsupported(node, f"a {type(arg).__name__} operand")
        keys.append(key)
    c.op(node, L.Where(), keys)
    c.set(node, dims)


def _fill_causal(c: Capture, node: Any, x: Any, hidden: Any, fill: Any) -> None:
    """``x`` with the scores ``hidden`` marks (True: masked) set to ``fill`` -> ``CausalMask``
    when ``hidden`` is causal and ``fill`` is -inf (or below -1e30) or 0."""
    import torch

    if getattr(fill, "name", None) in c.folded:
        value = c.folded[fill.name]
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            fill = float(value.item())
    names = {float("-inf"): "-inf", 0.0: "0"}
    if not isinstance(fill, torch.fx.Node) and float(fill) <= -1e30:
        fill = float("-inf")  # HF's finfo.min: the same after softmax
    if isinstance(fill, torch.fx.Node) or float(fill) not in names:
        raise c.unsupported(node, f"fill value {fill!r} (only -inf, 0 or below -1e30)")
    shape = c.shape(node)
    if c.shape(x) != shape:
        raise c.unsupported(node, "a mask that broadcasts the scores to a larger shape")
    if _mask_kind(hidden, shape) != "causal":
        raise c.unsupported(node, "a constant mask that is not causal over the last two dims")
    key = c.plain(x)
    *batch, lq, sk = c.dims[key]
    c.op(node, L.CausalMask(c.axis(lq), c.axis(sk), fill=names[float(fill)]), [key])
    c.set(node, [*batch, lq, sk])


def _hidden(mask: Any) -> Any:
    """Where an additive float mask hides a score (``-inf`` or a huge negative such as HF's
    ``finfo.min``); ``None`` when it holds other values than those and 0."""
    import torch

    if not isinstance(mask, torch.Tensor) or not mask.is_floating_point():
        return None
    hidden = mask <= -1e30
    if not bool((hidden | (mask == 0)).all()):
        return None
    return hidden


def _mask_kind(hidden: Any, shape: tuple[int, ...]) -> str | None:
    """``"causal"`` when ``hidden`` (True: masked) hides exactly the keys after each query
    (aligned at the end, as ``CausalMask``) over the last two dims of ``shape``, ``"none"`` when
    it hides nothing, else ``None``."""
    import torch

    if hidden is None or len(shape) < 2:
        return None
    try:
        m = hidden.broadcast_to(shape)
    except RuntimeError:
        return None
    nq, nx = shape[-2:]
    causal = torch.ones(nq, nx, dtype=torch.bool).triu(nx - nq + 1)  # True: key after query
    if bool((m == causal).all()):
        return "causal"
    return "none" if not bool(m.any()) else None


def _additive_mask(c: Capture, node: Any, a: Any, b: Any) -> bool:
    """``scores + mask`` with a constant additive mask (0 or very negative, as HF's eager
    attention adds) -> ``CausalMask``; a mask of zeros vanishes. ``False``: not such an add."""
    folded = [x for x in (a, b) if getattr(x, "name", None) in c.folded]
    if len(folded) != 1 or not all(c.is_tensor(x) for x in (a, b)) or len(c.shape(node)) < 2:
        return False
    scores = b if folded[0] is a else a
    if c.shape(scores) != c.shape(node):
        return False
    kind = _mask_kind(_hidden(c.folded[folded[0].name]), c.shape(node))
    if kind is None:
        return False
    key = c.plain(scores)
    if None in c.dims[key][-2:]:
        return False
    if kind == "none":
        c.alias(node, key)
        return True
    *batch, lq, sk = c.dims[key]
    c.op(node, L.CausalMask(c.axis(lq), c.axis(sk)), [key])
    c.set(node, [*batch, lq, sk])
    return True


#: torch's random factories and their draws: (distribution, low/mean, high/std)
_RANDOM = {
    "aten.rand": ("uniform", 0.0, 1.0),
    "aten.rand_like": ("uniform", 0.0, 1.0),
    "aten.randn": ("normal", 0.0, 1.0),
    "aten.randn_like": ("normal", 0.0, 1.0),
}


def _draw_seed(c: Capture) -> int:
    """A seed per random op of the import, in graph order: each draw its own stream."""
    c.draws += 1
    return c.draws - 1


@import_rule(*_RANDOM)
def _random(c: Capture, node: Any) -> None:
    """``torch.rand``/``randn`` (a size) and ``rand_like``/``randn_like`` (an activation's
    axes): ``ops.uniform``/``ops.normal`` of ncd's counter-based generator, seeded by the
    draw's place in the graph. Same distribution, other numbers than torch's generator: every
    ncd backend draws the same ones, torch's global state is not read."""
    dist, a, b = _RANDOM[c.aten(node)]
    if not c.dtype(node).startswith(("float", "bf")):
        raise c.unsupported(node, f"a {c.dtype(node)} draw (floats only)")
    if c.aten(node).endswith("_like"):
        x = c.plain(node.args[0])
        dims = list(c.dims[x])
    else:
        size = node.args[0]
        if not isinstance(size, list | tuple) or not all(isinstance(n, int) for n in size):
            raise c.unsupported(node, "a size that is not a list of ints")
        dims = [c.axes.new(int(n), "dim", 0) if n != 1 else None for n in size]
    axes = tuple(c.axis(v) for v in c._vars(dims))
    c.op(node, L.Random(axes, dist, _draw_seed(c), a, b, name=dist), [])
    c.set(node, dims)


@import_rule("aten.bernoulli")
def _bernoulli(c: Capture, node: Any) -> None:
    """``torch.bernoulli(p)`` (a tensor of probabilities) and ``x.bernoulli(p)`` (a float):
    1.0 where a uniform draw of ncd's generator is below ``p``, else 0.0 (see ``_random``)."""
    x = c.plain(node.args[0])
    dims = list(c.dims[x])
    axes = tuple(c.axis(v) for v in c._vars(dims))
    p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p")
    seed = _draw_seed(c)
    if isinstance(p, int | float) and not isinstance(p, bool):
        c.op(node, L.Random(axes, "bernoulli", seed, float(p), 0.0, name="bernoulli"), [])
        c.set(node, dims)
        return
    if p is not None:
        raise c.unsupported(node, "a probability that is neither a float nor the input")
    u = c.op(node, L.Random(axes, "uniform", seed, 0.0, 1.0, name="bernoulli"), [])
    c.dims[u] = dims
    c.op(node, L.Binary("lt"), [u, x])
    c.set(node, dims)


import ncd_torch._import_conv  # noqa: E402, F401  (registers the conv and pooling rules)

# registers slice, cat and rotary (llama), select, index, index_select and gather (index), and
# issue 15's reductions (reduce: prod, logsumexp, var/std, argmax/argmin, max/min, cumsum)
# and recurrent layers (rnn: lstm, gru, rnn_tanh/relu)
from ncd_torch import (  # noqa: E402, F401
    _import_index,
    _import_llama,
    _import_reduce,
    _import_rnn,
    _import_shape,
)
