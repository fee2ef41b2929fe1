"""Small tensor functions the generated ``forward`` code calls by name.

They keep the generated code one readable line per op and are plain PyTorch, so
``torch.compile`` traces through them. Every function works on the trailing (core) dimensions
and broadcasts over the leading (lifted) ones, the layout ``ncd.reference`` uses.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "Fill",
    "batch_norm",
    "causal_mask",
    "concat",
    "l2norm",
    "linear_nd",
    "rmsnorm",
    "rotary",
    "sign",
    "where",
    "window",
]


def linear_nd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, n_in: int, n_out: int
) -> torch.Tensor:
    """A linear map over the last ``n_in`` dims to ``n_out`` dims; weight is (*out, *in)."""
    out_shape = weight.shape[:n_out]
    if n_in != 1:
        x = x.flatten(-n_in)
    w = weight.flatten(n_out) if n_in != 1 else weight
    if n_out != 1:
        w = w.flatten(0, n_out - 1)
        bias = None if bias is None else bias.flatten()
    y = F.linear(x, w, bias)
    return y.unflatten(-1, out_shape) if n_out != 1 else y


def causal_mask(x: torch.Tensor, fill: float) -> torch.Tensor:
    """Scores ``[..., q, x]``: keep key ``j <= i + (|x| - |q|)``, set the rest to ``fill``."""
    nq, nx = x.shape[-2], x.shape[-1]
    keep = torch.ones(nq, nx, dtype=torch.bool, device=x.device).tril(nx - nq)
    return x.masked_fill(~keep, fill)


def l2norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(sum x^2 + eps)`` over the last dim (the spherical-attention normaliser)."""
    return x / torch.sqrt(torch.sum(x * x, dim=-1, keepdim=True) + eps)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, n: int, eps: float) -> torch.Tensor:
    """RMS normalisation over the last ``n`` dims with an optional scale."""
    dims = tuple(range(-n, 0))
    y = x / torch.sqrt(torch.mean(x * x, dim=dims, keepdim=True) + eps)
    return y if weight is None else y * weight


def _comparison(name: str, holds: Any) -> Any:
    """A comparison as a bool tensor (ncd's comparisons give bool wires), either operand a
    number, a named module-level function the generated code calls."""

    def compare(a: Any, b: Any) -> torch.Tensor:
        if not isinstance(a, torch.Tensor):
            a = torch.as_tensor(a, dtype=b.dtype, device=b.device)
        return holds(a, b)  # type: ignore[no-any-return]

    compare.__name__ = compare.__qualname__ = name
    return compare


lt = _comparison("lt", torch.lt)
le = _comparison("le", torch.le)
gt = _comparison("gt", torch.gt)
ge = _comparison("ge", torch.ge)
eq = _comparison("eq", torch.eq)
ne = _comparison("ne", torch.ne)


