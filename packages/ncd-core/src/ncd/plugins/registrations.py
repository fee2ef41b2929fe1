"""What each hook registers (the table a registration lands in, its class, its name) and the
checks that turn a hook's return value into claims; anything invalid fails the whole plugin."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from ncd.errors import PluginError
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
from ncd.plugins.precedence import Claim, Owner

__all__ = ["HOOKS", "TARGETED_COMMANDS", "Hook", "claims_from"]

COMMAND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: Core subcommands that hand over to a per-backend ``Command`` (``target=...``) by ``--target``.
TARGETED_COMMANDS = ("compile",)


@attrs.frozen
class Hook:
    """What one hook registers: the table ``kind``, the class of its items, an item's name."""

    kind: str
    cls: type
    key: Callable[[Any], str]
    override: Callable[[Any], bool] = lambda item: bool(item.override)


def _name(item: Any) -> str:
    return str(item.name)


HOOKS: dict[str, Hook] = {
    "ncd_register_backends": Hook("backend", Backend, _name),
    "ncd_register_exporters": Hook("exporter", Exporter, _name),
    "ncd_register_renderers": Hook("renderer", Renderer, _name),
    "ncd_register_cost_models": Hook("cost model", CostModel, _name),
    "ncd_register_commands": Hook(
        "command", Command, lambda c: _name(c) if c.target is None else f"{c.name}/{c.target}"
    ),
    "ncd_register_ops": Hook("op", OpDefinition, lambda d: str(d.op.kind)),
    "ncd_register_lowerings": Hook("lowering", Lowering, lambda lw: f"{lw.target}/{lw.kind}"),
    "ncd_demo_steps": Hook("demo step", DemoStep, _name, lambda _: False),  # never collide
}


def claims_from(hook: Hook, hook_name: str, result: Any, owner: Owner) -> list[Claim]:
    if result is None:
        return []
    if not isinstance(result, list | tuple):
        raise PluginError(f"{hook_name} must return a list, got {type(result).__name__}")
    out = []
    for item in result:
        if not isinstance(item, hook.cls):
            raise PluginError(f"{hook_name} returned {item!r}, not a {hook.cls.__name__}")
        name = hook.key(item)
        if not name or (hook.kind == "command" and not command_name_ok(item)):
            raise PluginError(
                f"{hook_name} returned a {hook.kind} with the invalid name "
                f"{name!r} (names read like 'draw' or 'my-tool'; a command with "
                f"a target must be one of: {', '.join(TARGETED_COMMANDS)})"
            )
        out.append(Claim(hook.kind, name, item, owner, hook.override(item)))
    return out


def command_name_ok(cmd: Any) -> bool:
    if cmd.target is not None:
        return cmd.name in TARGETED_COMMANDS and bool(COMMAND_NAME.fullmatch(cmd.target))
    return bool(COMMAND_NAME.fullmatch(cmd.name))
