"""Checkpoints between ncd's form and torch's: ncd keeps a weight's axes apart (a Linear onto
``heads d_head`` has weight ``(heads, d_head, d_model)``) where torch's ``nn.Linear`` holds one
matrix ``(heads * d_head, d_model)``. The two hold the same elements in the same order (torch's
dims are runs of ncd's merged), so converting is a reshape, checked dim by dim: a state dict
whose shape merely has the same number of elements (a transposed matrix) is refused, never
reshaped into wrong numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ncd.errors import ParameterError, SizeError
from ncd.graph import as_graph
from ncd.primitives import library as L
from ncd_torch._dtypes import to_numpy

__all__ = ["load_state_dict", "torch_shapes"]


def _sizes(graph: Any, name: str, axes: tuple[Any, ...]) -> tuple[int, ...]:
    out = []
    for a in axes:
        n = graph.size(a)
        if n is None:
            raise SizeError(
                f"parameter {name} has the free axis {a.describe()}. Fix: bind it "
                "(model.bind(...)) before converting a checkpoint."
            )
        out.append(int(n))
    return tuple(out)


def torch_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape in torch's form: a Linear's weight ``(out, in)`` and bias
    ``(out,)`` with each side's axes merged, an embedding's table ``(vocab, width)``; any
    other parameter as ncd holds it."""
    graph = as_graph(model, "ncd_torch.torch_shapes")
    out: dict[str, tuple[int, ...]] = {}
    for node in graph.nodes:
        op = node.op
        for name, p in node.params():
            shape = _sizes(graph, name, p.axes)
            if isinstance(op, L.Linear):
                rows = math.prod(_sizes(graph, name, op.out_axes))
                shape = (rows, math.prod(shape) // rows) if p.name == "weight" else (rows,)
            elif isinstance(op, L.Embedding):
                shape = (shape[0], math.prod(shape[1:]))
            out[name] = shape
    return out


def _merges(fine: tuple[int, ...], coarse: tuple[int, ...]) -> bool:
    """``coarse`` is ``fine`` with runs of consecutive dims merged (size-1 dims anywhere)."""
    dims = [d for d in fine if d != 1]
    for n in (d for d in coarse if d != 1):
        product = 1
        while dims and product < n:
            product *= dims.pop(0)
        if product != n:
            return False
    return not dims


def load_state_dict(
    model: Any, state_dict: Mapping[str, Any], *, strict: bool = True
) -> dict[str, np.ndarray]:
    """ncd parameters of ``model`` from a torch state dict with the same names, each tensor
    reshaped to ncd's form (``from_torch``'s result converts from its original module's
    names and layouts). ``strict``: keys the model has no parameter for are refused; missing
    ones always are, as is a tensor whose dims are not runs of the parameter's
    (``ParameterError`` naming each)."""
    params_from = getattr(model, "params_from", None)
    if params_from is not None:
        return params_from(state_dict)  # type: ignore[no-any-return]
    graph = as_graph(model, "ncd_torch.load_state_dict")
    wanted = {name: _sizes(graph, name, p.axes) for name, p in graph.params().items()}
    missing = [k for k in wanted if k not in state_dict]
    extra = [k for k in state_dict if k not in wanted] if strict else []
    if missing or extra:
        words = [f"missing {', '.join(missing[:6])}" if missing else ""]
        words.append(f"unexpected {', '.join(extra[:6])}" if extra else "")
        raise ParameterError(
            f"load_state_dict: the state dict does not name the model's parameters: "
            f"{'; '.join(w for w in words if w)}. Fix: rename the keys to the model's "
            "(ncd.init(model) lists them), or pass strict=False to drop the unexpected ones."
        )
    out: dict[str, np.ndarray] = {}
    for name, shape in wanted.items():
        value = state_dict[name]
        array = np.asarray(to_numpy(value) if hasattr(value, "detach") else value)
        if array.shape != shape and not _merges(shape, array.shape):
            raise ParameterError(
                f"load_state_dict: {name} has shape {list(array.shape)}, which is not the "
                f"parameter's {list(shape)} with consecutive dims merged (a transposed weight?). "
                "Fix: transpose or reshape it to torch's (out, in) layout of this parameter "
                "(ncd_torch.torch_shapes(model) lists them)."
            )
        out[name] = np.ascontiguousarray(array.reshape(shape))
    return out
