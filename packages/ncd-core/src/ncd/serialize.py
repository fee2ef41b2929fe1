"""JSON interchange: a versioned, index-based form of the graph.

Axes and array types are interned in tables and referred to by index; uids are kept; scopes
(definitions) are a table of parents. Loading builds ops only from the registry of op kinds
(never imports or evaluates anything), validates every index, then replays the nodes through
the builder so the loaded graph satisfies exactly the invariants of a lowered one.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from ncd.axis import ArrayType, Axis
from ncd.canonical import op_fields
from ncd.errors import DefinitionError, NcdError, SerializationError
from ncd.graph import Graph, Node, Scope
from ncd.op import OP_KINDS, Op

__all__ = ["FORMAT", "VERSION", "from_json", "graph_from_dict", "graph_to_dict", "to_json"]

FORMAT = "ncd-graph"
VERSION = 1
MAX_BYTES = 64 * 1024 * 1024


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """The interchange dictionary of a graph (also its canonical form)."""
    axis_index = {a.uid: i for i, a in enumerate(graph.axes)}
    types: dict[tuple[tuple[int, ...], str], int] = {}
    values = []
    for t in graph.values:
        key = (tuple(axis_index[a.uid] for a in t.axes), t.dtype)
        values.append(types.setdefault(key, len(types)))

    def number(a: Axis) -> int:
        return axis_index[a.uid]

    nodes = []
    for n in graph.nodes:
        fields = op_fields(n.op, number)
        if fields.get("dtype", "") is None:
            del fields["dtype"]  # an op without a format of its own: JSON as before formats
        if fields.get("pinned") is False:
            del fields["pinned"]  # as before pinned formats
        nodes.append(
            {
                "kind": n.op.kind,
                "name": n.op.name,
                "fields": fields,
                "in": list(n.inputs),
                "out": list(n.outputs),
                "loop": [axis_index[a.uid] for a in n.loop],
                "scope": n.scope,
                "path": n.path,
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "axes": [{"name": a.name, "uid": a.uid, "size": a.size} for a in graph.axes],
        "types": [{"axes": list(k[0]), "dtype": k[1]} for k in types],
        "values": values,
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "scopes": [{"name": s.name, "label": s.label, "parent": s.parent} for s in graph.scopes],
        "nodes": nodes,
    }


def to_json(model: Any, *, indent: int | None = None) -> str:
    """Serialise a model (a term or a graph) to interchange JSON."""
    graph: Graph = model if isinstance(model, Graph) else model.graph
    return json.dumps(graph_to_dict(graph), indent=indent)


def from_json(text: str | bytes) -> Any:
    """Load a model from interchange JSON; malformed input raises ``SerializationError``."""
    from ncd._term import GraphTerm

    if isinstance(text, bytes | bytearray):
        if len(text) > MAX_BYTES:
            raise SerializationError(f"input is larger than {MAX_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SerializationError(f"input is not UTF-8: {e}") from None
    if not isinstance(text, str):
        raise SerializationError(f"expected JSON text, got {type(text).__name__}")
    if len(text) > MAX_BYTES:
        raise SerializationError(f"input is larger than {MAX_BYTES} bytes")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise SerializationError(f"not valid JSON: {e}") from None
    return GraphTerm(graph_from_dict(data), site="from_json")


#: Exceptions a malformed document could still provoke past the checks; the loader reports
#: them as ``SerializationError`` too, so a caller needs to catch one type.
_STRAY = (ArithmeticError, LookupError, ValueError, TypeError, RecursionError)


class _Reader:
    def __init__(self, data: Any) -> None:
        self.data = data

    def fail(self, where: str, what: str) -> SerializationError:
        return SerializationError(f"invalid ncd JSON at {where}: {what}")

    def obj(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        missing = [k for k in keys if k not in value]
        if missing:
            raise self.fail(where, f"missing key(s) {missing}")
        return value

    def lst(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def index(self, value: Any, where: str, bound: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
            raise self.fail(where, f"expected an index in [0, {bound}), got {value!r}")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {type(value).__name__}")
        return value


def graph_from_dict(data: Any) -> Graph:
    """Validate and rebuild a graph from its interchange dictionary.

    Every field goes through the validators of the class it builds (``Axis``, ``ArrayType``,
    ``Scope``, the op classes), the ones constructors use; any failure is a
    ``SerializationError`` naming the JSON path."""
    try:
        return _graph_from_dict(data)
    except SerializationError:
        raise
    except NcdError as e:
        raise SerializationError(f"inconsistent ncd JSON: {e}") from None
    except _STRAY as e:
        raise SerializationError(f"invalid ncd JSON ({type(e).__name__}: {e})") from None


def _graph_from_dict(data: Any) -> Graph:
    r = _Reader(data)
    top = r.obj(
        data,
        "$",
        ("format", "version", "axes", "types", "values", "inputs", "outputs", "scopes", "nodes"),
    )
    if top["format"] != FORMAT:
        raise r.fail("$.format", f"expected {FORMAT!r}, got {top['format']!r}")
    if isinstance(top["version"], bool) or top["version"] != VERSION:
        raise r.fail(
            "$.version", f"unsupported version {top['version']!r} (this ncd reads {VERSION})"
        )
    axes: list[Axis] = []
    for i, a in enumerate(r.lst(top["axes"], "$.axes")):
        a = r.obj(a, f"$.axes[{i}]", ("name", "uid", "size"))
        try:
            axes.append(
                Axis(
                    r.string(a["name"], f"$.axes[{i}].name"),
                    uid=r.string(a["uid"], f"$.axes[{i}].uid"),
                    size=a["size"],
                )
            )
        except (TypeError, ValueError) as e:
            raise r.fail(f"$.axes[{i}]", str(e)) from None
    if len({a.uid for a in axes}) != len(axes):
        raise r.fail("$.axes", "two axes share a uid")
    types: list[ArrayType] = []
    for i, t in enumerate(r.lst(top["types"], "$.types")):
        t = r.obj(t, f"$.types[{i}]", ("axes", "dtype"))
        idx = [
            r.index(k, f"$.types[{i}].axes", len(axes))
            for k in r.lst(t["axes"], f"$.types[{i}].axes")
        ]
        try:
            types.append(
                ArrayType(tuple(axes[k] for k in idx), r.string(t["dtype"], f"$.types[{i}].dtype"))
            )
        except (TypeError, ValueError) as e:
            raise r.fail(f"$.types[{i}]", str(e)) from None
    values = [
        types[r.index(t, f"$.values[{i}]", len(types))]
        for i, t in enumerate(r.lst(top["values"], "$.values"))
    ]
    nv = len(values)
    inputs = tuple(r.index(v, "$.inputs", nv) for v in r.lst(top["inputs"], "$.inputs"))
    outputs = tuple(r.index(v, "$.outputs", nv) for v in r.lst(top["outputs"], "$.outputs"))
    scopes: list[Scope] = []
    for i, s in enumerate(r.lst(top["scopes"], "$.scopes")):
        s = r.obj(s, f"$.scopes[{i}]", ("name", "label", "parent"))
        parent = (
            None
            if s["parent"] is None
            else r.index(s["parent"], f"$.scopes[{i}].parent", max(i, 0))
        )
        if (i == 0) != (parent is None):
            raise r.fail(f"$.scopes[{i}].parent", "only the first scope (the root) has no parent")
        try:
            scopes.append(
                Scope(
                    r.string(s["name"], f"$.scopes[{i}].name"),
                    r.string(s["label"], f"$.scopes[{i}].label"),
                    parent,
                )
            )
        except DefinitionError as e:
            raise r.fail(f"$.scopes[{i}]", str(e)) from None
    if not scopes:
        raise r.fail("$.scopes", "the root scope is missing")
    nodes = [
        _node(r, n, f"$.nodes[{i}]", axes, nv, len(scopes))
        for i, n in enumerate(r.lst(top["nodes"], "$.nodes"))
    ]
    try:
        raw = Graph(tuple(axes), tuple(values), tuple(nodes), inputs, outputs, tuple(scopes))
        raw.verify()
        graph = _replay(raw)
    except NcdError as e:
        raise SerializationError(f"inconsistent ncd JSON: {e}") from None
    if [t.axes for t in graph.values] != [t.axes for t in raw.values] or [
        t.dtype for t in graph.values
    ] != [t.dtype for t in raw.values]:
        raise SerializationError(
            "inconsistent ncd JSON: stored value types differ from what the ops produce"
        )
    if [n.path for n in graph.nodes] != [n.path for n in raw.nodes]:
        raise SerializationError(
            "inconsistent ncd JSON: stored parameter paths differ from the scopes"
        )
    return graph


def _node(r: _Reader, n: Any, where: str, axes: list[Axis], nv: int, ns: int) -> Node:
    n = r.obj(n, where, ("kind", "name", "fields", "in", "out", "loop", "scope", "path"))
    kind = r.string(n["kind"], f"{where}.kind")
    cls = OP_KINDS.get(kind)
    if cls is None:
        raise r.fail(
            f"{where}.kind", f"unknown op kind {kind!r}; is the plugin that defines it installed?"
        )
    fields = r.obj(n["fields"], f"{where}.fields", ())
    spec = {f.name: f for f in attrs.fields(cls) if f.name != "name"}
    if "dtype" in spec and "dtype" not in fields:
        fields = {**fields, "dtype": None}  # written by an ncd without formats, or format-less
    if "pinned" in spec and "pinned" not in fields:
        fields = {**fields, "pinned": False}
    if set(fields) != set(spec):
        raise r.fail(f"{where}.fields", f"{kind} takes fields {sorted(spec)}, got {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for key, f in spec.items():
        depth = f.metadata.get("axes")
        val = fields[key]
        at = f"{where}.fields.{key}"
        if depth == 1:
            kwargs[key] = axes[r.index(val, at, len(axes))]
        elif depth == 2:
            kwargs[key] = tuple(axes[r.index(k, at, len(axes))] for k in r.lst(val, at))
        elif depth == 3:
            kwargs[key] = tuple(
                tuple(axes[r.index(k, at, len(axes))] for k in r.lst(g, at)) for g in r.lst(val, at)
            )
        elif isinstance(val, str | int | float) or val is None:
            kwargs[key] = val
        elif isinstance(val, list) and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in val
        ):
            kwargs[key] = tuple(val)  # a table of numbers (a rotary's frequencies)
        else:
            raise r.fail(at, f"expected a scalar or a list of numbers, got {type(val).__name__}")
    try:
        op: Op = cls(**kwargs, name=r.string(n["name"], f"{where}.name"))
    except (TypeError, ValueError) as e:
        raise r.fail(where, f"cannot build {kind}: {e}") from None
    return Node(
        op,
        tuple(r.index(v, f"{where}.in", nv) for v in r.lst(n["in"], f"{where}.in")),
        tuple(r.index(v, f"{where}.out", nv) for v in r.lst(n["out"], f"{where}.out")),
        tuple(
            axes[r.index(a, f"{where}.loop", len(axes))] for a in r.lst(n["loop"], f"{where}.loop")
        ),
        r.index(n["scope"], f"{where}.scope", ns),
        r.string(n["path"], f"{where}.path"),
    )


def _replay(raw: Graph) -> Graph:
    from ncd._lower import Builder
    from ncd._term import replay_nodes

    b = Builder(raw.scopes[0])
    holes = [b.new_slot() for _ in raw.inputs]
    for hole, v in zip(holes, raw.inputs, strict=True):
        b.materialise(hole, raw.values[v])
    outs = replay_nodes(b, raw, holes, "from_json")
    return b.finish(outs, "the loaded model")
