"""Which definitions (scopes) of a graph become their own ``torch.nn.Module``.

A definition becomes a submodule at its parameter prefix (``blocks.0.attn``) when that is
possible without changing any parameter name: its nodes are contiguous in graph order, its
path is a fresh dotted name of identifiers, and exactly its own parameters live under that
path. Otherwise its nodes are inlined into the enclosing module (still numerically the same).
"""

from __future__ import annotations

import re

from ncd.graph import Graph

__all__ = ["plan_modules", "scope_chain", "scope_path"]

_COMPONENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_RESERVED = {"forward", "training", "graph", "code", "T_destination", "dump_patches"}


def scope_chain(graph: Graph, scope: int) -> list[int]:
    """Scope ids from ``scope`` up to (not including) the root."""
    return list(reversed(graph.scope_ids(scope)))


def scope_path(graph: Graph, scope: int) -> str:
    """The parameter prefix of a scope: its non-empty labels joined with dots."""
    return graph.scope_prefix(scope)


def _valid(path: str) -> bool:
    parts = path.split(".")
    return all(_COMPONENT.fullmatch(p) and p not in _RESERVED for p in parts)


def _under(name: str, path: str) -> bool:
    return name.startswith(path + ".")


def _prefix(a: str, b: str) -> bool:
    return a == b or _under(b, a)


def plan_modules(graph: Graph) -> dict[int, str]:
    """Scope id -> module path for every scope that becomes a submodule (the root maps to "")."""
    members: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for s in scope_chain(graph, node.scope):
            members.setdefault(s, []).append(i)
    planned: dict[int, str] = {0: ""}
    for s in range(1, len(graph.scopes)):
        idx = members.get(s)
        path = scope_path(graph, s)
        if not idx or not path or not _valid(path) or idx != list(range(idx[0], idx[-1] + 1)):
            continue
        inside = set(idx)
        names = [(i, name) for i, n in enumerate(graph.nodes) for name, _ in n.params()]
        if any(_under(name, path) != (i in inside) for i, name in names):
            continue
        ancestors = set(scope_chain(graph, s))
        clash = any(
            p == path or (p and (_prefix(p, path) or _prefix(path, p)) and t not in ancestors)
            for t, p in planned.items()
        )
        if not clash:
            planned[s] = path
    return planned
