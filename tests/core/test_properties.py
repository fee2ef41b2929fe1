"""Property tests: traced and algebraic forms agree, JSON round trips, and lifting is vmap."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ncd
from ncd import ops

R, C = 3, 5


def _op(kind: str):
    return {
        "exp": lambda: ops.exp(),
        "tanh": lambda: ops.tanh(),
        "neg": lambda: ops.neg(),
        "relu": lambda: ops.relu(),
        "mul": lambda: ops.mul(0.5),
        "rsub": lambda: ops.sub(1.0, reverse=True),
        "softmax": lambda: ops.softmax("c"),
        "l2norm": lambda: ops.l2norm("c"),
        "layernorm": lambda: ops.layernorm("c", affine=False),
        "rmsnorm": lambda: ops.rmsnorm("c", affine=False),
    }[kind]()


KINDS = ["exp", "tanh", "neg", "relu", "mul", "rsub", "softmax", "l2norm", "layernorm", "rmsnorm"]
steps = st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), min_size=1, max_size=6)


def build(spec):
    """The same model twice: as algebra and as a traced function (residual when flagged)."""
    r, c = ncd.Axis("r", size=R), ncd.Axis("c", size=C)
    terms = [_op(kind) for kind, _ in spec]
    algebra = ncd.identity([r, c])
    for term, (_, residual) in zip(terms, spec):
        algebra = algebra >> (
            ncd.copy() >> (term @ ncd.identity(1)) >> ops.add() if residual else term
        )

    @ncd.trace(inputs=[[r, c]])
    def traced(x):
        for term, (_, residual) in zip(terms, spec):
            x = term(x) + x if residual else term(x)
        return x

    return algebra, traced


@settings(max_examples=60, deadline=None)
@given(steps)
def test_traced_and_algebraic_forms_give_the_same_graph(spec):
    algebra, traced = build(spec)
    assert algebra.graph.canonical() == traced.graph.canonical()
    algebra.graph.verify()


@settings(max_examples=60, deadline=None)
@given(steps)
def test_json_round_trip(spec):
    algebra, _ = build(spec)
    assert ncd.from_json(ncd.to_json(algebra)) == algebra


@settings(max_examples=40, deadline=None)
@given(steps, st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_over_equals_running_per_index(spec, n, seed):
    model, _ = build(spec)
    lifted = model.over("a").bind(a=n)
    x = np.random.default_rng(seed).standard_normal((n, R, C))
    want = np.stack([ncd.run(model, x[i]) for i in range(n)])
    np.testing.assert_allclose(ncd.run(lifted, x), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(
        [
            "a b, b c -> a c",
            "a b, c b -> a c",
            "a, b -> a b",
            "a b c, c -> a b",
            "a b -> b a",
            "a b, a b -> a",
        ]
    ),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
)
def test_lifted_einsum_is_vmap(spec, n, seed):
    f = ops.einsum(spec, a=2, b=3, c=4)
    lifted = f.over("h").bind(h=n)
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, *f.graph.shape(v))) for v in f.graph.inputs]
    want = np.stack([ncd.run(f, *(x[i] for x in xs)) for i in range(n)])
    np.testing.assert_allclose(ncd.run(lifted, *xs), want, rtol=1e-12)
