"""Training a model on any backend: a character corpus, seeded batches, and the loop.

``fit`` runs one training step per batch: the gradient model (``ncd.grad``) compiled for the
target gives the loss and the gradients, which are clipped by global norm and passed to an
``ncd.optim`` optimiser compiled for the same target. Batches come from a seeded NumPy
generator and depend on nothing else, so two targets given the same init and seed see the same
batches, and their loss curves can be compared step by step (``agreement``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import attrs
import numpy as np

from ncd import nn
from ncd._term import Term
from ncd.autodiff import grad
from ncd.axis import Axis
from ncd.errors import DefinitionError
from ncd.optim import AdamW, Optimizer, clip_by_global_norm, warmup_cosine

__all__ = [
    "CharCorpus",
    "History",
    "ProgressBar",
    "agreement",
    "char_gpt",
    "fit",
    "python_docs_corpus",
]


@attrs.frozen
class CharCorpus:
    """A text as character ids: ``vocab`` the distinct characters (sorted), the first
    ``1 - val_fraction`` of the text the training split, the rest the validation split."""

    text: str
    val_fraction: float = 0.1
    vocab: tuple[str, ...] = attrs.field(init=False)
    ids: np.ndarray = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise DefinitionError(
                f"CharCorpus: val_fraction must be in (0, 1), got {self.val_fraction!r}. "
                "Fix: pass e.g. val_fraction=0.1."
            )
        vocab = tuple(sorted(set(self.text)))
        lookup = {c: i for i, c in enumerate(vocab)}
        object.__setattr__(self, "vocab", vocab)
        object.__setattr__(self, "ids", np.array([lookup[c] for c in self.text], np.int64))

    @property
    def split(self) -> int:
        return int(len(self.ids) * (1.0 - self.val_fraction))

    def part(self, which: str) -> np.ndarray:
        if which not in ("train", "val"):
            raise DefinitionError(f"CharCorpus: no split {which!r}. Fix: 'train' or 'val'.")
        return self.ids[: self.split] if which == "train" else self.ids[self.split :]

    def unigram_entropy(self) -> float:
        """The entropy (nats per character) of the training split's character frequencies:
        the loss of the best model that ignores context."""
        counts = np.bincount(self.part("train"), minlength=len(self.vocab)).astype(np.float64)
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())

    def batch(
        self, rng: np.random.Generator, which: str, batch: int, seq: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``batch`` windows at random offsets: tokens ``[batch seq]`` and the next characters
        as targets ``[batch seq]``."""
        ids = self.part(which)
        if len(ids) <= seq + 1:
            raise DefinitionError(
                f"CharCorpus: the {which} split has {len(ids)} characters, too few for seq="
                f"{seq}. Fix: a longer text or a shorter seq."
            )
        starts = rng.integers(0, len(ids) - seq - 1, batch)
        windows = np.stack([ids[s : s + seq + 1] for s in starts])
        return windows[:, :-1], windows[:, 1:]


def python_docs_corpus(val_fraction: float = 0.1) -> CharCorpus:
    """The English text of CPython's own help topics (``pydoc_data.topics``, ~465k
    characters of the language reference): shipped with every CPython, so it is there offline
    on any machine with Python. Topics in sorted order, so the text does not depend on the
    dict's order."""
    from pydoc_data.topics import topics

    return CharCorpus("".join(topics[k] for k in sorted(topics)), val_fraction)


def char_gpt(vocab: int, *, layers: int, d_model: int, heads: int, seq: int, batch: int) -> Term:
    """A character-level GPT's training loss: ``nn.gpt`` lifted over a ``batch`` axis, then
    ``nn.cross_entropy`` (the mean over batch and seq). Inputs: tokens and targets
    ``[batch seq]``."""
    if d_model % heads:
        raise DefinitionError(
            f"char_gpt: d_model={d_model} is not a multiple of heads={heads}. Fix: e.g. "
            f"heads={math.gcd(d_model, 4)}."
        )
    model = nn.gpt(layers=layers).bind(
        seq=seq, d_model=d_model, heads=heads, d_head=d_model // heads, d_ff=4 * d_model,
        vocab=vocab,
    )  # fmt: skip
    return model.over(Axis("batch", size=batch)) >> nn.cross_entropy()


