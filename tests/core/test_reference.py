import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.testing import cases


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_every_canonical_case_runs_in_float32_and_float64(case):
    want = case.expected(np.float64)
    got = ncd.run(case.model, *case.inputs(np.float32), params=case.params(np.float32))
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        if g.dtype.kind in "biu":  # indices, truths: exact
            np.testing.assert_array_equal(g, w)
            continue
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_multihead_attention_matches_numpy():
    m = nn.multihead_attention(causal=True).bind(seq=7, d_model=12, heads=3, d_head=4)
    p = ncd.init(m, seed=3, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((7, 12))

    def proj(name):
        w, b = p[f"{name}.weight"], p[f"{name}.bias"]  # (heads, d_head, d_model)
        return np.einsum("sm,hdm->hsd", x, w) + b[:, None, :]

    q, k, v = proj("q"), proj("k"), proj("v")
    s = q @ k.transpose(0, 2, 1) / 2.0
    s = np.where(np.tril(np.ones((7, 7), bool)), s, -np.inf)
    o = softmax(s) @ v  # (heads, seq, d_head)
    want = np.einsum("hsd,mhd->sm", o, p["o.weight"]) + p["o.bias"]
    np.testing.assert_allclose(ncd.run(m, x, params=p), want, rtol=1e-10)


def test_gpt_matches_numpy_forward():
    sizes = dict(seq=5, d_model=8, heads=2, d_head=4, d_ff=16, vocab=11)
    m = nn.gpt(layers=1).bind(**sizes)
    p = ncd.init(m, seed=0, dtype=np.float64)
    tok = np.array([1, 4, 0, 10, 3])
    x = p["wte.weight"][tok] + p["wpe.weight"]
    h = layernorm(x, p["blocks.0.ln_1.weight"], p["blocks.0.ln_1.bias"])
    heads = {
        n: np.einsum("sm,hdm->hsd", h, p[f"blocks.0.attn.{n}.weight"])
        + p[f"blocks.0.attn.{n}.bias"][:, None]
        for n in "qkv"
    }
    s = heads["q"] @ heads["k"].transpose(0, 2, 1) / 2.0
    s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    o = (
        np.einsum("hsd,mhd->sm", softmax(s) @ heads["v"], p["blocks.0.attn.o.weight"])
        + p["blocks.0.attn.o.bias"]
    )
    x = x + o
    h = layernorm(x, p["blocks.0.ln_2.weight"], p["blocks.0.ln_2.bias"])
    from math import erf

    f = h @ p["blocks.0.mlp.fc.weight"].T + p["blocks.0.mlp.fc.bias"]
    f = 0.5 * f * (1 + np.vectorize(erf)(f / np.sqrt(2)))
    x = x + f @ p["blocks.0.mlp.proj.weight"].T + p["blocks.0.mlp.proj.bias"]
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    np.testing.assert_allclose(ncd.run(m, tok, params=p), x @ p["lm_head.weight"].T, rtol=1e-9)


def test_spherical_attention_uses_the_l2_normaliser():
    m = nn.spherical_attention().bind(q=3, x=5, d=4, v=2)
    rng = np.random.default_rng(1)
    Q, K, V = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    s = Q @ K.T
    want = (s / np.sqrt((s * s).sum(1, keepdims=True) + 1e-12)) @ V
    np.testing.assert_allclose(ncd.run(m, Q, K, V), want, rtol=1e-10)


def test_dropout_is_identity_in_inference_and_seeded_in_training():
    m = ops.dropout(0.5).over(ncd.Axis("r", size=1000))
    x = np.ones(1000)
    np.testing.assert_array_equal(ncd.run(m, x), x)
    a = ncd.run(m, x, training=True, seed=1)
    assert np.array_equal(a, ncd.run(m, x, training=True, seed=1))
    assert not np.array_equal(a, ncd.run(m, x, training=True, seed=2))
    assert set(np.unique(a)) == {0.0, 2.0} and 400 < (a == 0).sum() < 600


def test_parameter_errors_name_the_parameter():
    m = nn.mlp().over("s").bind(s=2, d_model=3, d_ff=4)
    p = ncd.init(m)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ncd.ParameterError, match="missing parameter"):
        ncd.run(m, x)
    assert set(p) == set(ncd.init(nn.mlp().bind(d_model=3, d_ff=4)))  # lifting keeps names
    bad = dict(p, **{"fc.weight": np.ones((3, 3))})
    with pytest.raises(ncd.ParameterError, match=r"fc\.weight must have shape \(4, 3\)"):
        ncd.run(m, x, params=bad)
    with pytest.raises(ncd.ParameterError, match="unexpected"):
        ncd.run(m, x, params=dict(p, extra=np.ones(1)))


def test_init_names_follow_the_hierarchy():
    m = nn.gpt(layers=2).bind(seq=4, d_model=8, heads=2, d_head=4, d_ff=8, vocab=7)
    p = ncd.init(m, seed=0)
    assert "blocks.1.attn.q.weight" in p and "blocks.0.mlp.fc.bias" in p and "ln_f.weight" in p
    assert p["blocks.0.attn.q.weight"].shape == (2, 4, 8)
    assert p["wte.weight"].shape == (7, 8) and p["lm_head.weight"].shape == (7, 8)
    assert np.array_equal(p["wte.weight"], ncd.init(m, seed=0)["wte.weight"])
    with pytest.raises(ncd.SizeError, match="bind"):
        ncd.init(nn.gpt(layers=1))


def test_embedding_rejects_out_of_range_ids():
    m = ops.embedding("vocab -> d", vocab=5, d=2).over(ncd.Axis("s", size=3))
    with pytest.raises(ncd.IndexRangeError, match="token ids"):
        ncd.run(m, np.array([0, 5, 1]), params=ncd.init(m))
