"""``ncd.grad``: every rule against float64 central finite differences on the reference (sizes 1,
7 and 13), the GPT against finite differences and ``torch.autograd``, the acceptance example of
issue 13 as written, and the typed errors."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.primitives.library import COMPARISONS

RNG = np.random.default_rng(13)
EPS = 1e-6


def _fd(f: Callable[[], float], arr: np.ndarray) -> np.ndarray:
    """Central differences of ``f`` (which reads ``arr``) with respect to every element."""
    out = np.zeros_like(arr)
    flat, grad = arr.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + EPS
        hi = f()
        flat[i] = keep - EPS
        lo = f()
        flat[i] = keep
        grad[i] = (hi - lo) / (2 * EPS)
    return out


def check(model: Any, *inputs: np.ndarray, tol: float = 1e-6) -> None:
    """Gradients of ``model`` (any output shape: a random seed cotangent per output) with respect
    to its float inputs and every parameter, against central finite differences in float64."""
    params = {
        k: v.astype(np.float64) + 0.1 * RNG.normal(size=v.shape)
        for k, v in ncd.init(model, seed=1).items()
    }
    xs = [x if x.dtype.kind in "iub" else x.astype(np.float64) for x in inputs]
    floats = [k for k, x in enumerate(xs) if x.dtype.kind == "f"]
    outs = ncd.run(model, *xs, params=params)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    seeds = [RNG.normal(size=np.shape(o)) for o in outs]
    # buffers (a batch norm's running statistics) are state, with no gradient
    learned = [k for k, p in model.graph.params().items() if not p.buffer]
    train = ncd.grad(model, wrt=[*learned, *floats], cotangents=True)

    def value() -> float:
        ys = ncd.run(model, *xs, params=params)
        ys = list(ys) if isinstance(ys, tuple) else [ys]
        return float(sum(np.sum(s * y) for s, y in zip(seeds, ys, strict=True)))

    got_outs, grads = ncd.run(train, *xs, *seeds, params=params)
    first = got_outs if len(outs) > 1 else [got_outs]
    for a, b in zip(first, outs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for name in learned:
        want = _fd(value, params[name])
        np.testing.assert_allclose(grads[name], want, rtol=tol, atol=tol, err_msg=name)
    for k in floats:
        want = _fd(value, xs[k])
        np.testing.assert_allclose(grads[k], want, rtol=tol, atol=tol, err_msg=f"input {k}")


def on(
    term: ncd.Term, *shapes: tuple[int, ...], dtype: str | tuple[str, ...] = "float32"
) -> ncd.Term:
    """``term`` on typed inputs of these shapes (axes shared by right-aligned position), so an
    elementwise op is lifted over them."""
    axes = {k: ncd.Axis(f"p{k}", size=None) for k in range(4)}
    dtypes = (dtype,) * len(shapes) if isinstance(dtype, str) else dtype
    types = [
        ncd.ArrayType(tuple(axes[len(s) - 1 - i] for i in range(len(s))), dt)
        for s, dt in zip(shapes, dtypes, strict=True)
    ]
    sizes = {axes[len(s) - 1 - i]: n for s in shapes for i, n in enumerate(s)}

    @ncd.trace(inputs=types)
    def body(*xs: ncd.Tensor) -> Any:
        return term(*xs)

    return body.bind(sizes)


def normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, size=shape)


def away_from_zero(*shape: int) -> np.ndarray:
    x = RNG.uniform(0.2, 2.0, size=shape)
    return x * RNG.choice([-1.0, 1.0], size=shape)


SIZES = [1, 7, 13]


@pytest.mark.parametrize("n", SIZES)
def test_einsum_contraction_outer_and_sum(n: int) -> None:
    m = 13 if n != 13 else 1
    check(ops.einsum("a b, b c -> a c").bind(a=n, b=7, c=m), normal(n, 7), normal(7, m))
    check(ops.einsum("a b -> b").bind(a=n, b=7), normal(n, 7))
    check(ops.einsum("a, b -> a b").bind(a=n, b=13), normal(n), normal(13))
    check(ops.einsum("a b, b -> a").bind(a=n, b=7), normal(n, 7), normal(7))
    lifted = ops.einsum("q d, x d -> q x").over("h").bind(h=2, q=n, x=7, d=5)
    check(lifted, normal(2, n, 5), normal(2, 7, 5))


@pytest.mark.parametrize("n", SIZES)
def test_linear_lifted_over_a_batch_accumulates(n: int) -> None:
    m = ops.linear("d -> e").over("batch").bind(batch=n, d=7, e=13 if n != 13 else 1)
    check(m, normal(n, 7))
    check(ops.linear("d -> h e", bias=False).bind(d=n, h=2, e=7), normal(n))


UNARY_INPUT = {
    "log": positive,
    "sqrt": positive,
    "rsqrt": positive,
    "recip": positive,
    "abs": away_from_zero,
    "relu": away_from_zero,
    "log1p": positive,
    # inside the domains of the inverse trig/hyperbolic functions
    "asin": lambda *shape: RNG.uniform(-0.8, 0.8, size=shape),
    "acos": lambda *shape: RNG.uniform(-0.8, 0.8, size=shape),
    "atanh": lambda *shape: RNG.uniform(-0.8, 0.8, size=shape),
    "acosh": lambda *shape: 1.2 + positive(*shape),
}


# stop_gradient's gradient is zero by definition, not its value's slope (its own test is in
# test_batch_norm_train.py)
@pytest.mark.parametrize("fn", [f for f in ops.UNARY_FNS if f != "stop_gradient"])
def test_unary(fn: str) -> None:
    make = UNARY_INPUT.get(fn, normal)
    for n in SIZES:
        check(on(ops.unary(fn), (n, 7)), make(n, 7))


def test_gelu_near_zero_and_far_out() -> None:
    x = np.array([0.0, 1e-5, -1e-4, 9.9e-4, -1.2e-3, 0.3, -3.0, 8.0, -40.0])
    check(on(ops.gelu(), x.shape), x)


ARITHMETIC_FNS = [f for f in ops.BINARY_FNS if f not in COMPARISONS]


def test_comparisons_are_bool_wires_with_no_gradient() -> None:
    a, b = normal(7), away_from_zero(7)
    with pytest.raises(ncd.autodiff.SeedError, match="no float output"):
        ncd.grad(on(ops.lt(), a.shape, b.shape), wrt="inputs")
    # through a where: the gradient reaches the chosen input, none goes through the condition
    absolute = ncd.copy(3) >> (ops.gt(0.0) @ ncd.identity(1) @ ops.neg()) >> ops.where()
    check(on(absolute, b.shape), b)


@pytest.mark.parametrize("fn", ARITHMETIC_FNS)
def test_binary_with_broadcast(fn: str) -> None:
    for n in SIZES:
        if fn == "pow":
            a, b = positive(n, 7), normal(7)
        elif fn in ("max", "min"):
            a = normal(n, 7)
            b = a[0] + away_from_zero(7)  # no ties with any row
            a = a + 0.3 * np.sign(a - b)
        else:
            a, b = normal(n, 7), away_from_zero(7)
        check(on(ops.binary(fn), a.shape, b.shape), a, b)


@pytest.mark.parametrize("fn", ARITHMETIC_FNS)
@pytest.mark.parametrize("reverse", [False, True])
def test_scalar(fn: str, reverse: bool) -> None:
    c = 1.7
    x = positive(7, 13) if fn == "pow" else away_from_zero(7, 13)
    if fn in ("max", "min"):
        x = x + c  # values around the constant, none equal to it
    check(on(ops.scalar(fn, c, reverse=reverse), x.shape), x)


@pytest.mark.parametrize("n", SIZES)
def test_scale_and_reductions(n: int) -> None:
    d = ncd.Axis("d", size=n)
    model = ncd.identity(ncd.ArrayType((ncd.Axis("s", size=7), d))) >> ops.scale(d, -0.5)
    check(model, normal(7, n))
    for fn in ops.REDUCE_FNS:
        check(on(ops.reduce(fn, "d"), (13, n)), normal(13, n))
        check(on(ops.reduce(fn, ["a", "b"]), (n, 7)), normal(n, 7))


@pytest.mark.parametrize("n", SIZES)
def test_normalisers(n: int) -> None:
    check(on(ops.softmax("x"), (n, 7)), normal(n, 7))
    masked = ops.einsum("q d, x d -> q x") >> ops.causal_mask("q", "x") >> ops.softmax("x")
    check(masked.bind(q=n, x=13, d=3), normal(n, 3), normal(13, 3))
    check(on(ops.l2norm("d"), (13, n)), normal(13, n))
    check(on(ops.layernorm("d"), (7, n)), normal(7, n))
    check(on(ops.layernorm("d", affine=False), (7, n)), normal(7, n))
    check(on(ops.layernorm("d", bias=False), (n, 13)), normal(n, 13))
    check(on(ops.rmsnorm("d"), (7, n)), normal(7, n))
    check(on(ops.rmsnorm("d", affine=False), (7, n)), normal(7, n))


@pytest.mark.parametrize("n", SIZES)
def test_embedding_views_and_sources(n: int) -> None:
    emb = on(ops.embedding("vocab -> d", vocab=13, d=n), (7,), dtype="int64")
    ids = RNG.integers(0, 13, size=(7,))
    ids[:2] = 3  # a repeated id accumulates
    check(emb, ids)
    check(
        on(ops.embedding("vocab -> d", vocab=13, d=n), (2, 7), dtype="int64"),
        ids.reshape(1, 7).repeat(2, 0),
    )
    check(ops.rearrange("s (h e) -> h s e", h=2).bind(s=n, h_e=14), normal(n, 14))
    check(on(ops.rename("a", "b"), (n,)), normal(n))
    check(on(ops.dropout(0.3), (n, 7)), normal(n, 7))
    check(ops.learned(("a", "b")).bind(a=n, b=7) >> ops.unary("tanh"))
    check(on(ops.mul() >> ops.add(0.5), (n, 7), (n, 7)), normal(n, 7), normal(n, 7))


def test_copy_becomes_sum() -> None:
    d = ncd.Axis("d", size=13)

    @ncd.trace(inputs=[ncd.ArrayType((d,))])
    def f(x: ncd.Tensor) -> ncd.Tensor:
        y = ops.unary("tanh")(x)
        return ops.sum("d")(y * y + x * y + y)  # type: ignore[no-any-return]

    check(f, normal(13))
    e = ncd.Axis("d_model", size=7)
    block = nn.mlp(e, 13)

    @ncd.trace(inputs=[ncd.ArrayType((e,))])
    def residual(x: ncd.Tensor) -> ncd.Tensor:
        return x + block(x)  # type: ignore[no-any-return]

    check(residual, normal(7))


def test_losses_against_numpy_and_fd() -> None:
    z = normal(7, 13)
    t = RNG.integers(0, 13, size=(7,))
    shifted = z - z.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    want = -logp[np.arange(7), t].mean()

    def loss(term: ncd.Term, n: int = 7, classes: int = 13) -> ncd.Term:
        seq, vocab = ncd.Axis("s", size=n), ncd.Axis("vocab", size=classes)

        @ncd.trace(inputs=[ncd.ArrayType((seq, vocab)), ncd.ArrayType((seq,), "int64")])
        def body(z: ncd.Tensor, t: ncd.Tensor) -> Any:
            return term(z, t)

        return body

    ce = loss(nn.cross_entropy())
    assert np.isclose(ncd.run(ce, z, t), want, rtol=1e-12)
    check(ce, z, t)
    smooth = loss(nn.cross_entropy(label_smoothing=0.1))
    want_s = 0.9 * want - 0.1 * logp.mean(-1).mean()
    assert np.isclose(ncd.run(smooth, z, t), want_s, rtol=1e-12)
    check(smooth, z, t)
    t2 = t.copy()
    t2[[1, 4]] = -100
    ign = loss(nn.cross_entropy(ignore_index=-100))
    keep = t2 != -100
    want_i = -logp[np.arange(7)[keep], t2[keep]].mean()
    assert np.isclose(ncd.run(ign, z, t2), want_i, rtol=1e-12)
    check(ign, z, t2)
    assert np.isclose(ncd.run(loss(nn.nll()), logp, t), want, rtol=1e-12)
    check(loss(nn.nll()), logp, t)
    y, target = normal(7, 13), normal(7, 13)
    assert np.isclose(
        ncd.run(on(ops.unary("tanh") >> nn.mse(), (7, 13), (7, 13)), y, target),
        np.mean((np.tanh(y) - target) ** 2),
    )
    check(on(ops.unary("tanh") >> nn.mse(), (7, 13), (7, 13)), y, target)
    # large logits stay finite: the log-softmax is fused, never log(softmax)
    big = np.array([[1000.0, 0.0, -1000.0]])
    assert np.isfinite(ncd.run(loss(nn.cross_entropy(), 1, 3), big, np.array([2])))


def tiny_gpt(seq: int = 7) -> ncd.Term:
    return nn.gpt(layers=2).bind(seq=seq, d_model=8, heads=2, d_head=4, d_ff=13, vocab=13)


def test_gpt_gradients_against_finite_differences() -> None:
    lm = tiny_gpt() >> nn.cross_entropy()
    params = {k: v.astype(np.float64) for k, v in ncd.init(lm, seed=0).items()}
    toks, tgts = np.arange(7) * 5 % 13, (np.arange(7) * 5 + 1) % 13
    loss, grads = ncd.run(ncd.grad(lm), toks, tgts, params=params)
    assert set(grads) == set(params)
    assert np.isclose(loss, ncd.run(lm, toks, tgts, params=params), rtol=1e-12)
    rng = np.random.default_rng(0)
    for name in [
        "gpt.wte.weight",
        "gpt.blocks.0.attn.q.weight",
        "gpt.blocks.1.attn.k.weight",
        "gpt.blocks.0.ln_1.weight",
        "gpt.blocks.1.mlp.fc.bias",
        "gpt.ln_f.bias",
        "gpt.lm_head.weight",
        "gpt.wpe.weight",
    ]:
        arr = params[name]
        for _ in range(2):
            idx = tuple(int(rng.integers(0, s)) for s in arr.shape)
            keep = arr[idx]
            arr[idx] = keep + EPS
            hi = ncd.run(lm, toks, tgts, params=params)
            arr[idx] = keep - EPS
            lo = ncd.run(lm, toks, tgts, params=params)
            arr[idx] = keep
            assert np.isclose(grads[name][idx], (hi - lo) / (2 * EPS), rtol=1e-5, atol=1e-8), name


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_gpt_gradients_against_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    ncd_torch = pytest.importorskip("ncd_torch")
    lm = tiny_gpt() >> nn.cross_entropy()
    params = {k: v.astype(np.float64) for k, v in ncd.init(lm, seed=0).items()}
    toks, tgts = np.arange(7) * 3 % 13, (np.arange(7) * 3 + 2) % 13
    module = ncd_torch.to_module(lm, params=params, dtype=torch.float64)
    loss = module(torch.tensor(toks), torch.tensor(tgts))
    loss.backward()
    got = dict(module.named_parameters())
    value, grads = ncd.run(ncd.grad(lm), toks, tgts, params=params)
    assert np.isclose(value, float(loss.detach()), rtol=1e-6)
    for name, g in grads.items():
        ref = got[name].grad.numpy()  # type: ignore[union-attr]
        np.testing.assert_allclose(g, ref, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_rules_against_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    ncd_torch = pytest.importorskip("ncd_torch")
    every = ["s", "d"]
    cases = [
        (ops.layernorm("d") >> ops.unary("gelu") >> ops.sum(every), normal(7, 13)),
        (ops.rmsnorm("d") >> ops.unary("silu") >> ops.sum(every), normal(1, 7)),
        (ops.l2norm("d") >> ops.softmax("d") >> ops.unary("log") >> ops.sum(every), normal(1, 13)),
        (ops.linear("d -> e", e=7) >> ops.unary("gelu_tanh") >> ops.sum(["s", "e"]), normal(13, 1)),
        (ops.softmax("s") >> ops.unary("sqrt") >> ops.max(["s"]) >> ops.sum("d"), normal(7, 13)),
        (
            ops.rearrange("s (h e) -> h s e", h=2)
            >> ops.unary("tanh")
            >> ops.mean(["h", "s", "e"]),
            normal(7, 2),
        ),
    ]
    for fn in ("exp", "sigmoid", "abs", "relu", "square"):
        cases.append((ops.unary(fn) >> ops.sum(every), away_from_zero(13, 7)))
    for term, x in cases:
        s, d = ncd.Axis("s", size=x.shape[0]), ncd.Axis("d", size=x.shape[1])
        model = ncd.identity(ncd.ArrayType((s, d))) >> term
        params = {k: v.astype(np.float64) for k, v in ncd.init(model, seed=0).items()}
        module = ncd_torch.to_module(model, params=params, dtype=torch.float64)
        tx = torch.tensor(x, requires_grad=True)
        module(tx).backward()
        _, grads = ncd.run(ncd.grad(model, wrt=[*params, 0]), x, params=params)
        np.testing.assert_allclose(grads[0], tx.grad.numpy(), rtol=1e-9, atol=1e-12)
        for name, p in module.named_parameters():
            np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("spherical", [False, True])
def test_attention_against_torch_autograd(spherical: bool) -> None:
    torch = pytest.importorskip("torch")
    ncd_torch = pytest.importorskip("ncd_torch")
    make = nn.spherical_attention if spherical else nn.attention
    att = make(causal=True).bind(q=7, x=13, d=1, v=7) >> ops.unary("tanh") >> ops.sum(["q", "v"])
    q, k, v = normal(7, 1), normal(13, 1), normal(13, 7)
    module = ncd_torch.to_module(att, dtype=torch.float64)
    ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    module(*ts).backward()
    _, grads = ncd.run(ncd.grad(att, wrt="inputs"), q, k, v)
    for g, t in zip(grads, ts, strict=True):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-9, atol=1e-12)  # type: ignore[union-attr]


def test_gradient_graph_is_an_ordinary_graph() -> None:
    lm = tiny_gpt() >> nn.cross_entropy()
    train = ncd.grad(lm)
    g = train.graph
    g.verify()
    core = set(ncd.ops.OP_KINDS)
    assert {type(n.op).kind for n in g.nodes} <= core
    assert set(ncd.init(train, seed=0)) == set(ncd.init(lm, seed=0))
    # definitions keep their names; the backward of a block is a block
    names = {s.name for s in g.scopes}
    assert {"transformer_block", "transformer_block_grad", "attention_grad"} <= names
    # the compiled reference executable packs (loss, grads) too
    params = ncd.init(lm, seed=0)
    toks = np.arange(7) % 13
    a = ncd.compile(train, "reference")(toks, toks, params=params)
    b = ncd.run(train, toks, toks, params=params)
    assert a[0] == b[0] and all(np.array_equal(a[1][k], b[1][k]) for k in b[1])


def test_wrt_inputs_gives_a_tuple() -> None:
    m = ops.einsum("a b, b -> a") >> ops.sum("a")
    x, y = normal(7, 13), normal(13)
    _, grads = ncd.run(ncd.grad(m, wrt="inputs"), x, y)
    assert isinstance(grads, tuple) and len(grads) == 2
    np.testing.assert_allclose(grads[0], np.broadcast_to(y, (7, 13)))
    np.testing.assert_allclose(grads[1], x.sum(0))


def test_typed_errors() -> None:
    lm = tiny_gpt() >> nn.cross_entropy()
    with pytest.raises(ncd.IntegerGradError, match="integer wire"):
        ncd.grad(lm, wrt="inputs")
    with pytest.raises(ncd.SeedError, match="seed cotangent"):
        ncd.grad(tiny_gpt())
    with pytest.raises(ncd.GradError, match="no parameter"):
        ncd.grad(lm, wrt=["nope"])
    moe = nn.moe(d_model=8, d_ff=16, experts=4).bind(seq=7) >> ops.sum(["seq", "d_model"])
    with pytest.raises(ncd.NoGradRuleError, match="topk_gate"):
        ncd.grad(moe)
    assert issubclass(ncd.NoGradRuleError, ncd.NcdError)


def test_seed_cotangent_for_a_non_scalar_output() -> None:
    m = ops.linear("d -> e").bind(d=7, e=13)
    params = {k: v.astype(np.float64) for k, v in ncd.init(m, seed=0).items()}
    x, ct = normal(7), normal(13)
    _, grads = ncd.run(ncd.grad(m, wrt=[0, "linear.weight"], cotangents=True), x, ct, params=params)
    np.testing.assert_allclose(grads[0], params["linear.weight"].T @ ct)
    np.testing.assert_allclose(grads["linear.weight"], np.outer(ct, x))


OPENCL = (
    importlib.util.find_spec("ncd_opencl") is not None
    and importlib.util.find_spec("pyopencl") is not None
)


#: issue 13's acceptance example, verbatim (run with exec so its text stays as written)
EXAMPLE = """
import numpy as np, ncd
from ncd import nn
gpt = nn.gpt(layers=2).bind(seq=16, d_model=32, heads=4, d_head=8, d_ff=64, vocab=50)
loss_model = gpt >> nn.cross_entropy()          # inputs: tokens [seq], targets [seq]; output: a scalar
train = ncd.grad(loss_model)                    # outputs: the loss, and a gradient per parameter
params = ncd.init(loss_model, seed=0)
toks, tgts = np.arange(16) % 50, (np.arange(16) + 1) % 50
loss, grads = ncd.run(train, toks, tgts, params=params)
assert set(grads) == set(params)
loss_cl, grads_cl = ncd.compile(train, "opencl")(toks, tgts, params=params)
assert all(np.allclose(grads_cl[k], grads[k], atol=2e-4) for k in grads)
opt = ncd.optim.AdamW(lr=1e-3, weight_decay=0.1)
state = opt.init(params)
params, state = opt.update(params, grads, state)
"""  # noqa: E501


@pytest.mark.skipif(not OPENCL, reason="ncd-opencl (pyopencl) is not installed")
def test_issue_13_acceptance_example_as_written() -> None:
    scope: dict[str, Any] = {}
    exec(compile(EXAMPLE, "issue-13-example", "exec"), scope)
    assert np.isclose(scope["loss"], np.log(50), rtol=0.05)  # an untrained model: ~ uniform
    assert np.isclose(scope["loss_cl"], scope["loss"], rtol=1e-5)
    for k, ref in scope["grads"].items():  # 1e-4 relative to each gradient's scale, float32
        err = np.max(np.abs(scope["grads_cl"][k] - ref))
        assert err <= 1e-4 * max(float(np.max(np.abs(ref))), 1e-3), k
    assert scope["state"]["step"] == 1
    moved = [
        k for k in scope["grads"] if not np.array_equal(scope["params"][k], scope["state"]["m"][k])
    ]
    assert moved


def test_gradient_model_round_trips_through_json() -> None:
    lm = tiny_gpt() >> nn.cross_entropy()
    train = ncd.grad(lm)
    loaded = ncd.from_json(ncd.to_json(train))
    assert loaded.graph == train.graph
    assert list(loaded.graph.params()) == list(train.graph.params())
    params = ncd.init(lm, seed=0)
    toks = np.arange(7) % 13
    loss, grads = ncd.run(train, toks, toks, params=params)
    flat = ncd.run(loaded, toks, toks, params=params)  # a plain graph: flat outputs
    assert flat[0] == loss
    assert all(np.array_equal(a, grads[k]) for a, k in zip(flat[1:], grads, strict=True))


@pytest.mark.skipif(
    importlib.util.find_spec("ncd_diagram") is None or importlib.util.find_spec("ncd_perf") is None,
    reason="ncd-diagram or ncd-perf is not installed",
)
def test_gradient_model_draws_and_is_priced() -> None:
    import ncd_diagram
    import ncd_perf

    att = nn.attention(causal=True).bind(q=5, x=5, d=4, v=4) >> ops.sum(["q", "v"])
    train = ncd.grad(att, wrt="inputs")
    svg = ncd_diagram.draw(train)
    assert "attention" in svg
    assert "kernel" in str(ncd_perf.cost(train))


def test_chain_rule_composes_the_two_backward_passes() -> None:
    d, e = ncd.Axis("d", size=7), ncd.Axis("e", size=13)
    f = ncd.identity(ncd.ArrayType((d,))) >> ops.linear(d, e, name="f") >> ops.unary("tanh")
    g = ops.layernorm(e) >> ops.sum(e)
    fg = f >> g
    params = {k: v.astype(np.float64) for k, v in ncd.init(fg, seed=3).items()}
    pf = {k: v for k, v in params.items() if k.startswith("f.")}
    pg = {k: v for k, v in params.items() if not k.startswith("f.")}
    x = normal(7)
    _, whole = ncd.run(ncd.grad(fg, wrt=[0, *params]), x, params=params)
    y = ncd.run(f, x, params=pf)
    g_on = ncd.identity(ncd.ArrayType((e,))) >> g
    _, back_g = ncd.run(ncd.grad(g_on, wrt=[0, *pg]), y, params=pg)
    _, back_f = ncd.run(ncd.grad(f, wrt=[0, *pf], cotangents=True), x, back_g[0], params=pf)
    np.testing.assert_allclose(whole[0], back_f[0], rtol=1e-12, atol=1e-14)
    for k in pf:
        np.testing.assert_allclose(whole[k], back_f[k], rtol=1e-12, atol=1e-14)
    for k in pg:
        np.testing.assert_allclose(whole[k], back_g[k], rtol=1e-12, atol=1e-14)


def test_lifting_sums_the_per_index_gradients() -> None:
    d, e = ncd.Axis("d", size=5), ncd.Axis("e", size=3)
    f = ncd.identity(ncd.ArrayType((d,))) >> ops.linear(d, e) >> ops.unary("gelu") >> ops.sum(e)
    lifted = f.over(ncd.Axis("b", size=4)) >> ops.sum("b")
    params = {k: v.astype(np.float64) for k, v in ncd.init(f, seed=5).items()}
    xs = normal(4, 5)
    _, together = ncd.run(ncd.grad(lifted), xs, params=params)
    train = ncd.grad(f)
    parts = [ncd.run(train, x, params=params)[1] for x in xs]
    for k in params:
        np.testing.assert_allclose(together[k], sum(p[k] for p in parts), rtol=1e-12)


# -- properties ---------------------------------------------------------------------------------

_R, _C = 3, 5
_KINDS = {
    "exp": lambda: ops.unary("exp"),
    "tanh": lambda: ops.unary("tanh"),
    "gelu": lambda: ops.gelu(),
    "mul": lambda: ops.mul(0.5),
    "rsub": lambda: ops.sub(1.0, reverse=True),
    "softmax": lambda: ops.softmax("c"),
    "l2norm": lambda: ops.l2norm("c"),
    "layernorm": lambda: ops.layernorm("c", affine=False),
    "rmsnorm": lambda: ops.rmsnorm("c", affine=False),
}


def _chain(spec: list[tuple[str, bool]], r: ncd.Axis, c: ncd.Axis) -> ncd.Term:
    """Ops over ``[r c]``, each optionally as a residual ``x + op(x)`` (a copy becomes a sum)."""
    model: ncd.Term = ncd.identity([r, c])
    for kind, residual in spec:
        term = _KINDS[kind]()
        model = model >> (ncd.copy() >> (term @ ncd.identity(1)) >> ops.add() if residual else term)
    return model


if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    _steps = st.lists(
        st.tuples(st.sampled_from(sorted(_KINDS)), st.booleans()), min_size=1, max_size=4
    )

    @settings(max_examples=25, deadline=None)
    @given(_steps, _steps, st.integers(0, 2**31 - 1))
    def test_chain_rule_on_random_compositions(
        first: list[tuple[str, bool]], second: list[tuple[str, bool]], seed: int
    ) -> None:
        r, c = ncd.Axis("r", size=_R), ncd.Axis("c", size=_C)
        f, g = _chain(first, r, c), _chain(second, r, c)
        x = np.random.default_rng(seed).normal(size=(_R, _C))
        w = np.random.default_rng(seed + 1).normal(size=(_R, _C))
        fg = f >> g
        _, (whole,) = ncd.run(ncd.grad(fg, wrt="inputs", cotangents=True), x, w)
        y = ncd.run(f, x)
        _, (dy,) = ncd.run(ncd.grad(g, wrt="inputs", cotangents=True), y, w)
        _, (dx,) = ncd.run(ncd.grad(f, wrt="inputs", cotangents=True), x, dy)
        np.testing.assert_allclose(whole, dx, rtol=1e-10, atol=1e-12)

    @settings(max_examples=15, deadline=None)
    @given(_steps, st.integers(0, 2**31 - 1))
    def test_lifting_is_per_index_on_random_compositions(
        spec: list[tuple[str, bool]], seed: int
    ) -> None:
        r, c, b = ncd.Axis("r", size=_R), ncd.Axis("c", size=_C), ncd.Axis("b", size=2)
        f = _chain(spec, r, c)
        xs = np.random.default_rng(seed).normal(size=(2, _R, _C))
        ws = np.random.default_rng(seed + 1).normal(size=(2, _R, _C))
        _, (lifted,) = ncd.run(ncd.grad(f.over(b), wrt="inputs", cotangents=True), xs, ws)
        train = ncd.grad(f, wrt="inputs", cotangents=True)
        for i in range(2):
            _, (one,) = ncd.run(train, xs[i], ws[i])
            np.testing.assert_allclose(lifted[i], one, rtol=1e-10, atol=1e-12)


def test_a_gradient_model_of_free_sizes_binds_later() -> None:
    lm = nn.gpt(layers=1) >> nn.cross_entropy()
    train = ncd.grad(lm)
    assert "vocab" in {v.label for v in train.config().free}
    sizes = {"seq": 7, "d_model": 8, "heads": 2, "d_head": 4, "d_ff": 13, "vocab": 13}
    bound = lm.bind(**sizes)
    params = ncd.init(bound, seed=0)
    toks = np.arange(7) % 13
    loss, grads = ncd.run(train.bind(**sizes), toks, toks, params=params)
    loss_b, grads_b = ncd.run(ncd.grad(bound), toks, toks, params=params)
    assert loss == loss_b
    assert all(np.array_equal(grads[k], grads_b[k]) for k in grads)


def test_a_loss_lifted_after_composition_loops_over_the_lifted_axis() -> None:
    """``(gpt >> cross_entropy()).over(batch)``: the batch axis is a loop axis of the loss (one
    loss per index, as running each instance alone gives), not an axis it averages over twice
    (it once failed to build: the targets gained the lifted axis twice)."""
    gpt = nn.gpt(layers=1).bind(seq=7, d_model=16, heads=2, d_head=8, d_ff=32, vocab=13)
    batch = ncd.Axis("batch", size=3)
    lifted = (gpt >> nn.cross_entropy()).over(batch)
    params = ncd.init(lifted, seed=0)
    rng = np.random.default_rng(0)
    toks, tgts = rng.integers(0, 13, (3, 7)), rng.integers(0, 13, (3, 7))
    per = ncd.run(lifted, toks, tgts, params=params)
    one = gpt >> nn.cross_entropy()
    want = [float(ncd.run(one, toks[i], tgts[i], params=params)) for i in range(3)]
    np.testing.assert_allclose(per, want, rtol=1e-6)
    mean = ncd.run(gpt.over(batch) >> nn.cross_entropy(), toks, tgts, params=params)
    np.testing.assert_allclose(mean, np.mean(want), rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_rotary_gradient_is_the_inverse_rotation(n: int) -> None:
    """RoPE is a rotation at each position: its gradient rotates the cotangent back
    (``Rotary(inverse=True)``), checked against finite differences, lifted over heads."""
    seq, d = ncd.Axis("seq", size=n), ncd.Axis("d", size=6)
    check(ops.rotary(seq, d, base=100.0).over(ncd.Axis("h", size=2)), normal(2, n, 6))
    table = ops.rotary(seq, d, freqs=(0.9, 0.2, 0.01), scale=1.7)  # a scaled RoPE's table
    check(table.over(ncd.Axis("h", size=2)), normal(2, n, 6))
    x = normal(n, 6)
    there = ncd.run(ops.rotary(seq, d), x)
    back = ncd.run(_inverse_rotary(seq, d), there)
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)


def _inverse_rotary(seq: ncd.Axis, d: ncd.Axis) -> ncd.Term:
    from ncd.ops import prim
    from ncd.primitives.indexing import Rotary

    return prim(Rotary(seq, d, inverse=True))


def test_llama_gradients_against_finite_differences() -> None:
    """Every parameter of a small Llama (RMSNorm, RoPE, GQA, SwiGLU) gets its gradient."""
    llama = nn.llama(layers=1).bind(
        seq=5, d_model=8, kv_heads=1, group=2, d_head=4, d_ff=8, vocab=7
    )
    lm = llama >> nn.cross_entropy()
    toks = np.array([1, 3, 0, 6, 2])
    tgts = np.array([3, 0, 6, 2, 5])
    params = {k: v.astype(np.float64) for k, v in ncd.init(lm, seed=2).items()}
    _, grads = ncd.run(ncd.grad(lm), toks, tgts, params=params)
    assert set(grads) == set(params)
    for name in params:
        want = _fd(lambda: float(ncd.run(lm, toks, tgts, params=params)), params[name])
        np.testing.assert_allclose(grads[name], want, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.skipif(not OPENCL, reason="ncd-opencl (pyopencl) is not installed")
def test_inverse_rotation_on_opencl_and_torch() -> None:
    seq, d = ncd.Axis("seq", size=13), ncd.Axis("d", size=8)
    inv = _inverse_rotary(seq, d)
    x = normal(13, 8).astype(np.float32)
    want = ncd.run(inv, x)
    np.testing.assert_allclose(ncd.compile(inv, "opencl")(x), want, rtol=1e-5, atol=1e-6)
    if importlib.util.find_spec("torch") is not None:
        import torch

        got = ncd.export(inv, "torch")(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_where_slice_and_concat(n: int) -> None:
    """The indexing ops' rules against finite differences, at awkward sizes, lifted."""
    cond = (RNG.normal(size=(3, n)) > 0).astype(np.float64)
    check(on(ops.where(), (3, n), (3, n), (n,)), cond, normal(3, n), normal(n))
    sl = ops.slice("d", "part", start=min(2, n - 1), d=n + 3, part=min(3, n)).over("r")
    check(sl.bind(r=2), normal(2, n + 3))
    cat = ops.concat("a, b -> c", a=n, b=4, c=n + 4).over("r")
    check(cat.bind(r=3), normal(3, n), normal(3, 4))


def test_slice_gradient_needs_bound_sizes() -> None:
    free = ops.slice("d", "part", start=1)
    with pytest.raises(ncd.GradError, match="bind it"):
        ncd.grad(free, wrt="inputs", cotangents=True)
