"""Import: PyTorch modules become ncd models with named axes and blocks, equal to the module,
and export back to an equal module."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_gpt2 import GPT, Block

import ncd
from ncd_torch import TorchImportError, from_torch, to_module


def _check(module, *inputs, rtol=1e-5, atol=1e-5):
    module.eval()
    want = module(*inputs).detach().numpy()
    imported = from_torch(module, inputs)
    model, params = imported
    got = ncd.run(model, *(x.numpy() for x in inputs), params=params)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    back = to_module(model, params=params)
    np.testing.assert_allclose(back(*inputs).detach().numpy(), want, rtol=rtol, atol=atol)
    return imported


def test_gpt2_block_imports_equal_with_named_axes_and_blocks():
    torch.manual_seed(0)
    imported = _check(Block(d_model=12, heads=3, d_ff=29), torch.randn(2, 7, 12))
    model = imported.model
    text = model.explain()
    for name in ("seq", "seq_k", "heads", "d_head", "d_model", "d_ff", "batch"):
        assert name in text, name
    assert "dim0" not in text and "#" not in text  # every axis has one meaningful name
    sizes = {v.label: v.size for v in model.config().bound}
    assert sizes == {"d_model": 12, "heads": 3, "d_head": 4, "d_ff": 29}
    assert [v.label for v in model.config().free] == ["batch", "seq"]  # any batch and length
    scopes = {s.label for s in model.graph.scopes}
    assert {"attn", "mlp", "attention"} <= scopes
    # nn.Linear q/k/v fold the head split: weight axes (heads, d_head, d_model)
    assert imported.params["attn.q.weight"].shape == (3, 4, 12)
    assert imported.torch_names["attn.q.weight"] == "attn.q.weight"
    assert "attn" in dict(to_module(model, params=imported.params).named_modules())


def test_batch_and_length_stay_free_unless_asked_or_fixed():
    torch.manual_seed(6)
    block = Block(d_model=12, heads=3, d_ff=29).eval()
    model, params = from_torch(block, (torch.randn(2, 7, 12),))
    for shape in ((3, 11, 12), (1, 1, 12)):  # another batch and length, and a single token
        x = torch.randn(*shape)
        got = ncd.run(model, x.numpy(), params=params)
        np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    bound = from_torch(block, (torch.randn(2, 7, 12),), free_sizes=False).model
    assert not bound.config().free
    # a positional table added whole fixes the length (the module runs at no other one); the
    # batch alone stays free
    gpt = GPT(layers=1, seq=7, d_model=12, heads=3, d_ff=29, vocab=11).eval()
    fixed = from_torch(gpt, (torch.randint(0, 11, (2, 7)),))
    assert [v.label for v in fixed.model.config().free] == ["batch"]
    ids = torch.randint(0, 11, (5, 7))
    got = ncd.run(fixed.model, ids.numpy(), params=fixed.params)
    np.testing.assert_allclose(got, gpt(ids).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_explicit_matmul_attention_imports():
    torch.manual_seed(1)
    imported = _check(Block(d_model=12, heads=2, d_ff=13, sdpa=False), torch.randn(1, 13, 12))
    assert "seq_k" in imported.model.explain()


def test_whole_gpt_with_embedding_and_module_list():
    torch.manual_seed(2)
    gpt = GPT(layers=2, seq=7, d_model=12, heads=3, d_ff=29, vocab=11)
    imported = _check(gpt, torch.randint(0, 11, (2, 7)))
    labels = {s.label for s in imported.model.graph.scopes}
    assert {"blocks.0", "blocks.1"} <= labels
    assert "blocks.1.attn.o.weight" in imported.params
    # blocks share their axes, like ncd.nn.gpt's
    assert [v.label for v in imported.model.config().bound].count("d_head") == 1


class Ops(nn.Module):
    """The rest of the documented op set in one module."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(6, eps=1e-6)
        self.lin = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(self.norm(x))
        y = torch.einsum("bsd,bte->bste", y, torch.sigmoid(self.lin(x)))
        y = F.silu(y) - torch.tanh(y) / 2.0 + torch.relu(y) * 3.0
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        z = torch.bmm(y, y.transpose(1, 2))
        return torch.softmax(z, dim=-1) + F.gelu(z, approximate="tanh")


