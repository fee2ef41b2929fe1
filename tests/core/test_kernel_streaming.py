"""The accumulators a kernel names are the right mathematics: a small chunked interpreter,
driven only by ``kernel.accumulators()``, walks the streamed axis in chunks of awkward sizes
and must reproduce the reference interpreter (online softmax, the L2 normaliser, sums)."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.reference import REFERENCE_RULES, Context, _arrange


def _node_eval(
    graph: ncd.Graph,
    i: int,
    env: dict[int, np.ndarray],
    params: dict[str, np.ndarray],
    window: tuple[ncd.Axis, int, int] | None = None,
) -> list[np.ndarray]:
    node = graph.nodes[i]
    xs = [
        _arrange(env[v], graph.values[v].axes, node.loop, core)
        for v, core in zip(node.inputs, node.core_in, strict=True)
    ]
    ps = {p.name: params[name] for name, p in node.params()}
    if window is not None:  # parameters carrying the streamed axis are read chunk by chunk
        s, lo, hi = window
        ps = {
            p.name: np.take(ps[p.name], range(lo, hi), axis=p.axes.index(s))
            if s in p.axes
            else ps[p.name]
            for _, p in node.params()
        }
    return REFERENCE_RULES[type(node.op)](node.op, xs, ps, Context(graph))


def _chunked(
    model: ncd.Term, inputs: list[np.ndarray], params: dict[str, np.ndarray], chunk: int
) -> np.ndarray:
    graph = model.graph
    (kernel,) = ncd.fuse(graph).kernels
    (s,) = kernel.streamed
    kinds = kernel.accumulators()
    n = graph.size(s)
    assert n is not None
    full: dict[int, np.ndarray] = dict(zip(graph.inputs, inputs, strict=True))
    acc: dict[int, np.ndarray] = {}  # contraction/sum accumulators by output value
    stat: dict[int, np.ndarray] = {}  # normaliser state: running max (softmax) / sum sq (l2)
    norm: dict[int, np.ndarray] = {}  # running softmax sum per normaliser output
    source: dict[int, int] = {}  # value -> normaliser value its pending division is from
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        env = {}
        for v, x in full.items():
            axes = graph.values[v].axes
            env[v] = np.take(x, range(lo, hi), axis=axes.index(s)) if s in axes else x
        for i in kernel.nodes:
            node, kind = graph.nodes[i], kinds[i]
            (out,) = node.outputs
            if kind in ("prologue", "epilogue"):
                continue
            ax = -1
            if kind == "online_softmax" and node.op.category == "normaliser":
                x = _arrange(
                    env[node.inputs[0]],
                    graph.values[node.inputs[0]].axes,
                    node.loop,
                    node.core_in[0],
                )
                m_new = np.maximum(stat.get(out, -np.inf), x.max(axis=ax, keepdims=True))
                scale = np.exp(stat.get(out, -np.inf) - m_new)
                e = np.exp(x - m_new)
                norm[out] = norm.get(out, 0.0) * scale + e.sum(axis=ax, keepdims=True)
                for w, src in source.items():  # rescale the contractions fed by this normaliser
                    if src == out and w in acc:
                        acc[w] = acc[w] * np.squeeze(scale, -1)[..., None]
                stat[out] = m_new
                env[out], source[out] = e, out
            elif kind == "l2" and node.op.category == "normaliser":
                x = _arrange(
                    env[node.inputs[0]],
                    graph.values[node.inputs[0]].axes,
                    node.loop,
                    node.core_in[0],
                )
                stat[out] = stat.get(out, 0.0) + (x * x).sum(axis=ax, keepdims=True)
                env[out], source[out] = x, out
            elif kind in ("online_softmax", "l2", "sum"):
                (y,) = _node_eval(graph, i, env, params, (s, lo, hi))
                if lo > 0 and getattr(node.op, "bias", False) is True:
                    y = y - params[node.param_name("bias")]  # the bias starts the sum, once
                (src,) = [source[v] for v in node.inputs if v in source] or [None]
                if src is not None:
                    source[out] = src
                acc[out] = acc.get(out, 0.0) + y
            else:  # chunk
                (y,) = _node_eval(graph, i, env, params, (s, lo, hi))
                env[out] = y
                src = [source[v] for v in node.inputs if v in source]
                if src:
                    source[out] = src[0]
    final = dict(full)
    for v, a in acc.items():
        src = source.get(v)
        if src is not None and src in norm:
            a = a / np.squeeze(norm[src], -1)[..., None]
        elif src is not None:
            op = graph.nodes[graph.producers[src]].op
            a = a / np.sqrt(np.squeeze(stat[src], -1)[..., None] + op.eps)
        final[v] = a
    for i in kernel.nodes:
        if kinds[i] == "epilogue":
            (final[graph.nodes[i].outputs[0]],) = _node_eval(graph, i, final, params)
    (result,) = [final[v] for v in graph.outputs]
    return result


ATT = ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")


@pytest.mark.parametrize("chunk", [1, 4, 7, 13])
@pytest.mark.parametrize(
    "model",
    [ATT, nn.spherical_attention(), nn.attention(scale=True)],
    ids=["one-line", "spherical", "scaled"],
)
def test_streamed_attention_matches_reference(model: ncd.Term, chunk: int) -> None:
    bound = model.bind(q=7, x=13, d=5, v=3)
    rng = np.random.default_rng(chunk)
    inputs = [3 * rng.standard_normal(bound.graph.shape(v)) for v in bound.graph.inputs]
    want = ncd.run(bound, *inputs)
    got = _chunked(bound, inputs, {}, chunk)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 5, 13])
def test_streamed_mlp_sums_over_d_ff(chunk: int) -> None:
    mlp = nn.mlp().over("seq").bind(seq=7, d_model=6, d_ff=13)
    params = {k: p.astype(np.float64) for k, p in ncd.init(mlp, seed=0).items()}
    x = np.random.default_rng(0).standard_normal((7, 6))
    (kernel,) = ncd.fuse(mlp).kernels
    assert [a.name for a in kernel.streamed] == ["d_ff"]
    np.testing.assert_allclose(
        _chunked(mlp, [x], params, chunk), ncd.run(mlp, x, params=params), rtol=1e-10, atol=1e-12
    )
