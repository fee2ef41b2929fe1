"""``ncd.nn.bert``: HF's ``BertModel`` (no pooler) written in ncd. Its parameters have HF's
names and HF's weights load after a reshape of each (head dims split off); it then agrees with
HF at lengths 1, 7 and 13, with padding (a row that is all padding included), through the torch
export, the reference and OpenCL; it draws and prices like the GPT."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import ncd
import ncd_torch

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None

T = pytest.importorskip("transformers")

SIZES = {"d_model": 32, "d_head": 8, "d_ff": 64, "vocab": 50, "block": 40, "types": 2}
TOL = 2e-6


def _hf(impl: str) -> torch.nn.Module:
    cfg = T.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=40,
        type_vocab_size=2,
        attn_implementation=impl,
    )
    torch.manual_seed(0)
    return T.BertModel(cfg, add_pooling_layer=False).eval()


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(0, 50, (3, n), generator=g)
    types = torch.randint(0, 2, (3, n), generator=g)
    mask = torch.ones(3, n, dtype=torch.int64)
    mask[1, (n + 1) // 2 :] = 0
    mask[2, :] = 0  # all padding: HF's extended mask attends uniformly
    return ids, types, mask


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_nn_bert_agrees_with_hf_bert_on_its_weights(impl: str) -> None:
    model = ncd.nn.bert(layers=2, heads=4).bind(**SIZES).over(ncd.Axis("batch"))
    module = ncd_torch.to_module(model)
    hf = _hf(impl)
    own, theirs = module.state_dict(), hf.state_dict()
    assert set(own) == set(theirs)  # every name is HF's, and none is missing
    module.load_state_dict({k: theirs[k].reshape(own[k].shape) for k in own})
    params = {k: theirs[k].reshape(own[k].shape).numpy() for k in own}
    exe = ncd.compile(model, "opencl") if OPENCL else None
    for n in (1, 7, 13):
        ids, types, mask = _batch(n)
        with torch.no_grad():
            want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
            want = want.last_hidden_state.numpy()
            np.testing.assert_allclose(module(ids, types, mask).numpy(), want, atol=TOL)
        arrays = (ids.numpy(), types.numpy(), mask.numpy())
        np.testing.assert_allclose(ncd.run(model, *arrays, params=params), want, atol=TOL)
        if exe is not None:
            np.testing.assert_allclose(exe(*arrays, params=params), want, atol=TOL)


def test_nn_bert_pooler_is_hf_pooler_output() -> None:
    model = ncd.nn.bert(layers=2, heads=4, pooler=True).bind(**SIZES).over(ncd.Axis("batch"))
    cfg = _hf("eager").config
    torch.manual_seed(0)
    hf = T.BertModel(cfg, add_pooling_layer=True).eval()
    module = ncd_torch.to_module(model)
    assert set(module.state_dict()) == set(hf.state_dict())
    params = ncd_torch.load_state_dict(model, hf.state_dict())
    ids, types, mask = _batch(7)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    hidden, pooled = ncd.run(model, ids.numpy(), types.numpy(), mask.numpy(), params=params)
    np.testing.assert_allclose(hidden, want.last_hidden_state.numpy(), atol=TOL)
    np.testing.assert_allclose(pooled, want.pooler_output.numpy(), atol=TOL)


def test_nn_bert_refuses_a_length_past_its_position_table() -> None:
    model = ncd.nn.bert(layers=1, heads=4).bind(**SIZES)
    params = ncd.init(model, seed=0)
    ids = np.zeros(41, dtype=np.int64)
    with pytest.raises(ncd.NcdError, match=r"block.*40"):
        ncd.run(model, ids, ids, np.ones(41, dtype=np.int64), params=params)


def test_nn_bert_draws_and_prices() -> None:
    ncd_diagram = pytest.importorskip("ncd_diagram")
    ncd_perf = pytest.importorskip("ncd_perf")
    model = ncd.nn.bert(layers=2, heads=4).bind(seq=16, **SIZES)
    svg = ncd_diagram.draw(model, "svg")
    assert "attention" in svg and "intermediate" in svg
    priced = ncd_perf.cost(model)
    assert priced.kernels and priced.flops
