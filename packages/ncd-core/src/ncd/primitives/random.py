"""Seeded random draws: ``Random`` is a source of values over its axes drawn by the counter-based
generator behind seeded dropout (``ncd.counter_rng``): a pure function of the seed and each
element's position, so the reference, every kernel and the torch export draw the same numbers
at any size, in any order, over any number of threads.

``uniform(low, high)``: ``low + (high - low) u``, ``u = ((bits >> 8) + 1/2) 2^-24`` (24 random
bits, exact in float32, strictly inside (0, 1)); ``normal(mean, std)``: Box-Muller on two such
uniforms of two streams of the seed; ``bernoulli(p)``: 1.0 where ``bits < floor(p 2^32)``,
else 0.0 (an integer comparison: the same ones in every backend, as dropout's mask).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs
import numpy as np

from ncd import counter_rng as R
from ncd.axis import Axis
from ncd.errors import DefinitionError
from ncd.op import Op, Signature, axes_field, choice_field, number_field, register_op
from ncd.reference import Context, reference_rule
from ncd.streaming import ROLE_RULES

__all__ = ["DISTRIBUTIONS", "Random", "stream_keys", "uniform_of_bits"]

#: the distributions and the names of their two constants
DISTRIBUTIONS = {"uniform": ("low", "high"), "normal": ("mean", "std"), "bernoulli": ("p", "")}


def stream_keys(seed: int) -> tuple[int, int]:
    """The keys of a seed's two streams (normal draws read both; the others the first)."""
    k = R.key(seed)
    return k, R.key(k ^ R.M2)


def uniform_of_bits(bits: np.ndarray) -> np.ndarray:
    """``((bits >> 8) + 1/2) 2^-24`` in float64 (exact in float32 too)."""
    return ((bits >> np.uint32(8)).astype(np.float64) + 0.5) * 2.0**-24


def _check_seed(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise DefinitionError(
            f"random: seed must be an int in [0, 2^32), got {value!r}. Fix: pass e.g. seed=0."
        )


@register_op
@attrs.frozen
class Random(Op):
    """Random values over ``axes`` (see the module): ``dist`` one of ``uniform`` (``a`` = low,
    ``b`` = high), ``normal`` (``a`` = mean, ``b`` = std >= 0) or ``bernoulli`` (``a`` = p in
    [0, 1]), drawn from ``seed``. A source spans exactly ``axes`` (``.over()`` lifts no source),
    so name every axis the draw should vary along."""

    kind: ClassVar[str] = "random"
    category: ClassVar[str] = "source"
    axes_: tuple[Axis, ...] = axes_field()
    dist: str = choice_field(tuple(DISTRIBUTIONS))
    seed: int = attrs.field(default=0, validator=_check_seed)
    a: float = number_field(0.0, fix="pass a finite constant")
    b: float = number_field(1.0, fix="pass a finite constant")

    def __attrs_post_init__(self) -> None:
        if self.dist == "bernoulli" and not 0.0 <= self.a <= 1.0:
            raise DefinitionError(
                f"bernoulli: p must be in [0, 1], got {self.a:g}. Fix: pass a probability."
            )
        if self.dist == "normal" and self.b < 0.0:
            raise DefinitionError(
                f"normal: std must be >= 0, got {self.b:g}. Fix: pass a non-negative std."
            )
        if self.dist == "uniform" and not self.a <= self.b:
            raise DefinitionError(
                f"uniform: low {self.a:g} is above high {self.b:g}. Fix: pass low <= high."
            )

    def signature(self) -> Signature:
        return (), (self.axes_,)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.dist == "bernoulli":
            return f"bernoulli {self.a:g}"
        return f"{self.dist} {self.a:g} {self.b:g}"

    def draw(self, pos: np.ndarray) -> np.ndarray:
        """The values at these positions (any integer array), in float64."""
        k1, k2 = stream_keys(self.seed)
        bits = R.bits(pos, k1)
        if self.dist == "bernoulli":
            return (bits < np.uint32(R.threshold(self.a))).astype(np.float64)
        u = uniform_of_bits(bits)
        if self.dist == "uniform":
            return self.a + (self.b - self.a) * u
        v = uniform_of_bits(R.bits(pos, k2))
        radius: np.ndarray = np.sqrt(-2.0 * np.log(u))
        return self.a + self.b * radius * np.cos(2.0 * math.pi * v)


@reference_rule(Random)
def _random(op: Random, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context) -> list[Any]:
    sizes = {a: ctx.size(a) for a in op.axes_}
    return [op.draw(R.positions(op.axes_, sizes)).astype(op.format.numpy)]


# a source: any index of any axis is computed alone
ROLE_RULES[Random] = lambda op, axis: "map"
