"""``OutputPool``: output arrays an executable hands out again once their caller has let go of
them (every backend that returns NumPy arrays uses it).

A fresh 64 MiB ``numpy.empty`` pays a page fault per 4 KiB page on its first write (the
allocator returns large blocks to the OS when they are freed), which on a memory-bound kernel
costs as much as the kernel. So an executable keeps the arrays it returned (at most ``keep`` per
output slot and shape, for the ``shapes`` most recent shapes) and reuses one only when nothing
but the pool refers to it any more: no variable, container, view (``.base``),
``torch.from_numpy`` tensor or memoryview of the caller's. An array the caller still holds is
never written again; once the caller drops every reference its memory may hold a later call's
output. (Only a raw pointer taken with ``arr.ctypes.data`` and kept past the array's lifetime
escapes this rule, as it does for any NumPy array.) ``enabled=False`` allocates every output
afresh (the backends' ``reuse_outputs=False``).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["OutputPool"]


class OutputPool:
    """See the module docstring. ``take(slot, shape, dtype)``: an array for output ``slot``."""

    def __init__(self, enabled: bool = True, keep: int = 2, shapes: int = 16) -> None:
        self.enabled, self.keep, self.shapes = enabled, keep, shapes
        # (slot, shape, dtype) -> arrays handed out; least recently used shapes dropped
        self.slots: OrderedDict[tuple[int, tuple[int, ...], str], list[np.ndarray]]
        self.slots = OrderedDict()
        self.reused = 0  # outputs served from the pool (for tests and benchmarks)

    def take(self, slot: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        if not self.enabled:
            return np.empty(shape, dtype=dtype)
        key = (slot, tuple(shape), str(np.dtype(dtype)))
        kept = self.slots.setdefault(key, [])
        self.slots.move_to_end(key)
        for n in range(len(kept)):
            if sys.getrefcount(kept[n]) <= _ONLY_LISTED:
                self.reused += 1
                return kept[n]
        arr = np.empty(shape, dtype=dtype)
        if arr.nbytes:  # (an empty array faults nothing)
            kept.append(arr)
            del kept[: -self.keep]
        while len(self.slots) > self.shapes:
            self.slots.popitem(last=False)
        return arr


#: ``sys.getrefcount(kept[n])`` of an object only a list refers to (measured, not assumed:
#: the count of the call's own argument differs between Python versions)
_PROBE = [object()]
_ONLY_LISTED = sys.getrefcount(_PROBE[0])
del _PROBE
