"""``ncd demo``: build the GPT, show its configuration, run it on the reference interpreter,
then hand it to every installed plugin's demo step (export, draw, price, compile...)."""

from __future__ import annotations

import os
import time
import traceback

import numpy as np


def demo(out: str, layers: int = 2) -> int:
    import ncd
    from ncd.plugins import registry

    os.makedirs(out, exist_ok=True)
    print(f"== ncd {ncd.__version__} demo ==\n")
    gpt = ncd.nn.gpt(layers=layers)
    print(f"-- a {layers}-layer GPT, defined symbolically; its configurable sizes:")
    print(gpt.config())
    sizes = dict(seq=64, d_model=128, heads=4, d_head=32, d_ff=512, vocab=256)
    model = gpt.bind(**sizes)
    print(f"\n-- bound with {sizes}; explain():")
    print(model.explain())
    params = ncd.init(model, seed=0)
    n_params = sum(p.size for p in params.values())
    tokens = np.random.default_rng(0).integers(0, sizes["vocab"], sizes["seq"])
    t0 = time.perf_counter()
    logits = ncd.run(model, tokens, params=params)
    dt = time.perf_counter() - t0
    print(
        f"\n-- reference interpreter: {len(params)} parameter arrays ({n_params:,} numbers); "
        f"logits {logits.shape} in {dt * 1e3:.1f} ms, mean {logits.mean():+.4f}, "
        f"std {logits.std():.4f}"
    )
    ctx = {
        "model": model,
        "unbound": gpt,
        "params": params,
        "tokens": tokens,
        "logits": logits,
        "out": out,
        "sizes": sizes,
    }
    failed = []
    steps = registry().demo_steps_with_owners()
    if not steps:
        print("\n(no plugins installed: pip install packages/ncd-torch ... to see more)")
    for step, owner in steps:
        print(f"\n-- {step.name}")
        try:
            step.run(ctx)
        except Exception:  # report every step, naming its plugin, then fail at the end
            traceback.print_exc()
            print(f"demo step {step.name!r} of {owner.describe()} failed (above)")
            failed.append(f"{step.name} ({owner.distribution})")
    if failed:
        print(f"\ndemo steps failed: {', '.join(failed)}")
        return 1
    print("\ndemo complete.")
    return 0
