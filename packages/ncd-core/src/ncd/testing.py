"""The conformance suite every backend runs against the reference interpreter.

``cases()`` lists canonical models (every op kind, lifts, compositions, awkward sizes 1, 7, 13)
with seeded inputs and parameters; ``BackendConformance`` is a pytest base class a backend's
tests subclass::

    class TestMyBackend(ncd.testing.BackendConformance):
        target = "mybackend"

``free_sizes = True`` runs every case with the sizes its inputs determine left free when
compiling (``Case.free_model``): a backend that takes sizes at run time is checked there too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import numpy as np

from ncd import conv, nn, ops
from ncd._term import Term, identity
from ncd.axis import ArrayType, Axis
from ncd.params import init
from ncd.reference import run
from ncd.sizes import WindowSize

__all__ = [
    "ELEMENTWISE",
    "MODEL",
    "BackendConformance",
    "Case",
    "case_by_name",
    "cases",
    "assert_close_in_format",
    "contraction",
    "position_cases",
    "random_inputs",
]

# Tolerances for a target against the reference computing the same formats, in units of the
# format's eps times the result's scale (what tests/opencl and tests/cuda compare with):
ELEMENTWISE = 2.0  # one ulp flip either side
MODEL = 8.0  # a flip carried through a few layers


def contraction(k: int) -> float:
    """The factor for a sum of ``k`` products: the normaliser's 2 plus sqrt(k) for the order."""
    return ELEMENTWISE + math.sqrt(k)


def assert_close_in_format(got: Any, want: Any, fmt: Any, c: float) -> None:
    """``got`` (a target's output) within ``c`` epsilons of ``fmt`` of ``want`` (the reference
    computing the same formats): ``|got - want| <= c * eps * (|want| + scale)`` elementwise,
    ``scale = max(1, max |want|)``; both in ``fmt``'s NumPy type."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == fmt.numpy, (got.dtype, want.dtype, fmt)
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
    tol = c * fmt.eps * (np.abs(w) + scale)
    bad = np.abs(g - w) > tol
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.size} elements off by more than {c} eps; worst "
        f"{float(np.max(np.abs(g - w) / (fmt.eps * (np.abs(w) + scale)))):.2f} eps"
    )


def random_inputs(model: Any, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal inputs in each input's format (token inputs: integers below 11) for a
    bound model or graph."""
    g = getattr(model, "graph", model)
    rng = np.random.default_rng(seed)
    out = []
    for v in g.inputs:
        t = g.values[v]
        shape = tuple(g.size(a) for a in t.axes)
        if t.dtype == "int64":
            out.append(rng.integers(0, 11, shape))
        else:
            out.append(rng.standard_normal(shape).astype(t.dtype.numpy))
    return out


@attrs.frozen
class Case:
    """A bound model with seeded inputs; ``expected()`` is the reference output."""

    name: str
    build: Callable[[], Term]
    shapes: tuple[tuple[int, ...], ...] = ()
    int_inputs: tuple[int, ...] = ()  # input indices holding token ids in [0, 11)
    positive: bool = False
    tags: frozenset[str] = frozenset()

    @functools.cached_property
    def model(self) -> Term:
        return self.build()

    def inputs(self, dtype: Any = np.float32) -> list[np.ndarray]:
        rng = np.random.default_rng(abs(hash(self.name)) % (2**32))
        graph = self.model.graph
        out: list[np.ndarray] = []
        for k, v in enumerate(graph.inputs):
            shape = graph.shape(v)
            if k in self.int_inputs:
                out.append(rng.integers(0, 11, shape).astype(np.int64))
            elif graph.values[v].dtype == "bool":
                out.append(rng.random(shape) < 0.5)
            elif self.positive:
                out.append(rng.uniform(0.5, 2.0, shape).astype(dtype))
            else:
                out.append(rng.standard_normal(shape).astype(dtype))
        return out

    def params(self, dtype: Any = np.float32) -> dict[str, np.ndarray]:
        return init(self.model, seed=1, dtype=dtype)

    def free_model(self) -> Any:
        """The case's graph with every size class left free that the inputs fix on their own:
        classes of input axes that no parameter holds and no view constraint ties (a
        parameter's shape, or a product, would need the size before running)."""
        graph = self.model.graph
        held = {a.uid for n in graph.nodes for p in n.op.params() for a in p.axes}
        held.update(a.uid for n in graph.nodes for a in n.op.fixed_axes())
        for n in graph.nodes:
            for c in n.op.constraints():
                # a window's input length may stay free: its output follows at run time
                tied = (c.out, c.k) if isinstance(c, WindowSize) else (c.result, *c.factors)
                held.update(a.uid for a in tied)
        seen = {a.uid for v in graph.inputs for a in graph.values[v].axes}
        free = {}
        for _, members in graph._classes:
            uids = {a.uid for a in members}
            if uids & seen and not uids & held:
                free.update(dict.fromkeys(uids))
        return graph.with_sizes(free)

    def expected(self, dtype: Any = np.float64) -> list[np.ndarray]:
        out = run(self.model, *self.inputs(dtype), params=self.params(dtype))
        return list(out) if isinstance(out, tuple) else [out]


