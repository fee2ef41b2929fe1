"""A GPT-2-style model written the usual PyTorch way (the import tests' and benchmark's peer)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, *, sdpa: bool = True) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = self.k(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = self.v(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the explicit form, without a mask
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.o(y)


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.proj = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(
        self, d_model: int = 12, heads: int = 3, d_ff: int = 29, *, sdpa: bool = True
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, heads, sdpa=sdpa)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(
        self,
        layers: int = 2,
        *,
        seq: int = 7,
        d_model: int = 12,
        heads: int = 3,
        d_ff: int = 29,
        vocab: int = 11,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        self.blocks = nn.ModuleList([Block(d_model, heads, d_ff) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class FusedQKV(nn.Module):
    """GPT-2's own layout: one ``c_attn`` Linear to 3 * d_model, split into q, k, v."""

    def __init__(self, d_model: int = 12, heads: int = 3) -> None:
        super().__init__()
        self.d_model, self.heads = d_model, heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
