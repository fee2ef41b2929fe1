"""Dispatch verbs: ``ncd.compile`` and ``ncd.export`` find targets among installed plugins."""

from __future__ import annotations

from typing import Any

from ncd.plugins import registry
from ncd.plugins.interfaces import Executable

__all__ = ["compile", "export"]


def compile(model: Any, target: str = "reference", **options: Any) -> Executable:
    """An executable of ``model`` for ``target`` (``"reference"`` is built in)."""
    return registry().backend(target).compile(model, **options)


def export(model: Any, target: str, **options: Any) -> Any:
    """Translate ``model`` for ``target`` (``"json"`` is built in; ``"torch"`` needs ncd-torch)."""
    return registry().exporter(target).export(model, **options)