def _a(name: str, size: int) -> Axis:
    return Axis(name, size=size)


def _cases() -> list[Case]:
    cs: list[Case] = []
    for fn in ops.UNARY_FNS:
        cs.append(
            Case(
                f"unary_{fn}",
                functools.partial(_unary_case, fn),
                positive=fn in ("log", "sqrt", "rsqrt", "recip", "log1p"),
                tags=frozenset({"elementwise"}),
            )
        )
    for fn, alpha, beta in (
        ("leaky_relu", 0.01, 0.0),
        ("leaky_relu", -0.3, 0.0),
        ("elu", 1.0, 0.0),
        ("celu", 0.5, 0.0),
        ("softplus", 1.0, 20.0),
        ("softplus", 2.0, 0.5),
    ):
        cs.append(
            Case(
                f"activation_{fn}_{alpha:g}_{beta:g}",
                functools.partial(_activation_case, fn, alpha, beta),
                tags=frozenset({"elementwise"}),
            )
        )
    for dist, a, b in (("uniform", -2.0, 3.0), ("normal", 1.0, 0.5), ("bernoulli", 0.3, 0.0)):
        cs.append(
            Case(
                f"random_{dist}",
                functools.partial(_random_case, dist, a, b),
                tags=frozenset({"source"}),
            )
        )
    cs.append(
        Case(
            "clamp",
            lambda: ops.clamp(-0.5, 0.75).over(_a("r", 13)),
            tags=frozenset({"elementwise"}),
        )
    )
    for fn in ops.BINARY_FNS:

        def bin_model(fn: str = fn) -> Term:
            r, c = _a("r", 7), _a("c", 13)
            return identity((r, c), (c,)) >> ops.binary(fn)

        cs.append(
            Case(
                f"binary_{fn}_broadcast",
                bin_model,
                positive=fn in ("pow", "div"),
                tags=frozenset({"elementwise"}),
            )
        )
        cs.append(
            Case(
                f"scalar_{fn}",
                functools.partial(_scalar_case, fn),
                positive=fn == "pow",
                tags=frozenset({"elementwise"}),
            )
        )
    cs.append(Case("scalar_sub_reverse", lambda: ops.sub(2.0, reverse=True).over(_a("r", 7))))
    cs.append(Case("scale_by_size", lambda: ops.scale(_a("d", 13)).over(_a("r", 7))))
    cs.append(Case("einsum_matmul_7x13x1", lambda: ops.einsum("a b, b c -> a c", a=7, b=13, c=1)))
    cs.append(Case("einsum_matmul_13x7x13", lambda: ops.einsum("a b, b c -> a c", a=13, b=7, c=13)))
    cs.append(
        Case(
            "einsum_batched_lifted",
            lambda: ops.einsum("q d, x d -> q x", q=7, x=13, d=5).over(_a("h", 3)),
        )
    )
    cs.append(Case("einsum_outer", lambda: ops.einsum("a, b -> a b", a=7, b=13)))
    cs.append(Case("einsum_transpose", lambda: ops.einsum("a b -> b a", a=7, b=13)))
    cs.append(Case("einsum_two_contracted", lambda: ops.einsum("a b c, b c -> a", a=7, b=3, c=13)))
    cs.append(Case("linear_bias_lifted", lambda: ops.linear("d -> e", d=13, e=7).over(_a("s", 7))))
    cs.append(
        Case(
            "linear_nobias_multi",
            lambda: ops.linear("d -> h e", d=7, h=3, e=5, bias=False).over(_a("s", 13)),
        )
    )
    for fn in ops.REDUCE_FNS:
        cs.append(Case(f"reduce_{fn}", functools.partial(_reduce_case, fn)))
    cs.extend(_composed_reduction_cases())
    cs.extend(_shape_cases())
    cs.extend(_logic_cases())
    cs.extend(_integer_cases())
    cs.append(Case("reduce_two_axes", lambda: ops.sum([_a("a", 7), _a("b", 13)]).over(_a("r", 1))))
    cs.append(Case("softmax_13", lambda: ops.softmax(_a("x", 13)).over(_a("r", 7))))
    cs.append(Case("softmax_1", lambda: ops.softmax(_a("x", 1)).over(_a("r", 7))))
    cs.append(Case("l2norm", lambda: ops.l2norm(_a("x", 13)).over(_a("r", 7))))
    cs.append(Case("layernorm", lambda: ops.layernorm(_a("d", 13)).over(_a("s", 7))))
    cs.append(
        Case("layernorm_plain", lambda: ops.layernorm(_a("d", 7), affine=False).over(_a("s", 13)))
    )
    cs.append(Case("rmsnorm", lambda: ops.rmsnorm(_a("d", 13)).over(_a("s", 7))))
    cs.append(
        Case("causal_softmax", lambda: ops.causal_mask(_a("q", 7), _a("x", 13)) >> ops.softmax("x"))
    )
    cs.append(
        Case(
            "embedding",
            lambda: ops.embedding("vocab -> d", vocab=11, d=7).over(_a("s", 13)),
            int_inputs=(0,),
        )
    )
    cs.extend(_indexing_cases())
    cs.extend(_window_cases())
    cs.append(Case("dropout_inference", lambda: ops.dropout(0.5).over(_a("r", 7))))
    cs.append(Case("view_split", lambda: ops.rearrange("s (h e) -> s h e", s=7, h=3, e=5)))
    cs.append(Case("view_merge_permute", lambda: ops.rearrange("a b c -> (c a) b", a=3, b=7, c=5)))
    cs.append(Case("view_rename", lambda: ops.rename(_a("s", 13), "t").over(_a("r", 7))))
    cs.append(
        Case(
            "constant_add",
            lambda: identity([_a("r", 7)]) @ ops.constant(0.5, [_a("c", 13)]) >> ops.add(),
        )
    )
    cs.append(Case("learned_add", lambda: _learned_add()))
    cs.append(
        Case(
            "attention_one_line",
            lambda: (
                ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")
            ).bind(q=7, x=13, d=5, v=3),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "attention_q1",
            lambda: nn.attention().bind(q=1, x=13, d=7, v=7),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "attention_causal_lifted",
            lambda: nn.attention(causal=True).over("h").bind(h=2, q=13, x=13, d=7, v=5),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "spherical_attention",
            lambda: nn.spherical_attention().bind(q=7, x=13, d=5, v=3),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "mlp",
            lambda: nn.mlp().over("s").bind(s=7, d_model=13, d_ff=29),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "mha",
            lambda: nn.multihead_attention().bind(seq=13, d_model=12, heads=3, d_head=4),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "transformer_block",
            lambda: nn.transformer_block().bind(seq=7, d_model=12, heads=2, d_head=5, d_ff=13),
            tags=frozenset({"model"}),
        )
    )
    cs.append(
        Case(
            "gpt_2_layers",
            lambda: nn.gpt(layers=2).bind(seq=13, d_model=16, heads=2, d_head=8, d_ff=24, vocab=11),
            int_inputs=(0,),
            tags=frozenset({"model"}),
        )
    )
    return cs


