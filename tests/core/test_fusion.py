"""ncd.fuse: flash attention from the one-line attention, GPT blocks as a few kernels, reasons
for every boundary; nn.moe's reference semantics."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
import ncd.testing
from ncd import nn, ops
from ncd.primitives.routing import TopKGate

ATT = ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")


def _check_plan(plan: ncd.FusionPlan) -> None:
    g = plan.graph
    covered = sorted(i for k in plan.kernels for i in k.nodes)
    assert covered == list(range(len(g.nodes)))
    ready = set(g.inputs)
    for k in plan.kernels:  # launch order respects data flow
        assert set(k.inputs) <= ready, k
        ready |= {v for i in k.nodes for v in g.nodes[i].outputs}
    for b in plan.boundaries:
        assert b.reason and b.consumers


@pytest.mark.parametrize(
    "model",
    [
        ATT,
        nn.attention(causal=True),
        nn.attention(scale=True),
        nn.spherical_attention(),
        nn.spherical_attention(causal=True),
    ],
)
def test_attention_fuses_into_one_kernel_streaming_the_key_axis(model: ncd.Term) -> None:
    plan = ncd.fuse(model)
    _check_plan(plan)
    (k,) = plan.kernels
    (x,) = k.streamed
    assert x.name == "x" and [a.name for a in k.grouped] == ["q"]
    assert set(k.accumulators().values()) & {"online_softmax", "l2"}
    assert "stream(x" in str(plan)


def test_transformer_block_is_six_kernels_with_flash_attention() -> None:
    plan = ncd.fuse(nn.transformer_block())
    _check_plan(plan)
    bodies = [[n.op.kind for n in k.ops] for k in plan.kernels]
    assert bodies == [
        ["layernorm"],
        ["linear", "linear", "view", "linear", "view"],
        ["einsum", "scale", "causal_mask", "softmax", "einsum"],
        ["linear", "binary"],
        ["layernorm"],
        ["linear", "unary", "linear", "binary"],
    ]
    assert [a.name for a in plan.kernels[2].streamed] == ["seq_k"]
    assert [a.name for a in plan.kernels[5].streamed] == ["d_ff"]
    text = str(plan)
    assert "written to memory once" in text and "would serialise" in text


def test_gpt_kernel_count_grows_linearly_and_reasons_are_given() -> None:
    for layers in (1, 3):
        plan = ncd.fuse(nn.gpt(layers=layers))
        _check_plan(plan)
        assert len(plan.kernels) <= 2 + 6 * layers


def test_fuse_accepts_concrete_tiles() -> None:
    (k,) = ncd.fuse(ATT, tiles={"q": 32, "t_x": 16}).kernels
    assert sorted(p.tile for p in k.partitions) == [16, 32]


def test_softmax_read_twice_keeps_a_boundary_with_its_reason() -> None:
    @ncd.trace(inputs=[ncd.ArrayType(ncd.axes("q x"))])
    def twice(s: ncd.Tensor) -> ncd.Tensor:
        p = ops.softmax("x")(s)
        return p + ops.exp()(p)

    plan = ncd.fuse(twice)
    _check_plan(plan)


# -- nn.moe ----------------------------------------------------------------------------------


def _moe_by_hand(x: np.ndarray, p: dict[str, np.ndarray], k: int) -> np.ndarray:
    scores = x @ p["router.weight"].T
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = sorted(range(scores.shape[1]), key=lambda e: (-scores[t, e], e))[:k]
        w = np.exp(scores[t, top] - scores[t, top].max())
        w /= w.sum()
        for gate, e in zip(w, top, strict=True):
            h = p["experts.fc_weight"][e] @ x[t] + p["experts.fc_bias"][e]
            h = 0.5 * h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2)))
            out[t] += gate * (p["experts.proj_weight"][e] @ h + p["experts.proj_bias"][e])
    return out


@pytest.mark.parametrize("seq,experts,k", [(1, 1, 1), (7, 5, 2), (13, 4, 3)])
def test_moe_reference_matches_a_per_token_loop(seq: int, experts: int, k: int) -> None:
    m = nn.moe(experts=experts, k=k).bind(seq=seq, d_model=6, d_ff=7)
    params = ncd.init(m, seed=1)
    params = {
        n: a + 0.1 * np.random.default_rng(2).standard_normal(a.shape).astype(a.dtype)
        for n, a in params.items()
    }
    x = np.random.default_rng(0).standard_normal((seq, 6)).astype(np.float32)
    y = ncd.run(m, x, params=params)
    np.testing.assert_allclose(y, _moe_by_hand(x, params, k), rtol=2e-4, atol=2e-5)
    again = ncd.from_json(ncd.to_json(m))
    np.testing.assert_allclose(ncd.run(again, x, params=params), y, rtol=1e-6)


def test_topk_gates_have_k_nonzeros_summing_to_one() -> None:
    (e,) = ncd.axes("e", e=6)
    gate = ops.prim(TopKGate(e, 2))
    s = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    g = np.stack([ncd.run(gate, row) for row in s])
    assert ((g != 0).sum(axis=1) == 2).all()
    np.testing.assert_allclose(g.sum(axis=1), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="positive int"):
        TopKGate(e, 0)


@pytest.mark.parametrize("name", [c.name for c in ncd.testing.cases()])
def test_every_conformance_case_gets_a_valid_plan(name: str) -> None:
    case = ncd.testing.case_by_name(name)
    plan = ncd.fuse(case.model)
    _check_plan(plan)
    for k in plan.kernels:
        k.accumulators()  # the analysis of every streamed kernel succeeds


@pytest.mark.parametrize("norm", [ops.softmax, ops.layernorm, ops.rmsnorm, ops.l2norm])
def test_elementwise_after_a_normaliser_joins_its_kernel(norm: object) -> None:
    """Each instance of the normaliser's kernel walks the row whole already; an activation or
    scale after it maps each element alone, so it fuses without losing parallelism."""
    r, c = ncd.Axis("r", size=5), ncd.Axis("c", size=40)
    plan = ncd.fuse((norm(c) >> ops.gelu() >> ops.mul(2.0)).over(r))  # type: ignore[operator]
    assert len(plan.kernels) == 1
    assert [a.name for a in plan.kernels[0].grouped] == ["r"]


def test_a_matmul_after_a_normaliser_stays_apart() -> None:
    """A linear map after a layernorm is no elementwise unit: fusing it would recompute the
    statistics for every output column, so the boundary stays."""
    r, c = ncd.Axis("r", size=5), ncd.Axis("c", size=40)
    plan = ncd.fuse((ops.layernorm(c) >> ops.linear(c, ncd.Axis("o", size=8))).over(r))
    assert len(plan.kernels) == 2


def test_no_kernel_renames_two_axes_onto_one() -> None:
    """An LSTM step renames each of its four gates onto ``hidden``: a kernel holding two of
    those renames would map ``hidden`` to one source only and launch the product of the gate
    axes (64^4 x batch work-items were once planned). Every kernel's grid is no larger than
    its largest output."""
    import math

    from ncd.streaming import is_rename

    m = nn.lstm(16, 16, seq=ncd.Axis("seq", size=3), batch=ncd.Axis("n", size=2), label="")
    plan = ncd.fuse(m)
    g = plan.graph
    for k in plan.kernels:
        onto: dict[ncd.Axis, set[ncd.Axis]] = {}
        for i in k.nodes:
            if is_rename(g.nodes[i].op):
                onto.setdefault(g.nodes[i].op.out_axes[0], set()).add(g.nodes[i].op.in_axes[0])
        assert all(len(srcs) == 1 for srcs in onto.values()), k.name
        grid = math.prod(int(g.size(a) or 1) for a in k.schedule.grid)
        largest = max(math.prod(int(g.size(a) or 1) for a in g.values[v].axes) for v in k.outputs)
        assert grid <= largest, (k.name, grid, largest)
