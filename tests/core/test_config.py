import numpy as np
import pytest

import ncd
from ncd import nn, ops


def test_gpt_config_lists_each_size_once():
    assert list(nn.gpt(layers=3).config()) == ["seq", "d_model", "heads", "d_head", "d_ff", "vocab"]


def test_bind_by_label_or_axis():
    q, x = ncd.axes("q x")
    att = nn.attention(q, x)
    a = att.bind({q: 3}, x=4, d=5, v=6)
    assert a.graph.size(q) == 3 and a.graph.size(x) == 4
    assert not a.config()
    assert [v.label for v in a.config().bound] == ["q", "d", "x", "v"]


def test_size_conflicts_are_reported_together():
    a = ncd.Axis("a", size=3)
    b = ncd.Axis("b", size=4)
    c = ncd.Axis("c", size=5)
    model = ncd.identity([a], [a]) >> (
        ops.rename(a, ncd.Axis("b2", size=4)) @ ops.rename(a, ncd.Axis("c2", size=5))
    )
    with pytest.raises(ncd.SizeError) as e:
        model.graph
    assert "2 size conflict" in str(e.value)
    del b, c


def test_unknown_label_lists_the_labels():
    with pytest.raises(ncd.SizeError, match="labels are: q, d, x, v"):
        nn.attention().bind(k=3)


def test_bind_conflict_with_declared_size():
    q = ncd.Axis("q", size=3)
    with pytest.raises(ncd.SizeError, match="q#"):
        nn.attention(q).bind({q: 4})


def test_view_split_derives_the_other_part():
    m = ops.rearrange("s (h e) -> s h e", h=4)
    assert list(m.config()) == ["s", "h_e"]
    b = m.bind(s=2, h_e=12)
    assert [a.size for a in b.codomain[0].axes] == [2, 4, 3]
    with pytest.raises(ncd.SizeError, match="not a multiple"):
        m.bind(s=2, h_e=10)


def test_view_merge_is_derived():
    m = ops.rearrange("a b -> (a b)")
    assert list(m.config()) == ["a", "b"]
    b = m.bind(a=3, b=5)
    assert b.codomain[0].axes[0].size == 15
    x = np.arange(15.0).reshape(3, 5)
    np.testing.assert_array_equal(ncd.run(b, x), x.reshape(15))


def test_run_reads_free_sizes_from_shapes():
    att = nn.attention()
    Q, K, V = np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 5))
    assert ncd.run(att, Q, K, V).shape == (2, 5)
    with pytest.raises(ncd.SizeError):
        ncd.run(att, Q, np.ones((4, 2)), V)