def _indexing_cases() -> list[Case]:
    """Selects, slices, concatenations, rotary embeddings, gathers and index ramps at sizes of
    1, odd and awkward."""

    def where() -> Term:
        r, c = _a("r", 7), _a("c", 13)
        return identity((r, c), (c,), (r, c)) >> ops.where()

    def concat(n: int, m: int) -> Term:
        r, a, b = _a("r", 7), _a("a", n), _a("b", m)
        return identity((r, a), (b,)) >> ops.concat("a, b -> c", a=a, b=b, c=n + m)

    def rotary(s: int, d: int) -> Term:
        return ops.rotary(_a("s", s), _a("d", d)).over(_a("h", 3))

    def rows(v: int, b: int, s: int, d: int) -> Term:
        ids = ArrayType((_a("b", b), _a("s", s)), "int64")
        return identity(ids, (_a("v", v), _a("d", d))) >> ops.gather("v")

    def along(b: int, s: int, v: int) -> Term:
        bb, ss = _a("b", b), _a("s", s)
        return identity(ArrayType((bb, ss), "int64"), (bb, ss, _a("v", v))) >> ops.gather("v")

    def ramp(r: int, n: int) -> Term:
        axis = _a("n", n)
        return (identity((_a("r", r), axis)) @ ops.arange(axis, start=-3.0, step=0.5)) >> ops.add()

    return [
        Case("where_broadcast", where, tags=frozenset({"elementwise"})),
        Case("slice_13_5_7", lambda: ops.slice(_a("d", 13), "e", start=5, e=7).over(_a("r", 7))),
        Case("slice_1", lambda: ops.slice(_a("d", 1), "e", e=1).over(_a("r", 13))),
        Case(
            "slice_from_end_13_2_3",
            lambda: ops.slice(_a("d", 13), "e", start=2, from_end=True, e=3).over(_a("r", 7)),
        ),
        Case("concat_7_13", functools.partial(concat, 7, 13)),
        Case("concat_1_1", functools.partial(concat, 1, 1)),
        Case("rotary_13x8", functools.partial(rotary, 13, 8)),
        Case("rotary_1x2", functools.partial(rotary, 1, 2)),
        Case("rotary_301x6", functools.partial(rotary, 301, 6)),
        Case(
            "rotary_table_13x6",  # a scaled RoPE: one frequency per pair, cos and sin scaled
            lambda: ops.rotary(_a("s", 13), _a("d", 6), freqs=(1.0, 0.1, 3e-3), scale=0.8).over(
                _a("h", 3)
            ),
        ),
        # ids are drawn in [0, 11): tables of 11 rows and more
        Case("gather_rows_13", functools.partial(rows, 13, 7, 1, 5), int_inputs=(0,)),
        Case("gather_rows_301", functools.partial(rows, 301, 1, 13, 7), int_inputs=(0,)),
        Case("gather_along_11", functools.partial(along, 7, 13, 11), int_inputs=(0,)),
        Case("arange_7x13", functools.partial(ramp, 7, 13)),
        Case("arange_1x1", functools.partial(ramp, 1, 1)),
        Case(
            "pad_13_2_3",
            lambda: ops.pad(_a("l", 13), "lp", before=2, after=3, value=-1.5).over(_a("r", 7)),
        ),
        Case("pad_1_0_1", lambda: ops.pad(_a("l", 1), "lp", after=1).over(_a("r", 1))),
    ]


