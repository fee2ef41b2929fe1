"""Lifting, binding and re-binding a model keep its parameter names (issue 10, finding 12): the
parameters made for ``gpt`` run ``gpt.over(batch)``; only ``.named()`` nested in a larger model
adds a prefix."""

from __future__ import annotations

import numpy as np
import pytest

import ncd
from ncd import nn, ops

SIZES = {"seq": 7, "d_model": 8, "heads": 2, "d_head": 4, "d_ff": 13, "vocab": 13}


def _gpt() -> ncd.Term:
    return nn.gpt(layers=1).bind(**SIZES)


def test_lifting_and_binding_keep_names() -> None:
    gpt = _gpt()
    names = set(ncd.init(gpt))
    assert "wte.weight" in names
    assert set(ncd.init(gpt.over(ncd.Axis("batch", size=3)))) == names
    assert set(ncd.init(gpt.over("batch").bind(batch=1))) == names
    assert set(ncd.init(nn.gpt(layers=1).over("batch").bind(batch=2, **SIZES))) == names
    lifted_twice = gpt.over(ncd.Axis("a", size=2)).over(ncd.Axis("b", size=1))
    assert set(ncd.init(lifted_twice)) == names


def test_an_explicit_nested_name_still_prefixes() -> None:
    lin = ops.linear("d -> e", d=3, e=7, name="fc").named("block")
    assert set(ncd.init(lin)) == set(ncd.init(lin.over("s").bind(s=2))) == {"fc.weight", "fc.bias"}
    assert set(ncd.init(lin.over("s").bind(s=2) >> ops.relu())) == {
        "block.fc.weight",
        "block.fc.bias",
    }
    assert set(ncd.init(lin >> ops.relu())) == {"block.fc.weight", "block.fc.bias"}


@pytest.mark.parametrize("batch", [1, 3])
def test_params_of_gpt_run_its_batched_form_on_the_reference(batch: int) -> None:
    gpt = _gpt()
    params = ncd.init(gpt, seed=1)
    tokens = np.random.default_rng(0).integers(0, 13, size=(batch, 7))
    got = ncd.run(gpt.over(ncd.Axis("batch", size=batch)), tokens, params=params)
    for i in range(batch):
        np.testing.assert_allclose(
            got[i], ncd.run(gpt, tokens[i], params=params), rtol=1e-5, atol=1e-6
        )


@pytest.mark.opencl
def test_params_of_gpt_run_its_batched_form_on_opencl() -> None:
    pytest.importorskip("ncd_opencl")
    from ncd.plugins import registry

    if "opencl" not in registry().backends:
        pytest.skip("no opencl backend")
    gpt = _gpt()
    params = ncd.init(gpt, seed=2)
    tokens = np.random.default_rng(1).integers(0, 13, size=(3, 7))
    batched = gpt.over(ncd.Axis("batch", size=3))
    got = ncd.compile(batched, "opencl")(tokens, params=params)
    np.testing.assert_allclose(got, ncd.run(batched, tokens, params=params), rtol=2e-3, atol=2e-4)


def test_explain_and_scopes_of_a_lifted_model() -> None:
    gpt = _gpt()
    lifted = gpt.over(ncd.Axis("batch", size=2))
    assert lifted.graph.scopes[0].name == "gpt"
    assert [s.label for s in lifted.graph.scopes] == [s.label for s in gpt.graph.scopes]
    assert "over (batch seq)" in lifted.explain()
    lifted.graph.verify()


@pytest.mark.torch
def test_torch_export_of_a_lifted_model_loads_the_models_params() -> None:
    pytest.importorskip("ncd_torch")
    gpt = _gpt()
    params = ncd.init(gpt, seed=3)
    batched = gpt.over(ncd.Axis("batch", size=2))
    tokens = np.random.default_rng(2).integers(0, 13, size=(2, 7))
    got = ncd.compile(batched, "torch")(tokens, params=params)
    np.testing.assert_allclose(got, ncd.run(batched, tokens, params=params), rtol=1e-4, atol=1e-5)
