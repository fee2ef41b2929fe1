"""Llama-family models in and out: HF ``LlamaForCausalLM`` imports unmodified (RoPE, GQA in
both spellings, no-op casts) and matches on the reference and OpenCL at two batch/length sizes;
its original checkpoint loads into the export; RoPE and GQA written by hand import too."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ncd
import ncd_torch

T = pytest.importorskip("transformers")

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None

VOCAB = 100


def _llama(impl: str = "sdpa", **extra: object) -> torch.nn.Module:
    cfg = T.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        attn_implementation=impl,
        **extra,
    )
    torch.manual_seed(0)
    hf = T.LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(s, m: torch.nn.Module) -> None:
            super().__init__()
            s.m = m

        def forward(s, ids: torch.Tensor) -> torch.Tensor:
            return s.m(input_ids=ids, use_cache=False).logits

    return Logits(hf)


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_hf_llama_imports_runs_at_any_size_and_loads_its_checkpoint(impl: str) -> None:
    wrapped = _llama(impl)
    model, params = ncd_torch.from_torch(wrapped, (_ids(2, 16),))
    compiled = ncd.compile(model, "opencl") if OPENCL else None
    back = ncd_torch.to_module(model)
    back.load_state_dict(wrapped.state_dict())  # the original checkpoint loads as it is
    for ids in (_ids(2, 16), _ids(3, 29)):  # any batch and length
        with torch.no_grad():
            want = wrapped(ids).numpy()
            again = back(ids).numpy()
        np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-4)
        if compiled is not None:
            np.testing.assert_allclose(compiled(ids.numpy(), params=params), want, atol=1e-4)
        np.testing.assert_allclose(again, want, atol=1e-4)
    text = model.explain()
    # RoPE is one op per projection; the key/value heads are an axis of their own, shared by
    # the group of query heads that reads them (no copy of K and V)
    assert text.count("rope: [seq d_head -> seq d_head]") == 4
    assert "kv_heads" in text and "group" in text
    assert "slice" not in text and "concat" not in text


def test_rope_base_is_read_from_the_tables() -> None:
    wrapped = _llama(rope_theta=500000.0)
    model, params = ncd_torch.from_torch(wrapped, (_ids(2, 16),), free_sizes=False)
    ropes = [n.op for n in model.graph.nodes if isinstance(n.op, ncd.ops.Rotary)]
    assert ropes and all(op.base == 500000.0 and not op.freqs for op in ropes)
    with torch.no_grad():
        want = wrapped(_ids(2, 16)).numpy()
    np.testing.assert_allclose(ncd.run(model, _ids(2, 16).numpy(), params=params), want, atol=1e-4)


SCALED = {
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "linear": {"rope_type": "linear", "factor": 2.0},
}


@pytest.mark.parametrize("kind", sorted(SCALED))
def test_scaled_rope_imports_as_a_frequency_table(kind: str) -> None:
    """Llama 3's, YaRN's (with its attention factor on cos and sin) and linear scaling: the
    frequencies are read from the tables at import, one per pair, and run at any length on
    the reference, OpenCL and the export (which loads the original checkpoint)."""
    wrapped = _llama(rope_scaling=SCALED[kind])
    model, params = ncd_torch.from_torch(wrapped, (_ids(2, 16),))
    ropes = [n.op for n in model.graph.nodes if isinstance(n.op, ncd.ops.Rotary)]
    inv_freq = wrapped.m.model.rotary_emb.inv_freq.double().numpy()
    factor = wrapped.m.model.rotary_emb.attention_scaling
    for op in ropes:
        np.testing.assert_allclose(op.freqs, inv_freq, rtol=1e-6, atol=1e-9)
        assert op.scale == pytest.approx(factor, rel=1e-6)
    assert kind != "yarn" or ropes[0].scale != 1.0
    compiled = ncd.compile(model, "opencl") if OPENCL else None
    back = ncd_torch.to_module(model)
    back.load_state_dict(wrapped.state_dict())
    for ids in (_ids(2, 16), _ids(1, 7), _ids(3, 29)):
        with torch.no_grad():
            want = wrapped(ids).numpy()
            np.testing.assert_allclose(back(ids).numpy(), want, atol=1e-4)
        np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-4)
        if compiled is not None:
            np.testing.assert_allclose(compiled(ids.numpy(), params=params), want, atol=1e-4)


def test_a_rotary_frequency_table_is_checked() -> None:
    s, d = ncd.Axis("seq"), ncd.Axis("d_head", size=8)
    with pytest.raises(ncd.DefinitionError, match="3 frequencies for d_head"):
        ncd.ops.rotary(s, d, freqs=[1.0, 0.5, 0.25])
    with pytest.raises(ncd.DefinitionError, match="finite and >= 0"):
        ncd.ops.rotary(s, d, freqs=[1.0, float("nan"), 0.1, 0.01])
    with pytest.raises(ncd.DefinitionError, match="needs the size"):
        ncd.ops.rotary(s, ncd.Axis("d_head"), freqs=[1.0, 0.1])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class HandGQA(torch.nn.Module):
    """Grouped-query attention as people write it: SDPA's enable_gqa, RoPE tables built from
    torch.arange and a registered inv_freq buffer."""

    def __init__(self, d: int = 24, heads: int = 6, kv: int = 2) -> None:
        super().__init__()
        self.heads, self.kv, self.dh = heads, kv, d // heads
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv * self.dh, bias=False)
        self.v = torch.nn.Linear(d, kv * self.dh, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, self.dh, 2).float() / self.dh))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.dh).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.dh).transpose(1, 2)
        t = torch.arange(s, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def test_hand_written_gqa_with_enable_gqa_and_rope() -> None:
    torch.manual_seed(1)
    m = HandGQA().eval()
    model, params = ncd_torch.from_torch(m, (torch.randn(2, 7, 24),))
    compiled = ncd.compile(model, "opencl") if OPENCL else None
    for shape in ((2, 7, 24), (1, 13, 24)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(ncd.run(model, x.numpy(), params=params), want, atol=1e-5)
        if compiled is not None:
            np.testing.assert_allclose(compiled(x.numpy(), params=params), want, atol=1e-5)


class SliceCat(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x[..., 5:], torch.sin(x[..., :3]), x], dim=-1)
        return torch.cos(y) * 2.0


def test_slices_and_concatenations_of_activations_import() -> None:
    model, params = ncd_torch.from_torch(SliceCat(), (torch.randn(3, 13),))
    x = torch.randn(3, 13)
    want = SliceCat()(x).numpy()
    np.testing.assert_allclose(ncd.run(model, x.numpy(), params=params), want, rtol=1e-6)
    if OPENCL:
        np.testing.assert_allclose(ncd.compile(model, "opencl")(x.numpy()), want, atol=1e-5)
    assert math.isclose(want.shape[-1], 8 + 3 + 13)


def test_imported_llama_draws_rope_as_one_box_and_prices() -> None:
    ncd_diagram = pytest.importorskip("ncd_diagram")
    ncd_perf = pytest.importorskip("ncd_perf")
    model, _ = ncd_torch.from_torch(_llama(), (_ids(2, 16),), free_sizes=False)
    svg = ncd_diagram.draw(model, "svg")
    # one box per rotation drawn (the diagram may fold repeated layers), never its pieces
    assert svg.count('data-kind="rotary"') >= 2
    assert 'data-kind="slice"' not in svg and 'data-kind="concat"' not in svg
    priced = ncd_perf.cost(model)
    assert priced.kernels and priced.flops


def test_nn_llama_exported_agrees_with_hf_llama_on_its_weights() -> None:
    """ncd.nn.llama's parameters have HF's names; each weight is HF's with its head dims split
    off, so HF's state dict loads after a reshape of each tensor to the export's shape."""
    model = ncd.nn.llama(layers=2, heads=4, kv_heads=2).bind(
        d_model=64, d_head=16, d_ff=128, vocab=VOCAB
    )
    batched = model.over(ncd.Axis("batch"))
    module = ncd_torch.to_module(batched)
    hf = _llama().m
    own = module.state_dict()
    theirs = hf.state_dict()
    assert set(own) <= set(theirs)
    module.load_state_dict({k: theirs[k].reshape(own[k].shape) for k in own})
    ids = _ids(3, 13)
    with torch.no_grad():
        want = hf(input_ids=ids, use_cache=False).logits.numpy()
        got = module(ids).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    params = {k: theirs[k].reshape(own[k].shape).numpy() for k in own}
    np.testing.assert_allclose(ncd.run(batched, ids.numpy(), params=params), want, atol=1e-5)