def _window_cases() -> list[Case]:
    """Sliding windows, convolutions (windows then an einsum) and pooling at sizes of 1, odd
    and awkward, channels not multiples of 8, with stride, padding, dilation and groups."""

    def window(n: int, k: int, s: int, p: int, d: int, fill: float) -> Term:
        w = ops.window(_a("l", n), "o", "j", j=k, stride=s, padding=p, dilation=d, fill=fill)
        return w.over(_a("c", 3))

    def conv1d(ci: int, co: int, k: int, n: int, s: int, p: int, d: int, g: int) -> Term:
        c = conv.conv1d(ci, co, k, stride=s, padding=p, dilation=d, groups=g, length=n)
        return c.over(_a("b", 2))

    def conv2d(ci: int, co: int, k: int, h: int, w: int, s: int, p: int, d: int, g: int) -> Term:
        c = conv.conv2d(ci, co, k, stride=s, padding=p, dilation=d, groups=g, height=h, width=w)
        return c.over(_a("b", 2))

    def conv_t1d(ci: int, co: int, k: int, n: int, s: int, p: int, e: int, d: int, g: int) -> Term:
        c = conv.conv_transpose1d(
            ci, co, k, stride=s, padding=p, output_padding=e, dilation=d, groups=g, length=n
        )
        return c.over(_a("b", 2))

    def conv3d(ci: int, co: int, d: int, h: int, w: int, g: int) -> Term:
        c = conv.conv3d(ci, co, (3, 2, 3), stride=(2, 1, 1), padding=(1, 0, 1), groups=g)
        return c.over(_a("b", 2)).bind(d=d, h=h, w=w)

    def conv_bn_relu(ci: int, co: int, h: int, w: int) -> Term:
        c = Axis("c_out", size=co)
        t = conv.conv2d(ci, c, 3, padding=1, height=h, width=w) >> conv.batch_norm(c)
        return (t >> ops.unary("relu")).over(_a("b", 2))

    def pool(kind: str, k: int, s: int, p: int, h: int, w: int) -> Term:
        t: Term = getattr(conv, kind)(k, s, p, height=h, width=w)
        return t.over(_a("b", 2), _a("c", 3))

    P = functools.partial
    return [
        Case("window_13_k3_s2_p1_d2", P(window, 13, 3, 2, 1, 2, 0.0)),
        Case("window_1_k1", P(window, 1, 1, 1, 0, 1, 0.0)),
        Case("window_7_k3_pad_inf", P(window, 7, 3, 1, 1, 1, -math.inf)),
        Case("conv1d_3_5_k3_13", P(conv1d, 3, 5, 3, 13, 1, 0, 1, 1)),
        Case("conv1d_6_10_s2_p1_d2_g2", P(conv1d, 6, 10, 3, 13, 2, 1, 2, 2)),
        Case("conv1d_1_1_k1_1", P(conv1d, 1, 1, 1, 1, 1, 0, 1, 1)),
        Case("conv1d_depthwise_7", P(conv1d, 7, 7, 3, 7, 1, 1, 1, 7)),
        Case("conv2d_3_13_k3_7x13_p1", P(conv2d, 3, 13, 3, 7, 13, 1, 1, 1, 1)),
        Case("conv2d_6_10_s2_p1_d2_g2", P(conv2d, 6, 10, 3, 13, 7, 2, 1, 2, 2)),
        Case("conv2d_1x1_1", P(conv2d, 1, 1, 1, 1, 1, 1, 0, 1, 1)),
        Case("conv2d_batch_norm_relu_5_13", P(conv_bn_relu, 5, 13, 7, 13)),
        Case("conv3d_4_6_g2_5x7x1", P(conv3d, 4, 6, 5, 7, 1, 2)),
        Case("conv_transpose1d_3_5_k3_13", P(conv_t1d, 3, 5, 3, 13, 1, 0, 0, 1, 1)),
        Case("conv_transpose1d_6_10_s2_p1_op1_d2_g2", P(conv_t1d, 6, 10, 3, 13, 2, 1, 1, 2, 2)),
        Case("conv_transpose1d_1_1_k1_1", P(conv_t1d, 1, 1, 1, 1, 1, 0, 0, 1, 1)),
        Case("conv_transpose1d_4_6_k4_s3_p2_op2_g2", P(conv_t1d, 4, 6, 4, 7, 3, 2, 2, 1, 2)),
        Case("max_pool2d_3_2_1", P(pool, "max_pool2d", 3, 2, 1, 13, 7)),
        Case("avg_pool2d_3_2_1", P(pool, "avg_pool2d", 3, 2, 1, 13, 7)),
        Case("max_pool2d_1", P(pool, "max_pool2d", 1, 1, 0, 1, 1)),
    ]


