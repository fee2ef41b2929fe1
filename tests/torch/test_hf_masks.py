"""Hugging Face models called with a padding ``attention_mask`` import (issue 12): transformers'
mask functions are traced by broadcasting instead of ``torch.vmap`` (``masks_without_vmap``),
the causal part becomes two compared index ramps, the ``mask[batch, kv]`` read a grid index,
and SDPA's bool or additive mask applies per batch row, also with grouped-query heads. Batch
and length stay free; every model matches torch at two sizes with left and right padding."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ncd
from ncd_torch import TorchImportError, from_torch

transformers = pytest.importorskip("transformers")
OPENCL = importlib.util.find_spec("ncd_opencl") is not None
VOCAB = 61


def _config(family: str, attention: str) -> tuple[type, object]:
    T = transformers
    small = dict(num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB)
    llama = dict(small, hidden_size=32, intermediate_size=64, max_position_embeddings=64)
    configs = {
        "gpt2": (T.GPT2LMHeadModel, T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB)),
        "llama": (T.LlamaForCausalLM, T.LlamaConfig(**llama, num_key_value_heads=2)),
        "qwen2": (T.Qwen2ForCausalLM, T.Qwen2Config(**llama, num_key_value_heads=2)),
        # a window of 4 keys, narrower than the example's 9: a band of diagonals
        "mistral-window": (
            T.MistralForCausalLM,
            T.MistralConfig(**llama, num_key_value_heads=2, sliding_window=4),
        ),
        "bert": (T.BertModel, T.BertConfig(**llama)),
    }
    cls, cfg = configs[family]
    cfg._attn_implementation = attention
    return cls, cfg


class Masked(nn.Module):
    """Called as people call an HF model on a padded batch."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if isinstance(self.m, transformers.BertModel):
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _batch(batch: int, seq: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, :3] = 0  # left padding: the first queries see no key at all
    mask[-1, -2:] = 0  # right padding
    return ids, mask


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2", "mistral-window", "bert"])
def test_padded_batches_match_torch_at_free_sizes(family: str, attention: str) -> None:
    cls, cfg = _config(family, attention)
    torch.manual_seed(0)
    module = Masked(cls(cfg).eval())
    model, params = from_torch(module, _batch(2, 9, 0))
    assert [v.label for v in model.config().free] == ["batch", "seq"]
    for batch, seq in ((2, 9), (3, 13)):
        ids, mask = _batch(batch, seq, batch)
        with torch.no_grad():
            want = module(ids, mask).numpy()
        got = ncd.run(model, ids.numpy(), mask.numpy(), params=params)
        assert np.abs(got - want).max() < 1e-5, (batch, seq)
    if OPENCL and attention == "sdpa":
        got = ncd.compile(model, "opencl")(ids.numpy(), mask.numpy(), params=params)
        assert np.abs(got - want).max() < 1e-4


def test_vmap_is_restored_after_the_import_even_when_it_fails() -> None:
    import transformers.masking_utils as utils

    before = utils._vmap_for_bhqkv, utils.TransformGetItemToIndex

    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.svd(x)[0]

    with pytest.raises(TorchImportError):
        from_torch(Bad(), (torch.zeros(3, 3),))
    assert (utils._vmap_for_bhqkv, utils.TransformGetItemToIndex) == before


class GroupedAttention(nn.Module):
    """SDPA with grouped keys and a per-row bool mask ``[batch, 1, q, k]``: the batch of 2
    equals the 2 kv heads, which once aligned the mask's batch with the kv heads (wrong
    numbers at the example's own size)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask[:, None, None, :].bool()
        return F.scaled_dot_product_attention(q, k, k, attn_mask=keep, enable_gqa=True)


def test_a_row_mask_with_grouped_heads_applies_per_batch_row() -> None:
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 4, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, 5:] = 0
    mask[1, :2] = 0
    module = GroupedAttention()
    model, params = from_torch(module, (q, k, mask))
    want = module(q, k, mask).numpy()
    got = ncd.run(model, q.numpy(), k.numpy(), mask.numpy(), params=params)
    assert np.abs(got - want).max() < 1e-5


class Grid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(x.shape[0])[:, None]
        cols = torch.arange(1, 4)[None, :]
        return x[rows, cols] * 2.0


class Diagonal(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        i = torch.arange(x.shape[0])
        return x[i, i]


def test_a_grid_of_constant_ranges_indexes_and_a_diagonal_is_refused() -> None:
    x = torch.randn(5, 6)
    model, params = from_torch(Grid(), (x,))
    assert np.array_equal(ncd.run(model, x.numpy(), params=params), Grid()(x).numpy())
    with pytest.raises(TorchImportError, match="run along a broadcast dim of their own"):
        from_torch(Diagonal(), (torch.randn(5, 5),))


def test_a_window_wider_than_the_example_keeps_the_length_bound() -> None:
    """A 16-key sliding window over 9 tokens reads as a causal mask: right up to 16 tokens
    only, so the length stays the example's (a typed error at another), the batch free."""
    T = transformers
    cfg = T.MistralConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, sliding_window=16,
    )  # fmt: skip
    torch.manual_seed(0)
    module = Masked(T.MistralForCausalLM(cfg).eval())
    model, params = from_torch(module, _batch(2, 9, 0))
    assert [v.label for v in model.config().free] == ["batch"]
    ids, mask = _batch(3, 9, 1)
    with torch.no_grad():
        want = module(ids, mask).numpy()
    assert np.abs(ncd.run(model, ids.numpy(), mask.numpy(), params=params) - want).max() < 1e-5
    with pytest.raises(ncd.SizeError):
        ids, mask = _batch(2, 20, 1)
        ncd.run(model, ids.numpy(), mask.numpy(), params=params)
