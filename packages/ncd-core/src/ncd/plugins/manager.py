"""The plugin registry: takes the claims of every plugin ``ncd.plugins.loader`` loaded and
settles them into one table per kind by the rule of ``ncd.plugins.precedence`` (built-ins win;
overrides are explicit; nothing wins silently), then looks names up with errors that say how to
get what is missing. ``NCD_DISABLE_PLUGINS=name,other`` skips plugins by entry-point name;
``NCD_PLUGIN_PREFER=name=distribution,...`` settles collisions. Ctrl-C while loading leaves no
half-built registry.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import pluggy

from ncd.errors import PluginError, TargetNotFoundError
from ncd.plugins import hookspecs
from ncd.plugins.attribution import call
from ncd.plugins.interfaces import (
    Backend,
    Command,
    CostModel,
    DemoStep,
    Exporter,
    Lowering,
    Renderer,
)
from ncd.plugins.loader import DISABLE_ENV, PluginInfo, dist_version, load_plugins
from ncd.plugins.precedence import (
    PREFER_ENV,
    Claim,
    Collision,
    Owner,
    normalise,
    parse_prefer,
    resolve,
    warn,
)

__all__ = ["KNOWN_PROVIDERS", "Registry", "registry", "reset"]

T = TypeVar("T")

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


class Registry:
    """Everything plugins registered, by kind and name, and every collision on the way."""

    def __init__(
        self, *, prefer: Mapping[str, str] | None = None, disabled: Iterable[str] | None = None
    ) -> None:
        self.pm = pluggy.PluginManager("ncd")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.backends: dict[str, Backend] = {}
        self.exporters: dict[str, Exporter] = {}
        self.renderers: dict[str, Renderer] = {}
        self.formats: dict[str, Renderer] = {}
        self.cost_models: dict[str, CostModel] = {}
        self.commands: dict[str, Command] = {}
        self.lowerings: dict[tuple[str, str], Lowering] = {}
        self.collisions: list[Collision] = []
        if prefer is None:
            prefer, bad = parse_prefer(os.environ.get(PREFER_ENV, ""))
            for entry in bad:
                warn(f"{PREFER_ENV}: ignored {entry!r}; entries read name=distribution")
        self.prefer = {name: normalise(dist) for name, dist in prefer.items()}
        if disabled is None:
            disabled = os.environ.get(DISABLE_ENV, "").split(",")
        self.disabled = frozenset(s.strip() for s in disabled if s.strip())
        self._owners: dict[tuple[str, str], Owner] = {}
        self._refused: dict[tuple[str, str], Collision] = {}
        self._steps: list[tuple[DemoStep, Owner]] = []

    @property
    def overrides(self) -> list[Collision]:
        """Collisions where a third party replaced a built-in (both keys turned)."""
        return [c for c in self.collisions if c.overridden]

    def owner(self, kind: str, name: str) -> Owner | None:
        """Who registered the ``kind`` (``backend``, ``command``...) named ``name``."""
        return self._owners.get((kind, name))

    def refused(self, kind: str) -> dict[str, Collision]:
        """Names of ``kind`` that no one got (two third parties, and the user chose neither)."""
        return {n: c for (k, n), c in self._refused.items() if k == kind}

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        """The named registrations by kind (``backend``, ``exporter``, ``renderer``,
        ``cost model``, ``command``); formats, lowerings and demo steps are kept apart."""
        return {
            "backend": self.backends,
            "exporter": self.exporters,
            "renderer": self.renderers,
            "cost model": self.cost_models,
            "command": self.commands,
        }

    @property
    def demo_steps(self) -> list[DemoStep]:
        """Every plugin's demo steps, in ``order``."""
        return [s for s, _ in self._steps]

    def demo_steps_with_owners(self) -> list[tuple[DemoStep, Owner]]:
        return list(self._steps)

    def load(self) -> None:
        """Load every plugin and settle their claims (``registry()`` does, once)."""
        plugins, claims = load_plugins(self.pm, self.disabled)
        self.plugins.extend(plugins)
        self._settle_all(claims)

    # -- settling names --------------------------------------------------------------------------
    def _settle_all(self, claims: list[Claim]) -> None:
        groups: dict[tuple[str, str], list[Claim]] = {}
        for c in claims:
            if c.kind == "demo step":
                self._steps.append((c.item, c.owner))
            else:
                groups.setdefault((c.kind, c.name), []).append(c)
        self._steps.sort(key=lambda s: s[0].order)
        tables = self.tables
        for (kind, _), group in groups.items():
            if kind in tables:
                win = self._settle(group)
                if win is not None:
                    tables[kind][win.name] = win.item
        # ops first: a lowering asks whether its op kind is the core's
        for kind, settle in (("op", self._settle_op), ("lowering", self._settle_lowering)):
            for (k, _), group in groups.items():
                if k == kind:
                    settle(group)
        self._settle_formats()

    def _settle(self, claims: list[Claim]) -> Claim | None:
        win, collision = resolve(claims, self.prefer)
        key = (claims[0].kind, claims[0].name)
        if collision is not None:
            self.collisions.append(collision)
            warn(f"ncd: {collision.describe()}")
            if win is None:
                self._refused[key] = collision
        if win is not None:
            self._owners[key] = win.owner
        return win

    def _settle_lowering(self, claims: list[Claim]) -> None:
        """The owner of a target keeps its codegen: its own lowerings count as built-in, and a
        lowering of a core op kind from anyone else competes with the target's own rule."""
        from ncd.op import OP_KINDS

        target, _, kind = claims[0].name.partition("/")
        owner = self.owner("backend", target) or self.owner("exporter", target)
        mine = owner is not None and any(c.owner == owner for c in claims)
        claims = [attrs.evolve(c, protected=True) if c.owner == owner else c for c in claims]
        cls = OP_KINDS.get(kind)
        if owner is not None and not mine and cls is not None and _is_core(cls):
            claims.append(Claim("lowering", claims[0].name, None, owner, protected=True))
        win = self._settle(claims)
        if win is None:
            refused = self._refused[("lowering", claims[0].name)]
            self.lowerings[(target, kind)] = Lowering(target, kind, _refusing(refused))
        elif win.item is not None:
            self.lowerings[(target, kind)] = win.item

    def _settle_op(self, claims: list[Claim]) -> None:
        """An op kind, once defined, is never replaced: JSON loading and every rule table key
        on it. A claim on a kind held by another class loses whatever the settings."""
        from ncd.op import OP_KINDS, register_op
        from ncd.reference import REFERENCE_RULES

        name = claims[0].name
        existing = OP_KINDS.get(name)
        if existing is not None and all(c.item.op is not existing for c in claims):
            holder = _module_owner(existing.__module__)
            collision = Collision(
                "op",
                name,
                (holder, *(c.owner for c in claims)),
                holder,
                f"op kind already defined by {existing.__module__}."
                f"{existing.__qualname__}; op kinds are never replaced, "
                "rename the new kind",
                (holder,),
            )
            self.collisions.append(collision)
            warn(f"ncd: {collision.describe()}")
            return
        win = self._settle([attrs.evolve(c, protected=c.item.op is existing) for c in claims])
        if win is None:
            return
        try:
            register_op(win.item.op)
        except (Exception, SystemExit) as e:  # e.g. an op class without a kind
            warn(
                f"ncd: op {name!r} of {win.owner.describe()} was not registered: "
                f"{type(e).__name__}: {e}"
            )
            return
        REFERENCE_RULES[win.item.op] = win.item.reference

    def _settle_formats(self) -> None:
        groups: dict[str, list[Claim]] = {}
        for name, r in self.renderers.items():
            owner = self._owners[("renderer", name)]
            for fmt in r.formats:
                groups.setdefault(fmt, []).append(Claim("format", fmt, r, owner, r.override))
        for claims in groups.values():
            win = self._settle(claims)
            if win is not None:
                self.formats[win.name] = win.item

    # -- lookup ------------------------------------------------------------------------------------
    def _lookup(self, kind: str, name: str, table: Mapping[str, T]) -> T:
        if name in table:
            return table[name]
        refused = self._refused.get((kind, name))
        if refused is not None:
            raise PluginError(refused.refusal())
        raise self._missing("renderer for format" if kind == "format" else kind, name, table)

    def _missing(self, what: str, name: str, table: Mapping[str, Any]) -> TargetNotFoundError:
        have = ", ".join(sorted(table)) or "none"
        fix = f" Fix: use one of the installed {what}s, or install a plugin that provides it."
        pkg = KNOWN_PROVIDERS.get(name)
        info = next((p for p in self.plugins if pkg and normalise(p.distribution) == pkg), None)
        if pkg is not None and info is None:
            fix = f" '{name}' is provided by the {pkg} package. Fix: pip install packages/{pkg}."
        elif info is not None and info.status == "disabled":
            fix = (
                f" {pkg} is installed but its plugin {info.name!r} is disabled. Fix: remove "
                f"{info.name!r} from {DISABLE_ENV}."
            )
        elif info is not None and info.status.startswith("failed"):
            fix = (
                f" {pkg} is installed but its plugin {info.name!r} {info.status}. Fix: "
                f"repair the {pkg} installation (see the warning printed when it loaded)."
            )
        elif info is not None:
            fix = (
                f" {pkg} {info.version} is installed and loaded, but registers no {what} "
                f"named {name!r}. Fix: use one of the installed {what}s."
            )
        return TargetNotFoundError(
            f"no {what} named {name!r} is installed (installed: {have}).{fix}"
        )

    def backend(self, name: str) -> Backend:
        return self._lookup("backend", name, self.backends)

    def exporter(self, name: str) -> Exporter:
        return self._lookup("exporter", name, self.exporters)

    def renderer_for(self, fmt: str) -> Renderer | None:
        """The renderer that draws ``fmt``, None if none does (refused formats raise)."""
        if fmt not in self.formats and ("format", fmt) not in self._refused:
            return None
        return self.renderer(fmt)

    def renderer(self, fmt: str) -> Renderer:
        return self._lookup("format", fmt, self.formats)

    def render(self, model: Any, fmt: str, **options: Any) -> str | bytes:
        """Draw ``model`` as ``fmt`` with the renderer for it, its errors attributed."""
        r = self.renderer(fmt)
        owner = self._owners.get(("format", fmt))
        return call(owner, f"renderer {r.name!r}", r.render, model, fmt, **options)

    def cost_model(self, name: str) -> CostModel:
        return self._lookup("cost model", name, self.cost_models)

    def lowerings_for(self, target: str) -> dict[str, Lowering]:
        """Op kind -> lowering registered for ``target`` by any plugin."""
        return {k: lw for (t, k), lw in self.lowerings.items() if t == target}