#: a map into the domain of the functions defined on part of the line (so no case compares NaNs)
_DOMAIN = {
    "asin": lambda: ops.unary("tanh"),
    "acos": lambda: ops.unary("tanh"),
    "atanh": lambda: ops.unary("tanh") >> ops.mul(0.99),
    "acosh": lambda: ops.unary("square") >> ops.add(1.5),  # away from its pole at 1
    # |x| < 1.2, away from the poles at +-pi/2 where float32 rounding of x is amplified
    "tan": lambda: ops.unary("tanh") >> ops.mul(1.2),
}


def _unary_case(fn: str) -> Term:
    f = ops.unary(fn)
    into = _DOMAIN.get(fn)
    return (f if into is None else into() >> f).over(_a("r", 7), _a("c", 13))


def _random_case(dist: str, a: float, b: float) -> Term:
    """Draws over [7, 13] added to the input (so the case has one, as every case does)."""
    r, c = _a("r", 7), _a("c", 13)
    draw = ops.prim(ops.Random((r, c), dist, 5, a, b))
    return identity([r, c]) @ draw >> ops.add()


def _activation_case(fn: str, alpha: float, beta: float) -> Term:
    return ops.prim(ops.Activation(fn, alpha, beta)).over(_a("r", 7), _a("c", 13))


def _scalar_case(fn: str) -> Term:
    return ops.scalar(fn, 1.5).over(_a("r", 13))


def _reduce_case(fn: str) -> Term:
    return ops.reduce(fn, _a("c", 13)).over(_a("r", 7))


#: issue 15's reductions, each over the axis ``c`` given (lifted over ``r``)
_REDUCTIONS: dict[str, Callable[[Axis], Term]] = {
    "logsumexp": ops.logsumexp,
    "argmax": ops.argmax,
    "argmin": ops.argmin,
    "cumsum": lambda c: ops.cumsum(c, "c_cum"),
    "cumprod": ops.cumprod,
    "var_biased": lambda c: ops.var(c, correction=0),
    "max_with_indices": ops.max_with_indices,
}


def _reduction_case(kind: str, n: int, rows: int = 7) -> Term:
    return _REDUCTIONS[kind](_a("c", n)).over(_a("r", rows))


