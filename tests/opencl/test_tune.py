"""``ncd.tune`` on ncd-opencl: the search keeps correctness, shares identical layers, and the
tuning cache is reused, verified and never trusted when it is corrupted or foreign."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.tuning import TuningCacheWarning


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tuning"
    monkeypatch.setenv("NCD_TUNING_CACHE", str(folder))
    return folder


def _gpt() -> ncd.Term:  # awkward length 13; d_model a multiple of 8 so the tiled matmul renders
    return nn.gpt(layers=2).bind(seq=13, d_model=32, heads=2, d_head=16, d_ff=64, vocab=29)


QUICK = {"budget": 5.0, "candidates": 2, "reps": 1}


def test_tuned_gpt_matches_the_reference_and_tunes_each_layer_once(cache: Path) -> None:
    gpt = _gpt()
    report = ncd.tune(gpt, "opencl", **QUICK)
    assert len(report.groups) < len(report.plan.kernels)  # identical layers share a group
    assert sum(len(g.kernels) for g in report.groups) == len(report.plan.kernels)
    searched = [g for g in report.groups if len(g.tried) > 1]
    assert searched, "the GPT has matmuls and attention: something to search"
    backend_space = {
        k.name: [c.label for c in _space(k)] for k in ncd.plan(gpt, target="opencl").kernels
    }
    for g in report.groups:
        assert g.winner in backend_space[g.kernels[0]]
    params = ncd.init(gpt, seed=3)
    toks = np.random.default_rng(3).integers(0, 29, 13)
    want = ncd.run(gpt, toks, params=params)
    got = ncd.compile(gpt, "opencl", plan=report.plan)(toks, params=params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(list(cache.glob("*.json"))) == len(searched)
    assert "group(s)" in str(report)


def test_a_second_tune_is_answered_by_the_cache(cache: Path) -> None:
    gpt = _gpt()
    first = ncd.tune(gpt, "opencl", **QUICK)
    again = ncd.tune(gpt, "opencl", **QUICK)
    searched = {g.key for g in first.groups if len(g.tried) > 1}
    assert {g.key for g in again.groups if g.cached} == searched
    assert again.rounds <= 1  # at most the check of the cached plan against the reference
    assert [g.winner for g in again.groups] == [g.winner for g in first.groups]


def test_corrupted_and_foreign_entries_are_ignored_with_a_warning(cache: Path) -> None:
    gpt = _gpt()
    ncd.tune(gpt, "opencl", **QUICK)
    entries = sorted(cache.glob("*.json"))
    assert len(entries) >= 2
    tampered = json.loads(entries[0].read_text())
    tampered["winner"] = tampered["space"][-1]  # edited without its checksum
    entries[0].write_text(json.dumps(tampered))
    shutil.copy(entries[2 % len(entries)], entries[1])  # another kernel's entry in its place
    with pytest.warns(TuningCacheWarning) as seen:
        report = ncd.tune(gpt, "opencl", **QUICK)
    text = " ".join(str(w.message) for w in seen)
    assert "corrupted" in text and "foreign" in text
    assert sum(not g.cached and len(g.tried) > 1 for g in report.groups) >= 2  # tuned again
    entries[0].write_bytes(b"\xff\x00 not json")
    with pytest.warns(TuningCacheWarning, match="cannot be read"):
        ncd.tune(gpt, "opencl", **QUICK)


def test_compile_with_tune_runs_the_tuned_plan(cache: Path) -> None:
    att = nn.attention(causal=True).bind(q=37, x=37, d=16, v=16)
    exe = ncd.compile(att, "opencl", tune=dict(QUICK))
    assert exe.tuning.plan.kernels  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((37, 16)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(exe(q, k, v), ncd.run(att, q, k, v), rtol=1e-4, atol=1e-5)


def test_bad_requests_are_schedule_errors(cache: Path) -> None:
    free = ops.softmax("x").over("r")
    with pytest.raises(ncd.ScheduleError, match="still free"):
        ncd.tune(free, "opencl")
    bound = free.bind(r=7, x=13)
    with pytest.raises(ncd.ScheduleError, match="no schedule space"):
        ncd.tune(bound, "reference")
    with pytest.raises(ncd.ScheduleError, match="tune= and plan="):
        ncd.compile(bound, "opencl", tune=True, plan=ncd.plan(bound, target="opencl"))
    with pytest.raises(ncd.ScheduleError, match="expected True or a dict"):
        ncd.compile(bound, "opencl", tune="fast")
    with pytest.raises(ncd.ScheduleError, match="budget"):
        ncd.tune(bound, "opencl", budget=-1)


def test_cli_tune_prints_the_table(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ncd.cli import main

    code = main(
        ["tune", "attention", "--bind", "q=16", "x=16", "d=8", "v=8", "--budget", "2",
         "--candidates", "2", "--reps", "1"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "tuned" in out and str(cache) in out


def _space(kernel: ncd.Kernel) -> list[object]:
    from ncd.plugins import registry

    return registry().backend("opencl").candidates(kernel)  # type: ignore[no-any-return]


def test_the_space_is_data_with_the_default_first() -> None:
    gpt = _gpt()
    plan = ncd.plan(gpt, target="opencl")
    for k in plan.kernels:
        space = _space(k)
        assert space and set(space[0].choices) == set(k.choices)  # type: ignore[attr-defined]
        labels = [c.label for c in space]  # type: ignore[attr-defined]
        assert len(labels) == len(set(labels))
