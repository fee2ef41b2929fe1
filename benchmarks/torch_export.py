"""Exported-module forward time versus a hand-written PyTorch GPT of the same size.

Both run the same weights (the hand-written model loads the exported one's state, mapped by
name) on the same tokens; the script checks they agree, then prints median forward times side
by side with the ratio exported / hand-written (the target is <= 1.1: the export should add no
measurable overhead). Run: python benchmarks/torch_export.py [--layers 4 --seq 256 ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import ncd
from ncd_torch import state_dict, to_module


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, d_head: int, sdpa: bool) -> None:
        super().__init__()
        self.heads, self.d_head, self.sdpa = heads, d_head, sdpa
        self.q = nn.Linear(d_model, heads * d_head)
        self.k = nn.Linear(d_model, heads * d_head)
        self.v = nn.Linear(d_model, heads * d_head)
        self.o = nn.Linear(heads * d_head, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[0]
        q, k, v = (
            f(x).view(T, self.heads, self.d_head).transpose(0, 1) for f in (self.q, self.k, self.v)
        )
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            y = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return self.o(y.transpose(0, 1).reshape(T, -1))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, d_head: int, d_ff: int, sdpa: bool) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, d_head, sdpa)
        self.fc, self.proj = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(
        self,
        layers: int,
        seq: int,
        d_model: int,
        heads: int,
        d_head: int,
        d_ff: int,
        vocab: int,
        sdpa: bool,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Parameter(torch.zeros(seq, d_model))
        self.blocks = nn.ModuleList(
            Block(d_model, heads, d_head, d_ff, sdpa) for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def hand_state(params: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """ncd parameter names and shapes -> the hand-written model's."""
    out = {}
    for name, array in params.items():
        t = torch.from_numpy(array)
        name = name.replace(".mlp.", ".").replace("wpe.weight", "wpe")
        if name.endswith(("q.weight", "k.weight", "v.weight")):
            t = t.reshape(-1, t.shape[-1])
        elif name.endswith(("q.bias", "k.bias", "v.bias")):
            t = t.reshape(-1)
        elif name.endswith("o.weight"):
            t = t.reshape(t.shape[0], -1)
        out[name] = t
    return out


def forward_ms(fn: object, tokens: torch.Tensor) -> tuple[float, float]:
    """(CPU ms of this thread, wall ms) of one forward. With one torch thread all the work runs
    on the calling thread, so its CPU time is robust to other processes sharing the cores."""
    c0, t0 = time.thread_time(), time.perf_counter()
    fn(tokens)  # type: ignore[operator]
    return (time.thread_time() - c0) * 1e3, (time.perf_counter() - t0) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--repeat", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    d_head = a.d_model // a.heads
    sizes = dict(
        seq=a.seq, d_model=a.d_model, heads=a.heads, d_head=d_head, d_ff=a.d_ff, vocab=a.vocab
    )
    model = ncd.nn.gpt(layers=a.layers).bind(**sizes)
    params = ncd.init(model, seed=0)
    exported = to_module(model)
    exported.load_state_dict(state_dict(params))
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, a.vocab, a.seq))
    peers = {}
    for sdpa in (False, True):
        hand = GPT(a.layers, **sizes, sdpa=sdpa).eval()
        hand.load_state_dict(hand_state(params))
        peers["hand-written (sdpa)" if sdpa else "hand-written (matmul+mask)"] = hand
    with torch.no_grad():
        want = exported(tokens)
        for name, hand in peers.items():
            diff = (hand(tokens) - want).abs().max().item()
            assert diff < 1e-3, f"{name} disagrees with the export: {diff:.2e}"
    names = ["ncd_torch.to_module", *peers]
    modules = [exported, *peers.values()]
    print(
        f"GPT {a.layers} layers, {sizes}, {a.threads} thread(s); {a.repeat} rounds, each "
        "running every module once in rotating order; medians (cpu: this thread's CPU time)"
    )
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    with torch.no_grad():
        for m in modules:  # warm up
            m(tokens)
        for r in range(a.repeat):
            for k in range(len(names)):
                i = (r + k) % len(names)
                c, w = forward_ms(modules[i], tokens)
                cpu[names[i]].append(c)
                wall[names[i]].append(w)
    print(f"{'module':28} {'cpu ms':>8} {'wall ms':>9} {'exported/this (cpu, paired)':>28}")
    ours = cpu[names[0]]
    for n in names:
        ratio = statistics.median(o / t for o, t in zip(ours, cpu[n], strict=True))
        print(
            f"{n:28} {statistics.median(cpu[n]):8.2f} {statistics.median(wall[n]):9.2f} "
            f"{ratio:28.3f}"
        )


if __name__ == "__main__":
    main()