def _composed_reduction_cases() -> list[Case]:
    """logsumexp, var/std, argmax/argmin, cumsum/cumprod (compositions) and prod over two axes
    (issue 15) at awkward sizes."""
    P = functools.partial
    built: list[tuple[str, Callable[[], Term]]] = [
        (f"{kind}_{n}", P(_reduction_case, kind, n)) for kind in _REDUCTIONS for n in (1, 7, 13)
    ]
    built += [
        ("var_13", lambda: ops.var(_a("c", 13)).over(_a("r", 7))),
        ("std_7", lambda: ops.std(_a("c", 7)).over(_a("r", 13))),
        ("prod_two_axes", lambda: ops.prod([_a("a", 3), _a("b", 5)]).over(_a("r", 7))),
    ]
    return [Case(name, build, tags=frozenset({"reduction"})) for name, build in built]


def _shape_cases() -> list[Case]:
    """flip, roll, the reflect/replicate/circular pads, tile, repeat_interleave and stack
    (issue 15) at awkward sizes."""

    def pad(mode: str, n: int, before: int, after: int) -> Term:
        return ops.pad(_a("l", n), "lp", before=before, after=after, mode=mode).over(_a("r", 7))

    def stack(n: int) -> Term:
        r, c = _a("r", 7), _a("c", n)
        return identity((r, c), (c,), (r, c)) >> ops.stack("s", 3)

    P = functools.partial
    built: list[tuple[str, Callable[[], Term]]] = [
        ("flip_13", lambda: ops.flip(_a("l", 13)).over(_a("r", 7))),
        ("flip_2", lambda: ops.flip(_a("l", 2)).over(_a("r", 7))),
        ("roll_13_5", lambda: ops.roll(_a("l", 13), 5).over(_a("r", 7))),
        ("roll_7_neg_9", lambda: ops.roll(_a("l", 7), -9).over(_a("r", 13))),
        ("pad_reflect_13_3_12", P(pad, "reflect", 13, 3, 12)),
        ("pad_replicate_1_2_3", P(pad, "replicate", 1, 2, 3)),
        ("pad_replicate_13_0_5", P(pad, "replicate", 13, 0, 5)),
        ("pad_circular_7_7_2", P(pad, "circular", 7, 7, 2)),
        ("tile_13_3", lambda: ops.tile(_a("l", 13), "lt", 3).over(_a("r", 7))),
        (
            "repeat_interleave_7_2",
            lambda: ops.repeat_interleave(_a("l", 7), "lr", 2).over(_a("r", 13)),
        ),
        ("stack_13", P(stack, 13)),
        ("stack_1", P(stack, 1)),
    ]
    return [Case(name, build, tags=frozenset({"shape"})) for name, build in built]


def _logic_cases() -> list[Case]:
    """Bool wires: comparisons and logic giving bool outputs, a bool read as 0.0 / 1.0 by
    arithmetic and a reduction in one kernel, a bool input, casts from floats to integers
    (truncated, saturating) and to bool, and max pooling's int64 indices, at awkward sizes."""
    r, c = _a("r", 7), _a("c", 13)

    def two(term: Term) -> Term:
        return identity((r, c), (c,)) >> term

    def masked_sum() -> Term:
        return two((ops.gt(0.0) @ identity(1)) >> ops.mul() >> ops.sum(c))

    def bool_input() -> Term:
        flags = ArrayType((r, c), "bool")
        return identity(flags, (r, c)) >> (ops.logical_not() @ ops.exp()) >> ops.add()

    def max_pool_indices() -> Term:
        from ncd import conv

        pool = conv.max_pool2d(3, 2, 1, return_indices=True, height=7, width=13)
        return pool.over(_a("c", 3))

    def cast(to: object, scale: float, whole: bool = False) -> Term:
        # exact in float32 and float64 alike: a power-of-two scale (of whole numbers: past the
        # integer's range, so it saturates)
        first = (ops.round() >> ops.mul(scale)) if whole else ops.mul(scale)
        return (first >> ops.cast(to)).over(r, c)

    built: list[tuple[str, Callable[[], Term]]] = [
        ("compare_lt_broadcast", lambda: two(ops.lt())),
        ("compare_ge_const", lambda: ops.ge(0.25).over(r, c)),
        ("logical_and", lambda: two(ops.logical_and())),
        ("logical_or", lambda: two(ops.logical_or())),
        ("logical_xor", lambda: two(ops.logical_xor())),
        ("logical_not", lambda: ops.logical_not().over(r, c)),
        ("bool_masked_sum", masked_sum),
        ("bool_input", bool_input),
        ("cast_float_int64", lambda: cast("int64", 8.0)),
        ("cast_float_int32_saturating", lambda: cast("int32", 2.0**31, whole=True)),
        ("cast_float_bool", lambda: (ops.floor() >> ops.cast("bool")).over(r, c)),
        ("max_pool2d_indices", max_pool_indices),
        ("any_true_13", lambda: identity((r, c)) >> ops.gt(0.5) >> ops.any_true(c)),
        ("all_true_13", lambda: identity((r, c)) >> ops.gt(-1.0) >> ops.all_true(c)),
    ]
    return [Case(name, build, tags=frozenset({"elementwise"})) for name, build in built]


