"""Optimisers: ``SGD`` (momentum, Nesterov), ``Adam`` and ``AdamW``, each step an ncd model.

An optimiser's update is one elementwise ncd model over a flat parameter axis ``n`` (free, so
one model serves every parameter): its inputs are a parameter, its gradient, its state arrays
and a few step-dependent scalars (learning rate, bias corrections), its outputs the new
parameter and state. ``update`` runs it per parameter through ``ncd.compile(model, target)``
(the reference by default; ``target="opencl"`` compiles it into kernels like any model), so
the arithmetic is ncd's, not NumPy's. The bookkeeping around it (the step count, the schedule,
reshaping each parameter to ``[n]``) is Python.

``init(params) -> state`` and ``update(params, grads, state) -> (params, state)`` are pure:
nothing is changed in place. Semantics follow ``torch.optim`` (Adam's bias corrections, AdamW's
decoupled decay ``p *= 1 - lr * weight_decay``, SGD's momentum buffer without dampening).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ncd import ops
from ncd._term import Term
from ncd._trace import Tensor, trace
from ncd.axis import ArrayType, Axis, show
from ncd.errors import DefinitionError, ParameterError

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "clip_by_global_norm", "warmup_cosine"]

Schedule = Callable[[int], float]
LR = float | Schedule


def warmup_cosine(peak: float, warmup: int, total: int, floor: float = 0.0) -> Schedule:
    """A learning rate rising linearly to ``peak`` over ``warmup`` steps, then falling along a
    half cosine to ``floor`` at step ``total`` (and staying there). Steps count from 1."""
    if warmup < 0 or total < 1 or warmup > total:
        raise DefinitionError(
            f"warmup_cosine: need 0 <= warmup <= total and total >= 1, got warmup={warmup}, "
            f"total={total}. Fix: e.g. warmup_cosine(3e-4, warmup=100, total=2000)."
        )

    def lr(step: int) -> float:
        if step <= warmup and warmup > 0:
            return peak * step / warmup
        span = max(total - warmup, 1)
        frac = min(max(step - warmup, 0), span) / span
        return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * frac))

    return lr


def clip_by_global_norm(
    grads: Mapping[str, np.ndarray], max_norm: float
) -> tuple[dict[str, np.ndarray], float]:
    """Gradients scaled so that their joint L2 norm is at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``), and the norm before clipping. NumPy on the host."""
    norm = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))
    factor = min(1.0, max_norm / (norm + 1e-6))
    return {k: (g * factor).astype(g.dtype) for k, g in grads.items()}, norm


def _number(what: str, value: object, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DefinitionError(f"{what} must be a finite number, got {show(value)}.")
    v = float(value)
    if v < low or (high is not None and v >= high):
        bound = f"[{low:g}, {high:g})" if high is not None else f">= {low:g}"
        raise DefinitionError(f"{what} must be in {bound}, got {v:g}. Fix: pass a value in range.")
    return v


class Optimizer:
    """Shared machinery: the per-parameter update model, compiled once per target."""

    #: names of the per-parameter state arrays, in the update model's input order
    slots: tuple[str, ...] = ()

    def __init__(self, lr: LR, target: str = "reference") -> None:
        if not callable(lr):
            _number("lr", lr, 0.0)
        self.lr = lr
        self.target = target
        self._exe: Any = None

    # -- the model -------------------------------------------------------------------------------
    def scalars(self, step: int) -> tuple[float, ...]:
        """The step-dependent scalar inputs of the update model."""
        raise NotImplementedError

    def body(self, p: Tensor, g: Tensor, state: list[Tensor], s: list[Tensor]) -> list[Tensor]:
        """The update of one parameter: ``[new p, *new state]``."""
        raise NotImplementedError

    @property
    def model(self) -> Term:
        """The update as an ncd model: inputs ``p, g, *state`` over ``[n]`` then the scalars;
        outputs the new ``p`` and state."""
        n = Axis("n")
        vec, one = ArrayType((n,)), ArrayType(())
        k = len(self.slots)
        m = len(self.scalars(1))

        @trace(inputs=[vec] * (2 + k) + [one] * m, name=type(self).__name__.lower())
        def step(*xs: Tensor) -> tuple[Tensor, ...]:
            p, g, rest = xs[0], xs[1], list(xs[2:])
            return tuple(self.body(p, g, rest[:k], rest[k:]))

        return step

    def _run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        if self._exe is None:
            from ncd.api import compile

            self._exe = compile(self.model, self.target)
        outs = self._exe(*arrays)
        return list(outs) if isinstance(outs, tuple) else [outs]

    def rate(self, step: int) -> float:
        return float(self.lr(step)) if callable(self.lr) else float(self.lr)

    # -- the API ---------------------------------------------------------------------------------
    def init(self, params: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Fresh state: the step count and zeroed state arrays per parameter."""
        state: dict[str, Any] = {"step": 0}
        for slot in self.slots:
            state[slot] = {k: np.zeros_like(np.asarray(v)) for k, v in params.items()}
        return state

    def update(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        state: Mapping[str, Any],
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """One step: ``(new params, new state)``; the inputs are left unchanged. A parameter
        with no gradient (a buffer such as a batch norm's running statistics, or one left out
        of ``wrt``) is carried as it is, as torch's optimisers skip one whose ``.grad`` is
        ``None``; a gradient for no parameter is an error."""
        stray = [k for k in grads if k not in params]
        if stray or not grads:
            raise ParameterError(
                f"update: gradients for {', '.join(stray[:8]) or 'nothing'}, "
                f"{'which are not parameters' if stray else 'so nothing to update'}. Fix: "
                "pass the grads of ncd.run(ncd.grad(model), ...) with that model's parameters."
            )
        step = int(state["step"]) + 1
        scalars = [np.asarray(s, dtype=np.float64) for s in self.scalars(step)]
        new_params: dict[str, np.ndarray] = {k: v for k, v in params.items() if k not in grads}
        new_state: dict[str, Any] = {"step": step, **{s: {} for s in self.slots}}
        for s in self.slots:
            new_state[s] = {k: state[s][k] for k in new_params if k in state[s]}
        groups: dict[np.dtype[Any], list[str]] = {}
        for name, p in params.items():
            if name not in grads:
                continue
            p = np.asarray(p)
            g = np.asarray(grads[name])
            if g.shape != p.shape:
                raise ParameterError(
                    f"update: gradient of {name} has shape {g.shape}, the parameter {p.shape}."
                )
            groups.setdefault(p.dtype, []).append(name)
        # one run of the update model per parameter format (a group): every parameter of it
        # laid end to end, so a compiled target launches one kernel for all of them
        for dtype, names in groups.items():
            shapes = [np.shape(params[k]) for k in names]
            flat = [_joined([params[k] for k in names], dtype)]
            flat.append(_joined([grads[k] for k in names], dtype))
            flat += [_joined([state[s][k] for k in names], dtype) for s in self.slots]
            outs = self._run(*flat, *(s.astype(dtype) for s in scalars))
            for target, arr in zip(
                [new_params, *(new_state[s] for s in self.slots)], outs, strict=True
            ):
                whole = np.asarray(arr).astype(dtype, copy=False)
                start = 0
                for k, shape in zip(names, shapes, strict=True):
                    size = math.prod(shape)
                    target[k] = whole[start : start + size].reshape(shape)
                    start += size
        return new_params, new_state


def _joined(arrays: list[Any], dtype: np.dtype[Any]) -> np.ndarray:
    """The arrays flattened end to end in ``dtype``: the buffer itself, with no copy, when they
    are consecutive pieces of one (the previous update's outputs), else a new one."""
    arrs = [np.asarray(a) for a in arrays]
    base = arrs[0].base if arrs and arrs[0].base is not None else None
    if (
        base is not None
        and isinstance(base, np.ndarray)
        and base.dtype == dtype
        and base.ndim == 1
        and base.flags.c_contiguous
        and sum(a.size for a in arrs) == base.size
    ):
        start = base.__array_interface__["data"][0]
        offset = 0
        for a in arrs:
            if (
                a.base is not base
                or not a.flags.c_contiguous
                or a.__array_interface__["data"][0] != start + offset * base.itemsize
            ):
                break
            offset += a.size
        else:
            return base
    if not arrs:
        return np.zeros(0, dtype)
    return np.concatenate([a.reshape(-1).astype(dtype, copy=False) for a in arrs])


class SGD(Optimizer):
    """``p -= lr * d`` with ``d = g`` (no momentum), the momentum buffer ``b = mu b + g``, or
    ``g + mu b`` (Nesterov); ``weight_decay`` adds ``wd * p`` to the gradient first."""

    def __init__(
        self,
        lr: LR,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        *,
        target: str = "reference",
    ) -> None:
        super().__init__(lr, target)
        self.momentum = _number("momentum", momentum, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)
        if nesterov and self.momentum == 0.0:
            raise DefinitionError("SGD: Nesterov needs a momentum > 0. Fix: pass momentum=0.9.")
        self.nesterov = bool(nesterov)
        self.slots = ("momentum",) if self.momentum else ()

    def scalars(self, step: int) -> tuple[float, ...]:
        return (self.rate(step),)

    def body(self, p: Tensor, g: Tensor, state: list[Tensor], s: list[Tensor]) -> list[Tensor]:
        (lr,) = s
        if self.weight_decay:
            g = g + p * self.weight_decay
        if not self.momentum:
            return [p - g * lr]
        buf = state[0] * self.momentum + g
        d = g + buf * self.momentum if self.nesterov else buf
        return [p - d * lr, buf]


class Adam(Optimizer):
    """Adam (Kingma and Ba) with PyTorch's bias corrections; ``weight_decay`` is L2 (added to
    the gradient), as ``torch.optim.Adam``'s."""

    slots = ("m", "v")
    decoupled = False

    def __init__(
        self,
        lr: LR = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        target: str = "reference",
    ) -> None:
        super().__init__(lr, target)
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise DefinitionError(f"betas must be a pair, got {show(betas)}.")
        self.b1 = _number("betas[0]", betas[0], 0.0, 1.0)
        self.b2 = _number("betas[1]", betas[1], 0.0, 1.0)
        self.eps = _number("eps", eps, 0.0)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)

    def scalars(self, step: int) -> tuple[float, ...]:
        lr = self.rate(step)
        c1 = 1.0 / (1.0 - self.b1**step)
        c2 = 1.0 / (1.0 - self.b2**step)
        decay = 1.0 - lr * self.weight_decay if self.decoupled else 1.0
        return (lr, c1, c2, decay)

    def body(self, p: Tensor, g: Tensor, state: list[Tensor], s: list[Tensor]) -> list[Tensor]:
        lr, c1, c2, decay = s
        m, v = state
        if self.weight_decay and not self.decoupled:
            g = g + p * self.weight_decay
        m = m * self.b1 + g * (1.0 - self.b1)
        v = v * self.b2 + ops.unary("square")(g) * (1.0 - self.b2)
        denom = ops.unary("sqrt")(v * c2) + self.eps
        return [p * decay - (m * c1) * lr / denom, m, v]


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter): ``p *= 1 - lr * wd`` before the
    Adam step, as ``torch.optim.AdamW`` (default ``weight_decay`` 0.01)."""

    decoupled = True

    def __init__(
        self,
        lr: LR = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        *,
        target: str = "reference",
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay, target=target)
