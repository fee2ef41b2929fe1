"""The torch rule of each primitive op: a table keyed by op class.

A rule receives the op, its inputs already arranged as (loop..., core...) (so broadcasting
performs the lift, as in ``ncd.reference``), its parameters as graph nodes, and the emitter
that writes ``torch.fx`` nodes. It returns the output nodes. Other plugins add rules for their
own ops through the ``ncd_register_lowerings`` hook (target ``"torch"``, same signature).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from ncd.errors import SizeError
from ncd.op import registrar
from ncd.primitives import batchnorm as BN
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import random as RND
from ncd.primitives import window as W
from ncd_torch import _functional as fn

if TYPE_CHECKING:
    from ncd_torch._export import Emitter

__all__ = ["TORCH_RULES", "torch_rule"]

Node = Any  # torch.fx.Node
Rule = Callable[[Any, list[Node], dict[str, Node], "Emitter"], list[Node]]

#: op class -> rule(op, inputs, params, emitter) -> outputs.
TORCH_RULES: dict[type, Rule] = {}


#: ``@torch_rule(OpClass)`` registers a rule in ``TORCH_RULES``.
torch_rule = registrar(TORCH_RULES)


UNARY: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "exp": (torch.exp, {}),
    "log": (torch.log, {}),
    "sqrt": (torch.sqrt, {}),
    "rsqrt": (torch.rsqrt, {}),
    "abs": (torch.abs, {}),
    "neg": (torch.neg, {}),
    "relu": (torch.relu, {}),
    "gelu": (F.gelu, {}),
    "gelu_tanh": (F.gelu, {"approximate": "tanh"}),
    "silu": (F.silu, {}),
    "sigmoid": (torch.sigmoid, {}),
    "tanh": (torch.tanh, {}),
    "square": (torch.square, {}),
    "recip": (torch.reciprocal, {}),
    "cos": (torch.cos, {}),
    "sin": (torch.sin, {}),
    "atan": (torch.atan, {}),
    "asinh": (torch.asinh, {}),
    "erf": (torch.erf, {}),
    "floor": (torch.floor, {}),
    "ceil": (torch.ceil, {}),
    "round": (torch.round, {}),
    "trunc": (torch.trunc, {}),
    "sign": (fn.sign, {}),
    "tan": (torch.tan, {}),
    "asin": (torch.asin, {}),
    "acos": (torch.acos, {}),
    "sinh": (torch.sinh, {}),
    "cosh": (torch.cosh, {}),
    "atanh": (torch.atanh, {}),
    "acosh": (torch.acosh, {}),
    "expm1": (torch.expm1, {}),
    "log1p": (torch.log1p, {}),
    "selu": (F.selu, {}),
    "mish": (F.mish, {}),
    "hardswish": (F.hardswish, {}),
    "hardsigmoid": (F.hardsigmoid, {}),
    "softsign": (F.softsign, {}),
    "logsigmoid": (F.logsigmoid, {}),
    "relu6": (F.relu6, {}),
    "stop_gradient": (torch.detach, {}),
}
BINARY: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "max": torch.maximum,
    "min": torch.minimum,
    # not operator.pow: fx prints it infix, and a negative constant base, -1.5 ** x, is -(1.5 ** x)
    "pow": torch.pow,
    "floordiv": fn.floordiv,
    "mod": fn.remainder,
    # comparisons: 1.0 / 0.0 in the operands' float dtype, as ncd's
    **{name: getattr(fn, name) for name in L.COMPARISONS},
}
REDUCE: dict[str, Callable[..., Any]] = {
    "sum": torch.sum,
    "max": torch.amax,
    "min": torch.amin,
    "mean": torch.mean,
    "logsumexp": torch.logsumexp,
}


def _trailing(n: int) -> tuple[int, ...]:
    return tuple(range(-n, 0))


@torch_rule(L.Einsum)
def _einsum(op: L.Einsum, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    letters: dict[Any, str] = {}
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for a in (*[a for g in op.inputs for a in g], *op.output):
        letters.setdefault(a, alphabet[len(letters)])
    lhs = ",".join("..." + "".join(letters[a] for a in g) for g in op.inputs)
    rhs = "..." + "".join(letters[a] for a in op.output)
    return [em.call(torch.einsum, f"{lhs}->{rhs}", *xs)]


@torch_rule(L.Linear)
def _linear(op: L.Linear, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    bias = ps.get("bias")
    if len(op.in_axes) == 1 and len(op.out_axes) == 1:
        return [em.call(F.linear, xs[0], ps["weight"], bias)]
    return [em.call(fn.linear_nd, xs[0], ps["weight"], bias, len(op.in_axes), len(op.out_axes))]


@torch_rule(L.Unary)
def _unary(op: L.Unary, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    f, kw = UNARY[op.fn]
    return [em.call(f, xs[0], **kw)]


@torch_rule(L.Activation)
def _activation(op: L.Activation, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    f = {
        "leaky_relu": F.leaky_relu,
        "elu": F.elu,
        "celu": F.celu,
        "softplus": F.softplus,
    }[op.fn]
    args = (op.alpha, op.beta) if op.fn == "softplus" else (op.alpha,)
    return [em.call(f, xs[0], *args)]


@torch_rule(L.Binary)
def _binary(op: L.Binary, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(BINARY[op.fn], xs[0], xs[1])]


@torch_rule(L.Scalar)
def _scalar(op: L.Scalar, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    # a whole constant of integer arithmetic is a Python int: torch keeps an integer tensor
    # an integer (and a float tensor its format either way)
    c: float | int = op.const if op.whole is None else op.whole
    if op.fn in ("max", "min"):  # symmetric: clamp keeps the tensor's dtype
        key = "min" if op.fn == "max" else "max"
        return [em.call(torch.clamp, xs[0], **{key: c})]
    f = BINARY[op.fn]
    return [em.call(f, c, xs[0]) if op.reverse else em.call(f, xs[0], c)]


@torch_rule(L.Scale)
def _scale(op: L.Scale, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    sizes = [em.size(a) for a in op.by]
    if all(isinstance(s, int) for s in sizes):
        return [em.call(operator.mul, xs[0], float(math.prod(sizes)) ** op.power)]
    total: Any = sizes[0]
    for s in sizes[1:]:
        total = em.call(operator.mul, total, s)
    return [em.call(operator.mul, xs[0], em.call(operator.pow, total, op.power))]


@torch_rule(L.Reduce)
def _reduce(op: L.Reduce, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    if not op.axes_:  # torch reads an empty dim list as "every dim"
        return [xs[0]]
    if op.fn == "prod":  # torch.prod takes one dim: the trailing ones flattened first
        k = len(op.axes_)
        x = em.call(torch.flatten, xs[0], -k) if k > 1 else xs[0]
        return [em.call(torch.prod, x, -1)]
    return [em.call(REDUCE[op.fn], xs[0], dim=_trailing(len(op.axes_)))]


@torch_rule(L.Softmax)
def _softmax(op: L.Softmax, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(torch.softmax, xs[0], -1)]


@torch_rule(L.L2Norm)
def _l2norm(op: L.L2Norm, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.l2norm, xs[0], op.eps)]


@torch_rule(L.LayerNorm)
def _layernorm(op: L.LayerNorm, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    shape = em.sizes(op.axes_, xs[0])
    return [em.call(F.layer_norm, xs[0], shape, ps.get("weight"), ps.get("bias"), op.eps)]


@torch_rule(L.RMSNorm)
def _rmsnorm(op: L.RMSNorm, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.rmsnorm, xs[0], ps.get("weight"), len(op.axes_), op.eps)]


@torch_rule(L.CausalMask)
def _causal(op: L.CausalMask, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.causal_mask, xs[0], -math.inf if op.fill == "-inf" else 0.0)]


@torch_rule(L.Embedding)
def _embedding(op: L.Embedding, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    if len(op.out_axes) == 1:
        return [em.call(F.embedding, xs[0], ps["weight"])]
    return [em.call(operator.getitem, ps["weight"], xs[0])]


@torch_rule(L.Cast)
def _cast(op: L.Cast, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    from ncd_torch._dtypes import torch_dtype

    to = torch_dtype(op.to, f"{op.label}'s target")
    if op.to.kind == "int":
        return [em.call(fn.truncate, xs[0], to)]
    return [em.method(xs[0], "to", to)]


@torch_rule(L.Dropout)
def _dropout(op: L.Dropout, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    if op.seed is not None:  # the counter-based mask of every backend
        from ncd import counter_rng

        order = counter_rng.canonical(em.loop)
        dims = [em.loop.index(a) for a in order]
        sizes = [em.size(a) for a in order]
        return [em.call(counter_dropout, xs[0], dims, sizes, op.p, op.seed)]
    # A real nn.Dropout submodule, so module.train()/eval() switch it like any PyTorch model.
    return [em.submodule("dropout", torch.nn.Dropout(op.p), xs[0])]


def _mul32(h: torch.Tensor, c: int) -> torch.Tensor:
    """``h * c mod 2^32`` for ``0 <= h, c < 2^32`` in int64 (torch has no uint32 arithmetic):
    split ``c`` in 16-bit halves so no product leaves int64."""
    lo = h * (c & 0xFFFF)
    hi = ((h * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & 0xFFFFFFFF


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    from ncd.counter_rng import M1, M2

    h = h ^ (h >> 16)
    h = _mul32(h, M1)
    h = h ^ (h >> 13)
    h = _mul32(h, M2)
    return h ^ (h >> 16)


def counter_bits(
    ndim: int, dims: list[int], sizes: list[int], k: int, device: torch.device
) -> torch.Tensor:
    """``ncd.counter_rng.bits`` under key ``k`` of a value of ``ndim`` dims (int64, broadcast
    along the dims it does not vary on): positions row-major over the dims ``dims`` (the
    value's axes in canonical order, of ``sizes``), two fmix32 rounds."""
    pos = torch.zeros((), dtype=torch.int64, device=device)
    for d, n in zip(dims, sizes, strict=True):
        shape = [1] * ndim
        shape[d] = n
        ramp = torch.arange(n, dtype=torch.int64, device=device).reshape(shape)
        pos = ((pos * n) & 0xFFFFFFFF) + ramp
    h = _fmix32((pos & 0xFFFFFFFF) ^ k)
    return _fmix32((h + k) & 0xFFFFFFFF)


def counter_dropout(
    x: torch.Tensor, dims: list[int], sizes: list[int], p: float, seed: int
) -> torch.Tensor:
    """Seeded dropout as ``ncd.counter_rng`` draws it (``counter_bits`` of the seed's key)."""
    from ncd import counter_rng

    h = counter_bits(x.dim(), dims, sizes, counter_rng.key(seed), x.device)
    keep = (h >= counter_rng.threshold(p)).expand(x.shape)
    return torch.where(keep, x * counter_rng.scale(p), torch.zeros((), dtype=x.dtype))


class CounterRandom(torch.nn.Module):
    """``ops.uniform``/``normal``/``bernoulli`` as ``ncd.primitives.random`` draws them, in
    float64 then cast to ``dtype``, on the device of a 0-d buffer (not saved)."""

    def __init__(
        self, dist: str, a: float, b: float, seed: int, dims: list[int], dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.dist, self.a, self.b, self.seed, self.dims = dist, a, b, seed, dims
        self.anchor: torch.Tensor
        self.register_buffer("anchor", torch.zeros((), dtype=dtype), persistent=False)

    def forward(self, *sizes: int) -> torch.Tensor:
        from ncd import counter_rng
        from ncd.primitives.random import stream_keys

        k1, k2 = stream_keys(self.seed)
        order = [sizes[d] for d in self.dims]
        dev, n = self.anchor.device, len(sizes)
        h = counter_bits(n, self.dims, order, k1, dev).expand(*sizes)
        if self.dist == "bernoulli":
            out = (h < counter_rng.threshold(self.a)).to(torch.float64)
        else:
            u = ((h >> 8).to(torch.float64) + 0.5) * 2.0**-24
            if self.dist == "uniform":
                out = self.a + (self.b - self.a) * u
            else:
                v = counter_bits(n, self.dims, order, k2, dev).expand(*sizes)
                v = ((v >> 8).to(torch.float64) + 0.5) * 2.0**-24
                out = self.a + self.b * torch.sqrt(-2.0 * torch.log(u)) * torch.cos(
                    2.0 * math.pi * v
                )
        return out.to(self.anchor.dtype)

    def extra_repr(self) -> str:
        return f"{self.dist}, a={self.a:g}, b={self.b:g}, seed={self.seed}"


@torch_rule(RND.Random)
def _random(op: RND.Random, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    from ncd import counter_rng
    from ncd_torch._dtypes import torch_dtype

    order = counter_rng.canonical(op.axes_)
    dims = [op.axes_.index(a) for a in order]
    dtype = torch_dtype(op.format, f"{op.label}'s format")
    draw = CounterRandom(op.dist, op.a, op.b, op.seed, dims, dtype)
    return [em.submodule("random", draw, *(em.size(a) for a in op.axes_))]


@torch_rule(L.View)
def _view(op: L.View, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    x = xs[0]
    base = em.lead  # the arranged input has exactly len(loop) leading dims
    cursor = base
    for axis, parts in zip(op.in_axes, op.in_parts, strict=True):
        if len(parts) != 1 or parts[0] != axis:
            sizes = [em.size(a, allow_free=True) for a in parts]
            if sizes.count(None) > 1:
                free = ", ".join(
                    a.describe() for a, s in zip(parts, sizes, strict=True) if s is None
                )
                raise SizeError(
                    f"{op.label}: the split of {axis.describe()} has several free "
                    f"parts ({free}). Fix: bind all but one of them."
                )
            x = em.method(x, "unflatten", cursor, tuple(-1 if s is None else s for s in sizes))
        cursor += len(parts)
    elems = op.elementary
    order = [a for g in op.out_parts for a in g]
    if order != list(elems):
        perm = (*range(base), *(base + elems.index(a) for a in order))
        x = em.method(x, "permute", *perm)
    cursor = base
    for _axis, parts in zip(op.out_axes, op.out_parts, strict=True):
        if len(parts) > 1:
            x = em.method(x, "flatten", cursor, cursor + len(parts) - 1)
        cursor += 1
    return [x]


@torch_rule(L.Constant)
def _constant(op: L.Constant, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    from ncd_torch._dtypes import torch_dtype

    sizes = em.sizes(op.axes_, None) if op.axes_ else ()
    fill = fn.Fill(op.value, torch_dtype(op.format, f"{op.label}'s format"))
    return [em.submodule("const", fill, *sizes)]


@torch_rule(L.Learned)
def _learned(op: L.Learned, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    # a Parameter (``ncd.grad``'s view of another op's weight or bias) names which one it is
    return [ps[getattr(op, "param", "weight")]]


@torch_rule(X.Where)
def _where(op: X.Where, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.where, xs[0], xs[1], xs[2])]


@torch_rule(X.Gather)
def _gather(op: X.Gather, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.gather, xs[0], xs[1])]


@torch_rule(X.Arange)
def _arange(op: X.Arange, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    from ncd_torch._dtypes import torch_dtype

    ramp = fn.Ramp(op.start, op.step, torch_dtype(op.format, f"{op.label}'s format"))
    return [em.submodule("arange", ramp, em.size(op.axis))]


@torch_rule(X.Slice)
def _slice(op: X.Slice, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    m = em.size(op.out)
    if not op.from_end:
        return [em.call(torch.narrow, xs[0], -1, op.start, m)]
    # the last start + m elements but start: the length read from the input when it is free
    n = em.ncd.size(op.axis)
    if isinstance(n, int) and isinstance(m, int):
        return [em.call(torch.narrow, xs[0], -1, n - m - op.start, m)]
    n = em.method(xs[0], "size", -1) if n is None else n
    first = em.call(operator.sub, em.call(operator.sub, n, m), op.start)
    return [em.call(torch.narrow, xs[0], -1, first, m)]


@torch_rule(X.Concat)
def _concat(op: X.Concat, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    return [em.call(fn.concat, *xs)]


@torch_rule(X.Rotary)
def _rotary(op: X.Rotary, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    args: list[Any] = [xs[0], op.base]
    if op.inverse or op.freqs or op.scale != 1.0:
        args.append(op.inverse)
    if op.freqs or op.scale != 1.0:
        args += [op.freqs, op.scale]
    return [em.call(fn.rotary, *args)]


@torch_rule(W.Window)
def _window(op: W.Window, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    k = em.size(op.k)
    args = (k, op.stride, op.padding, op.dilation, op.fill, op.upsample, op.extra, op.reverse)
    return [em.call(fn.window, xs[0], *args)]


@torch_rule(BN.BatchNorm)
def _batch_norm(op: BN.BatchNorm, xs: list[Node], ps: dict[str, Node], em: Emitter) -> list[Node]:
    stats = (ps["running_mean"], ps["running_var"], ps.get("weight"), ps.get("bias"))
    dim = BN.channel_dim(op, tuple(em.loop))
    return [em.call(fn.batch_norm, xs[0], dim, *stats, op.eps)]