@attrs.frozen
class PositionCase:
    """A model whose outputs are positions (or select by them), with inputs exact in every
    float format and the true outputs, past the 256 (bfloat16) or 2048 (float16) whole numbers
    a 16-bit format holds exactly: a target runs ``model.cast(fmt)`` on ``inputs_in(fmt)``
    and ``check``s what it gives."""

    name: str
    model: Term
    inputs: tuple[np.ndarray, ...]
    expected: tuple[np.ndarray, ...]

    def inputs_in(self, fmt: Any) -> list[np.ndarray]:
        return [x.astype(fmt.numpy) if x.dtype.kind == "f" else x for x in self.inputs]

    def check(self, got: Any, fmt: Any) -> None:
        """Positions exactly (``int64``, as torch's); values within ``MODEL`` eps of ``fmt``."""
        outs = list(got) if isinstance(got, tuple | list) else [got]
        assert len(outs) == len(self.expected), self.name
        for g, w in zip(outs, self.expected, strict=True):
            g = np.asarray(g)
            if w.dtype.kind == "i":
                assert g.dtype == np.int64, (self.name, g.dtype)
                np.testing.assert_array_equal(g, w, err_msg=self.name)
            else:
                assert_close_in_format(g, w.astype(fmt.numpy), fmt, MODEL)


def position_cases() -> list[PositionCase]:
    """argmax, argmin, max with indices, max-pool indices, a running product and a
    cross-entropy with ignored targets, over axes of 301 and 2100 elements (a NaN counts as
    the extreme, as torch)."""
    out = []
    for n in (301, 2100):
        x = _a("x", n)
        v = np.zeros((3, n), np.float32)
        v[0, n - 2], v[1, n - 1], v[2, 257] = 5.0, -5.0, np.nan
        top = np.array([n - 2, 0, 257])
        bottom = np.array([0, n - 1, 257])
        out += [
            PositionCase(f"argmax_{n}", ops.argmax(x).over(_a("r", 3)), (v,), (top,)),
            PositionCase(f"argmin_{n}", ops.argmin(x).over(_a("r", 3)), (v,), (bottom,)),
            PositionCase(
                f"max_with_indices_{n}",
                ops.max_with_indices(x).over(_a("r", 3)),
                (v,),
                (v.max(-1), top),
            ),
        ]
    line = np.zeros(301, np.float32)
    line[298], line[299] = 3.0, 1.0
    # windows of 3 at stride 3 over 301: window i covers 3i..3i+2; the zero windows' first 0
    found = np.arange(0, 300, 3)
    found[-1] = 298
    pool = conv.max_pool1d(3, return_indices=True, length=_a("l", 301))
    pooled = line[:300].reshape(100, 3).max(-1)
    out.append(PositionCase("max_pool1d_indices_301", pool, (line,), (pooled, found)))
    ones = np.ones(301, np.float32)
    ones[280] = 2.0
    running = np.where(np.arange(301) >= 280, 2.0, 1.0).astype(np.float32)
    out.append(PositionCase("cumprod_301", ops.cumprod(_a("x", 301)), (ones,), (running,)))
    logits = np.zeros((4, 300), np.float32)
    targets = np.array([257, 299, -100, 5])
    logits[0, 257], logits[1, 299], logits[3, 5] = 4.0, 4.0, 4.0
    # log(299 + e^4) - 4 where the target holds the 4.0; 0 where ignored
    hit = np.float32(np.log(299.0 + np.exp(4.0)) - 4.0)
    loss = nn.cross_entropy(_a("vocab", 300), ignore_index=-100).over(_a("s", 4))
    want = np.array([hit, hit, 0.0, hit], np.float32)
    out.append(PositionCase("cross_entropy_ignore_300", loss, (logits, targets), (want,)))
    return out


