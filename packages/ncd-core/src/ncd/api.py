"""Dispatch verbs: ``ncd.compile`` and ``ncd.export`` find targets among installed plugins.
Errors raised by a plugin's backend, executable or exporter name the plugin (see
``ncd.plugins.attribution``)."""

from __future__ import annotations

from typing import Any

from ncd.plugins import registry
from ncd.plugins.attribution import AttributedExecutable, call
from ncd.plugins.interfaces import Executable

__all__ = ["compile", "export"]


def compile(model: Any, target: str = "reference", **options: Any) -> Executable:
    """An executable of ``model`` for ``target`` (``"reference"`` is built in)."""
    reg = registry()
    backend = reg.backend(target)
    owner = reg.owner("backend", target)
    exe = call(owner, f"backend {target!r}: compile", backend.compile, model, **options)
    if owner is None or owner.core:
        return exe
    return AttributedExecutable(exe, owner, f"backend {target!r}: executable")


def export(model: Any, target: str, **options: Any) -> Any:
    """Translate ``model`` for ``target`` (``"json"`` is built in; ``"torch"`` needs ncd-torch)."""
    reg = registry()
    exporter = reg.exporter(target)
    owner = reg.owner("exporter", target)
    return call(owner, f"exporter {target!r}", exporter.export, model, **options)
