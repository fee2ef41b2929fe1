"""``ncd.optim``: SGD (momentum, Nesterov), Adam and AdamW as ncd update models, against the
textbook formulas in NumPy and against ``torch.optim`` when torch is installed; the schedule and
global-norm clipping; one training step of a tiny GPT lowers its loss."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, optim

RNG = np.random.default_rng(7)


def _params() -> dict[str, np.ndarray]:
    return {
        "a": RNG.normal(size=(7, 13)).astype(np.float32),
        "b": RNG.normal(size=(1,)).astype(np.float32),
    }


def _numpy_adam(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, eps: float,
    wd: float, decoupled: bool,
) -> np.ndarray:  # fmt: skip
    p = p.astype(np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p


def _numpy_sgd(
    p: np.ndarray, grads: list[np.ndarray], lr: float, mu: float, nesterov: bool, wd: float
) -> np.ndarray:
    p = p.astype(np.float64)
    buf = np.zeros_like(p)
    for g in grads:
        g = g.astype(np.float64) + wd * p
        if mu:
            buf = mu * buf + g
            g = g + mu * buf if nesterov else buf
        p = p - lr * g
    return p


def _steps(opt: optim.Optimizer, params: dict[str, np.ndarray], n: int) -> tuple[Any, list[Any]]:
    grads = [{k: RNG.normal(size=v.shape).astype(np.float32) for k, v in params.items()}]
    for _ in range(n - 1):
        grads.append({k: RNG.normal(size=v.shape).astype(np.float32) for k, v in params.items()})
    state = opt.init(params)
    p = dict(params)
    for g in grads:
        p, state = opt.update(p, g, state)
    assert state["step"] == n
    return p, grads


@pytest.mark.parametrize("wd", [0.0, 0.1])
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_adam_family_matches_the_formulas(cls: type[optim.Adam], wd: float) -> None:
    params = _params()
    opt = cls(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=wd)
    got, grads = _steps(opt, params, 4)
    for k in params:
        want = _numpy_adam(
            params[k], [g[k] for g in grads], 1e-2, 0.8, 0.99, 1e-6, wd, cls is optim.AdamW
        )
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)
        assert got[k].dtype == np.float32 and got[k].shape == params[k].shape


@pytest.mark.parametrize(
    ("mu", "nesterov", "wd"), [(0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.05)]
)
def test_sgd_matches_the_formulas(mu: float, nesterov: bool, wd: float) -> None:
    params = _params()
    opt = optim.SGD(lr=0.1, momentum=mu, nesterov=nesterov, weight_decay=wd)
    got, grads = _steps(opt, params, 3)
    for k in params:
        want = _numpy_sgd(params[k], [g[k] for g in grads], 0.1, mu, nesterov, wd)
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_against_torch_optim() -> None:
    torch = pytest.importorskip("torch")
    cases: list[tuple[optim.Optimizer, Callable[[list[Any]], Any]]] = [
        (
            optim.AdamW(lr=1e-2, weight_decay=0.1),
            lambda ps: torch.optim.AdamW(ps, 1e-2, weight_decay=0.1),
        ),
        (optim.Adam(lr=1e-2), lambda ps: torch.optim.Adam(ps, lr=1e-2)),
        (
            optim.SGD(lr=1e-2, momentum=0.9, nesterov=True),
            lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True),
        ),
    ]
    for opt, make in cases:
        params = _params()
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        tor = make(list(tp.values()))
        p, state = dict(params), opt.init(params)
        for _ in range(5):
            g = {k: RNG.normal(size=v.shape).astype(np.float32) for k, v in params.items()}
            for k, t in tp.items():
                t.grad = torch.tensor(g[k])
            tor.step()
            p, state = opt.update(p, g, state)
        for k, t in tp.items():
            np.testing.assert_allclose(p[k], t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_update_is_an_elementwise_ncd_model_and_pure() -> None:
    opt = optim.AdamW(lr=1e-3)
    kinds = {n.op.category for n in opt.model.graph.nodes}
    assert kinds <= {"elementwise"}
    params = _params()
    before = {k: v.copy() for k, v in params.items()}
    grads = {k: np.ones_like(v) for k, v in params.items()}
    state = opt.init(params)
    opt.update(params, grads, state)
    assert all(np.array_equal(before[k], params[k]) for k in params)
    assert state["step"] == 0
    with pytest.raises(ncd.ParameterError, match="nothing to update"):
        opt.update(params, {}, state)
    with pytest.raises(ncd.ParameterError, match="not parameters"):
        opt.update(params, {**grads, "typo.weight": np.ones(3)}, state)
    # a parameter without a gradient (a buffer) is carried unchanged, its state too
    first = next(iter(params))
    kept, new_state = opt.update(params, {k: g for k, g in grads.items() if k != first}, state)
    assert kept[first] is params[first] and set(kept) == set(params)
    assert np.array_equal(new_state["m"][first], state["m"][first])
    with pytest.raises(ncd.DefinitionError):
        optim.SGD(lr=0.1, nesterov=True)
    with pytest.raises(ncd.DefinitionError):
        optim.Adam(betas=(1.0, 0.9))


def test_one_update_run_per_parameter_format() -> None:
    """Every parameter of one format updates in one run of the update model (one kernel on a
    compiled target); the result equals updating each parameter alone, over several steps,
    and the next step reads the previous outputs in place."""
    calls: list[int] = []

    class Counted(optim.AdamW):
        def _run(self, *arrays: np.ndarray) -> list[np.ndarray]:
            calls.append(arrays[0].size)
            return super()._run(*arrays)

    params: dict[str, np.ndarray] = {
        **_params(),
        "c": RNG.normal(size=(3, 5)),  # float64: a second group
        "d": RNG.normal(size=()).astype(np.float32),
    }
    opt = Counted(lr=1e-2, weight_decay=0.1)
    state = opt.init(params)
    ps = params
    for step in range(3):
        grads = {k: RNG.normal(size=np.shape(v)).astype(v.dtype) for k, v in params.items()}
        ps, state = opt.update(ps, grads, state)
        assert sorted(calls[-2:]) == [15, 7 * 13 + 1 + 1]
        if step == 0:
            alone = {}
            for k, v in params.items():
                single = optim.AdamW(lr=1e-2, weight_decay=0.1)
                got, _ = single.update({k: v}, {k: grads[k]}, single.init({k: v}))
                alone[k] = got[k]
            for k in params:
                assert ps[k].shape == np.shape(params[k]) and ps[k].dtype == params[k].dtype
                np.testing.assert_array_equal(ps[k], alone[k])
    f32 = [k for k in ps if ps[k].dtype == np.float32]
    assert len({id(ps[k].base) for k in f32}) == 1  # views of one buffer: no copy next step


@pytest.mark.skipif(
    importlib.util.find_spec("ncd_opencl") is None or importlib.util.find_spec("pyopencl") is None,
    reason="ncd-opencl (pyopencl) is not installed",
)
def test_update_compiles_for_opencl() -> None:
    params = _params()
    ref, grads = _steps(optim.AdamW(lr=1e-2, weight_decay=0.1), params, 1)
    opt = optim.AdamW(lr=1e-2, weight_decay=0.1, target="opencl")
    state = opt.init(params)
    got, _ = opt.update(params, grads[0], state)
    for k in params:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)


def test_schedule_and_clipping() -> None:
    lr = optim.warmup_cosine(1.0, warmup=10, total=110, floor=0.1)
    assert lr(5) == pytest.approx(0.5)
    assert lr(10) == pytest.approx(1.0)
    assert lr(60) == pytest.approx(0.55)
    assert lr(110) == pytest.approx(0.1) and lr(500) == pytest.approx(0.1)
    grads = {
        "a": np.full((3,), 3.0, np.float32),
        "b": np.full((1,), 4.0 * math.sqrt(3), np.float32),
    }
    clipped, norm = optim.clip_by_global_norm(grads, 1.0)
    assert norm == pytest.approx(math.sqrt(27 + 48))
    total = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in clipped.values()))
    assert total == pytest.approx(1.0, rel=1e-5)
    opt = optim.SGD(lr=lr)
    p, _ = opt.update({"a": np.zeros(2)}, {"a": np.ones(2)}, opt.init({"a": np.zeros(2)}))
    np.testing.assert_allclose(p["a"], [-0.1, -0.1])  # step 1 of warm-up: lr = 0.1


def test_a_few_adamw_steps_lower_a_tiny_gpt_loss() -> None:
    gpt = nn.gpt(layers=1).bind(seq=8, d_model=16, heads=2, d_head=8, d_ff=32, vocab=11)
    lm = gpt >> nn.cross_entropy()
    train = ncd.grad(lm)
    params = ncd.init(lm, seed=0)
    toks = np.arange(8) % 11
    tgts = (toks + 1) % 11
    opt = optim.AdamW(lr=1e-2, weight_decay=0.0)
    state = opt.init(params)
    losses = []
    for _ in range(6):
        loss, grads = ncd.run(train, toks, tgts, params=params)
        losses.append(float(loss))
        params, state = opt.update(params, grads, state)
    assert losses[-1] < losses[0] - 0.2
