"""from_torch of indexing an activation: ``x[:, i]`` (select), ``x[:, [i]]`` and ``x[:, ids]``
(index), ``index_select``, ``torch.gather`` after ``log_softmax``, an embedding of a computed
table, splits, and comparisons of activations feeding ``where``, ``masked_fill``, logic, casts
and SDPA's bool ``attn_mask``. Each against torch at lengths 1, 7 and 13 on the reference and
OpenCL (where ncd-opencl is installed), with non-finite activations, and exported back with
the original checkpoint."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ncd
import ncd_torch

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None

TOL = 2e-6


class Select(nn.Module):
    def __init__(self, i: int) -> None:
        super().__init__()
        self.i, self.proj = i, nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)[:, self.i])


class KeepLast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)[:, [-1], :]


class Pick(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x * 2.0, 1, ids)


class Indexed(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return (x + 1.0)[:, ids]


class LogLikelihood(nn.Module):
    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logp = F.log_softmax(x, dim=-1)
        return torch.gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1)


class ComputedTable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(11, 6))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, torch.tanh(self.table) * 3.0)


class Glu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.tanh(x).chunk(2, dim=-1)
        return a * torch.sigmoid(b)


class Pieces(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c = (x * 2.0).split([3, 1, 4], dim=-1)
        p = (x + 1.0).split(3, dim=-1)  # 3, 3, 2: the last piece shorter
        return a.sum(-1) + b.squeeze(-1) - c.mean(-1) + p[2].sum(-1)


class Unbind(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = (x * 3.0).unbind(-1)
        return a - b


def _check(module: nn.Module, *inputs: torch.Tensor) -> ncd_torch.Imported:
    module.eval()
    imported = ncd_torch.from_torch(module, inputs)
    want = module(*inputs).detach().numpy()
    arrays = [t.numpy() for t in inputs]
    got = ncd.run(imported.model, *arrays, params=imported.params)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    if OPENCL:
        exe = ncd.compile(imported.model, "opencl")
        np.testing.assert_allclose(exe(*arrays, params=imported.params), want, rtol=TOL, atol=TOL)
    back = ncd_torch.to_module(imported.model)
    back.load_state_dict(module.state_dict())
    np.testing.assert_allclose(back(*inputs).detach().numpy(), want, rtol=TOL, atol=TOL)
    return imported


def _x(n: int) -> torch.Tensor:
    x = torch.randn(2, n, 8, generator=torch.Generator().manual_seed(n))
    x[0, 0, 0] = float("inf")
    x[1, -1, 1] = float("nan")
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", [1, 7, 13])
@pytest.mark.parametrize("i", [0, -1])
def test_select_of_a_position(n: int, i: int) -> None:
    _check(Select(i), _x(n))


@pytest.mark.parametrize("n", [1, 7, 13])
def test_index_with_a_constant_position_keeps_the_dim(n: int) -> None:
    _check(KeepLast(), torch.randn(3, n, 8))


@pytest.mark.parametrize("module", [lambda: Select(0), lambda: Select(-1), KeepLast])
def test_positions_keep_the_sizes_free(module: object) -> None:
    """``x[:, 0]`` (BERT's pooler) and ``x[:, -1]`` (the last position, counted from the end)
    read the same position at every length: batch and length stay free."""
    m = module().eval()  # type: ignore[operator]
    imported = _check(m, torch.randn(2, 7, 8))
    assert [v.label for v in imported.model.config().free] == ["batch", "seq"]
    for batch, n in ((3, 13), (1, 1)):
        x = torch.randn(batch, n, 8)
        got = ncd.run(imported.model, x.numpy(), params=imported.params)
        np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=TOL, atol=TOL)
        if OPENCL:
            exe = ncd.compile(imported.model, "opencl")
            got = exe(x.numpy(), params=imported.params)
            np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=TOL, atol=TOL)


class Tail(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -3:] * 2.0 + x[:, -4:-1]


def test_a_slice_counted_from_the_end_keeps_the_length_free() -> None:
    imported = _check(Tail(), torch.randn(2, 7, 8))
    assert [v.label for v in imported.model.config().free] == ["batch", "seq"]
    x = torch.randn(3, 13, 8)
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, Tail()(x).numpy(), rtol=TOL, atol=TOL)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", [1, 7, 13])
@pytest.mark.parametrize("module", [Pick, Indexed])
def test_ids_fed_to_the_model_are_a_gather(n: int, module: type[nn.Module]) -> None:
    ids = torch.tensor([n - 1, 0, n // 2, n - 1])
    imported = _check(module(), _x(n), ids)
    assert any(type(node.op).kind == "gather" for node in imported.model.graph.nodes)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", [1, 7, 13])
def test_log_likelihood_through_torch_gather(n: int) -> None:
    x = _x(n)
    x[1, 0] = float("-inf")  # a row of -inf: NaN through log_softmax, as torch gives
    x[1, 0, 3] = 0.0
    targets = torch.randint(0, 8, (2, n), generator=torch.Generator().manual_seed(1))
    _check(LogLikelihood(), x, targets)


def test_log_softmax_never_takes_the_log_of_an_underflowed_softmax() -> None:
    x = torch.tensor([[[0.0, -200.0, 300.0]]])
    targets = torch.tensor([[1]])
    imported = _check(LogLikelihood(), x, targets)
    got = ncd.run(imported.model, x.numpy(), targets.numpy(), params=imported.params)
    assert np.isfinite(got).all() and got[0, 0] == pytest.approx(-500.0)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_embedding_of_a_computed_table(n: int) -> None:
    ids = torch.randint(0, 11, (3, n), generator=torch.Generator().manual_seed(n))
    imported = _check(ComputedTable(), ids)
    with pytest.raises(ncd.IndexRangeError, match=r"must lie in \[0, 11\)"):
        ncd.run(imported.model, np.full((3, n), 11), params=imported.params)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("module", [Glu, Pieces])
def test_split_and_chunk_of_an_activation_are_slices(module: type[nn.Module]) -> None:
    imported = _check(module(), _x(7))
    assert [v.label for v in imported.model.config().free] == ["batch", "seq"]
    x = _x(13)
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, module()(x).numpy(), rtol=TOL, atol=TOL)


def test_unbind_reads_each_position() -> None:
    _check(Unbind(), torch.randn(3, 7, 2))


class Leaky(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, 0.01 * x)


class Clip(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.masked_fill((x < y) & ~(y > 1.0) | (x == 0.5), -5.0)


class Count(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (
            (x >= 0.5).float().mean(-1) + (x != x).float().sum(-1) + (x <= -1).to(x.dtype)[..., 0]
        )


class BoolMask(nn.Module):
    """SDPA with a bool mask computed from the inputs: a key takes part where its features are
    large; a query with no such key gets zeros, as torch gives."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.proj(x).view(b, n, 2, 4).transpose(1, 2)
        keep = (x.abs().sum(-1) > 6.0)[:, None, None, :]
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
        return out.transpose(1, 2).reshape(b, n, 8)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", [1, 7, 13])
def test_comparisons_of_activations(n: int) -> None:
    _check(Leaky(), _x(n))
    _check(Clip(), _x(n), torch.randn(8) * 2.0)
    _check(Count(), _x(n))


@pytest.mark.parametrize("n", [1, 7, 13])
def test_a_bool_attn_mask_computed_from_the_inputs(n: int) -> None:
    torch.manual_seed(n)
    x = torch.randn(3, n, 8)
    x[0] *= 0.1  # no key of the first batch row takes part: zeros, as torch
    imported = _check(BoolMask(), x)
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    assert np.all(got[0] == 0.0) and np.isfinite(got).all()


class ChunkOfLength(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=1)
        return a.sum(1) * 2.0 + b.sum(1)


class ClampedTail(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -10:].sum(1)  # all 8 positions of the example, the last 10 of a longer one


@pytest.mark.parametrize("module", [ChunkOfLength, ClampedTail])
def test_a_size_that_depends_on_the_length_keeps_it_bound(module: type[nn.Module]) -> None:
    """A chunk of the length (its size follows the length, no input carries it) and a slice
    clamped at the example's length would be wrong or unrunnable at another length: the
    length stays bound (a typed error at another one), the batch free."""
    m = module()
    imported = _check(m, torch.randn(2, 8, 4))
    assert [v.label for v in imported.model.config().free] == ["batch"]
    x = torch.randn(5, 8, 4)
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, m(x).numpy(), rtol=TOL, atol=TOL)
    with pytest.raises(ncd.SizeError, match=r"seq.*has size 8, got 13"):
        ncd.run(imported.model, torch.randn(5, 13, 4).numpy(), params=imported.params)


class Interleaved(nn.Module):
    """GPT-J's interleaved rotation of pairs: ``stack((-x2, x1), -1).flatten(-2)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., :4], x[..., 4:]
        return torch.stack((-x2, x1), dim=-1).flatten(-2) * 2.0


class StackMiddle(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x, torch.tanh(x), x * 3.0], dim=1).sum(-1)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("module", [Interleaved, StackMiddle])
def test_stack_along_a_new_dim(module: type[nn.Module]) -> None:
    imported = _check(module(), _x(7))
    assert [v.label for v in imported.model.config().free] == ["batch", "seq"]
    x = _x(13)
    got = ncd.run(imported.model, x.numpy(), params=imported.params)
    np.testing.assert_allclose(got, module()(x).numpy(), rtol=TOL, atol=TOL)
