"""``ncd.from_json`` refuses what the constructors refuse, always as ``SerializationError``
(issue 10, finding 10): the same validators serve both."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import ops


def _model() -> ncd.Term:
    d, s = ncd.Axis("d", size=7), ncd.Axis("s", size=13)
    body = (
        ops.layernorm(d, eps=1e-5) >> ops.add(1.5) >> ops.scale(d, -0.5) >> ops.dropout(0.25)
    ).named("block")
    return body.over(s) >> ops.exp()


def _doc() -> dict[str, Any]:
    return json.loads(ncd.to_json(_model()))  # type: ignore[no-any-return]


def _load(doc: Any) -> ncd.Term:
    return ncd.from_json(json.dumps(doc))  # type: ignore[no-any-return]


def test_the_base_document_round_trips() -> None:
    m = _model()
    x = np.random.default_rng(0).standard_normal((13, 7)).astype(np.float32)
    p = ncd.init(m)
    np.testing.assert_allclose(ncd.run(_load(_doc()), x, params=p), ncd.run(m, x, params=p))


def _set(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = _doc()
    target: Any = doc
    for key in path[:-1]:
        if isinstance(key, str) and key.startswith("node:"):
            target = next(n for n in target if n["kind"] == key[5:])
        else:
            target = target[key]
    target[path[-1]] = value
    return doc


BAD: list[tuple[str, tuple[Any, ...], Any, str]] = [
    ("400-digit eps", ("nodes", "node:layernorm", "fields", "eps"), 10**400, "eps"),
    ("400-digit const", ("nodes", "node:scalar", "fields", "const"), -(10**400), "const"),
    ("400-digit size", ("axes", 0, "size"), 10**400, "size"),
    ("400-digit version", ("version",), 10**400, "version"),
    ("400-digit index", ("inputs",), [10**400], "index"),
    ("NaN eps", ("nodes", "node:layernorm", "fields", "eps"), float("nan"), "eps"),
    ("inf eps", ("nodes", "node:layernorm", "fields", "eps"), float("inf"), "eps"),
    ("negative eps", ("nodes", "node:layernorm", "fields", "eps"), -1e-5, "eps"),
    ("NaN power", ("nodes", "node:scale", "fields", "power"), float("nan"), "power"),
    ("inf power", ("nodes", "node:scale", "fields", "power"), float("-inf"), "power"),
    ("NaN constant", ("nodes", "node:scalar", "fields", "const"), float("nan"), "const"),
    ("dropout p 1.5", ("nodes", "node:dropout", "fields", "p"), 1.5, "p must"),
    ("version true", ("version",), True, "version"),
    ("bool eps", ("nodes", "node:layernorm", "fields", "eps"), True, "eps"),
    ("string affine", ("nodes", "node:layernorm", "fields", "affine"), "yes", "affine"),
    ("unknown fn", ("nodes", "node:unary", "fields", "fn"), "system", "fn"),
    ("int64 input to layernorm", ("types", 0, "dtype"), "int64", "int64"),
    ("complex dtype", ("types", 0, "dtype"), "complex64", "dtype"),
    ("size 10^100", ("axes", 0, "size"), 10**100, "2\\^62"),
    ("size 0", ("axes", 0, "size"), 0, "size"),
    ("size 2^62+1", ("axes", 1, "size"), 2**62 + 1, "size"),
    ("NUL in an axis name", ("axes", 0, "name"), "d\x00", "U\\+0000"),
    ("newline in a uid", ("axes", 0, "uid"), "ab\ncd", "U\\+000A"),
    ("NUL in a scope name", ("scopes", 1, "name"), "block\x00", "U\\+0000"),
    ("control char in an op name", ("nodes", "node:unary", "name"), "e\x1b[31m", "U\\+001B"),
]


@pytest.mark.parametrize(("what", "path", "value", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_documents_raise_serialization_error(
    what: str, path: tuple[Any, ...], value: Any, match: str
) -> None:
    with pytest.raises(ncd.SerializationError, match=match):
        _load(_set(path, value))


def test_element_count_overflow_is_refused() -> None:
    doc = _doc()
    doc["axes"][0]["size"] = 2**62
    doc["axes"][1]["size"] = 2**62
    with pytest.raises(ncd.SerializationError, match="64-bit"):
        _load(doc)


def test_json_nan_literals_are_refused_where_a_number_is_read() -> None:
    text = ncd.to_json(_model()).replace('"eps": 1e-05', '"eps": NaN')
    with pytest.raises(ncd.SerializationError, match="eps"):
        ncd.from_json(text)


def test_float_input_to_an_embedding_is_refused() -> None:
    m = ops.embedding("vocab -> d", vocab=5, d=3).over(ncd.Axis("s", size=2))
    doc = json.loads(ncd.to_json(m))
    doc["types"][0]["dtype"] = "float32"  # the ids' type
    with pytest.raises(ncd.SerializationError, match="int64"):
        _load(doc)


HOSTILE = (
    10**400,
    -(10**400),
    float("nan"),
    float("inf"),
    -1,
    0,
    True,
    None,
    "x\x00",
    "",
    [],
    {},
    [[]],
    2**63,
)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def test_every_leaf_replaced_by_a_hostile_value_loads_or_raises_serialization_error() -> None:
    base = _doc()
    tried = 0
    for path in _leaves(base):
        for value in HOSTILE:
            doc = copy.deepcopy(base)
            target: Any = doc
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            try:
                ncd.from_json(json.dumps(doc))
            except ncd.SerializationError:
                pass
            tried += 1
    assert tried > 300
