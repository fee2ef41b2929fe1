"""Every package together: one model, every interpretation, one answer."""

import numpy as np
import pytest

import ncd

SIZES = dict(seq=13, d_model=16, heads=2, d_head=8, d_ff=24, vocab=11)


@pytest.fixture(scope="module")
def gpt():
    model = ncd.nn.gpt(layers=2).bind(**SIZES)
    params = ncd.init(model, seed=0)
    tokens = np.random.default_rng(0).integers(0, SIZES["vocab"], SIZES["seq"])
    return model, params, tokens, ncd.run(model, tokens, params=params)


def test_every_plugin_is_installed_and_loaded():
    status = {p.name: p.status for p in ncd.plugins.registry().plugins}
    for name in ("reference", "torch", "opencl", "cuda", "diagram", "perf", "pysource"):
        assert name in status and not status[name].startswith("failed"), status


@pytest.mark.parametrize("target", ["torch", "opencl", "pysource"])
def test_every_backend_agrees_with_the_reference(gpt, target):
    model, params, tokens, want = gpt
    got = ncd.compile(model, target)(tokens, params=params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_loaded_model_exports_to_an_equal_module(gpt):
    import torch

    model, params, tokens, want = gpt
    loaded = ncd.from_json(ncd.to_json(model))
    module = ncd.export(loaded, "torch")
    module.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    with torch.no_grad():
        out = module(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_one_fusion_plan_is_drawn_priced_and_compiled(gpt):
    import ncd_diagram
    import ncd_perf

    model = gpt[0]
    plan = ncd.fuse(model)
    svg = ncd_diagram.draw(model, "svg", plan=plan)
    assert svg.count("<polygon") >= len(plan.kernels)  # partition hexagons
    priced = ncd_perf.cost(model, "h100", plan=plan)
    assert len(priced.kernels) == len(plan.kernels)


def test_ncd_perf_prices_the_cuda_plan_with_its_occupancy(capsys):
    """`ncd perf --target cuda`: the kernels priced are those ncd-cuda renders, each with the
    residency its ptxas report allows (compiled here, nothing runs)."""
    from ncd.cli import main

    sizes = ["seq=128", "d_model=64", "heads=4", "d_head=16", "d_ff=256", "vocab=97"]
    argv = ["perf", "gpt", "--target", "cuda", "--machine", "h200", "--dtype", "bfloat16"]
    assert main([*argv, "--no-formulas", "--bind", *sizes]) == 0
    out = capsys.readouterr().out
    assert "as target 'cuda' renders them" in out
    bound = {k: int(v) for k, v in (s.split("=") for s in sizes)}
    model = ncd.nn.gpt().bind(**bound).cast(ncd.bfloat16)
    plan = ncd.plan(model, target="cuda")
    used = ncd.plugins.registry().backend("cuda").resources(plan)
    assert set(used) == {k.name for k in plan.kernels}
    assert out.count("blocks/SM") == len(plan.kernels)
