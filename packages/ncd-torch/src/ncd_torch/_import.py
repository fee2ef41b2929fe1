"""Import: a PyTorch module becomes an ncd model with named axes and named blocks.

The module is captured with ``torch.export`` (an ATen graph carrying each node's module path
and source line) and read by ``Capture`` (``_capture.py``) into ncd op records over axis
variables. Once every variable's identity and name is settled, the records are replayed
through ``ncd.trace``; each user-defined submodule becomes a named definition (``blocks.0``,
``attn``...) whose parameters keep PyTorch's names where the shapes allow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from ncd import ops, trace
from ncd.axis import ArrayType
from ncd_torch._capture import Capture, Record, _snake
from ncd_torch._import_rules import TorchImportError

__all__ = ["Imported", "from_torch"]


@attrs.frozen
class Imported:
    """What ``from_torch`` returns; unpacks as ``model, params = from_torch(...)``."""

    model: Any
    params: dict[str, np.ndarray]
    torch_names: dict[str, str]  # ncd parameter name -> PyTorch state_dict name

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.params))


def _emit(
    c: Capture,
    recs: list[Record],
    depth: int,
    env: dict[str, Any],
    later: dict[str, int],
    start: int,
) -> None:
    pos = 0
    while pos < len(recs):
        rec = recs[pos]
        if len(rec.stack) <= depth:
            op = rec.op.substitute(c.final)
            env[rec.output] = ops.prim(op)(*(env[k] for k in rec.inputs))
            pos += 1
            continue
        scope = rec.stack[depth]
        end = pos
        while end < len(recs) and len(recs[end].stack) > depth and recs[end].stack[depth] == scope:
            end += 1
        group = recs[pos:end]
        made = {r.output for r in group}
        ins = list(dict.fromkeys(k for r in group for k in r.inputs if k not in made))
        outs = [r.output for r in group if later.get(r.output, -1) >= start + end]
        first = start + pos
        if not outs:  # a block whose results nothing reads
            pos = end
            continue

        def body(
            *ts: Any,
            group: list[Record] = group,
            ins: list[str] = ins,
            outs: list[str] = outs,
            first: int = first,
        ) -> Any:
            inner = dict(zip(ins, ts, strict=True))
            _emit(c, group, depth + 1, inner, later, first)
            return tuple(inner[k] for k in outs) if len(outs) > 1 else inner[outs[0]]

        types = [ArrayType(env[k].axes, env[k].type.dtype) for k in ins]
        sub = trace(inputs=types, name=scope[0], label=scope[1])(body)
        result = sub(*(env[k] for k in ins))
        env.update(zip(outs, result if len(outs) > 1 else (result,), strict=True))
        pos = end


def from_torch(module: Any, example_inputs: Sequence[Any]) -> Imported:
    """Capture ``module`` on ``example_inputs`` and rebuild it as an ncd model.

    Returns ``Imported(model, params, torch_names)`` (it unpacks as ``model, params``): sizes
    are bound to the example's, parameters are named by the block hierarchy, and
    ``ncd.run(model, *inputs, params=params)`` equals ``module(*inputs)``.
    """
    program = _capture(module, tuple(example_inputs))
    c = Capture(program, type(module).__name__)
    c.run()
    c.axes.finish()
    later: dict[str, int] = {}
    for i, rec in enumerate(c.records):
        for k in rec.inputs:
            later[k] = i
    outs = [c.ref[name] for name in c.outputs]
    for k in outs:
        later[k] = len(c.records) + 1
    types = [
        ArrayType(tuple(c.axes.axis(v) for v in c.dims[name]), c.dtype(_node(program, name)))
        for name in c.user_inputs
    ]
    root = type(module).__name__

    def body(*ts: Any) -> Any:
        env = dict(zip(c.user_inputs, ts, strict=True))
        _emit(c, c.records, 0, env, later, 0)
        results = []
        for name, k in zip(c.outputs, outs, strict=True):
            want = tuple(c.axes.axis(v) for v in c._vars(c.dims[name]))
            t = env[k]
            if t.axes != want:  # ncd orders axes by lifting; restore PyTorch's dim order
                t = ops.prim(
                    ops.View(
                        t.axes,
                        want,
                        tuple((a,) for a in t.axes),
                        tuple((a,) for a in want),
                        name="to_torch_order",
                    )
                )(t)
            results.append(t)
        return tuple(results) if len(results) > 1 else results[0]

    try:
        model = trace(inputs=types, name=_snake(root), label=_snake(root))(body)
    except (ValueError, TypeError) as e:  # an identity the rules inferred contradicts an op
        raise TorchImportError(
            f"from_torch: {root} was captured but could not be rebuilt as an ncd model: {e}. "
            "Fix: simplify the part of forward that mixes these dims, or build it with ncd.ops."
        ) from e
    params: dict[str, np.ndarray] = {}
    names: dict[str, str] = {}
    learned = [r for r in c.records if r.params]
    nodes = [n for n in model.graph.nodes if n.op.params()]
    for rec, node in zip(learned, nodes, strict=True):
        for pname, (array, fqn) in rec.params.items():
            params[node.param_name(pname)] = array
            names[node.param_name(pname)] = fqn
    return Imported(model, params, names)


def _node(program: Any, name: str) -> Any:
    return next(n for n in program.graph.nodes if n.name == name)


def _capture(module: Any, inputs: tuple[Any, ...]) -> Any:
    """``torch.export`` first; if it fails, export the ``torch.fx`` symbolic trace instead."""
    import torch

    try:
        return torch.export.export(module, inputs)
    except Exception as first:
        try:
            traced = torch.fx.symbolic_trace(module)
            return torch.export.export(traced, inputs)
        except Exception:
            raise TorchImportError(
                f"from_torch could not capture {type(module).__name__}: torch.export failed with "
                f"{type(first).__name__}: {first}. Fix: make forward traceable (no data-dependent "
                "control flow) or pass example inputs of the right shapes."
            ) from first
