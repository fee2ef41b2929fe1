"""ncd formats as torch dtypes, and arrays across the NumPy / torch border.

NumPy has no bfloat16 of its own (ml_dtypes provides it) and ``torch.from_numpy`` refuses
ml_dtypes arrays, so bf16 crosses as its 16 bits (``view``), exactly. Torch has float8 storage
but no float8 arithmetic: a model with a float8 wire or parameter is refused with a
``DTypeError`` before anything is exported (cast it to bfloat16 or float16 for torch).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch

from ncd.dtypes import DType
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DTypeError
from ncd.graph import Graph

__all__ = ["TORCH_DTYPES", "check_formats", "format_of", "to_numpy", "to_tensor", "torch_dtype"]

#: ncd format name -> torch dtype (float8 formats are absent: torch cannot compute in them).
TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}


def torch_dtype(fmt: DType, what: str = "a value") -> torch.dtype:
    """The torch dtype of ``fmt``; float8 is a ``DTypeError`` naming ``what`` and the fix."""
    found = TORCH_DTYPES.get(fmt.name)
    if found is None:
        raise DTypeError(
            f"{what} is {fmt.name}, which torch stores but cannot compute in (no float8 "
            f"arithmetic on its CPU or GPU kernels). Fix: export model.cast(ncd.bfloat16) or "
            f".cast(ncd.float16) to torch, or run the {fmt.name} model with ncd.run."
        )
    return found


def check_formats(graph: Graph) -> None:
    """Refuse, before any export work, a model with a value or parameter torch cannot run."""
    for v, t in enumerate(graph.values):
        torch_dtype(t.dtype, f"value {v} {t}")
    for name, p in graph.params().items():
        torch_dtype(p.dtype, f"parameter {name}")


def format_of(graph: Graph) -> DType | None:
    """The one float format of a cast model (its float wires and parameters), or ``None`` for a
    float32 model or one that mixes formats (each parameter then keeps its own)."""
    found = {t.dtype for t in graph.values if t.is_float}
    found |= {p.dtype for p in graph.params().values()}
    return next(iter(found)) if len(found) == 1 and found != {to_dtype("float32")} else None


def to_tensor(array: Any) -> torch.Tensor:
    """A NumPy array (bf16 from ml_dtypes included) as a tensor of the same dtype."""
    a = np.asarray(array, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    try:
        fmt = to_dtype(a.dtype)
    except DTypeError:
        fmt = None
    if fmt is not None and fmt.name not in TORCH_DTYPES:
        torch_dtype(fmt, "an array")  # raises: float8 has no torch arithmetic
    return torch.from_numpy(a)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as a NumPy array; a bfloat16 one as an ml_dtypes.bfloat16 array (bit exact)."""
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
