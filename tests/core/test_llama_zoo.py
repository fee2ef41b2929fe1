"""ncd.nn's Llama family on the reference: grouped-query attention against NumPy written out
with K and V repeated per query head (ncd never copies them), SwiGLU, and a whole llama at
two lengths (no positional table), drawn and priced."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn

RNG = np.random.default_rng(5)


def _rope(x: np.ndarray, base: float) -> np.ndarray:
    n, d = x.shape[-2:]
    h = d // 2
    theta = np.arange(n)[:, None] * base ** (-2.0 * (np.arange(d) % h) / d)[None, :]
    turned = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * np.cos(theta) + turned * np.sin(theta)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("seq", [1, 7, 13])
def test_gqa_attention_is_attention_over_repeated_keys(seq: int) -> None:
    kv, g, dh, dm = 2, 3, 4, 10
    model = nn.gqa_attention(seq, dm, kv, g, dh, rope_base=100.0)
    p = ncd.init(model, seed=3)
    x = RNG.standard_normal((seq, dm))
    got = ncd.run(model, x, params=p)
    pre = ""  # the root definition adds no prefix
    q = np.einsum("sd,kged->kgse", x, p[pre + "q_proj.weight"]).reshape(kv * g, seq, dh)
    k = np.einsum("sd,ked->kse", x, p[pre + "k_proj.weight"])
    v = np.einsum("sd,ked->kse", x, p[pre + "v_proj.weight"])
    q, k = _rope(q, 100.0), _rope(k, 100.0)
    k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)  # query head h reads kv head h // g
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
    scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    heads = _softmax(scores) @ v  # (kv*g, s, dh)
    o = p[pre + "o_proj.weight"].reshape(dm, kv * g * dh)
    want = heads.transpose(1, 0, 2).reshape(seq, -1) @ o.T
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # no op makes keys or values over the group axis: they are read by broadcasting
    group = next(a for a in model.graph.axes if a.name == "group")
    k_side = [n for n in model.graph.nodes if n.op.label in ("k_proj", "v_proj")]
    assert k_side and all(group not in model.graph.values[n.outputs[0]].axes for n in k_side)


def test_swiglu_is_down_of_silu_gate_times_up() -> None:
    model = nn.swiglu(7, 13)
    p = ncd.init(model, seed=1)
    x = RNG.standard_normal((5, 7))
    gate, up = x @ p["gate_proj.weight"].T, x @ p["up_proj.weight"].T
    want = (gate / (1 + np.exp(-gate)) * up) @ p["down_proj.weight"].T
    np.testing.assert_allclose(ncd.run(model.over(ncd.Axis("r", size=5)), x, params=p), want)


def test_llama_runs_at_any_length_draws_and_prices() -> None:
    model = nn.llama(layers=2, heads=4, kv_heads=2).bind(d_model=16, d_head=4, d_ff=24, vocab=11)
    p = ncd.init(model.bind(seq=5), seed=0)
    for n in (5, 13):
        logits = ncd.run(model, np.arange(n) % 11, params=p)
        assert logits.shape == (n, 11) and np.isfinite(logits).all()
    # causal: the first 5 positions do not see what follows
    short = ncd.run(model, np.arange(5) % 11, params=p)
    long = ncd.run(model, np.arange(13) % 11, params=p)
    np.testing.assert_allclose(long[:5], short, rtol=1e-5, atol=1e-5)  # float32 parameters
    assert "model.layers.1.self_attn.q_proj.weight" in p
    assert p["model.layers.0.self_attn.q_proj.weight"].shape == (2, 2, 4, 16)
    ncd_diagram = pytest.importorskip("ncd_diagram")
    ncd_perf = pytest.importorskip("ncd_perf")
    svg = ncd_diagram.draw(model.bind(seq=13), "svg")
    assert 'data-kind="rotary"' in svg
    assert ncd_perf.cost(model.bind(seq=13)).flops


def test_llama_refuses_heads_its_kv_heads_cannot_share() -> None:
    with pytest.raises(ncd.DefinitionError, match=r"cannot be shared.*Fix"):
        nn.llama(heads=6, kv_heads=4)
