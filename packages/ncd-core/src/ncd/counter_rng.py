"""The counter-based generator behind seeded dropout (``ops.dropout(p, seed=s)``).

Element ``i`` keeps its value iff ``bits(i, key(s)) >= threshold(p)``: ``bits`` is a pure
function of the element's position and the key (two rounds of MurmurHash3's 32-bit finaliser,
all arithmetic modulo 2^32), so there is no generator state to share and the reference, every
kernel and the torch export draw the same mask at any size, in any order, over any number of
threads: the counter-based idea of Salmon et al., "Parallel random numbers: as easy as 1, 2,
3" (SC 2011). The position is row-major over the value's axes sorted by ``(name, uid)``, not
in their layout order, so a transposed copy of a value (a cotangent) draws the same mask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ncd.axis import Axis

__all__ = ["M1", "M2", "bits", "canonical", "key", "keep_mask", "positions", "scale", "threshold"]

#: MurmurHash3's finaliser multipliers (fmix32), and the golden-ratio constant salting the seed
M1, M2, GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B9
_MASK = 0xFFFFFFFF


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * M1) & _MASK
    h ^= h >> 13
    h = (h * M2) & _MASK
    return h ^ (h >> 16)


def key(seed: int) -> int:
    """The 32-bit key of a seed (computed on the host; kernels receive it as a literal)."""
    return _fmix((seed & _MASK) ^ GOLDEN)


def threshold(p: float) -> int:
    """An element is dropped iff its bits are below ``floor(p * 2^32)``: an integer
    comparison, exact in every backend."""
    return min(int(p * 2.0**32), _MASK)


def scale(p: float) -> float:
    """What a kept element is multiplied by: ``1 / (1 - p)``."""
    return 1.0 / (1.0 - p)


def _fmix_array(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(M1)) & np.uint64(_MASK)
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(M2)) & np.uint64(_MASK)
    return h ^ (h >> np.uint64(16))


def bits(pos: np.ndarray, k: int) -> np.ndarray:
    """The 32 random bits of each position (any integer array; positions count mod 2^32)."""
    h = (np.asarray(pos).astype(np.uint64) & np.uint64(_MASK)) ^ np.uint64(k)
    h = (_fmix_array(h) + np.uint64(k)) & np.uint64(_MASK)
    return _fmix_array(h).astype(np.uint32)


def canonical(axes: Sequence[Axis]) -> list[Axis]:
    """The axes in the order positions are counted in."""
    return sorted(axes, key=lambda a: (a.name, a.uid))


def positions(axes: Sequence[Axis], sizes: Mapping[Axis, int]) -> np.ndarray:
    """An int64 array laid out as ``axes``: each element's position, row-major over
    ``canonical(axes)``."""
    pos = np.zeros([sizes[a] for a in axes], np.int64)
    stride = 1
    for a in reversed(canonical(axes)):
        shape = [sizes[b] if b == a else 1 for b in axes]
        pos = pos + np.arange(sizes[a], dtype=np.int64).reshape(shape) * stride
        stride *= sizes[a]
    return pos


def keep_mask(axes: Sequence[Axis], sizes: Mapping[Axis, int], p: float, seed: int) -> np.ndarray:
    """The boolean keep mask of ``dropout(p, seed=seed)`` over a value laid out as ``axes``."""
    return bits(positions(axes, sizes), key(seed)) >= np.uint32(threshold(p))
