"""Import time of real models, and the imported model's OpenCL forward beside torch.

For HF ``GPT2LMHeadModel`` and ``LlamaForCausalLM`` (built from configs, random weights, no
download) at 2, 12 and 24 layers: the wall time of ``ncd_torch.from_torch`` (two captures: the
second tells which sizes stay free), then, on the same weights and tokens, median forward times
of the imported model on OpenCL, torch eager and ``torch.compile``, with the ratios OpenCL /
eager and OpenCL / compiled in one run. Llama has GQA (a quarter as many key/value heads as
query heads) and RoPE; its d_ff is 2.75 x d_model, as Llama's 11008 / 4096 rounds.

Run: python benchmarks/torch_import.py [--models gpt2 llama --layers 2 12 24 --d-model 256
--seq 64 --rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

import ncd
import ncd_torch


class Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids, use_cache=False).logits


def _median(fn: Callable[[], Any], rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _gpt2(layers: int, d_model: int, heads: int, vocab: int, positions: int) -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        n_embd=d_model, n_layer=layers, n_head=heads, vocab_size=vocab, n_positions=positions
    )
    torch.manual_seed(0)
    return Logits(transformers.GPT2LMHeadModel(config)).eval()


def _llama(layers: int, d_model: int, heads: int, vocab: int, positions: int) -> nn.Module:
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=d_model,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 4),
        intermediate_size=d_model * 11 // 4,
        vocab_size=vocab,
        max_position_embeddings=positions,
    )
    torch.manual_seed(0)
    return Logits(transformers.LlamaForCausalLM(config)).eval()


MODELS = {"gpt2": ("HF GPT2LMHeadModel", _gpt2), "llama": ("HF LlamaForCausalLM", _llama)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["gpt2", "llama"])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 12, 24])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator())
    for name in args.models:
        title, build = MODELS[name]
        print(
            f"{title}, d_model {args.d_model}, {args.heads} heads, vocab {args.vocab}, "
            f"batch {args.batch} x {args.seq} tokens, float32, 1 torch thread"
        )
        header = "layers | import s | s/layer | max err | opencl ms | eager ms | compiled ms | "
        print(header + "opencl/eager | opencl/compiled")
        for layers in args.layers:
            module = build(layers, args.d_model, args.heads, args.vocab, max(args.seq, 64))
            _row(module, layers, ids, args)


def _row(module: nn.Module, layers: int, ids: torch.Tensor, args: Any) -> None:
    start = time.perf_counter()
    model, params = ncd_torch.from_torch(module, (ids,))
    seconds = time.perf_counter() - start
    run = ncd.compile(model, "opencl")
    x = ids.numpy()
    with torch.no_grad():
        want = module(ids).numpy()
        err = float(np.abs(run(x, params=params) - want).max())
        opencl = _median(lambda: run(x, params=params), args.rounds)
        eager = _median(lambda: module(ids), args.rounds)
        compiled = float("nan")
        if not args.no_compile:
            fast = torch.compile(module)
            compiled = _median(lambda: fast(ids), args.rounds)
    print(
        f"{layers:6d} | {seconds:8.2f} | {seconds / layers:7.3f} | {err:7.1e} | "
        f"{opencl * 1e3:9.2f} | {eager * 1e3:8.2f} | {compiled * 1e3:11.2f} | "
        f"{opencl / eager:12.2f} | {opencl / compiled:15.2f}"
    )


if __name__ == "__main__":
    main()
