"""``ncd.tuning.agrees``: the check a tuning candidate must pass before its time counts."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ncd.tuning import agrees


def test_a_reordered_sum_agrees_and_a_wrong_tile_does_not() -> None:
    rng = np.random.default_rng(0)
    want = rng.standard_normal((13, 301)).astype(np.float32)
    assert agrees(want * np.float32(1 + 1e-6), want)
    wrong = want.copy()
    wrong[7, 300] += 0.5 * float(np.abs(want).mean())  # one element off by half a typical term
    assert not agrees(wrong, want)
    assert not agrees(want[:, :300], want)  # shape


def test_non_finite_entries_must_match_exactly() -> None:
    want = np.array([1.0, np.inf, -np.inf, np.nan], np.float32)
    assert agrees(want.copy(), want)
    assert not agrees(np.array([1.0, np.inf, np.inf, np.nan], np.float32), want)
    assert not agrees(np.array([1.0, np.inf, -np.inf, 0.0], np.float32), want)
    assert not agrees(np.array([np.nan, np.inf, -np.inf, np.nan], np.float32), want)


def test_tolerance_follows_the_format() -> None:
    want = np.linspace(-3, 3, 7).astype(ml_dtypes.bfloat16)
    assert agrees((want.astype(np.float32) * 1.004).astype(ml_dtypes.bfloat16), want)
    ids = np.arange(7)
    assert agrees(ids.copy(), ids) and not agrees(ids[::-1], ids)
