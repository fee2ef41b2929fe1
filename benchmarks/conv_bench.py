"""Convolutions on ncd-opencl beside torch eager and torch.compile, on this CPU, one table.

Workloads (issue 15): a 3x3 conv2d 64 -> 64 channels on 56x56 images, batch 8, a ResNet
basic block at the same sizes (conv, eval batch norm, ReLU, conv, batch norm, the residual,
ReLU) and an LSTM layer (``nn.lstm``: 256 steps, 512 inputs and hidden units, batch 8,
unrolled by ``ncd.scan``). The peers are ``torch.nn`` modules holding the same weights; every
output is checked against torch eager before it is timed (max abs error in the table). ncd's
first call (plan, code generation, OpenCL build) and torch.compile's (inductor) are shown
apart from the steady medians.

    python benchmarks/conv_bench.py            # the issue's sizes (minutes on 2 cores)
    python benchmarks/conv_bench.py --quick    # 16 channels, 14x14, batch 2; 32 steps of 64
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

import ncd
from ncd import conv, ops
from ncd import nn as ncd_nn


def _median(fn: Callable[[], Any], reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _first(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def conv_case(c: int, hw: int) -> tuple[Any, nn.Module, dict[str, str]]:
    model = conv.conv2d(c, c, 3, padding=1, height=hw, width=hw)
    peer = nn.Conv2d(c, c, 3, padding=1)
    return model, peer, {"conv.weight": "weight", "conv.bias": "bias"}


class BasicBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def block_case(c: int, hw: int) -> tuple[Any, nn.Module, dict[str, str]]:
    ch, h, w = ncd.Axis("c", size=c), ncd.Axis("h", size=hw), ncd.Axis("w", size=hw)
    mid = ncd.Axis("c_mid", size=c)
    conv1 = conv.conv2d(ch, mid, 3, padding=1, bias=False, height=h, width=w, name="conv1")
    # the second convolution writes the block's own h and w, so the residual adds index by index
    conv2 = conv.conv2d(mid, ch, 3, padding=1, bias=False, height_out=h, width_out=w, name="conv2")
    bn1, bn2 = conv.batch_norm(mid, name="bn1"), conv.batch_norm(ch, name="bn2")

    @ncd.trace(inputs=[ncd.ArrayType((ch, h, w))])
    def block(x: Any) -> Any:
        y = ops.relu()(bn1(conv1(x)))
        return ops.relu()(bn2(conv2(y)) + x)

    stats = ("weight", "bias", "running_mean", "running_var")
    names = [f"{m}.{p}" for m in ("bn1", "bn2") for p in stats] + ["conv1.weight", "conv2.weight"]
    return block, BasicBlock(c).eval(), {n: n for n in names}


def lstm_case(steps: int, width: int, batch: int) -> tuple[Any, nn.Module, torch.Tensor]:
    model = ncd_nn.lstm(width, width, seq=steps, batch=ncd.Axis("n", size=batch), label="")
    return model, nn.LSTM(width, width).eval(), torch.randn(steps, batch, width)


Case = tuple[str, Any, nn.Module, torch.Tensor, dict[str, str]]


def _conv_cases(c: int, hw: int, batch: int) -> list[Case]:
    out: list[Case] = []
    for name, make in (("conv2d 3x3", conv_case), ("resnet basic block", block_case)):
        model, peer, names = make(c, hw)
        with torch.no_grad():
            for m in peer.modules():
                if isinstance(m, nn.BatchNorm2d):  # statistics other than the initial ones
                    m.running_mean.normal_(0, 0.1)
                    m.running_var.uniform_(0.5, 2.0)
        model = model.over(ncd.Axis("n", size=batch))
        out.append((name, model, peer, torch.randn(batch, c, hw, hw), names))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    c, hw, batch = (16, 14, 2) if args.quick else (64, 56, 8)
    steps, width = (32, 64) if args.quick else (256, 512)
    torch.manual_seed(0)
    rows = []
    cases = _conv_cases(c, hw, batch)
    lstm, lstm_peer, lstm_x = lstm_case(steps, width, batch)
    cases.append(("lstm layer", lstm, lstm_peer, lstm_x, {k: k for k in lstm_peer.state_dict()}))
    for name, model, peer, x, names in cases:
        state = peer.state_dict()
        shapes = {k: v.shape for k, v in ncd.init(model).items()}  # torch's layout merges ncd's
        params = {k: state[v].numpy().reshape(shapes[k]) for k, v in names.items()}
        xn = x.numpy()
        with torch.no_grad():
            want = peer(x)
            want = (want[0] if isinstance(want, tuple) else want).numpy()
        exe = ncd.compile(model, "opencl")
        ncd_first = _first(lambda: exe(xn, params=params))
        err = float(np.max(np.abs(exe(xn, params=params) - want)))
        ncd_t = _median(lambda: exe(xn, params=params), args.reps)
        with torch.no_grad():
            eager_t = _median(lambda: peer(x), args.reps)
            compiled = torch.compile(peer)
            tc_first = _first(lambda: compiled(x))
            tc_t = _median(lambda: compiled(x), args.reps)
        rows.append((name, err, ncd_first, ncd_t, eager_t, tc_first, tc_t))
    threads = torch.get_num_threads()
    print(
        f"batch {batch}, {c} -> {c} channels, {hw}x{hw}; lstm {steps} steps x {width}; float32, "
        f"torch threads {threads}"
    )
    head = f"{'workload':<20} {'max err':>9} {'ncd 1st':>8} {'ncd ms':>8} {'eager ms':>9}"
    print(head + f" {'tc 1st':>7} {'tc ms':>8} {'ncd/eager':>9} {'ncd/tc':>7}")
    for name, err, nf, nt, et, tf, tt in rows:
        print(
            f"{name:<20} {err:>9.1e} {nf:>7.1f}s {nt * 1e3:>8.2f} {et * 1e3:>9.2f} {tf:>6.1f}s "
            f"{tt * 1e3:>8.2f} {nt / et:>9.2f} {nt / tt:>7.2f}"
        )


if __name__ == "__main__":
    main()
