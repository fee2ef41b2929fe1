"""Export: module structure, parameter names, state dicts, free sizes, every nn model."""

import numpy as np
import pytest
import torch

import ncd
from ncd import nn, ops
from ncd_torch import state_dict, to_module

GPT_SIZES = dict(seq=7, d_model=12, heads=3, d_head=4, d_ff=13, vocab=11)


def _gpt():
    return nn.gpt(layers=2).bind(**GPT_SIZES)


def test_export_through_the_registry_gives_a_graph_module():
    module = ncd.export(_gpt(), "torch")
    assert isinstance(module, torch.fx.GraphModule)
    assert "def forward" in module.code


def test_one_submodule_per_named_block():
    module = to_module(_gpt())
    names = dict(module.named_modules())
    for path in (
        "blocks.0",
        "blocks.1",
        "blocks.0.attn",
        "blocks.0.attn.attention",
        "blocks.0.mlp",
        "blocks.1.ln_2",
        "ln_f",
    ):
        assert path in names, path
    assert isinstance(names["blocks.0"], torch.fx.GraphModule)
    assert type(names["blocks.0"]).__name__ == "TransformerBlock"
    # the block's code calls its children, it does not inline them
    assert "self.attn(" in names["blocks.0"].code and "self.mlp(" in names["blocks.0"].code


def test_parameter_names_are_ncd_init_names_and_state_dict_round_trips():
    model = _gpt()
    params = ncd.init(model, seed=5)
    module = to_module(model)
    assert list(module.state_dict()) == list(params)
    assert all(isinstance(p, torch.nn.Parameter) for p in module.parameters())
    module.load_state_dict(state_dict(params))
    again = to_module(model)
    again.load_state_dict(module.state_dict())
    for name, value in again.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), params[name])


def test_params_argument_and_mismatch_error():
    model = _gpt()
    params = ncd.init(model, seed=2)
    module = to_module(model, params=params)
    np.testing.assert_array_equal(
        module.state_dict()["lm_head.weight"].numpy(), params["lm_head.weight"]
    )
    with pytest.raises(ncd.ParameterError, match="missing"):
        to_module(model, params={})


def test_lifted_axes_are_batch_dims_not_loops():
    model = ops.linear("d -> e", d=13, e=7).over(ncd.Axis("s", size=5))
    code = to_module(model).code
    assert "for " not in code and "linear" in code


def test_free_sequence_length_stays_free():
    block = nn.transformer_block().bind(d_model=12, heads=3, d_head=4, d_ff=13)
    module = to_module(block)
    for seq in (1, 7, 13):
        x = np.random.default_rng(seq).standard_normal((seq, 12)).astype(np.float32)
        params = ncd.init(block.bind(seq=seq), seed=0)
        want = ncd.run(block, x, params=params)
        got = module(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_free_size_needed_by_a_parameter_is_reported():
    with pytest.raises(ncd.SizeError, match="bind"):
        to_module(nn.mlp().over("s"))


MODELS = {
    "attention": lambda: nn.attention(causal=True).bind(q=7, x=13, d=5, v=3),
    "spherical": lambda: nn.spherical_attention(causal=True).bind(q=13, x=13, d=7, v=1),
    "mlp_silu": lambda: nn.mlp(activation="silu").over("s").bind(s=7, d_model=13, d_ff=1),
    "layernorm": lambda: nn.layernorm().over("s").bind(s=1, d_model=13),
    "rmsnorm": lambda: nn.rmsnorm().over("s").bind(s=7, d_model=13),
    "mha": lambda: nn.multihead_attention().bind(seq=13, d_model=7, heads=1, d_head=7),
    "block_spherical": lambda: nn.transformer_block(spherical=True).bind(
        seq=7, d_model=12, heads=2, d_head=5, d_ff=13
    ),
    "gpt": _gpt,
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_nn_model_matches_the_reference(name, dtype):
    model = MODELS[name]()
    graph = model.graph
    rng = np.random.default_rng(0)
    inputs = [
        rng.integers(0, 11, graph.shape(v))
        if graph.values[v].dtype == "int64"
        else rng.standard_normal(graph.shape(v)).astype(dtype)
        for v in graph.inputs
    ]
    params = ncd.init(model, seed=1, dtype=dtype)
    want = ncd.run(model, *inputs, params=params)
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    module = to_module(model, params=params, dtype=tdtype)
    got = module(*(torch.from_numpy(x) for x in inputs)).detach().numpy()
    assert got.dtype == dtype
    tol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_dropout_follows_train_and_eval():
    model = ops.dropout(0.5).over(ncd.Axis("r", size=64))
    module = to_module(model)
    x = torch.ones(64)
    assert torch.equal(module(x), x)  # eval by default, as ncd.run
    module.train()
    y = module(x)
    assert set(y.unique().tolist()) <= {0.0, 2.0} and (y == 0).any()


def test_multi_output_blocks():
    r = ncd.Axis("r", size=7)
    pair = (ops.exp() @ ops.neg()).named("pair", "pair").over(r)
    model = pair >> ops.add()
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    want = ncd.run(model, x[0], x[1])
    got = to_module(model)(torch.from_numpy(x[0]), torch.from_numpy(x[1]))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_attention_block_becomes_one_fused_call_and_others_do_not():
    model = _gpt()
    fused = dict(to_module(model).named_modules())["blocks.0.attn.attention"]
    assert "scaled_dot_product_attention" in fused.code and "softmax" not in fused.code
    plain = dict(to_module(model, fuse=False).named_modules())["blocks.0.attn.attention"]
    assert "softmax" in plain.code and "scaled_dot_product_attention" not in plain.code
    sph = nn.transformer_block(spherical=True).bind(seq=7, d_model=12, heads=2, d_head=5, d_ff=13)
    code = dict(to_module(sph).named_modules())["attn.attention"].code
    assert "l2norm" in code and "scaled_dot_product_attention" not in code


def test_causal_attention_with_unequal_lengths_is_not_fused():
    # PyTorch's is_causal aligns at the top left, ncd's mask at the end: only equal sizes fuse.
    model = nn.attention(causal=True).bind(q=5, x=9, d=4, v=3)
    module = to_module(model)
    assert "scaled_dot_product_attention" not in module.code + "".join(
        m.code for m in module.modules() if isinstance(m, torch.fx.GraphModule)
    )
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(5, 4), (9, 4), (9, 3)])
    got = module(*(torch.from_numpy(a) for a in (q, k, v))).detach().numpy()
    np.testing.assert_allclose(got, ncd.run(model, q, k, v), rtol=1e-5, atol=1e-6)


def test_a_block_nothing_reads_keeps_its_parameters():
    s = ncd.Axis("s", size=3)

    @ncd.trace(inputs=[[s, ncd.Axis("d", size=4)]])
    def model(x):
        ops.linear("d -> e", e=2, name="unused").named("dead", "dead")(x)
        return ops.relu()(x)

    module = to_module(model)
    assert sorted(module.state_dict()) == sorted(ncd.init(model))
    x = torch.randn(3, 4)
    torch.testing.assert_close(module(x), torch.relu(x))
