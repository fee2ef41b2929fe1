"""Rules for whole definitions: a named block whose body matches a known pattern becomes one
fused PyTorch call inside its submodule, instead of one call per op.

Keyed by the definition's name (``Scope.name``). A rule returns ``None`` to decline, and the
block is then built op by op; the numbers are the same either way (the conformance suite runs
both paths). ``attention`` (``ncd.nn.attention``: einsum, optional 1/sqrt(d) scale, optional
causal mask, softmax, einsum) becomes ``F.scaled_dot_product_attention``, PyTorch's fused
kernel, which is what a hand-written model calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F

from ncd.graph import Graph, Node
from ncd.primitives import library as L

if TYPE_CHECKING:
    from ncd_torch._export import Emitter

__all__ = ["DEFINITION_RULES"]

DefinitionRule = Callable[["Emitter", list[Node], list[int], list[int]], list[Any] | None]


def _same_size(graph: Graph, a: Any, b: Any) -> bool:
    if graph.size(a) is not None or graph.size(b) is not None:
        return graph.size(a) == graph.size(b)
    return any(a in v.axes and b in v.axes for v in graph.config().free)


def _attention(em: Emitter, nodes: list[Node], ins: list[int], outs: list[int]) -> list[Any] | None:
    """einsum(q d, x d -> q x) [>> scale(d)] [>> causal_mask(q, x)] >> softmax(x)
    >> einsum(q x, x v -> q v), on three inputs carrying every lifted axis."""
    g = em.ncd
    ops = [n.op for n in nodes]
    first, last = ops[0], ops[-1]
    if len(outs) != 1 or outs[0] != nodes[-1].outputs[0] or not 3 <= len(ops) <= 5:
        return None
    if not (
        isinstance(first, L.Einsum)
        and isinstance(last, L.Einsum)
        and len(first.inputs) == 2
        and len(last.inputs) == 2
        and isinstance(ops[-2], L.Softmax)
    ):
        return None
    if not all(len(s) == 2 for s in (*first.inputs, *last.inputs)):
        return None
    (q, d), (x, d2) = first.inputs
    if d != d2 or first.output != (q, x) or ops[-2].axis != x:
        return None
    (q3, x3), (x4, v) = last.inputs
    if (q3, x3, x4) != (q, x, x) or last.output != (q, v):
        return None
    middle = ops[1:-2]
    scaled = any(isinstance(o, L.Scale) and o.by == (d,) and o.power == -0.5 for o in middle)
    causal = any(
        isinstance(o, L.CausalMask) and (o.q, o.x, o.fill) == (q, x, "-inf") for o in middle
    )
    if len(middle) != int(scaled) + int(causal) or (causal and not _same_size(g, q, x)):
        return None
    chain = [nodes[0].outputs[0]]
    for n in nodes[1:]:
        if n.inputs[0] != chain[-1] or len(g.consumers[chain[-1]]) != 1:
            return None
        chain.append(n.outputs[0])
    values = [nodes[0].inputs[0], nodes[0].inputs[1], nodes[-1].inputs[1]]
    loop = nodes[-1].loop
    if set(nodes[0].loop) != set(loop) or any(
        set(g.values[val].axes) != {*loop, *core}
        for val, core in zip(values, [(q, d), (x, d), (x, v)], strict=True)
    ):
        return None
    args = [
        em.arrange(val, loop, core)
        for val, core in zip(values, [(q, d), (x, d), (x, v)], strict=True)
    ]
    return [
        em.call(
            F.scaled_dot_product_attention, *args, is_causal=causal, scale=None if scaled else 1.0
        )
    ]


#: definition name -> rule(emitter, the block's nodes, input values, output values).
DEFINITION_RULES: dict[str, DefinitionRule] = {"attention": _attention}
