"""``ncd compile MODEL --target opencl --emit DIR`` and the demo step."""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["configure", "demo_step", "run"]

#: ``--fuse`` flag -> the ``fuse=`` option of ``generate``
_FUSE: dict[str, bool | str] = {"ncd": True, "local": "local", "none": False}


def configure(p: argparse.ArgumentParser) -> None:
    from ncd.cli import add_model_arguments

    add_model_arguments(p)
    p.add_argument(
        "--target",
        default="opencl",
        choices=["opencl"],
        help="code generator (this command is provided by ncd-opencl)",
    )
    p.add_argument("--emit", metavar="DIR", help="write kernel sources, plan.json and plan.txt")
    p.add_argument(
        "--fuse",
        default="ncd",
        choices=list(_FUSE),
        help="planner: ncd.fuse (default), the local fallback, or one kernel per op",
    )


def run(args: argparse.Namespace) -> int:
    from ncd.cli import load_model
    from ncd_opencl.generate import generate
    from ncd_opencl.inspect import describe, emit, plan_dict

    model = load_model(args.model, args.bind)
    gen = generate(model.graph, fuse=_FUSE[args.fuse])
    print(describe(plan_dict(gen)), end="")
    if args.emit:
        files = emit(gen, args.emit)
        print(f"wrote {len(files)} files to {args.emit}")
    return 0


def demo_step(ctx: dict[str, Any]) -> None:
    import numpy as np

    import ncd

    model, params, tokens, want = ctx["model"], ctx["params"], ctx["tokens"], ctx["logits"]
    t0 = time.perf_counter()
    exe = ncd.compile(model, "opencl")
    got = exe(tokens, params=params)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    exe(tokens, params=params)
    steady = time.perf_counter() - t0
    compiled = exe.compiled(ncd.reference.prepare(model, [tokens], params)[0])  # type: ignore[attr-defined]
    print(
        f"opencl on {compiled.device.name.strip()}: {len(compiled.gen.kernels)} kernels "
        f"for {len(model.graph.nodes)} ops; max |logits - reference| = "
        f"{float(np.max(np.abs(got - want))):.2e}; first call {first:.2f} s "
        f"(generate + build), then {steady * 1e3:.1f} ms"
    )
    # the same model in bfloat16 (parameters and activations stored in 16 bits, f32 arithmetic),
    # against the reference interpreter computing the same formats
    half = model.cast(ncd.bfloat16)
    hparams = {k: v.astype(ncd.bfloat16.numpy) for k, v in params.items()}
    hot = ncd.compile(half, "opencl")(tokens, params=hparams).astype(np.float32)
    href = ncd.run(half, tokens, params=hparams).astype(np.float32)
    print(
        f"opencl bfloat16: max |logits - bf16 reference| = {float(np.max(np.abs(hot - href))):.2e}"
        f", max |logits - f32 logits| = {float(np.max(np.abs(hot - want))):.2e}"
    )
    _train_steps(model, tokens)


def _train_steps(model: Any, tokens: Any, steps: int = 5) -> None:
    """A few training steps of the demo GPT on OpenCL: ``ncd.grad`` of the model with
    cross-entropy on the next tokens (FlashAttention-2's backward), AdamW on OpenCL; the first
    step's gradients against the reference interpreter's."""
    import numpy as np

    import ncd

    loss_model = model >> ncd.nn.cross_entropy()
    params = ncd.init(loss_model, seed=0)
    grad = ncd.grad(loss_model)
    targets = np.roll(tokens, -1)
    t0 = time.perf_counter()
    step = ncd.compile(grad, "opencl")
    opt = ncd.optim.AdamW(lr=3e-3, target="opencl")
    ps, state = dict(params), opt.init(params)
    losses: list[float] = []
    times: list[float] = []
    first_grads: dict[str, Any] = {}
    for _ in range(steps):
        loss, grads = step(tokens, targets, params=ps)
        if not losses:
            first_grads = grads
        losses.append(float(loss))
        ps, state = opt.update(ps, grads, state)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
    want_loss, want = ncd.run(grad, tokens, targets, params=params)
    top = max(float(np.max(np.abs(g))) for g in want.values())
    rel = max(float(np.max(np.abs(first_grads[k] - g))) for k, g in want.items()) / top
    curve = " -> ".join(f"{x:.4f}" for x in losses)
    print(
        f"opencl training ({steps} AdamW steps, next-token cross-entropy): loss {curve} "
        f"(reference {float(want_loss):.4f} at step 1); step-1 gradients vs reference: max "
        f"diff {rel:.1e} of the largest; first step {times[0]:.1f} s (generate + build), then "
        f"{min(times[1:]) * 1e3:.0f} ms per step"
    )
