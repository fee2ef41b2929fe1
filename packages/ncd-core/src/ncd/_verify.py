"""The graph verifier: every whole-graph invariant, checked in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ncd.errors import GraphError

if TYPE_CHECKING:
    from ncd.graph import Graph


def verify(graph: Graph) -> None:
    problems: list[str] = []
    n_values = len(graph.values)
    defined: set[int] = set()
    uids = [a.uid for a in graph.axes]
    if len(set(uids)) != len(uids):
        problems.append("the axis table repeats a uid")
    known = set(uids)
    for v in graph.inputs:
        if not 0 <= v < n_values:
            problems.append(f"input value {v} does not exist")
        elif v in defined:
            problems.append(f"value {v} is an input twice")
        defined.add(v)
    for i, node in enumerate(graph.nodes):
        where = f"node {i} ({node.op.label})"
        for v in node.inputs:
            if v not in defined:
                problems.append(f"{where} reads value {v} before it is defined (not topological)")
        if not 0 <= node.scope < len(graph.scopes):
            problems.append(f"{where} is in unknown scope {node.scope}")
        core_in, core_out = node.op.signature()
        if len(core_in) != len(node.inputs) or len(core_out) != len(node.outputs):
            problems.append(f"{where} has the wrong number of inputs or outputs for its op")
            continue
        for k, (v, core) in enumerate(zip(node.inputs, core_in, strict=True)):
            if 0 <= v < n_values:
                have = set(graph.values[v].axes)
                missing = [a.ref for a in core if a not in have]
                if missing:
                    problems.append(f"{where} input {k} lacks its core axes {missing}")
        loop_from_inputs = {
            a for v in node.inputs if 0 <= v < n_values for a in graph.values[v].axes
        }
        for a in node.loop:
            if a not in loop_from_inputs:
                problems.append(f"{where} loops over {a.ref}, which no input carries")
        for k, (v, core) in enumerate(zip(node.outputs, core_out, strict=True)):
            if v in defined:
                problems.append(f"{where} redefines value {v} (not SSA)")
            defined.add(v)
            if 0 <= v < n_values and graph.values[v].axes != (*node.loop, *core):
                problems.append(f"{where} output {k} type is not loop + core axes")
        for a in node.op.axes():
            if a.uid not in known:
                problems.append(f"{where} mentions {a.ref}, missing from the axis table")
    for v in graph.outputs:
        if v not in defined:
            problems.append(f"output value {v} is never defined")
    for v in range(n_values):
        if v not in defined:
            problems.append(f"value {v} has no producer and is not an input")
        else:
            for a in graph.values[v].axes:
                if a.uid not in known:
                    problems.append(f"value {v} mentions {a.ref}, missing from the axis table")
    for s, scope in enumerate(graph.scopes):
        if s == 0 and scope.parent is not None:
            problems.append("the root scope has a parent")
        if s > 0 and (scope.parent is None or not 0 <= scope.parent < s):
            problems.append(f"scope {s} ({scope.name}) has an invalid parent {scope.parent}")
    names = [name for n in graph.nodes for name, _ in n.params()]
    if len(set(names)) != len(names):
        problems.append("two parameters share a name")
    if problems:
        raise GraphError("graph verification failed:\n" + "\n".join(f"  - {p}" for p in problems))