def test_documented_op_set():
    torch.manual_seed(3)
    _check(Ops(), torch.randn(2, 5, 6), rtol=1e-4, atol=1e-5)


def test_unsupported_op_names_the_op_and_where_it_came_from():
    class Inner(nn.Module):
        def forward(self, x):
            return torch.sort(x, 0).values

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x)

    with pytest.raises(TorchImportError) as info:
        from_torch(Outer(), (torch.randn(3, 4),))
    message = str(info.value)
    assert isinstance(info.value, ncd.NcdError)
    assert "aten.sort" in message and "inner (Inner)" in message and "test_import.py" in message
    assert "data-dependent selection (topk, sort) is not supported" in message
    assert [p.op for p in info.value.problems] == ["aten.sort"]


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(3.0))
        self.register_buffer("ones", torch.ones(4))
        self.register_buffer("mask", torch.arange(4.0))
        self.use = "scale"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * getattr(self, self.use)


def test_0d_and_uniform_buffers_are_constants_and_others_are_refused():
    x = torch.randn(2, 4)
    _check(Scaled(), x)
    module = Scaled()
    module.use = "ones"  # uniform, broadcasts away: the constant 1
    _check(module, x)
    module.use = "mask"
    with pytest.raises(TorchImportError, match="'mask' of shape \\[4\\]"):
        from_torch(module, (x,))


def test_gpt2_fused_qkv_split_stays_one_linear():
    """``c_attn(x).split(d, dim=-1)``: one Linear onto ``qkv`` (torch's one parameter, loaded
    as it is), then a slice per chunk, each viewed as ``heads d_head``."""
    from torch_gpt2 import FusedQKV

    torch.manual_seed(4)
    module = FusedQKV()
    imported = _check(module, torch.randn(2, 7, 12))
    assert imported.torch_names["c_attn.weight"] == "c_attn.weight"
    assert imported.params["c_attn.weight"].shape == (36, 12)
    assert len(imported.params) == len(list(module.parameters()))
    text = imported.model.explain()
    assert "c_attn: [d_model -> qkv]" in text and "c_attn_1: [qkv -> k]" in text
    assert "c_proj: [heads d_head -> d_model]" in text


class NanoAttention(nn.Module):
    """Causal self-attention written the usual nanoGPT way: one c_attn split in three, heads by
    view + transpose, and a registered tril buffer sliced to the sequence and used in
    masked_fill."""

    def __init__(
        self,
        d: int = 12,
        heads: int = 3,
        block: int = 16,
        band: bool = False,
        fill: float = float("-inf"),
    ):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads, self.fill = heads, fill
        mask = torch.tril(torch.ones(block, block))
        if band:  # not causal: also hides keys more than two steps back
            mask = mask - torch.tril(torch.ones(block, block), -3)
        self.register_buffer("bias", mask.view(1, 1, block, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, self.fill)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


@pytest.mark.parametrize("t", [16, 7])  # 7: the buffer is sliced to the sequence
def test_masked_fill_with_a_tril_buffer_is_a_causal_mask(t: int):
    torch.manual_seed(5)
    imported = _check(NanoAttention(), torch.randn(2, t, 12))
    text = imported.model.explain()
    assert "causal_mask: [seq seq_k -> seq seq_k]" in text
    assert not any("bias" in name and "c_" not in name for name in imported.params)


def test_masked_fill_with_other_constant_masks_is_refused():
    x = torch.randn(1, 6, 12)
    with pytest.raises(TorchImportError, match="not causal"):
        from_torch(NanoAttention(band=True).eval(), (x,))
    with pytest.raises(TorchImportError, match="fill value"):
        from_torch(NanoAttention(fill=-1e4).eval(), (x,))
