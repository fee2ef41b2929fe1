"""Checkpoints both ways for any ncd model: ``ncd_torch.load_state_dict`` reads a torch state
dict into ncd's form (head dims split off by a checked reshape), ``ncd_torch.state_dict(params,
model=...)`` writes torch's form, which HF's own modules load: ``ncd.nn.llama`` and
``ncd.nn.bert`` against HF's Llama and BERT, a round trip, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ncd
import ncd_torch

T = pytest.importorskip("transformers")


def _llama_pair() -> tuple[object, torch.nn.Module]:
    cfg = T.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    hf = T.LlamaForCausalLM(cfg).eval()
    model = ncd.nn.llama(layers=2, heads=4, kv_heads=2).bind(
        d_model=32, d_head=8, d_ff=64, vocab=50
    )
    return model.over(ncd.Axis("batch")), hf


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 50, shape, generator=torch.Generator().manual_seed(sum(shape)))


def test_llama_reads_hf_weights_and_hf_reads_ncd_weights() -> None:
    model, hf = _llama_pair()
    ids = _ids(3, 13)
    params = ncd_torch.load_state_dict(model, hf.state_dict(), strict=False)
    with torch.no_grad():
        want = hf(input_ids=ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-5)
    # ncd's own weights, written in torch's form, load into HF's module as they are
    mine = ncd.init(model, seed=3)
    torch.manual_seed(1)
    other = T.LlamaForCausalLM(hf.config).eval()
    missing, unexpected = other.load_state_dict(
        ncd_torch.state_dict(mine, model=model), strict=False
    )
    assert not unexpected and set(missing) <= {"model.rotary_emb.inv_freq"}
    with torch.no_grad():
        theirs = other(input_ids=ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=mine), theirs, atol=1e-5)


def test_a_round_trip_gives_back_the_same_arrays() -> None:
    model = ncd.nn.bert(layers=1, heads=4).bind(
        d_model=32, d_head=8, d_ff=64, vocab=50, block=40, types=2
    )
    params = ncd.init(model, seed=0)
    back = ncd_torch.load_state_dict(model, ncd_torch.state_dict(params, model=model))
    assert set(back) == set(params)
    for k, v in params.items():
        np.testing.assert_array_equal(back[k], v)
    shapes = ncd_torch.torch_shapes(model)
    assert shapes["encoder.layer.0.attention.self.query.weight"] == (32, 32)
    assert shapes["encoder.layer.0.attention.self.query.bias"] == (32,)
    assert params["encoder.layer.0.attention.self.query.weight"].shape == (4, 8, 32)


def test_a_transposed_weight_is_refused_not_reshaped() -> None:
    model = ncd.nn.mlp(d_model=8, d_ff=12)
    sd = ncd_torch.state_dict(ncd.init(model, seed=0), model=model)
    name = next(k for k, v in sd.items() if tuple(v.shape) == (12, 8))
    sd[name] = sd[name].T.contiguous()  # (8, 12): as many elements, other layout
    with pytest.raises(ncd.ParameterError, match=rf"{name} has shape \[8, 12\].*transposed"):
        ncd_torch.load_state_dict(model, sd)


def test_missing_and_unexpected_keys_are_named() -> None:
    model = ncd.nn.mlp(d_model=8, d_ff=12)
    sd = ncd_torch.state_dict(ncd.init(model, seed=0), model=model)
    gone = sorted(sd)[0]
    with pytest.raises(ncd.ParameterError, match=rf"missing {gone}.*Fix"):
        ncd_torch.load_state_dict(model, {k: v for k, v in sd.items() if k != gone})
    sd["extra.weight"] = torch.zeros(3)
    with pytest.raises(ncd.ParameterError, match=r"unexpected extra\.weight.*strict=False"):
        ncd_torch.load_state_dict(model, sd)
    assert set(ncd_torch.load_state_dict(model, sd, strict=False)) == set(sd) - {"extra.weight"}


def test_an_import_reads_its_original_checkpoint() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.GELU(), torch.nn.Linear(6, 3))
    module.eval()
    imported = ncd_torch.from_torch(module, (torch.randn(2, 8),))
    params = ncd_torch.load_state_dict(imported, module.state_dict())
    for k, v in imported.params.items():
        np.testing.assert_array_equal(params[k], v)
