"""Fuzzing ``ncd.from_json`` in bounded time (hypothesis; atheris with ``--atheris`` if installed).

The property: for any input, ``from_json`` either returns a model whose graph passes the verifier
and survives a second round trip unchanged, or raises ``ncd.errors.SerializationError``. Anything
else (another exception, a hang, a crash) is a bug. Inputs are valid documents of real models with
one to four hostile mutations (huge, negative, non-finite or mistyped numbers, wrong containers,
missing or extra keys, unknown kinds, out-of-range indices), byte-level damage, and arbitrary JSON.

    python tests/fuzz/fuzz_json.py [--examples N] [--seed S] [--atheris]

``NCD_FUZZ_EXAMPLES`` sets the default budget (2000).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncd
from ncd import nn, ops
from ncd._verify import verify
from ncd.errors import NcdError, SerializationError


def seeds() -> list[dict[str, Any]]:
    """Valid documents covering every op kind the conformance cases and ncd.nn use."""
    from ncd.testing import cases

    models = [c.model for c in cases()]
    models += [
        nn.gpt(layers=1).bind(seq=3, d_model=4, heads=2, d_head=2, d_ff=5, vocab=7),
        nn.moe().bind(seq=3, d_model=4, d_ff=3, experts=3),
        ops.softmax("x"),
    ]
    return [json.loads(ncd.to_json(m)) for m in models]


SEEDS = seeds()

HOSTILE = st.one_of(
    st.integers(-(10**400), 10**400),
    st.sampled_from(
        [
            0,
            -1,
            1,
            2**31,
            2**63,
            2**64,
            10**100,
            True,
            False,
            None,
            "",
            "x",
            "__import__('os')",
            "\x00",
            "../../etc",
            "NaN",
            float("nan"),
            float("inf"),
            -float("inf"),
            1e308,
            -0.0,
            0.5,
            [],
            {},
            [[]],
            [0, 0],
            {"kind": "einsum"},
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 40), max_size=4),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any, how: str) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if how == "delete":
        del parent[last]
    elif how == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    elif how == "extra" and isinstance(parent, dict):
        parent[f"{last}_extra"] = value
    else:
        parent[last] = value
    return doc


@st.composite
def mutated(draw: Any) -> str | bytes:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        how = draw(
            st.sampled_from(("replace", "replace", "replace", "delete", "duplicate", "extra"))
        )
        doc = _set(doc, path, copy.deepcopy(draw(HOSTILE)), how if path else "replace")
    text = json.dumps(doc, allow_nan=True)
    damage = draw(st.sampled_from(("none", "none", "truncate", "flip", "bytes")))
    if damage == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if damage == "flip":
        i = draw(st.integers(0, max(0, len(text) - 1)))
        return text[:i] + draw(st.sampled_from(list('{}[],:"0-e.\\\x00'))) + text[i + 1 :]
    if damage == "bytes":
        raw = bytearray(text.encode())
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        return bytes(raw)
    return text


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=20,
).map(lambda d: json.dumps(d))


def check(text: str | bytes) -> None:
    """The property (see the module docstring); raises AssertionError or the stray exception.
    A loaded model small enough to run is also run once on the reference, where bad input may
    raise only an ``NcdError``."""
    try:
        model = ncd.from_json(text)
    except SerializationError:
        return
    graph = model.graph
    verify(graph)
    again = ncd.to_json(model)
    assert ncd.to_json(ncd.from_json(again)) == again, "a loaded model does not round-trip"
    _run_small(model)


def _run_small(model: Any) -> None:
    import numpy as np

    graph = model.graph
    try:
        shapes = [graph.shape(v) for v in range(len(graph.values))]
    except NcdError:
        return  # free sizes: nothing to run
    if sum(int(np.prod(s, dtype=np.float64)) for s in shapes) > 100_000:
        return
    rng = np.random.default_rng(0)
    inputs = [
        rng.integers(0, 2, graph.shape(v))
        if graph.values[v].dtype == "int64"
        else rng.standard_normal(graph.shape(v)).astype(np.float32)
        for v in graph.inputs
    ]
    try:
        with np.errstate(all="ignore"):
            ncd.run(model, *inputs, params=ncd.init(model, seed=0))
    except NcdError:
        pass


def run_hypothesis(examples: int, seed: int | None) -> None:
    import hypothesis

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=seed is None,
    )
    @given(text=st.one_of(mutated(), mutated(), mutated(), ANY_JSON))
    def prop(text: str | bytes) -> None:
        check(text)

    (prop if seed is None else hypothesis.seed(seed)(prop))()


def run_atheris(examples: int) -> None:
    import atheris

    def one(data: bytes) -> None:
        try:
            check(data)
        except RecursionError:
            raise

    atheris.Setup([sys.argv[0], f"-runs={examples}"], one)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=int(os.environ.get("NCD_FUZZ_EXAMPLES", 2000)))
    ap.add_argument("--seed", type=int, default=None, help="a random seed (default: derandomised)")
    ap.add_argument("--atheris", action="store_true", help="coverage-guided, with atheris")
    args = ap.parse_args(argv)
    if args.atheris:
        run_atheris(args.examples)
    else:
        run_hypothesis(args.examples, args.seed)
    print(
        f"fuzz_json: {args.examples} inputs, every one loaded cleanly or raised SerializationError"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
