"""``nn.l1`` and ``nn.kl_div`` against torch's ``l1_loss`` and ``kl_div(reduction="mean")`` in
float64, values and gradients (``ncd.grad`` against autograd), at sizes 1, 7 and 13, with zero
targets in the KL divergence (0 log 0 = 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ncd
from ncd import nn


def _typed(loss: ncd.Term, n: int) -> ncd.Term:
    r, c = ncd.Axis("r", size=n), ncd.Axis("c", size=5)
    return ncd.identity((r, c), (r, c)) >> loss


@pytest.mark.parametrize("n", [1, 7, 13])
def test_l1_is_torch_l1_loss(n: int) -> None:
    rng = np.random.default_rng(n)
    y, t = rng.standard_normal((n, 5)), rng.standard_normal((n, 5))
    model = _typed(nn.l1(), n)
    yt, tt = torch.tensor(y, requires_grad=True), torch.tensor(t, requires_grad=True)
    want = F.l1_loss(yt, tt)
    want.backward()
    np.testing.assert_allclose(ncd.run(model, y, t), want.item(), rtol=1e-12)
    _, (gy, gt) = ncd.run(ncd.grad(model, wrt="inputs"), y, t)
    np.testing.assert_allclose(gy, yt.grad.numpy(), rtol=1e-12)  # type: ignore[union-attr]
    np.testing.assert_allclose(gt, tt.grad.numpy(), rtol=1e-12)  # type: ignore[union-attr]


@pytest.mark.filterwarnings("ignore:reduction")
@pytest.mark.parametrize("n", [1, 7, 13])
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum"])
def test_kl_div_is_torch_kl_div(n: int, reduction: str) -> None:
    rng = np.random.default_rng(n)
    logits = rng.standard_normal((n, 5))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = rng.dirichlet(np.ones(5), size=n)
    target[0, 1] = 0.0  # a zero target contributes nothing
    target[0] /= target[0].sum()
    model = _typed(nn.kl_div(reduction=reduction), n)
    lt = torch.tensor(logp, requires_grad=True)
    want = F.kl_div(lt, torch.tensor(target), reduction=reduction)
    want.backward()
    got = ncd.run(model, logp, target)
    np.testing.assert_allclose(got, want.item(), rtol=1e-12)
    _, (g, _gt) = ncd.run(ncd.grad(model, wrt="inputs"), logp, target)
    np.testing.assert_allclose(g, lt.grad.numpy(), rtol=1e-12)  # type: ignore[union-attr]


def test_losses_need_typed_inputs_and_a_known_reduction() -> None:
    for loss in (nn.l1(), nn.kl_div()):
        with pytest.raises(ncd.DefinitionError, match=r"neither input has a type.*Fix"):
            _ = (ncd.identity(2) >> loss).graph
    with pytest.raises(ncd.DefinitionError, match=r"unknown reduction 'none'.*Fix"):
        nn.kl_div(reduction="none")
