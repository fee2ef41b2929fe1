"""The sliding-window relation: ``Window`` views an axis of length ``n`` as output positions x
kernel offsets, ``y[..., o, j] = x[..., o*stride + j*dilation - padding]`` (``fill`` outside
``[0, n)``), with its size constraint, reference rule and streaming roles.

Convolution is an einsum over windowed views and pooling a reduction over the offsets
(``ncd.conv``), so neither is an opaque box: every interpretation that reads einsums and
reductions reads them, and a window is only an index map (no im2col array is ever made).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs
import numpy as np

from ncd.axis import MAX_SIZE, Axis, show
from ncd.dtypes import dtype as to_dtype
from ncd.errors import DefinitionError, SizeError
from ncd.op import Op, Signature, axis_field, count_field, flag_field, register_op
from ncd.reference import Context, reference_rule
from ncd.sizes import WindowSize
from ncd.streaming import ROLE_RULES

__all__ = ["Window"]


def _as_fill(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


def _check_fill(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, float) or math.isnan(value):
        raise DefinitionError(
            f"window: fill must be a number or +-inf, got {show(value)}. Fix: pass fill=0.0 "
            "(convolution, average pooling) or fill=-math.inf (max pooling)."
        )


def _check_extra(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_SIZE:
        raise DefinitionError(
            f"window: extra must be an int of at most 2^62 in size, got {show(value)}. Fix: "
            "pass the padding the window's end really has."
        )


@register_op
@attrs.frozen
class Window(Op):
    """``axis`` (``n`` elements) seen as ``out`` positions x ``k`` offsets:
    ``y[..., o, j] = x[..., o*stride + j*dilation - padding]``, ``fill`` where that index is
    outside ``[0, n)``. ``|out| = floor((n + 2 padding - dilation (|k| - 1) - 1) / stride) + 1``
    (torch's convolution and pooling length) is derived from ``n`` and ``|k|``."""

    kind: ClassVar[str] = "window"
    category: ClassVar[str] = "view"
    axis: Axis = axis_field()
    out: Axis = axis_field()
    k: Axis = axis_field()
    stride: int = count_field(1)
    padding: int = count_field(0, low=0)
    dilation: int = count_field(1)
    fill: float = attrs.field(default=0.0, converter=_as_fill, validator=_check_fill)
    #: input elements ``upsample`` apart, ``fill`` between them (a transposed convolution's
    #: stride), ``extra`` more padding at the end (its output padding; negative, down to
    #: ``-padding``: less at the end, as ``F.pad(x, (2, 1))``), and the offsets read in
    #: reverse, ``j -> |k| - 1 - j`` (its kernel flip, so the weight keeps torch's layout)
    upsample: int = count_field(1)
    extra: int = attrs.field(default=0, validator=_check_extra)
    reverse: bool = flag_field(False)

    def __attrs_post_init__(self) -> None:
        if len({self.axis, self.out, self.k}) != 3:
            raise DefinitionError(
                f"window: the input {self.axis.describe()}, the positions {self.out.describe()} "
                f"and the offsets {self.k.describe()} must be three different axes. Fix: name "
                "new axes for the positions and offsets, e.g. ops.window('l', 'l_out', 'k', k=3)."
            )
        if self.extra < -self.padding:
            raise DefinitionError(
                f"window: extra {self.extra} would cut into the input (padding "
                f"{self.padding} at each end). Fix: pass extra >= -padding."
            )
        n, k = self.axis.size, self.k.size
        if isinstance(n, int) and isinstance(k, int):
            c = self.constraint()
            m = c.positions(n, k)
            if m < 1:
                raise SizeError(f"window: {c.misfit(n, k)}.")
            if isinstance(self.out.size, int) and self.out.size != m:
                raise SizeError(
                    f"window: {self.out.describe()} is declared with {self.out.size} positions "
                    f"but {k} offsets over {self.axis.describe()} (stride {self.stride}, padding "
                    f"{self.padding}, dilation {self.dilation}) make {m}. Fix: leave the "
                    f"positions' size unset (it is derived) or declare {m}."
                )

    def accepts(self, k: int, dtype: str) -> bool:
        if to_dtype(dtype).kind == "int":  # positions, ids: padded with a whole number
            return math.isfinite(self.fill) and float(self.fill).is_integer()
        return super().accepts(k, dtype)

    def refusal(self, k: int, dtype: str) -> tuple[str, str]:
        if to_dtype(dtype).kind == "int":
            return (
                f"pads integers with {self.fill:g}, which is no integer",
                "pad integers with a whole number such as 0 (or cast them to a float first)",
            )
        return super().refusal(k, dtype)

    def out_dtypes(self, in_dtypes: tuple[str, ...]) -> tuple[str, ...]:
        if to_dtype(in_dtypes[0]).kind == "int":
            return (in_dtypes[0],)
        return super().out_dtypes(in_dtypes)

    def constraint(self) -> WindowSize:
        return WindowSize(
            self.out,
            self.axis,
            self.k,
            self.stride,
            self.padding,
            self.dilation,
            self.upsample,
            self.extra,
        )

    def signature(self) -> Signature:
        return ((self.axis,),), ((self.out, self.k),)

    def constraints(self) -> tuple[WindowSize, ...]:
        return (self.constraint(),)

    def derived_axes(self) -> tuple[Axis, ...]:
        return (self.out,)

    # what a view reads and writes (the schedulers' view of a view)
    @property
    def in_axes(self) -> tuple[Axis, ...]:
        return (self.axis,)

    @property
    def out_axes(self) -> tuple[Axis, ...]:
        return (self.out, self.k)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        shown = [
            f"{f}={getattr(self, f)}"
            for f, plain in (("stride", 1), ("padding", 0), ("dilation", 1), ("upsample", 1))
            if getattr(self, f) != plain
        ]
        return " ".join(["window", *shown, *(["reversed"] if self.reverse else [])])

    def taps(self, out: int, k: int) -> np.ndarray:
        """``o*stride + j*dilation - padding`` over ``(out, k)`` (``j`` counted from the end when
        ``reverse``): the index each output element reads among the input's elements spread
        ``upsample`` apart (off them, or outside: the fill)."""
        o = np.arange(out)[:, None] * self.stride
        j = np.arange(k)[None, :]
        return o + (k - 1 - j if self.reverse else j) * self.dilation - self.padding


@reference_rule(Window)
def _window(
    op: Window, xs: list[np.ndarray], p: dict[str, np.ndarray], ctx: Context
) -> list[np.ndarray]:
    x = xs[0]
    n, m, k = x.shape[-1], ctx.size(op.out), ctx.size(op.k)
    if op.constraint().positions(n, k) != m:
        raise SizeError(
            f"window: {op.axis.describe()} has {n} elements, not the length "
            f"{op.out.describe()} was derived from. Fix: bind the sizes the input has."
        )
    c = op.constraint()
    wide = np.full((*x.shape[:-1], c.span(n)), op.fill, dtype=x.dtype)
    wide[..., op.padding : op.padding + (n - 1) * op.upsample + 1 : op.upsample] = x
    return [wide[..., op.taps(m, k) + op.padding]]


# Streaming roles: a window reads other indices along its input axis; its positions and offsets
# are new axes its input does not carry, so any index of them (one chunk, one group) is
# computed alone from the input.
ROLE_RULES[Window] = lambda op, axis: "whole" if axis == op.axis else "map"
