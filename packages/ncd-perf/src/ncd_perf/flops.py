"""FLOPs by kind for each op, as a rule table keyed by op class.

Kinds: ``matrix`` (contractions: tensor cores / FMA arrays), ``vector`` (elementwise arithmetic
and reductions), ``special`` (transcendental functions: exp, tanh, sqrt... on special-function
units), ``reduce`` (the adds and maxes of a reduction, a loop-carried chain a compiler may not
vectorise under strict IEEE; a machine without that rate prices it as ``vector``), ``erf``
(the error function of exact GELU: an exp and a polynomial where there is no unit for it; a
machine without an ``erf`` rate prices it as ``special``). A rule gets the node
and a function mapping an axis to its size expression, and returns ``{kind: count}``; counts
include the node's loop (lifted) axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy as sp

from ncd.graph import Node
from ncd.op import Op, registrar
from ncd.primitives import batchnorm as BN
from ncd.primitives import indexing as X
from ncd.primitives import library as L
from ncd.primitives import random as RND
from ncd.primitives import routing as R
from ncd.primitives import window as W
from ncd.walk import rule_for

__all__ = ["FLOP_RULES", "flops"]

Size = Callable[[Any], sp.Expr]
FlopRule = Callable[[Any, Node, Size], dict[str, sp.Expr]]

FLOP_RULES: dict[type[Op], FlopRule] = {}

SPECIAL_UNARY = {
    *("exp", "log", "sqrt", "rsqrt", "gelu_tanh", "silu", "sigmoid", "tanh"),
    *("cos", "sin", "atan", "asinh", "tan", "asin", "acos", "sinh", "cosh", "atanh", "acosh"),
    *("expm1", "log1p", "selu", "mish", "logsigmoid"),
}
#: functions computed through the error function (``special`` on machines without its rate)
ERF_UNARY = {"gelu", "erf"}


def _kind(fn: str) -> str:
    return "erf" if fn in ERF_UNARY else "special" if fn in SPECIAL_UNARY else "vector"


#: ``@rule(OpClass, ...)`` registers a FLOP rule.
rule = registrar(FLOP_RULES)


def _prod(axes: Any, size: Size) -> sp.Expr:
    return sp.Mul(*(size(a) for a in axes)) if axes else sp.Integer(1)


def _out(node: Node, size: Size) -> sp.Expr:
    """Elements of the node's first output (loop axes included)."""
    return _prod((*node.loop, *node.core_out[0]), size)


@rule(L.Einsum)
def _einsum(op: L.Einsum, node: Node, size: Size) -> dict[str, sp.Expr]:
    every = {a: None for g in op.inputs for a in g}
    n = _prod((*node.loop, *every), size)
    # one multiply-add per point of the iteration space, per extra operand
    return {"matrix": 2 * n * max(1, len(op.inputs) - 1) if op.contracted else n}


