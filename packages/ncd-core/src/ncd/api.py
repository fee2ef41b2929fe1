"""Dispatch verbs: ``ncd.compile`` and ``ncd.export`` find targets among installed plugins.
Errors raised by a plugin's backend, executable or exporter name the plugin (see
``ncd.plugins.attribution``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ncd.plugins import registry
from ncd.plugins.attribution import AttributedExecutable, call
from ncd.plugins.interfaces import Executable

__all__ = ["compile", "export"]


def compile(model: Any, target: str = "reference", **options: Any) -> Executable:
    """An executable of ``model`` for ``target`` (``"reference"`` is built in). ``tune=True``
    (or a dict of ``ncd.tune`` options: ``budget``, ``candidates``, ``reps``, ``cache``...)
    first searches the target's schedules on its device (``ncd.tune``, the tuning cache
    answering for kernels tuned before) and compiles the winning plan; the executable's
    ``tuning`` holds the report."""
    reg = registry()
    backend = reg.backend(target)
    owner = reg.owner("backend", target)
    how = options.pop("tune", None)
    if how is not None and how is not False:
        return _tuned(model, target, how, options)
    exe = call(owner, f"backend {target!r}: compile", backend.compile, model, **options)
    if owner is not None and not owner.core:
        exe = AttributedExecutable(exe, owner, f"backend {target!r}: executable")
    pack = getattr(model, "pack_outputs", None)
    if callable(pack) and target != "reference":  # the reference's ncd.run packs by itself
        return PackedExecutable(exe, pack)
    return exe


def _tuned(model: Any, target: str, how: Any, options: dict[str, Any]) -> Executable:
    from ncd.errors import ScheduleError
    from ncd.tuning import tune

    if how is not True and not isinstance(how, dict):
        raise ScheduleError(
            f"ncd.compile(tune={how!r}): expected True or a dict of ncd.tune options. Fix: "
            "tune=True, or e.g. tune={'budget': 30}."
        )
    if options.get("plan") is not None:
        raise ScheduleError(
            "ncd.compile: both tune= and plan= were given; tuning chooses the plan. Fix: drop "
            "one (a plan from ncd.tune(...).plan compiles as plan=)."
        )
    report = tune(model, target, **({} if how is True else how), **options)
    exe = compile(model, target, **options, plan=report.plan)
    exe.tuning = report  # type: ignore[attr-defined]
    return exe


class PackedExecutable(Executable):
    """An executable of a model whose outputs have a structure (``ncd.grad``'s ``(loss,
    grads)``): the backend's flat outputs, packed by the model's ``pack_outputs``. Every other
    attribute is the wrapped executable's."""

    def __init__(self, inner: Executable, pack: Callable[[Sequence[Any]], Any]) -> None:
        self.wrapped, self._pack = inner, pack

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        outs = self.wrapped(*inputs, **kwargs)
        return self._pack(list(outs) if isinstance(outs, tuple) else [outs])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["wrapped"], name)


def export(model: Any, target: str, **options: Any) -> Any:
    """Translate ``model`` for ``target`` (``"json"`` is built in; ``"torch"`` needs ncd-torch)."""
    reg = registry()
    exporter = reg.exporter(target)
    owner = reg.owner("exporter", target)
    return call(owner, f"exporter {target!r}", exporter.export, model, **options)
