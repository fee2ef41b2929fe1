"""Max pooling's indices (issue 15: ``return_indices``, ``ncd.conv.pool_indices``): the int64
position of each window's maximum in its input plane, as torch defines it (the first
maximum in window order, the last NaN where a window holds NaN, padding never), checked
against a NumPy statement of that rule at awkward sizes with NaN and -inf."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ncd
from ncd import conv


def torch_rule(x: np.ndarray, k: int, s: int, p: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and indices of a 2-d max pool over the last two dims, window by window: the
    best so far is replaced by a larger value or by any NaN (torch's CPU loop)."""
    h, w = x.shape[-2:]
    ho, wo = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    values = np.empty((*x.shape[:-2], ho, wo), x.dtype)
    index = np.empty((*x.shape[:-2], ho, wo), np.int64)
    for lead in itertools.product(*(range(n) for n in x.shape[:-2])):
        plane = x[lead]
        for i, j in itertools.product(range(ho), range(wo)):
            best, at = -np.inf, -1
            for a, b in itertools.product(range(k), range(k)):
                r, c = i * s - p + a * d, j * s - p + b * d
                if not (0 <= r < h and 0 <= c < w):
                    continue
                v = plane[r, c]
                if at < 0 or v > best or np.isnan(v):
                    best, at = v, r * w + c
            values[(*lead, i, j)], index[(*lead, i, j)] = best, at
    return values, index


GEOMETRIES = [(7, 13, 3, 2, 1, 1), (13, 7, 2, 2, 0, 1), (1, 7, 1, 1, 0, 1), (9, 9, 3, 1, 1, 2)]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g)))
def test_indices_follow_torchs_rule_with_nan_and_inf(geometry: tuple[int, ...]) -> None:
    h, w, k, s, p, d = geometry
    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = np.nan  # several NaNs in one window: the last one
    x[0, 1] = -np.inf  # a plane of -inf: the first real element, never padding
    x[1, 2, -1, -1] = np.nan
    x[1, 0] = np.round(x[1, 0])  # ties: the first maximum in window order
    model = conv.max_pool2d(k, s, p, dilation=d, return_indices=True, height=h, width=w)
    model = model.over(ncd.Axis("b", size=2), ncd.Axis("c", size=3))
    graph = model.graph
    assert [graph.values[v].dtype for v in graph.outputs] == [ncd.float32, ncd.int64]
    values, index = ncd.run(model, x)
    want_values, want_index = torch_rule(x, k, s, p, d)
    np.testing.assert_array_equal(index, want_index)
    np.testing.assert_array_equal(values, want_values)


def test_one_dimensional_indices_at_free_lengths() -> None:
    """One model, its length left to run time: kernel 3, stride 2, padding 1."""
    model = conv.max_pool1d(3, 2, 1, return_indices=True, length=None)
    for n in (1, 7, 13, 301):
        x = np.random.default_rng(n).standard_normal((4, n))
        _, index = ncd.run(model.over(ncd.Axis("r", size=4)), x)
        padded = np.pad(x, ((0, 0), (1, 1)), constant_values=-np.inf)
        windows = np.stack([padded[:, j : j + 3] for j in range(0, n + 2 - 2, 2)], 1)
        expect = np.argmax(windows, -1) + 2 * np.arange(windows.shape[1]) - 1
        np.testing.assert_array_equal(index, expect)