def _refusing(collision: Collision) -> Callable[..., Any]:
    def rule(*_: Any, **__: Any) -> Any:
        raise PluginError(collision.refusal())

    return rule


def _is_core(cls: type) -> bool:
    return cls.__module__ == "ncd" or cls.__module__.startswith("ncd.")


def _module_owner(module: str) -> Owner:
    top = module.split(".")[0]
    dist = "ncd-core" if top == "ncd" else top.replace("_", "-")
    if dist_version(dist) == "?":
        dists = md.packages_distributions().get(top, [])
        dist = dists[0] if dists else f"module {top}"
    return Owner(module, dist, dist_version(dist))


_REGISTRY: Registry | None = None
_SETTINGS: dict[str, Any] = {}
_LOCK = threading.RLock()


def registry() -> Registry:
    """The process-wide registry, loaded on first use (once, whichever thread asks first)."""
    global _REGISTRY
    with _LOCK:
        if _REGISTRY is None:
            reg = Registry(**_SETTINGS)
            _REGISTRY = reg  # plugins that look it up while loading see this one
            try:
                reg.load()
            except BaseException:  # Ctrl-C included: the next call starts from scratch
                _REGISTRY = None
                raise
        return _REGISTRY


def reset(
    *, prefer: Mapping[str, str] | None = None, disabled: Iterable[str] | None = None
) -> None:
    """Forget the registry (tests; after changing the environment). ``prefer`` and
    ``disabled`` replace ``NCD_PLUGIN_PREFER`` and ``NCD_DISABLE_PLUGINS`` for the next load."""
    global _REGISTRY
    with _LOCK:
        _REGISTRY = None
        _SETTINGS.clear()
        if prefer is not None:
            _SETTINGS["prefer"] = dict(prefer)
        if disabled is not None:
            _SETTINGS["disabled"] = tuple(disabled)
