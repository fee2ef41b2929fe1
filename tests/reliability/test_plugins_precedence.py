"""Finding 6: no plugin can hijack a name. Collisions are reported with both owners and settled
by one rule (built-ins win; a third party replaces one only with ``override=True`` and the
user's ``NCD_PLUGIN_PREFER``; between third parties nothing wins silently).

Plugins here are real distributions (``plugin_fakes``), loaded by the same
``importlib.metadata`` scan as installed ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from plugin_fakes import SEQ, Fakes, attention, backend_source, inputs, load

import ncd


@pytest.mark.parametrize(("q", "x"), [(1, 1), (7, 13), (13, 301)])
def test_a_plugin_cannot_hijack_the_reference_backend(fakes: Fakes, q: int, x: int) -> None:
    fakes.add("aaa-hijack", backend_source("reference"), entry="aaa")  # sorts before all
    reg, warned = load()
    assert reg.owner("backend", "reference").distribution == "ncd-core"
    xs = inputs(q, x)
    np.testing.assert_array_equal(ncd.compile(attention(q, x))(*xs), ncd.run(attention(q, x), *xs))
    (c,) = [c for c in reg.collisions if c.name == "reference"]
    assert {o.distribution for o in c.owners} == {"ncd-core", "aaa-hijack"}
    assert c.winner is not None and c.winner.distribution == "ncd-core" and not reg.overrides
    (msg,) = [m for m in warned if "'reference'" in m]  # once per collision
    assert "ncd-core 0.1.0" in msg and "aaa-hijack 1.0" in msg and "built-ins win" in msg


def test_a_plugin_cannot_hijack_opencl_by_sorting_first(fakes: Fakes) -> None:
    pytest.importorskip("ncd_opencl")
    fakes.add("aaa-opencl", backend_source("opencl"), entry="aaa")
    reg, warned = load()
    assert type(reg.backend("opencl")).__module__.startswith("ncd_opencl")
    assert any("'opencl'" in m and "ncd-opencl" in m and "aaa-opencl 1.0" in m for m in warned)


def test_override_needs_both_the_flag_and_the_users_choice(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.add("my-ref", backend_source("reference", override=True))
    xs = inputs(7, 13)
    want = ncd.run(attention(7, 13), *xs)
    reg, warned = load()  # flag alone: built-in kept, the warning says how to allow it
    np.testing.assert_array_equal(ncd.compile(attention(7, 13))(*xs), want)
    assert any("NCD_PLUGIN_PREFER=reference=my-ref" in m for m in warned)
    monkeypatch.setenv("NCD_PLUGIN_PREFER", "reference=my-ref")
    reg, _ = load()  # both keys: the override is used and listed
    np.testing.assert_array_equal(ncd.compile(attention(7, 13))(*xs), 2.0 * want)
    (o,) = reg.overrides
    assert o.kind == "backend" and o.winner.distribution == "my-ref" and o.overridden


def test_users_choice_without_the_flag_keeps_the_builtin(fakes: Fakes) -> None:
    fakes.add("plain-ref", backend_source("reference"))
    reg, warned = load(prefer={"reference": "Plain_Ref"})  # names compare as pip does
    assert reg.owner("backend", "reference").distribution == "ncd-core" and not reg.overrides
    assert any("does not declare override=True" in m for m in warned)


def test_two_third_parties_on_one_name_are_refused_until_the_user_chooses(fakes: Fakes) -> None:
    fakes.add("one-dist", backend_source("shared", scale=1.0))
    fakes.add("two-dist", backend_source("shared", scale=3.0))
    reg, warned = load()
    assert "shared" not in reg.backends and "shared" in reg.refused("backend")
    with pytest.raises(ncd.PluginError, match=r"one-dist 1\.0.*two-dist 1\.0|two-dist.*one-dist"):
        ncd.compile(attention(1, 7), "shared")
    assert sum("'shared'" in m for m in warned) == 1
    reg, _ = load(prefer={"shared": "two-dist"})
    xs = inputs(1, 7)
    np.testing.assert_allclose(
        ncd.compile(attention(1, 7), "shared")(*xs), 3.0 * ncd.run(attention(1, 7), *xs)
    )
    assert not reg.overrides  # choosing between third parties replaces no built-in


KINDS = {  # hook, interface, lookup
    "exporter": ("ncd_register_exporters", "Exporter", "def export(self, model, **o): return 'x'"),
    "cost model": (
        "ncd_register_cost_models",
        "CostModel",
        "def cost(self, model, machine, **o): return 0",
    ),
    "renderer": (
        "ncd_register_renderers",
        "Renderer",
        "formats = ('svg',)\n            def render(self, model, fmt, **o): return ''",
    ),
}


@pytest.mark.parametrize(
    ("kind", "name", "package"),
    [
        ("exporter", "json", "ncd"),
        ("cost model", "perf", "ncd_perf"),
        ("renderer", "diagram", "ncd_diagram"),
    ],
)
def test_every_kind_of_registration_follows_the_rule(
    fakes: Fakes, kind: str, name: str, package: str
) -> None:
    pytest.importorskip(package, reason=f"the built-in {kind} {name!r} is not installed here")
    hook, cls, body = KINDS[kind]
    fakes.add(
        f"claim-{name}",
        f"""
        from ncd.plugins import {cls}, hookimpl

        class Fake({cls}):
            name = {name!r}
            {body}

        @hookimpl
        def {hook}():
            return [Fake()]
    """,
    )
    reg, warned = load()
    assert reg.owner(kind, name).builtin
    assert any(f"{kind} {name!r}" in m and f"claim-{name} 1.0" in m for m in warned)


def test_a_renderer_format_collision_keeps_the_builtin_renderer(fakes: Fakes) -> None:
    pytest.importorskip("ncd_diagram")
    fakes.add(
        "svg-thief",
        """
        from ncd.plugins import Renderer, hookimpl

        class Thief(Renderer):
            name = "thief"
            formats = ("svg", "webp")
            def render(self, model, fmt, **o):
                return "<svg>stolen</svg>"

        @hookimpl
        def ncd_register_renderers():
            return [Thief()]
    """,
    )
    reg, warned = load()
    assert reg.renderer("svg").name == "diagram" and reg.renderer("webp").name == "thief"
    assert "stolen" not in str(reg.render(ncd.nn.mlp(), "svg"))
    assert any("format 'svg'" in m and "svg-thief" in m for m in warned)


LOWER_SOFTMAX = """
    from ncd.plugins import Lowering, hookimpl

    def wrong(op, xs):
        return f"0.0 * {{xs[0]}}"

    @hookimpl
    def ncd_register_lowerings():
        return [Lowering("pysource", "softmax", wrong, override={override})]
