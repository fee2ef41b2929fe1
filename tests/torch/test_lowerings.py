"""Ops from other plugins: a ``Lowering(target="torch")`` teaches the exporter their rule; an op
without one is a CompileError naming the op and the fix."""

from typing import ClassVar

import attrs
import numpy as np
import pytest
import torch

import ncd
from ncd import ops
from ncd.op import Op, register_op
from ncd.plugins import Lowering, registry
from ncd.reference import REFERENCE_RULES
from ncd_torch import to_module


@register_op
@attrs.frozen
class Softplus(Op):
    kind: ClassVar[str] = "test_torch_softplus"
    category: ClassVar[str] = "elementwise"

    def signature(self):
        return ((),), ((),)


REFERENCE_RULES[Softplus] = lambda op, xs, ps, ctx: [np.log1p(np.exp(xs[0]))]


def _model():
    return ops.prim(Softplus()).over(ncd.Axis("r", size=7))


def test_an_op_without_a_torch_rule_is_a_compile_error():
    with pytest.raises(ncd.CompileError, match=r"test_torch_softplus.*ncd_register_lowerings"):
        to_module(_model())


def test_a_registered_lowering_is_used():
    key = ("torch", Softplus.kind)
    rule = lambda op, xs, ps, em: [em.call(torch.nn.functional.softplus, xs[0])]
    registry().lowerings[key] = Lowering("torch", Softplus.kind, rule)
    try:
        x = np.random.default_rng(0).standard_normal(7).astype(np.float32)
        got = to_module(_model())(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, ncd.run(_model(), x), rtol=1e-6)
    finally:
        del registry().lowerings[key]