def truncate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Floats as the integer ``dtype``: toward zero, saturating at its range, NaN as 0 (ncd's
    cast; torch's own ``.to`` leaves NaN and overflow undefined)."""
    if not x.is_floating_point():
        return x.to(dtype)
    info = torch.iinfo(dtype)
    wide = x.to(torch.float64)
    top = float(info.max) + 1.0  # 2^(bits-1), exact in float64
    inside = torch.where(torch.isnan(wide) | (wide >= top) | (wide < -top), 0.0, wide)
    y = inside.trunc().to(dtype)
    y = torch.where(wide >= top, torch.full_like(y, info.max), y)
    return torch.where(wide < -top, torch.full_like(y, info.min), y)


def where(cond: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x`` where ``cond`` is true (nonzero; NaN counts as true), else ``y``."""
    return torch.where(cond if cond.dtype == torch.bool else cond != 0, x, y)


def _integer_division(fn: Any, a: Any, b: Any) -> torch.Tensor:
    """``fn(a, b)`` (``floor_divide``, ``remainder``; either may be a Python number) with ncd's
    integer division by 0: 0, as NumPy's, where torch raises; floats as torch's (``x // 0`` is
    ``x / 0``, ``x % 0`` NaN)."""
    like = a if isinstance(a, torch.Tensor) else b
    a, b = (torch.as_tensor(v, device=like.device) for v in (a, b))
    if a.is_floating_point() or b.is_floating_point():
        return fn(a, b)  # type: ignore[no-any-return]
    zero = b == 0
    return torch.where(zero, 0, fn(a, torch.where(zero, 1, b)))


def floordiv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a // b`` (floor division); an integer divided by 0 gives 0."""
    return _integer_division(torch.floor_divide, a, b)


def remainder(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a % b`` with the divisor's sign; an integer ``% 0`` gives 0."""
    return _integer_division(torch.remainder, a, b)


def sign(x: torch.Tensor) -> torch.Tensor:
    """``torch.sign`` that keeps a NaN a NaN (torch's gives 0), as ncd's ``sign``."""
    return torch.where(torch.isnan(x), x, torch.sign(x))


def concat(*xs: torch.Tensor) -> torch.Tensor:
    """The inputs joined along the last dim, their leading dims broadcast first."""
    lead = torch.broadcast_shapes(*(x.shape[:-1] for x in xs))
    return torch.cat([x.expand(*lead, x.shape[-1]) for x in xs], dim=-1)


def gather(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``table`` read along its last dim at ``ids``, the leading dims of both broadcast first
    (``take_along_dim`` of expanded views: no copy of the table)."""
    lead = torch.broadcast_shapes(table.shape[:-1], ids.shape)
    rows = table.expand(*lead, table.shape[-1])
    return torch.gather(rows, -1, ids.long().expand(lead).unsqueeze(-1)).squeeze(-1)


def rotary(
    x: torch.Tensor,
    base: float,
    inverse: bool = False,
    freqs: tuple[float, ...] = (),
    scale: float = 1.0,
) -> torch.Tensor:
    """Rotary position embedding over the last two dims ``[seq, d]`` (rotate-half layout):
    ``s (x cos(t f) + rotate_half(x) sin(t f))``, ``f_j = base ** (-2 (j mod d/2) / d)`` or
    ``freqs[j mod d/2]`` (a scaled RoPE's table), ``s`` the scale; ``inverse``: minus the
    angles."""
    n, d = x.shape[-2], x.shape[-1]
    h = d // 2
    j = torch.arange(d, device=x.device) % h
    if freqs:
        f = torch.tensor(freqs, device=x.device, dtype=torch.float64)[j]
    else:
        f = base ** (-2.0 * j.double() / d)
    t = torch.arange(n, device=x.device, dtype=torch.float64)
    angles = t[:, None] * f[None, :]
    turned = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    sin = -angles.sin() if inverse else angles.sin()
    return x * (scale * angles.cos()).to(x.dtype) + turned * (scale * sin).to(x.dtype)


def batch_norm(
    x: torch.Tensor,
    dim: int,
    mean: torch.Tensor,
    var: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """Eval-mode batch norm with the channels at ``dim``: ``(x - mean) / sqrt(var + eps) *
    weight + bias``, each statistic broadcast along ``dim``."""
    shape = [1] * x.dim()
    shape[dim] = -1

    def at(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(shape)

    y = (x - at(mean)) * torch.rsqrt(at(var) + eps)
    return y if weight is None or bias is None else y * at(weight) + at(bias)


def window(
    x: torch.Tensor,
    k: int,
    stride: int,
    padding: int,
    dilation: int,
    fill: float,
    upsample: int = 1,
    extra: int = 0,
    reverse: bool = False,
) -> torch.Tensor:
    """``ncd.ops.window`` on the last dim: ``y[..., o, j] = x[..., o*stride + j*dilation -
    padding]`` (``fill`` off the ends), a strided view of the padded input (``unfold``); the
    input first spread ``upsample`` apart, ``extra`` more padding at the end, ``j`` reversed."""
    if upsample > 1:
        n = x.shape[-1]
        wide = x.new_full((*x.shape[:-1], (n - 1) * upsample + 1), fill)
        wide[..., ::upsample] = x
        x = wide
    if padding or extra:
        x = F.pad(x, (padding, padding + extra), value=fill)
    span = dilation * (k - 1) + 1
    taps = x.unfold(-1, span, stride)
    taps = taps[..., ::dilation] if dilation > 1 else taps
    return taps.flip(-1) if reverse else taps


class Ramp(torch.nn.Module):
    """The index ramp ``start + step * i`` over ``n`` positions, in ``dtype`` on the module's
    device (a 0-d buffer, not saved, carries it)."""

    def __init__(self, start: float, step: float, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.start, self.step = start, step
        self.anchor: torch.Tensor
        self.register_buffer("anchor", torch.zeros((), dtype=dtype), persistent=False)

    def forward(self, n: int) -> torch.Tensor:
        i = torch.arange(n, device=self.anchor.device, dtype=self.anchor.dtype)
        return i * self.step + self.start

    def extra_repr(self) -> str:
        return f"start={self.start:g}, step={self.step:g}"


class Fill(torch.nn.Module):
    """A constant: a 0-d buffer in ``dtype`` (not saved; it moves with ``.to(device)``)
    expanded to the sizes given at call time, which may be read from input shapes."""

    def __init__(self, value: float, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.value: torch.Tensor
        self.register_buffer("value", torch.tensor(value, dtype=dtype), persistent=False)

    def forward(self, *sizes: int) -> torch.Tensor:
        return self.value.expand(sizes) if sizes else self.value

    def extra_repr(self) -> str:
        return f"{float(self.value):g}"
