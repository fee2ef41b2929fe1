"""The exception hierarchy: every error ncd raises on bad input is an ``NcdError``.

Messages name axes as ``name#uid`` with sizes, name the ops involved and where they were
built, and end with a fix.
"""

from __future__ import annotations

__all__ = [
    "AlignmentError",
    "CompileError",
    "DTypeError",
    "DefinitionError",
    "GraphError",
    "IndexRangeError",
    "NcdError",
    "ParameterError",
    "PluginError",
    "ScheduleError",
    "SerializationError",
    "SizeError",
    "TargetNotFoundError",
    "TraceError",
    "UnknownDTypeError",
    "source_excerpt",
]


class NcdError(Exception):
    """Base class of every error ncd raises on bad input."""


class AlignmentError(NcdError, TypeError):
    """Composition could not bind an op's template axes to the axes it receives."""


class SizeError(NcdError, ValueError):
    """Axis sizes are missing or contradict each other (all conflicts are reported together)."""


class DefinitionError(NcdError, ValueError, TypeError):
    """An axis, op or model was constructed with invalid arguments (a malformed template, an
    unknown function name, a probability or size out of range, a control character in a name).

    It subclasses both ``ValueError`` and ``TypeError`` so code written against the bare
    exceptions these misuses used to raise keeps catching them."""


class DTypeError(NcdError, TypeError):
    """An array's dtype cannot be taken by the wire it feeds (complex, object or string data,
    floats for integer ids, or a wider float than the backend was built for)."""


class UnknownDTypeError(DTypeError, DefinitionError):
    """A name or type that is no ncd element format (``ncd.dtype("float13")``); also a
    ``DefinitionError``, which an unknown dtype of an ``ArrayType`` raised before."""


class IndexRangeError(NcdError, IndexError, ValueError):
    """An index (a token id) lies outside the axis of the table it indexes (also a
    ``ValueError``, which the reference raised before)."""


class GraphError(NcdError, ValueError):
    """The graph IR violates an invariant (raised by the verifier)."""


class SerializationError(NcdError, ValueError):
    """Interchange JSON is malformed, of an unknown version, or inconsistent."""


class ParameterError(NcdError, KeyError):
    """A parameter is missing, unexpected, or of the wrong shape."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TraceError(NcdError, TypeError):
    """A traced function misused symbolic tensors."""


class PluginError(NcdError, RuntimeError):
    """A plugin failed to load or returned something that is not a valid registration."""


class TargetNotFoundError(NcdError, LookupError):
    """No installed plugin provides the requested backend, exporter or renderer."""


class ScheduleError(NcdError, ValueError):
    """A kernel schedule is impossible (unstreamable axis, tile too large, unknown axis...)."""


class CompileError(NcdError, RuntimeError):
    """A generated program failed to compile; the message shows the source near the failure."""


def source_excerpt(source: str, line: int | None, context: int = 4) -> str:
    """Numbered lines of generated ``source`` around ``line`` (1-based, marked with ``>``), for
    a ``CompileError``; the first 40 lines when the compiler named no line."""
    lines = source.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return "\n".join(f"{i + 1:5d} | {t}" for i, t in enumerate(lines[:40]))
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(
        f"{'>' if i == line else ' '}{i:4d} | {lines[i - 1]}" for i in range(lo, hi + 1)
    )
