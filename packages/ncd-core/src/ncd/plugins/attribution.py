"""Errors raised by a plugin's objects name the plugin: an ``NcdError`` (bad user input) keeps
its type and gains a note; anything else becomes a ``PluginError`` naming the plugin and its
distribution, with the original as ``__cause__``. ncd-core's own objects are left alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ncd.errors import NcdError, PluginError
from ncd.plugins.interfaces import Executable
from ncd.plugins.precedence import Owner

__all__ = ["AttributedExecutable", "attribute", "call"]

T = TypeVar("T")


def attribute(error: Exception, owner: Owner | None, what: str) -> Exception:
    """The exception to raise for ``error`` escaping ``what`` (e.g. "backend 'x': compile")."""
    if owner is None or owner.core:
        return error
    if isinstance(error, NcdError):
        note = f"raised by {what} of {owner.describe()}"
        if note not in getattr(error, "__notes__", ()):
            error.add_note(note)
        return error
    wrapped = PluginError(
        f"{what} of {owner.describe()} failed: {type(error).__name__}: {error}. Fix: this is a "
        f"bug in {owner.distribution}; report it to its authors, or skip the plugin with "
        f"NCD_DISABLE_PLUGINS={owner.plugin}."
    )
    wrapped.__cause__ = error
    return wrapped


def call(owner: Owner | None, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with its errors attributed to ``owner``."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        error = attribute(e, owner, what)
        if error is e:
            raise
        raise error from e


class AttributedExecutable(Executable):
    """A plugin's executable whose call errors name the plugin. Every other attribute is the
    wrapped executable's (read and written through), so backend-specific methods still work."""

    __slots__ = ("_inner", "_owner", "_what")

    def __init__(self, inner: Executable, owner: Owner, what: str) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_what", what)

    @property
    def wrapped(self) -> Executable:
        inner: Executable = self._inner
        return inner

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return call(self._owner, self._what, self._inner, *inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # not self._inner: on an instance copy or pickle made without __init__, that would recurse
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle rebuild the wrapper
        return type(self), (self._inner, self._owner, self._what)

    def __dir__(self) -> list[str]:
        return sorted({*dir(type(self)), *dir(self._inner)})

    def __repr__(self) -> str:
        return f"<{self._inner!r} from {self._owner.describe()}>"
