"""The hooks a plugin may implement. Each returns a list of registrations (or ``None``).

A plugin is a module named by an entry point in the group ``ncd``; it implements any of these
functions decorated with ``ncd.plugins.hookimpl``. Keep that module light: import heavy
libraries (torch, pyopencl...) inside the objects it returns, not at module import.

Names are shared: when two plugins register the same name, ``ncd.plugins.precedence`` decides
(built-ins win; replacing one takes ``override=True`` on the registration and the user's
``NCD_PLUGIN_PREFER=name=distribution``). A hook that raises or returns something invalid
fails its whole plugin, which is then skipped with a warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ncd.plugins.interfaces import (
        Backend,
        Command,
        CostModel,
        DemoStep,
        Exporter,
        Lowering,
        OpDefinition,
        Renderer,
    )

hookspec = pluggy.HookspecMarker("ncd")
hookimpl = pluggy.HookimplMarker("ncd")


@hookspec
def ncd_register_backends() -> list[Backend] | None:
    """Executable targets for ``ncd.compile(model, target)``.

    :return: ``Backend`` instances, each with its ``name``; ``None`` registers nothing.
    """


@hookspec
def ncd_register_exporters() -> list[Exporter] | None:
    """Targets for ``ncd.export(model, target)`` (a module, source text, a file format...).

    :return: ``Exporter`` instances; ``None`` registers nothing.
    """


@hookspec
def ncd_register_renderers() -> list[Renderer] | None:
    """Drawing targets (``svg``, ``dot``, ``png``...) used by ``ncd draw`` and notebooks.

    :return: ``Renderer`` instances; ``None`` registers nothing.
    """


@hookspec
def ncd_register_cost_models() -> list[CostModel] | None:
    """Performance models that price a model or kernel on a machine.

    :return: ``CostModel`` instances; ``None`` registers nothing.
    """


@hookspec
def ncd_register_ops() -> list[OpDefinition] | None:
    """New primitive op kinds with their reference semantics.

    :return: ``OpDefinition`` (an ``Op`` subclass and its NumPy rule); ``None`` registers nothing.
    """


@hookspec
def ncd_register_lowerings() -> list[Lowering] | None:
    """Rules teaching a backend (possibly another plugin's) how to run an op kind.

    :return: ``Lowering`` entries (target name, op kind, rule); ``None`` registers nothing.
    """


@hookspec
def ncd_register_commands() -> list[Command] | None:
    """Subcommands of the ``ncd`` command line (``ncd draw``, ``ncd perf``...), or, with
    ``target=``, a backend's handler of ``ncd compile --target NAME``.

    :return: ``Command`` entries; ``None`` registers nothing.
    """


@hookspec
def ncd_demo_steps() -> list[DemoStep] | None:
    """Sections ``ncd demo`` runs after building and running the model on the reference.

    :return: ``DemoStep`` entries, run in ``order``; ``None`` registers nothing.
    """


def _unused(*_: Any) -> None:  # keeps the TYPE_CHECKING names referenced for linters
    return None
