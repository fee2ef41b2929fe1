"""``model.explain()``: one line per op, ``name: [core] over (loop ...)``, nested by block."""

from __future__ import annotations

from ncd.axis import Axis
from ncd.graph import Graph


def explain(graph: Graph) -> str:
    names: dict[str, set[str]] = {}
    for a in graph.axes:
        names.setdefault(a.name, set()).add(a.uid)

    def show(a: Axis) -> str:
        return a.name if len(names[a.name]) == 1 else f"{a.name}#{a.uid}"

    root = graph.scopes[0]
    lines = [root.label or root.name]
    open_path: tuple[int, ...] = ()
    for node in graph.nodes:
        path = graph.scope_ids(node.scope)
        common = 0
        while common < min(len(path), len(open_path)) and path[common] == open_path[common]:
            common += 1
        for depth in range(common, len(path)):
            s = graph.scopes[path[depth]]
            title = s.label if s.label and s.label != s.name else s.name
            kind = f" ({s.name})" if s.label and s.label != s.name else ""
            lines.append("  " * (depth + 1) + f"{title}{kind}")
        open_path = path
        ins = ", ".join(" ".join(show(a) for a in g) or "()" for g in node.core_in)
        outs = ", ".join(" ".join(show(a) for a in g) or "()" for g in node.core_out)
        loop = " ".join(show(a) for a in node.loop)
        learned = " *learned*" if node.op.params() else ""
        lines.append(
            "  " * (len(path) + 1) + f"{node.op.label}: [{ins} -> {outs}] over ({loop}){learned}"
        )
    return "\n".join(lines)