@rule(L.Linear)
def _linear(op: L.Linear, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _prod((*node.loop, *op.in_axes, *op.out_axes), size)
    return {"matrix": 2 * n, "vector": _out(node, size) if op.bias else sp.Integer(0)}


@rule(L.Unary)
def _unary(op: L.Unary, node: Node, size: Size) -> dict[str, sp.Expr]:
    if op.fn == "stop_gradient":
        return {}  # the value as it is: no arithmetic
    return {_kind(op.fn): _out(node, size)}


@rule(L.Activation)
def _activation(op: L.Activation, node: Node, size: Size) -> dict[str, sp.Expr]:
    # leaky_relu is a select; the others an exponential each
    return {"vector" if op.fn == "leaky_relu" else "special": _out(node, size)}


@rule(RND.Random)
def _random(op: RND.Random, node: Node, size: Size) -> dict[str, sp.Expr]:
    # the hash is integer work; a normal draw adds a log, a sqrt and a cosine
    n = _out(node, size)
    return {"vector": n, **({"special": 3 * n} if op.dist == "normal" else {})}


@rule(L.Binary, L.Scalar, L.Scale, L.CausalMask, L.Dropout)
def _elementwise(op: Op, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {"vector": _out(node, size)}


@rule(L.Cast)
def _cast(op: L.Cast, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {"vector": _out(node, size)}  # one conversion per element


@rule(L.Reduce)
def _reduce(op: L.Reduce, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _prod((*node.loop, *op.axes_), size)
    if op.fn == "logsumexp":  # a max and a sum reduce, one subtract and one exp each
        return {"special": n, "vector": n, "reduce": 2 * n}
    return {"reduce": n}


@rule(L.Softmax)
def _softmax(op: L.Softmax, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    # max and sum reduce; subtract and divide are elementwise; one exp each
    return {"special": n, "vector": 2 * n, "reduce": 2 * n}


@rule(L.L2Norm)
def _l2norm(op: L.L2Norm, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    rows = _prod(node.loop, size)
    return {"vector": 2 * n, "reduce": n, "special": rows}  # square, sum, divide; one sqrt a row


@rule(L.LayerNorm, L.RMSNorm)
def _norm(op: Op, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    # two reductions (mean and variance), five elementwise ops; one rsqrt per row
    return {"vector": 5 * n, "reduce": 2 * n, "special": _prod(node.loop, size)}


@rule(L.View, L.Constant, L.Learned, L.Embedding)
def _free(op: Op, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {}


@rule(X.Gather, X.Arange)
def _index(op: Op, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {"vector": _out(node, size)}  # one index computation (a clamp, a convert) each


@rule(X.Where)
def _where(op: X.Where, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {"vector": _out(node, size)}  # one compare-and-select per element


@rule(X.Slice, X.Concat)
def _moved(op: Op, node: Node, size: Size) -> dict[str, sp.Expr]:
    return {}  # elements move (their bytes count where they are read), nothing is computed


@rule(X.Rotary)
def _rotary(op: X.Rotary, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    # per element: the angle (a multiply), two products and a sum; a cos and a sin per
    # (position, feature), shared by the lifted instances when a backend keeps the table
    return {"vector": 4 * n, "special": 2 * n}


@rule(R.TopKGate)
def _topk(op: R.TopKGate, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    k = sp.Integer(op.k)
    return {
        "vector": n * sp.Integer(max(1, math.ceil(math.log2(op.k + 1))))
        + 3 * k * n / size(op.axis),
        "special": k * n / size(op.axis),
    }


@rule(R.Experts)
def _experts(op: R.Experts, node: Node, size: Size) -> dict[str, sp.Expr]:
    tokens = _prod(node.loop, size)
    k, d, f = sp.Integer(op.k), size(op.d_model), size(op.d_ff)
    # each token runs only its k routed experts: two d x f matmuls each, plus the gate mix
    return {
        "matrix": tokens * k * 4 * d * f,
        _kind(op.activation): tokens * k * f,
        "vector": tokens * k * (f + 3 * d),
    }


@rule(W.Window)
def _window(op: W.Window, node: Node, size: Size) -> dict[str, sp.Expr]:
    # an index map read in place by its reader: the convolution's work is its einsum's
    # (2 N C_out C_in/groups K L_out), the window's taps are address arithmetic
    return {}


@rule(BN.BatchNorm)
def _batch_norm(op: BN.BatchNorm, node: Node, size: Size) -> dict[str, sp.Expr]:
    n = _out(node, size)
    # subtract, multiply (and scale, shift); one rsqrt per element unless a backend folds it
    return {"vector": (4 if op.affine else 2) * n, "special": n}


def flops(node: Node, size: Size) -> dict[str, sp.Expr]:
    """``{kind: count}`` for one node (an op without a rule counts one vector op per output)."""
    fn = rule_for(FLOP_RULES, node.op)
    if fn is None:
        return {"vector": _out(node, size)} if node.core_out else {}
    return {k: v for k, v in fn(node.op, node, size).items() if v != 0}
