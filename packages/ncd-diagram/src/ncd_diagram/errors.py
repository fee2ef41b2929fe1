"""Errors ncd-diagram raises; all are ``ncd.NcdError`` subclasses."""

from __future__ import annotations

from ncd.errors import NcdError

__all__ = ["DiagramError", "GraphvizNotFoundError"]


class DiagramError(NcdError, ValueError):
    """A drawing option or theme is invalid."""


class GraphvizNotFoundError(NcdError, RuntimeError):
    """Graphviz's ``dot`` executable is missing; ``.dot`` still holds the DOT text."""

    def __init__(self, message: str, dot: str) -> None:
        super().__init__(message)
        self.dot = dot