class ProgressBar:
    """A one-line progress bar redrawn in place (``\\r``) on a terminal at every update;
    elsewhere (a log file) one line every ``every`` updates (default: 20 lines in all), at the
    last, and at any whose note has a validation loss."""

    def __init__(
        self,
        total: int,
        label: str = "",
        out: TextIO | None = None,
        width: int = 24,
        every: int | None = None,
    ) -> None:
        self.total, self.label, self.width = total, label, width
        self.out = out if out is not None else sys.stderr
        self.every = every if every is not None else max(total // 20, 1)
        self.start = time.perf_counter()
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())

    def update(self, done: int, note: str = "") -> None:
        last = done >= self.total
        if not self.tty and not (done % self.every == 0 or last or "val" in note):
            return
        filled = self.width * done // max(self.total, 1)
        rate = (time.perf_counter() - self.start) / max(done, 1)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"{self.label} [{bar}] {done}/{self.total} {note} ({rate:.2f} s/step)"
        self.out.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and last:
            self.out.write("\n")
        self.out.flush()


@attrs.frozen
class History:
    """A training run: the training loss of every step, the validation loss at the steps it
    was measured, and the final parameters."""

    target: str
    train: tuple[float, ...]
    val: tuple[tuple[int, float], ...]
    params: Mapping[str, np.ndarray] = attrs.field(eq=False, repr=False)


