"""The plugin host: hook specifications, the interfaces plugins implement, the loader, the
registry and the precedence rule that settles name collisions between plugins."""

from ncd.plugins.hookspecs import hookimpl, hookspec
from ncd.plugins.interfaces import (
    Backend,
    Command,
    CostModel,
    DemoStep,
    Executable,
    Exporter,
    Lowering,
    OpDefinition,
    Renderer,
)
from ncd.plugins.loader import PluginInfo
from ncd.plugins.manager import KNOWN_PROVIDERS, Registry, registry, reset
from ncd.plugins.precedence import FIRST_PARTY, PREFER_ENV, Collision, Owner, PluginWarning

__all__ = [
    "FIRST_PARTY",
    "KNOWN_PROVIDERS",
    "PREFER_ENV",
    "Backend",
    "Collision",
    "Command",
    "CostModel",
    "DemoStep",
    "Executable",
    "Exporter",
    "Lowering",
    "OpDefinition",
    "Owner",
    "PluginInfo",
    "PluginWarning",
    "Registry",
    "Renderer",
    "hookimpl",
    "hookspec",
    "registry",
    "reset",
]
