"""Loading plugins: ncd-core's own plugin, then every entry point of the group ``ncd``, each
registered with pluggy and its hooks called once into claims (``registrations.py`` checks what
they return). A plugin loads all or nothing: any failure, even ``sys.exit()``, unregisters it
and becomes a warning naming it; Ctrl-C propagates."""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from ncd.errors import PluginError
from ncd.plugins.precedence import Claim, Owner, warn
from ncd.plugins.registrations import HOOKS, claims_from

__all__ = ["DISABLE_ENV", "ENTRY_POINT_GROUP", "PluginInfo", "dist_version", "load_plugins"]

ENTRY_POINT_GROUP = "ncd"
DISABLE_ENV = "NCD_DISABLE_PLUGINS"


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str
    version: str
    status: str  # loaded | disabled | failed: <reason> | builtin
    hooks: tuple[str, ...] = ()


def load_plugins(
    pm: pluggy.PluginManager, disabled: frozenset[str]
) -> tuple[list[PluginInfo], list[Claim]]:
    """Every plugin's record, in load order, and the claims of those that loaded; entry points
    named in ``disabled`` are recorded but not imported."""
    from ncd.plugins import _builtin

    plugins: list[PluginInfo] = []
    claims: list[Claim] = []

    def load_one(owner: Owner, load: Callable[[], Any], status: str) -> None:
        try:
            got, hooks = _register(pm, load(), owner)
        except (Exception, SystemExit) as e:  # sys.exit() in a plugin must not end ncd
            reason = f"{type(e).__name__}: {e}"
            plugins.append(
                PluginInfo(owner.plugin, owner.distribution, owner.version, f"failed: {reason}")
            )
            warn(
                f"ncd plugin {owner.plugin!r} ({owner.distribution} {owner.version}) "
                f"failed to load: {reason}. Fix: repair or uninstall "
                f"{owner.distribution}, or skip it with {DISABLE_ENV}={owner.plugin}"
            )
            return
        claims.extend(got)
        plugins.append(PluginInfo(owner.plugin, owner.distribution, owner.version, status, hooks))

    load_one(Owner("reference", "ncd-core", dist_version("ncd-core")), lambda: _builtin, "builtin")
    eps = sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, _dist(e)))
    by_name: dict[str, list[str]] = {}
    for ep in eps:
        owner = Owner(ep.name, _dist(ep), ep.dist.version if ep.dist is not None else "?")
        by_name.setdefault(ep.name, []).append(owner.distribution)
        if ep.name in disabled:
            plugins.append(PluginInfo(ep.name, owner.distribution, owner.version, "disabled"))
            continue
        load_one(owner, ep.load, "loaded")
    for name, dists in by_name.items():
        if len(dists) > 1:
            warn(
                f"ncd: entry point {name!r} is declared by {' and '.join(dists)}; "
                f"both are loaded, and {DISABLE_ENV}={name} would skip both"
            )
    return plugins, claims


def _register(
    pm: pluggy.PluginManager, module: Any, owner: Owner
) -> tuple[list[Claim], tuple[str, ...]]:
    """Register ``module`` with pluggy and call its hooks; on any failure (Ctrl-C too) it
    is unregistered again, so pluggy never holds half a plugin."""
    if pm.is_registered(module):
        raise PluginError(f"its module is already registered as plugin {pm.get_name(module)!r}")
    taken = pm.get_plugin(owner.plugin) is not None
    pm.register(module, name=f"{owner.plugin}@{owner.distribution}" if taken else owner.plugin)
    try:
        return _collect(pm, module, owner)
    except BaseException:
        pm.unregister(module)
        raise


def _collect(
    pm: pluggy.PluginManager, module: Any, owner: Owner
) -> tuple[list[Claim], tuple[str, ...]]:
    claims: list[Claim] = []
    hooks: list[str] = []
    for caller in pm.get_hookcallers(module) or ():
        hook = HOOKS.get(caller.name)
        if hook is None:
            raise PluginError(
                f"it implements {caller.name}, which is not an ncd hook (known: {', '.join(HOOKS)})"
            )
        hooks.append(caller.name)
        for impl in caller.get_hookimpls():
            if impl.plugin is module:
                claims.extend(claims_from(hook, caller.name, impl.function(), owner))
    return claims, tuple(sorted(hooks))


def _dist(ep: md.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


def dist_version(dist: str) -> str:
    """The installed version of distribution ``dist``, ``?`` if there is none."""
    try:
        return md.version(dist)
    except (md.PackageNotFoundError, ValueError):
        return "?"