def fit(
    loss_model: Term,
    corpus: CharCorpus,
    params: Mapping[str, np.ndarray],
    *,
    target: str = "reference",
    steps: int,
    optimizer: Optimizer | None = None,
    seed: int = 0,
    clip: float | None = 1.0,
    val_every: int = 0,
    val_batches: int = 4,
    progress: Callable[[int, str], None] | None = None,
) -> History:
    """Train ``loss_model`` (inputs tokens, targets ``[batch seq]``; output the scalar loss)
    on ``corpus`` for ``steps`` steps on ``target``. The default optimiser is AdamW (lr 3e-3,
    warm-up over a tenth of the steps, cosine decay, weight decay 0.1) on the same target.
    ``val_every`` > 0: the validation loss (mean over ``val_batches`` batches drawn with
    ``seed + 1``, the same batches every time) at every ``val_every`` steps and at the end."""
    from ncd.api import compile

    batch, seq = _batch_shape(loss_model)
    opt = optimizer or AdamW(
        lr=warmup_cosine(3e-3, max(steps // 10, 1), steps, floor=3e-4),
        betas=(0.9, 0.99),
        weight_decay=0.1,
        target=target,
    )
    step_fn = compile(grad(loss_model), target)
    forward = compile(loss_model, target) if val_every else None
    val_rng = np.random.default_rng(seed + 1)
    val_set = [corpus.batch(val_rng, "val", batch, seq) for _ in range(val_batches)]
    rng = np.random.default_rng(seed)
    state = opt.init(params)
    losses: list[float] = []
    vals: list[tuple[int, float]] = []
    for i in range(1, steps + 1):
        tokens, targets = corpus.batch(rng, "train", batch, seq)
        loss, grads = step_fn(tokens, targets, params=params)
        if clip is not None:
            grads, _ = clip_by_global_norm(grads, clip)
        params, state = opt.update(params, grads, state)
        losses.append(float(loss))
        note = f"loss {losses[-1]:.4f}"
        if forward is not None and (i % val_every == 0 or i == steps):
            val = float(np.mean([forward(t, y, params=params) for t, y in val_set]))
            vals.append((i, val))
            note += f" val {val:.4f}"
        if progress is not None:
            progress(i, note)
    return History(target, tuple(losses), tuple(vals), dict(params))


def agreement(runs: Sequence[History], reference: int = 0) -> dict[str, float]:
    """The largest relative difference, over the steps, between each run's training loss and
    ``runs[reference]``'s: ``{target: max_t |l_t - ref_t| / |ref_t|}``."""
    base = np.asarray(runs[reference].train)
    out: dict[str, float] = {}
    for run in runs:
        curve = np.asarray(run.train)
        n = min(len(curve), len(base))
        out[run.target] = float(np.max(np.abs(curve[:n] - base[:n]) / np.abs(base[:n])))
    return out


def _batch_shape(loss_model: Any) -> tuple[int, int]:
    """The (batch, seq) sizes of the loss model's token input."""
    from ncd.graph import as_graph

    g = as_graph(loss_model, "ncd.training.fit")
    sizes = [a.size for a in g.values[g.inputs[0]].axes] if len(g.inputs) == 2 else []
    if len(sizes) != 2 or not all(isinstance(s, int) for s in sizes):
        raise DefinitionError(
            "fit: the loss model must take tokens and targets [batch seq] of bound sizes. "
            "Fix: build it with ncd.training.char_gpt(...) or bind its sizes."
        )
    return int(sizes[0]), int(sizes[1])  # type: ignore[arg-type]


def train_char_gpt(
    targets: Sequence[str] = ("torch",),
    *,
    steps: int = 200,
    layers: int = 4,
    d_model: int = 128,
    heads: int = 4,
    seq: int = 128,
    batch: int = 8,
    val_every: int = 50,
    seed: int = 0,
    save: str | None = None,
    out: Callable[[str], None] = print,
) -> list[History]:
    """``ncd train``: a character-level GPT trained on ``python_docs_corpus`` on each target
    from the same init and batches, reporting the validation loss against the unigram entropy
    and, with several targets, the loss curves' largest relative difference from the first.
    ``save``: a JSON file rewritten after each target, ``{target: {"train": [...], "val":
    [[step, loss], ...]}}``, so finished curves survive a later target's failure."""
    from ncd.params import init

    corpus = python_docs_corpus()
    model = char_gpt(
        len(corpus.vocab), layers=layers, d_model=d_model, heads=heads, seq=seq, batch=batch
    )
    params = init(model, seed=seed)
    entropy = corpus.unigram_entropy()
    out(
        f"corpus: pydoc_data.topics, {len(corpus.text)} characters, vocab {len(corpus.vocab)}; "
        f"unigram entropy {entropy:.4f} nats/char"
    )
    n_params = sum(int(p.size) for p in params.values())
    out(
        f"model: {layers} layers, d_model {d_model}, {heads} heads, seq {seq}, batch {batch}: "
        f"{n_params} parameters"
    )
    runs = []
    for target in targets:
        bar = ProgressBar(steps, target)
        start = time.perf_counter()
        run = fit(
            model, corpus, params, target=target, steps=steps, seed=seed,
            val_every=val_every or steps, progress=bar.update,
        )  # fmt: skip
        runs.append(run)
        if save is not None:
            curves = {r.target: {"train": list(r.train), "val": list(r.val)} for r in runs}
            with open(save, "w") as f:
                json.dump(curves, f)
        at, val = run.val[-1]
        out(
            f"{target}: {time.perf_counter() - start:.1f} s; train loss {run.train[0]:.4f} -> "
            f"{run.train[-1]:.4f}; validation loss at step {at} {val:.4f} nats/char (unigram "
            f"entropy {entropy:.4f})"
        )
    if len(runs) > 1:
        out(f"loss curves over {steps} steps, largest relative difference from {targets[0]}:")
        for target, diff in agreement(runs).items():
            out(f"  {target:<10} {diff:.2e}")
    return runs
