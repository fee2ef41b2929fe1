"""Train a character-level GPT on CPython's help topics, on the reference, ncd-opencl and torch.

The model is ``nn.gpt`` lifted over a batch, then ``nn.cross_entropy``; ``ncd.grad`` gives the
joint forward and backward graph, which every target runs as it runs any model (torch: the
exported joint graph, not torch.autograd); the update is ``ncd.optim.AdamW`` compiled for the
same target. Every target starts from the same parameters and sees the same seeded batches,
so with several targets the script also prints how far their loss curves drift apart. The
loop is ``ncd.training.fit``; ``ncd train`` is this script as a subcommand.

    python examples/train_gpt.py --targets torch --steps 1000
    python examples/train_gpt.py --targets reference opencl torch --steps 200

The corpus is ``pydoc_data.topics`` (the language reference's English text, shipped with
every CPython, so it is there offline): the last tenth is the validation split.
"""

from __future__ import annotations

import argparse

from ncd import training


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="+", default=["torch"], help="backends, first the base")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--val-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", metavar="FILE.json", help="write the loss curves there")
    args = ap.parse_args(argv)

    training.train_char_gpt(
        args.targets, steps=args.steps, layers=args.layers, d_model=args.d_model,
        heads=args.heads, seq=args.seq, batch=args.batch, val_every=args.val_every,
        seed=args.seed, save=args.save,
    )  # fmt: skip


if __name__ == "__main__":
    main()
