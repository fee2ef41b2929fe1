"""``ncd.training``: the character corpus, seeded batches, and the training loop on the
reference (and ncd-opencl where installed), kept to a tiny GPT and a few steps."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ncd
from ncd import training
from ncd.optim import AdamW

OPENCL = (
    importlib.util.find_spec("ncd_opencl") is not None
    and importlib.util.find_spec("pyopencl") is not None
)


@pytest.fixture(scope="module")
def corpus() -> training.CharCorpus:
    return training.python_docs_corpus()


def _tiny(corpus: training.CharCorpus, batch: int = 3, seq: int = 13) -> ncd.Term:
    return training.char_gpt(len(corpus.vocab), layers=1, d_model=8, heads=2, seq=seq, batch=batch)


def test_the_corpus_is_english_text_split_in_order(corpus: training.CharCorpus) -> None:
    assert len(corpus.text) > 100_000 and "statement" in corpus.text
    assert "".join(corpus.vocab[i] for i in corpus.ids[:50]) == corpus.text[:50]
    train, val = corpus.part("train"), corpus.part("val")
    assert len(train) + len(val) == len(corpus.text)
    assert abs(len(val) / len(corpus.text) - 0.1) < 1e-4


def test_unigram_entropy_is_that_of_the_character_frequencies() -> None:
    c = training.CharCorpus("aab" * 30 + "c" * 10, val_fraction=0.1)  # train: 45 a, 45 b... ish
    train = c.text[: c.split]
    p = np.array([train.count(ch) for ch in sorted(set(train))], float) / len(train)
    assert c.unigram_entropy() == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert training.CharCorpus("abab" * 10).unigram_entropy() == pytest.approx(np.log(2))


def test_batches_are_windows_with_next_character_targets(corpus: training.CharCorpus) -> None:
    t1, y1 = corpus.batch(np.random.default_rng(7), "train", 5, 11)
    t2, y2 = corpus.batch(np.random.default_rng(7), "train", 5, 11)
    assert t1.shape == y1.shape == (5, 11) and t1.dtype == np.int64
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(t1[:, 1:], y1[:, :-1])
    assert t1.max() < len(corpus.vocab)


def test_fit_lowers_the_loss_and_measures_validation(corpus: training.CharCorpus) -> None:
    model = _tiny(corpus)
    params = ncd.init(model, seed=0)
    run = training.fit(
        model, corpus, params, steps=12, optimizer=AdamW(lr=3e-2), val_every=6, val_batches=2
    )
    assert len(run.train) == 12 and [s for s, _ in run.val] == [6, 12]
    assert np.mean(run.train[-3:]) < run.train[0] - 0.5
    assert run.val[-1][1] < run.val[0][1]
    assert set(run.params) == set(params)
    assert all(not np.array_equal(run.params[k], params[k]) for k in params)


def test_two_runs_from_the_same_seed_are_the_same(corpus: training.CharCorpus) -> None:
    model = _tiny(corpus, batch=2, seq=7)
    params = ncd.init(model, seed=1)
    a = training.fit(model, corpus, params, steps=3, seed=4)
    b = training.fit(model, corpus, params, steps=3, seed=4)
    c = training.fit(model, corpus, params, steps=3, seed=5)
    assert a.train == b.train and a.train != c.train
    assert training.agreement([a, b]) == {"reference": 0.0}
    assert training.agreement([c, a])["reference"] > 0.0


@pytest.mark.skipif(not OPENCL, reason="ncd-opencl (pyopencl) is not installed")
def test_opencl_follows_the_reference_step_by_step(corpus: training.CharCorpus) -> None:
    model = _tiny(corpus)
    params = ncd.init(model, seed=2)
    runs = [training.fit(model, corpus, params, target=t, steps=5) for t in ("reference", "opencl")]
    assert runs[1].target == "opencl"
    assert training.agreement(runs)["opencl"] < 1e-4
    # Adam normalises each gradient, so a parameter whose gradient is zero in exact arithmetic
    # (the key bias: softmax ignores a shift along its axis) moves by float32 noise times lr
    for k in params:
        np.testing.assert_allclose(runs[1].params[k], runs[0].params[k], rtol=1e-3, atol=1e-3)


def test_train_char_gpt_reports_entropy_and_losses(tmp_path: Path) -> None:
    lines: list[str] = []
    save = tmp_path / "curves.json"
    runs = training.train_char_gpt(
        ["reference"], steps=2, layers=1, d_model=8, heads=2, seq=7, batch=2, out=lines.append,
        save=str(save),
    )  # fmt: skip
    assert len(runs) == 1 and len(runs[0].train) == 2
    text = "\n".join(lines)
    assert "unigram entropy 3.25" in text and "validation loss at step 2" in text
    curves = json.loads(save.read_text())
    assert curves["reference"]["train"] == list(runs[0].train)
    assert curves["reference"]["val"] == [list(v) for v in runs[0].val]


def test_ncd_train_command() -> None:
    argv = ["train", "--targets", "reference", "--steps", "2", "--layers", "1", "--d-model", "8"]
    argv += ["--heads", "2", "--seq", "7", "--batch", "2", "--val-every", "0"]
    r = subprocess.run([sys.executable, "-m", "ncd.cli", *argv], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "reference:" in r.stdout and "2/2" in r.stderr


def test_bad_input_is_a_typed_error(corpus: training.CharCorpus) -> None:
    with pytest.raises(ncd.DefinitionError, match="val_fraction"):
        training.CharCorpus("abc", val_fraction=1.5)
    with pytest.raises(ncd.DefinitionError, match="too few"):
        training.CharCorpus("abcdefghij" * 2).batch(np.random.default_rng(0), "val", 1, 8)
    with pytest.raises(ncd.DefinitionError, match="no split"):
        corpus.part("test")
    with pytest.raises(ncd.DefinitionError, match="multiple of heads"):
        training.char_gpt(10, layers=1, d_model=10, heads=4, seq=4, batch=1)
    with pytest.raises(ncd.DefinitionError, match=r"\[batch seq\]"):
        training.fit(ncd.nn.gpt(layers=1), corpus, {}, steps=1)


def test_the_progress_bar_in_a_log_prints_every_few_steps() -> None:
    import io

    out = io.StringIO()
    bar = training.ProgressBar(100, "reference", out=out)
    for i in range(1, 101):
        bar.update(i, f"loss {1 / i:.3f}" + (" val 0.5" if i == 33 else ""))
    lines = out.getvalue().splitlines()
    assert len(lines) == 21  # every 5th step, and step 33 for its validation loss
    assert lines[0].startswith("reference [#") and "5/100 loss 0.200" in lines[0]
    assert "33/100" in lines[6] and lines[-1].startswith("reference [" + "#" * 24 + "] 100/100")