"""


@pytest.mark.parametrize(("q", "x"), [(1, 1), (7, 13)])
def test_a_lowering_cannot_replace_builtin_codegen_silently(fakes: Fakes, q: int, x: int) -> None:
    pytest.importorskip("ncd_example_backend")
    fakes.add("lower-thief", LOWER_SOFTMAX.format(override=False))
    reg, warned = load()
    assert "softmax" not in reg.lowerings_for("pysource")
    xs = inputs(q, x, seed=q)
    np.testing.assert_allclose(
        ncd.compile(attention(q, x), "pysource")(*xs), ncd.run(attention(q, x), *xs), rtol=1e-12
    )
    assert any("lowering 'pysource/softmax'" in m and "lower-thief" in m for m in warned)


def test_a_lowering_override_needs_the_users_choice(fakes: Fakes) -> None:
    pytest.importorskip("ncd_example_backend")
    fakes.add("lower-over", LOWER_SOFTMAX.format(override=True))
    assert "softmax" not in load()[0].lowerings_for("pysource")
    reg, _ = load(prefer={"pysource/softmax": "lower-over"})
    assert (
        "softmax" in reg.lowerings_for("pysource") and reg.overrides[0].name == "pysource/softmax"
    )


NEW_OP = """
    from typing import ClassVar
    import attrs
    from ncd.op import Op
    from ncd.plugins import Lowering, OpDefinition, hookimpl

    @attrs.frozen
    class Op{n}(Op):
        kind: ClassVar[str] = {kind!r}
        category: ClassVar[str] = "elementwise"
        def signature(self):
            return ((),), ((),)

    @hookimpl
    def ncd_register_ops():
        return [OpDefinition(Op{n}, lambda op, xs, params, ctx: [xs[0] * {n}])]

    @hookimpl
    def ncd_register_lowerings():
        return [Lowering("opencl", {kind!r}, lambda *a: "x")]
"""


def test_lowerings_of_a_plugins_own_op_are_welcome_but_ties_refused(fakes: Fakes) -> None:
    kind = f"test_rel_op_{next(SEQ)}"
    fakes.add("op-one", NEW_OP.format(n=1, kind=kind))
    reg, _ = load()
    assert kind in reg.lowerings_for("opencl") and not reg.collisions
    fakes.add("op-two", NEW_OP.format(n=2, kind=kind))
    reg, warned = load()
    assert any(f"op {kind!r}" in m for m in warned)  # op-one's class already holds the kind
    with pytest.raises(ncd.PluginError, match=r"op-one.*op-two|op-two.*op-one"):
        reg.lowerings_for("opencl")[kind].rule()


def test_an_op_kind_is_never_replaced(fakes: Fakes) -> None:
    from ncd.op import OP_KINDS

    fakes.add("op-thief", NEW_OP.format(n=3, kind="softmax"))
    _, warned = load()

    assert OP_KINDS["softmax"] is ncd.ops.Softmax
    assert any("op 'softmax'" in m and "never replaced" in m for m in warned)
    got = ncd.run(ncd.ops.softmax("x").bind(x=3), np.array([0.0, 1.0, -np.inf]))
    np.testing.assert_allclose(got, [1 / (1 + np.e), np.e / (1 + np.e), 0.0])


def test_an_entry_point_name_taken_twice_loads_both_and_says_so(fakes: Fakes) -> None:
    pytest.importorskip("ncd_opencl")
    fakes.add("twin-opencl", backend_source("opencl"), entry="opencl")
    reg, warned = load()
    assert [p.distribution for p in reg.plugins if p.name == "opencl"] == [
        "ncd-opencl",
        "twin-opencl",
    ]
    assert all(p.status == "loaded" for p in reg.plugins if p.name == "opencl")
    assert type(reg.backend("opencl")).__module__.startswith("ncd_opencl")
    assert any(
        "entry point 'opencl' is declared by ncd-opencl and twin-opencl" in m for m in warned
    )


def test_a_malformed_prefer_entry_is_named_and_ignored(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.add("one-dist", backend_source("shared"))
    fakes.add("two-dist", backend_source("shared"))
    monkeypatch.setenv("NCD_PLUGIN_PREFER", " shared = Two_Dist , oops, =x")
    reg, warned = load()
    assert reg.owner("backend", "shared").distribution == "two-dist"
    assert any("ignored 'oops'" in m for m in warned) and any("ignored '=x'" in m for m in warned)
