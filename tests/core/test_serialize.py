import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncd
from ncd import nn
from ncd.testing import cases


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_round_trip_equals(case):
    text = ncd.to_json(case.model)
    back = ncd.from_json(text)
    assert back == case.model
    assert ncd.to_json(back) == text
    back.graph.verify()


def test_round_trip_keeps_uids_blocks_and_free_sizes():
    gpt = nn.gpt(layers=2)
    back = ncd.from_json(ncd.to_json(gpt))
    assert back == gpt
    assert [a.uid for a in back.graph.axes] == [a.uid for a in gpt.graph.axes]
    assert list(back.config()) == list(gpt.config())
    assert [s.label for s in back.graph.scopes] == [s.label for s in gpt.graph.scopes]
    data = json.loads(ncd.to_json(gpt))
    assert data["format"] == "ncd-graph" and data["version"] == 1


def test_loaded_models_compose():
    att = ncd.from_json(ncd.to_json(nn.attention()))
    lifted = att.over("h").bind(h=2, q=3, x=4, d=5, v=6)
    assert lifted.codomain[0].axes[0].name == "h"


BAD = [
    ("", "not valid JSON"),
    ("[1, 2]", "expected an object"),
    ('{"format": "x"}', "missing key"),
    ("[" * 100000 + "]" * 100000, "not valid JSON"),
]


@pytest.mark.parametrize("text,match", BAD)
def test_malformed_input_raises_serialization_error(text, match):
    with pytest.raises(ncd.SerializationError, match=match):
        ncd.from_json(text)


def _valid():
    return json.loads(ncd.to_json(nn.attention(causal=True).bind(q=2, x=3, d=4, v=5)))


def test_hostile_documents_are_rejected():
    doc = _valid()
    doc["nodes"][0]["kind"] = "__import__('os').system"
    with pytest.raises(ncd.SerializationError, match="unknown op kind"):
        ncd.from_json(json.dumps(doc))
    doc = _valid()
    doc["version"] = 99
    with pytest.raises(ncd.SerializationError, match="version"):
        ncd.from_json(json.dumps(doc))
    doc = _valid()
    doc["nodes"][0]["in"] = [10**9]
    with pytest.raises(ncd.SerializationError, match="index"):
        ncd.from_json(json.dumps(doc))
    doc = _valid()
    doc["values"][-1] = 0  # the output type no longer matches what the ops produce
    with pytest.raises(ncd.SerializationError):
        ncd.from_json(json.dumps(doc))


def _mutations(doc):
    """Every way to replace one leaf of the document."""
    out = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        else:
            out.append(path)

    walk(doc, ())
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_corruption_only_ever_raises_serialization_error(data):
    doc = _valid()
    paths = _mutations(doc)
    path = data.draw(st.sampled_from(paths))
    value = data.draw(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-3, 10**6),
            st.text(max_size=5),
            st.floats(allow_nan=True),
            st.lists(st.integers(0, 3), max_size=3),
        )
    )
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        ncd.from_json(json.dumps(doc))
    except ncd.SerializationError:
        pass
