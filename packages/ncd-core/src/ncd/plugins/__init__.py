"""The plugin host: hook specifications, the interfaces plugins implement, and the registry."""

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
from ncd.plugins.manager import KNOWN_PROVIDERS, PluginInfo, Registry, registry, reset

__all__ = ["KNOWN_PROVIDERS", "Backend", "Command", "CostModel", "DemoStep", "Executable",
           "Exporter", "Lowering", "OpDefinition", "PluginInfo", "Registry", "Renderer", "hookimpl",
           "hookspec", "registry", "reset"]
