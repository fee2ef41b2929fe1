import numpy as np
import pytest

import ncd
from ncd import ops

ATTENTION = "q d, x d -> q x"


def one_line_attention():
    return ops.einsum(ATTENTION) >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")


def test_attention_has_three_inputs_and_four_free_sizes():
    att = one_line_attention()
    assert (att.n_in, att.n_out) == (3, 1)
    assert list(att.config()) == ["q", "d", "x", "v"]
    lines = att.explain().splitlines()
    assert lines[1].strip() == "einsum: [q d, x d -> q x] over ()"
    assert lines[2].strip() == "softmax: [x -> x] over (q)"


def test_same_name_independent_axes_get_distinct_labels():
    att = ops.einsum(ATTENTION) >> ops.softmax("x") >> ops.einsum("q x, x d -> q d")
    cfg = att.config()
    assert list(cfg) == ["q", "d", "x", "d_2"]
    assert cfg["d"].axes[0] != cfg["d_2"].axes[0]
    bound = att.bind(q=2, d=3, x=4, d_2=5)
    assert bound.codomain[0].axes[-1].size == 5


def test_alignment_by_name_lifts_the_rest():
    r, c = ncd.axes("r c", r=3, c=4)
    model = ncd.identity([r, c]) >> ops.softmax("c")
    node = model.graph.nodes[0]
    assert node.loop == (r,)
    assert node.core_in == ((c,),)


def test_alignment_by_position_is_right_aligned():
    b, s, e = ncd.axes("b s e", b=2, s=3, e=4)
    model = ncd.identity([b, s, e]) >> ops.layernorm("d")
    node = model.graph.nodes[0]
    assert node.core_in == ((e,),) and node.loop == (b, s)


def test_alignment_by_uid_wins_over_name_and_position():
    a, b = ncd.axes("x x", x=3)  # two axes both called x
    model = ncd.identity([a, b]) >> ops.softmax(a)
    assert model.graph.nodes[0].core_in == ((a,),)


def test_lifted_einsum_broadcasts_missing_loop_axes():
    h, q, x, d = ncd.axes("h q x d", h=2, q=3, x=4, d=5)
    model = ncd.identity([h, q, d], [x, d]) >> ops.einsum(ATTENTION)
    (out,) = model.codomain
    assert [a.name for a in out.axes] == ["h", "q", "x"]
    Q = np.random.default_rng(0).standard_normal((2, 3, 5))
    K = np.random.default_rng(1).standard_normal((4, 5))
    np.testing.assert_allclose(ncd.run(model, Q, K), Q @ K.T)


def test_over_lifts_every_input():
    att = one_line_attention().over("h").bind(h=2, q=3, x=4, d=5, v=6)
    assert [t.axes[0].name for t in att.domain] == ["h", "h", "h"]
    assert all(n.loop[:1] == (att.domain[0].axes[0],) for n in att.graph.nodes)


def test_parallel_and_wiring():
    r = ncd.Axis("r", size=3)
    f = ops.exp() @ ops.neg()
    model = ncd.identity([r], [r]) >> f >> ncd.swap() >> ops.sub()
    x, y = np.arange(3.0), np.ones(3)
    np.testing.assert_allclose(ncd.run(model, x, y), -y - np.exp(x))
    dup = ncd.identity([r]) >> ncd.copy() >> ops.mul()
    np.testing.assert_allclose(ncd.run(dup, x), x * x)
    drop = ncd.identity([r], [r]) >> (ops.exp() @ ncd.discard())
    assert drop.n_out == 1


def test_extra_outputs_pass_through_and_extra_inputs_join():
    r = ncd.Axis("r", size=3)
    two = ncd.identity([r]) >> ncd.copy(3)
    model = two >> ops.add()
    assert (model.n_in, model.n_out) == (1, 2)


def test_alignment_error_names_axes_ops_sites_and_fix():
    r = ncd.Axis("r", size=3)
    bad = ncd.identity([r]) >> ops.einsum("a b, b c -> a c")
    with pytest.raises(ncd.AlignmentError) as e:
        bad.graph
    msg = str(e.value)
    assert "einsum" in msg and f"r#{r.uid}" in msg and "test_compose.py" in msg and "Fix:" in msg


def test_reusing_an_op_with_other_axes_is_an_error():
    sm = ops.softmax("x")
    a, b = ncd.axes("a b", a=2, b=3)
    model = (ncd.identity([a]) >> sm) @ (ncd.identity([b]) >> sm)
    with pytest.raises(ncd.AlignmentError, match="already bound"):
        model.graph


def test_definitions_stay_blocks():
    mlp = ncd.nn.mlp().over("s")
    g = mlp.graph
    assert [s.name for s in g.scopes] == ["mlp"]  # a lifted definition is still the model itself
    assert "mlp" in mlp.explain()
    nested = (ncd.nn.mlp().over("s") >> ops.relu()).graph
    assert [s.name for s in nested.scopes] == ["model", "mlp"]
    assert [n.scope for n in nested.nodes] == [1, 1, 1, 0]


def test_trace_equals_algebra():
    f, g = ops.exp(), ops.softmax("x")
    algebra = ncd.identity([ncd.Axis("x", size=4)]) >> f >> g
    x_type = algebra.domain[0]

    @ncd.trace(inputs=[x_type])
    def traced(x):
        return g(f(x))

    assert traced == algebra


def test_trace_copy_and_arithmetic():
    r = ncd.Axis("r", size=5)

    @ncd.trace(inputs=[[r]])
    def fn(x):
        return 2.0 * x + x / 4 - 1

    x = np.arange(5.0)
    np.testing.assert_allclose(ncd.run(fn, x), 2 * x + x / 4 - 1)


def test_trace_errors():
    with pytest.raises(ncd.TraceError):
        ops.exp()(1.0)

    with pytest.raises(ncd.TraceError, match="never read"):
        ncd.trace(lambda x, y: ops.exp()(x))

    with pytest.raises(ncd.TraceError, match="truth value"):
        ncd.trace(lambda x: ops.exp()(x) if ops.exp()(x) else x)
