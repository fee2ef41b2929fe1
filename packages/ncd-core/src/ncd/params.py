"""Parameter initialisation: named arrays whose shapes follow the axes.

Names come from the block hierarchy (``blocks.0.attn.q.weight``). Linear layers use PyTorch's
default ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, embeddings and learned arrays ``N(0, 0.02)``
(GPT-2), norms start at scale 1 and shift 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ncd.axis import show
from ncd.dtypes import DType
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DTypeError, ParameterError, SizeError
from ncd.sizes import check_bytes, memory_limit

__all__ = ["init"]


def init(model: Any, seed: int = 0, dtype: Any = None) -> dict[str, np.ndarray]:
    """Fresh parameters for a fully sized model, as ``{name: array}`` in graph order.

    Each array is in its parameter's format (float32, or the format of a ``.cast`` model:
    ``ml_dtypes.bfloat16`` arrays for ``m.cast(ncd.bfloat16)``); ``dtype`` overrides it for every
    parameter (``np.float64`` for a float64 ground truth). Values are drawn in float64 and
    rounded once."""
    from ncd.axis import check_seed
    from ncd.graph import as_graph

    graph = as_graph(model, "ncd.init")
    rng = np.random.default_rng(check_seed(seed, "ncd.init"))
    override: DType | None = None
    if dtype is not None:
        try:
            override = to_dtype(dtype)
        except DTypeError:
            override = None
        if override is None or override.kind != "float":
            raise DTypeError(
                f"ncd.init: dtype must be a float type, got {show(dtype)}. Fix: pass "
                "dtype=np.float32 (or np.float64, ncd.bfloat16...), or leave it out for each "
                "parameter's own format."
            )
    out: dict[str, np.ndarray] = {}
    limit = memory_limit()
    for name, p in graph.params().items():
        sizes = [graph.size(a) for a in p.axes]
        if any(s is None for s in sizes):
            free = [a.describe() for a in p.axes if graph.size(a) is None]
            raise SizeError(f"parameter {name} has free axes {free}; bind sizes before ncd.init")
        shape = tuple(int(s) for s in sizes if s is not None)
        check_bytes(f"parameter {name}", p.axes, shape, 8, limit)  # drawn in float64 first
        if p.init == "uniform_fan_in":
            fan_in = math.prod(graph.size(a) or 1 for a in p.fan_in) or 1
            bound = 1.0 / math.sqrt(fan_in)
            arr = rng.uniform(-bound, bound, shape)
        elif p.init == "normal":
            arr = rng.normal(0.0, 0.02, shape)
        elif p.init == "ones":
            arr = np.ones(shape)
        elif p.init == "zeros":
            arr = np.zeros(shape)
        else:
            raise ParameterError(
                f"parameter {name}: unknown initialiser {p.init!r}. Fix: use "
                "normal, uniform_fan_in, ones or zeros."
            )
        fmt = p.dtype if override is None else override
        with np.errstate(over="ignore"):
            out[name] = arr.astype(fmt.numpy)
    return out
