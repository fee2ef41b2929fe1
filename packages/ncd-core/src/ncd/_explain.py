"""``model.explain()``: one line per op, ``name: [core] over (loop ...)``, nested by block; an
op whose float values are not float32 ends with its format (``:bfloat16``, or
``:bfloat16 -> float32`` where a cast changes it). Integer wires are not marked."""

from __future__ import annotations

from ncd.axis import Axis
from ncd.graph import Graph, Node


def _formats(graph: Graph, node: Node) -> str:
    """`` :fmt`` (or `` :a -> b``) for the float formats a node reads and writes, unless all
    are float32."""

    def floats(values: tuple[int, ...]) -> list[str]:
        return sorted({graph.values[v].dtype.name for v in values if graph.values[v].is_float})

    ins = sorted({*floats(node.inputs), *(p.dtype.name for p in node.op.params())})
    outs = floats(node.outputs)
    if set(ins) | set(outs) <= {"float32"}:
        return ""
    if not ins or set(ins) == set(outs):
        return f" :{' '.join(outs)}"
    return f" :{' '.join(ins)} -> {' '.join(outs) or '()'}"


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
            "  " * (len(path) + 1)
            + f"{node.op.label}: [{ins} -> {outs}] over ({loop}){learned}{_formats(graph, node)}"
        )
    return "\n".join(lines)
