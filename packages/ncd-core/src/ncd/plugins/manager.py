"""The plugin host: loads entry points of the group ``ncd`` through pluggy and collects their
registrations into one registry. A plugin that fails to load is reported in a warning and the
rest keep working; ``NCD_DISABLE_PLUGINS=name,other`` skips plugins by entry-point name."""

from __future__ import annotations

import importlib.metadata as md
import os
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from ncd.errors import PluginError, TargetNotFoundError
from ncd.plugins import hookspecs
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

__all__ = ["KNOWN_PROVIDERS", "PluginInfo", "Registry", "registry", "reset"]

ENTRY_POINT_GROUP = "ncd"
DISABLE_ENV = "NCD_DISABLE_PLUGINS"

#: First-party targets and the distribution that provides them (for "pip install ..." hints).
KNOWN_PROVIDERS = {
    "torch": "ncd-torch",
    "opencl": "ncd-opencl",
    "cuda": "ncd-cuda",
    "svg": "ncd-diagram",
    "dot": "ncd-diagram",
    "png": "ncd-diagram",
    "diagram": "ncd-diagram",
    "diagram-json": "ncd-diagram",
    "perf": "ncd-perf",
}


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str
    version: str
    status: str  # loaded | disabled | failed: <reason> | builtin
    hooks: tuple[str, ...] = ()


class Registry:
    """Everything plugins registered, by kind and name."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("ncd")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.backends: dict[str, Backend] = {}
        self.exporters: dict[str, Exporter] = {}
        self.renderers: dict[str, Renderer] = {}
        self.cost_models: dict[str, CostModel] = {}
        self.commands: dict[str, Command] = {}
        self.demo_steps: list[DemoStep] = []
        self.lowerings: dict[tuple[str, str], Lowering] = {}

    # -- loading ---------------------------------------------------------------------------------
    def load(self) -> None:
        from ncd.plugins import _builtin

        self._register(_builtin, "reference", "ncd-core", _version("ncd-core"), "builtin")
        disabled = {s.strip() for s in os.environ.get(DISABLE_ENV, "").split(",") if s.strip()}
        for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            if ep.name in disabled:
                self.plugins.append(PluginInfo(ep.name, dist, version, "disabled"))
                continue
            try:
                module = ep.load()
                self._register(module, ep.name, dist, version, "loaded")
            except Exception as e:
                self.plugins.append(PluginInfo(ep.name, dist, version, f"failed: {type(e).__name__}: {e}"))
                warnings.warn(f"ncd plugin {ep.name!r} ({dist}) failed to load: {type(e).__name__}: {e}",
                              RuntimeWarning, stacklevel=3)

    def _register(self, module: Any, name: str, dist: str, version: str, status: str) -> None:
        if self.pm.get_plugin(name) is None:
            self.pm.register(module, name=name)
        hooks = tuple(h.name for h in self.pm.get_hookcallers(module) or ())
        collected: dict[str, list[Any]] = {}
        for hook in hooks:
            impls = [i for i in getattr(self.pm.hook, hook).get_hookimpls() if i.plugin is module]
            items: list[Any] = []
            for impl in impls:
                result = impl.function()
                if result is None:
                    continue
                if not isinstance(result, list | tuple):
                    raise PluginError(f"plugin {name!r}: {hook} must return a list, got {type(result).__name__}")
                items.extend(result)
            collected[hook] = items
        self._collect(name, collected)
        self.plugins.append(PluginInfo(name, dist, version, status, hooks))

    def _collect(self, plugin: str, collected: dict[str, list[Any]]) -> None:
        adders: dict[str, tuple[type, Callable[[Any], object]]] = {
            "ncd_register_backends": (Backend, lambda x: self._add(self.backends, x)),
            "ncd_register_exporters": (Exporter, lambda x: self._add(self.exporters, x)),
            "ncd_register_renderers": (Renderer, lambda x: self._add(self.renderers, x)),
            "ncd_register_cost_models": (CostModel, lambda x: self._add(self.cost_models, x)),
            "ncd_register_commands": (Command, lambda x: self._add(self.commands, x)),
            "ncd_demo_steps": (DemoStep, self.demo_steps.append),
            "ncd_register_ops": (OpDefinition, _add_op),
            "ncd_register_lowerings": (Lowering, lambda x: self.lowerings.setdefault((x.target, x.kind), x)),
        }
        for hook, items in collected.items():
            cls, add = adders[hook]
            for item in items:
                if not isinstance(item, cls):
                    raise PluginError(f"plugin {plugin!r}: {hook} returned {item!r}, not a {cls.__name__}")
                add(item)
        self.demo_steps.sort(key=lambda s: s.order)

    @staticmethod
    def _add(table: dict[str, Any], item: Any) -> None:
        table.setdefault(item.name, item)

    # -- lookup ------------------------------------------------------------------------------------
    def _missing(self, what: str, name: str, table: dict[str, Any]) -> TargetNotFoundError:
        have = ", ".join(sorted(table)) or "none"
        hint = ""
        if name in KNOWN_PROVIDERS:
            pkg = KNOWN_PROVIDERS[name]
            hint = f" '{name}' is provided by the {pkg} package: pip install packages/{pkg}."
        return TargetNotFoundError(f"no {what} named {name!r} is installed (installed: {have}).{hint}")

    def backend(self, name: str) -> Backend:
        if name not in self.backends:
            raise self._missing("backend", name, self.backends)
        return self.backends[name]

    def exporter(self, name: str) -> Exporter:
        if name not in self.exporters:
            raise self._missing("exporter", name, self.exporters)
        return self.exporters[name]

    def renderer_for(self, fmt: str) -> Renderer | None:
        for r in self.renderers.values():
            if fmt in r.formats:
                return r
        return None

    def renderer(self, fmt: str) -> Renderer:
        r = self.renderer_for(fmt)
        if r is None:
            raise self._missing("renderer for format", fmt, {f: r for r in self.renderers.values() for f in r.formats})
        return r

    def cost_model(self, name: str) -> CostModel:
        if name not in self.cost_models:
            raise self._missing("cost model", name, self.cost_models)
        return self.cost_models[name]

    def lowerings_for(self, target: str) -> dict[str, Lowering]:
        """Op kind -> lowering registered for ``target`` by any plugin."""
        return {k: lw for (t, k), lw in self.lowerings.items() if t == target}


def _add_op(definition: OpDefinition) -> None:
    from ncd.op import register_op
    from ncd.reference import REFERENCE_RULES

    register_op(definition.op)
    REFERENCE_RULES[definition.op] = definition.reference  # type: ignore[assignment]


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        reg = Registry()
        _REGISTRY = reg
        try:
            reg.load()
        except Exception:
            _REGISTRY = None
            raise
    return _REGISTRY


def reset() -> None:
    """Forget the registry (tests; after changing ``NCD_DISABLE_PLUGINS``)."""
    global _REGISTRY
    _REGISTRY = None