def _integer_cases() -> list[Case]:
    """Integer arithmetic, exact as torch's: products past 2^24 (float32 would round them),
    integers broadcast, a bool beside an integer (0 / 1 of it), an integer beside a float or
    divided (a float), and a select of integers, at awkward sizes."""
    r, c = _a("r", 7), _a("c", 13)
    ids, row = ArrayType((r, c), "int64"), ArrayType((c,), "int64")
    flags = ArrayType((r, c), "bool")
    big = ops.mul(1000003.0) >> ops.mul(1000003.0) >> ops.sub(7.0)
    signed = ops.sub(5.0) @ ops.sub(4.0)
    built: list[tuple[str, Callable[[], Term], tuple[int, ...]]] = [
        ("int_products_past_2_24", lambda: identity(ids) >> big >> ops.maximum(5.0), (0,)),
        ("int_neg_abs", lambda: identity(ids) >> ops.sub(5.0) >> ops.neg() >> ops.abs(), (0,)),
        ("int_binary_broadcast", lambda: identity(ids, row) >> ops.mul() >> big, (0, 1)),
        ("int_minimum_bool", lambda: identity(ids, flags) >> ops.minimum() >> big, (0,)),
        ("int_plus_float", lambda: identity(ids, (c,)) >> ops.add(), (0,)),
        ("int_divided", lambda: identity(ids) >> ops.div(3.0), (0,)),
        ("int_where", lambda: identity(flags, ids, ids) >> ops.where() >> big, (1, 2)),
        # signs either way and divisors of 0 (NumPy's 0) and -1 (a C division that may trap)
        ("int_floordiv_signs", lambda: identity(ids, row) >> signed >> ops.floordiv(), (0, 1)),
        ("int_mod_signs", lambda: identity(ids, row) >> signed >> ops.mod(), (0, 1)),
        ("int_floordiv_const", lambda: identity(ids) >> ops.sub(5.0) >> ops.floordiv(-3.0), (0,)),
    ]
    return [Case(n, b, int_inputs=k, tags=frozenset({"elementwise"})) for n, b, k in built]


def _learned_add() -> Term:
    r, c = _a("r", 7), _a("c", 13)
    return identity([r, c]) @ ops.learned([c], name="bias") >> ops.add()


@functools.cache
def cases() -> tuple[Case, ...]:
    """The canonical cases (built lazily, cached)."""
    return tuple(_cases())


def case_by_name(name: str) -> Case:
    for c in cases():
        if c.name == name:
            return c
    raise KeyError(name)


def _case_names() -> list[str]:
    return [c.name for c in cases()]


try:
    import pytest
except ImportError:  # pragma: no cover - ncd.testing needs pytest only for the base class
    pytest = None  # type: ignore[assignment]


class BackendConformance:
    """Subclass (as ``Test...``) and set ``target``; every case must match the reference.

    ``expected_failures`` maps case names to the documented reason a backend does not support
    them (they are marked xfail, strictly: passing one is reported).
    """

    target: ClassVar[str] = ""
    rtol: ClassVar[float] = 1e-4
    atol: ClassVar[float] = 1e-5
    dtype: ClassVar[Any] = np.float32
    expected_failures: ClassVar[dict[str, str]] = {}
    compile_options: ClassVar[dict[str, Any]] = {}
    #: compile each case with the sizes its inputs fix left free (``Case.free_model``)
    free_sizes: ClassVar[bool] = False

    def compile(self, model: Term) -> Any:
        from ncd.api import compile

        return compile(model, self.target, **self.compile_options)

    if pytest is not None:

        @pytest.mark.parametrize("name", _case_names())
        def test_matches_reference(self, name: str) -> None:
            case = case_by_name(name)
            if name in self.expected_failures:
                pytest.xfail(self.expected_failures[name])
            exe = self.compile(case.free_model() if self.free_sizes else case.model)
            got = exe(*case.inputs(self.dtype), params=case.params(self.dtype))
            got = list(got) if isinstance(got, tuple | list) else [got]
            want = case.expected(np.float64)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                g = np.asarray(g)
                assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}"
                if w.dtype.kind in "iub":  # integers and bools: the same type, exactly
                    assert g.dtype == w.dtype, f"{name}: {g.dtype}, the reference gives {w.dtype}"
                    np.testing.assert_array_equal(g, w, err_msg=name)
                    continue
                np.testing.assert_allclose(g, w, rtol=self.rtol, atol=self.atol, err_msg=name)
