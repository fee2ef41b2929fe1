"""Finding 6: a plugin that fails while loading or registering (an exception, ``sys.exit()``,
a wrong return value) is contained: named in a warning, no trace of it in the registry, the
rest working. Ctrl-C still stops ncd, and leaves no half-built registry behind. Errors raised
later by a plugin's objects name the plugin and its distribution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from plugin_fakes import Fakes, attention, backend_source, inputs, load

import ncd
from ncd.plugins import manager, registry, reset

GOOD_AND_BAD = """
    import sys
    from ncd.plugins import Backend, Executable, hookimpl

    class Exe(Executable):
        def __call__(self, *inputs, params=None):
            return 0

    class Half(Backend):
        name = "half_registered"
        def compile(self, model, **options):
            return Exe()

    @hookimpl
    def ncd_register_backends():
        return [Half()]

    @hookimpl
    def ncd_register_exporters():
        {fail}
"""

FAILURES = {
    "sys.exit() at import": ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    "SystemExit in a hook": (GOOD_AND_BAD.format(fail="sys.exit('bye')"), "SystemExit: bye"),
    "an exception in a hook": (GOOD_AND_BAD.format(fail="raise OSError('disk')"), "OSError"),
    "a hook returning a dict": (GOOD_AND_BAD.format(fail="return {}"), "must return a list"),
    "a wrong item": (GOOD_AND_BAD.format(fail="return [42]"), "not a Exporter"),
    "an unknown hook": (
        """
        from ncd.plugins import hookimpl

        @hookimpl
        def ncd_register_widgets():
            return []
    """,
        "not an ncd hook",
    ),
    "a nameless backend": (
        """
        from ncd.plugins import Backend, hookimpl

        class NoName(Backend):
            def compile(self, model, **options):
                return None

        @hookimpl
        def ncd_register_backends():
            return [NoName()]
    """,
        "AttributeError",
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failing_plugin_is_contained_and_leaves_no_trace(fakes: Fakes, case: str) -> None:
    source, reason = FAILURES[case]
    fakes.add("bad-plugin", source)
    reg, warned = load()
    (info,) = [p for p in reg.plugins if p.distribution == "bad-plugin"]
    assert info.status.startswith("failed") and reason in info.status
    assert any("bad-plugin 1.0" in m and reason in m for m in warned)
    assert "half_registered" not in reg.backends  # all of a plugin, or nothing
    assert reg.pm.get_plugin("bad-plugin") is None
    xs = inputs(13, 7)
    np.testing.assert_array_equal(
        ncd.compile(attention(13, 7))(*xs), ncd.run(attention(13, 7), *xs)
    )


CTRL_C_ONCE = (
    backend_source("after_ctrl_c")
    + """
        calls = []

        @hookimpl
        def ncd_register_exporters():
            calls.append(1)
            if len(calls) == 1:  # the user presses Ctrl-C while this plugin registers
                raise KeyboardInterrupt
            return []
"""
)


def test_ctrl_c_while_registering_propagates_and_leaves_no_half_registry(fakes: Fakes) -> None:
    fakes.add("ctrl-c", CTRL_C_ONCE)
    reset()
    with pytest.raises(KeyboardInterrupt):
        registry()
    assert manager._REGISTRY is None  # forgotten, not left half-loaded
    reg, warned = load()  # the next use loads everything, that plugin included, once
    assert "after_ctrl_c" in reg.backends and "reference" in reg.backends
    assert [p.distribution for p in reg.plugins].count("ctrl-c") == 1
    assert not any("ctrl-c" in m for m in warned)


def test_a_missing_target_blames_the_right_package(fakes: Fakes) -> None:
    pytest.importorskip("ncd_torch")
    reset(disabled=["torch"])
    with pytest.raises(
        ncd.TargetNotFoundError, match="ncd-torch is installed but its plugin 'torch' is disabled"
    ):
        ncd.compile(ncd.nn.mlp(), "torch")
    reset()
    if "cuda" not in registry().backends and any(p.name == "cuda" for p in registry().plugins):
        with pytest.raises(ncd.TargetNotFoundError, match="installed and loaded, but registers"):
            ncd.compile(ncd.nn.mlp(), "cuda")


FAULTY = """
    import ncd
    from ncd.plugins import Backend, Executable, Exporter, Renderer, hookimpl

    class Exe(Executable):
        def __init__(self, model):
            self.model = model
            self.calls = 0
        def __call__(self, *inputs, params=None):
            self.calls += 1
            if inputs and not all(x.shape[-1] == 5 for x in inputs[:2]):
                raise ncd.SizeError("faulty: last axis must be 5. Fix: pass d=5")
            if inputs and inputs[0].shape[0] == 301:
                raise ZeroDivisionError("bug in the executable")
            return ncd.run(self.model, *inputs, params=params)

    class Faulty(Backend):
        name = "faulty"
        def compile(self, model, **options):
            if options.get("explode"):
                raise ValueError("bug in compile")
            return Exe(model)

    class BadExporter(Exporter):
        name = "faulty_export"
        def export(self, model, **options):
            raise KeyError("bug in export")

    class BadRenderer(Renderer):
        name = "faulty_draw"
        formats = ("faulty-fmt",)
        def render(self, model, fmt, **options):
            raise RuntimeError("bug in render")

    @hookimpl
    def ncd_register_backends():
        return [Faulty()]

    @hookimpl
    def ncd_register_exporters():
        return [BadExporter()]

    @hookimpl
    def ncd_register_renderers():
        return [BadRenderer()]
"""


def _attributed(info: Any, cause: type[BaseException], what: str) -> None:
    e = info.value
    assert isinstance(e, ncd.PluginError) and isinstance(e.__cause__, cause)
    assert "faulty-plugin 2.1" in str(e) and "'faulty'" in str(e) and what in str(e)
    assert "NCD_DISABLE_PLUGINS=faulty" in str(e)


def test_errors_inside_a_plugin_name_the_plugin(fakes: Fakes) -> None:
    fakes.add("faulty-plugin", FAULTY, entry="faulty", version="2.1")
    reg, _ = load()
    with pytest.raises(ncd.PluginError) as info:
        ncd.compile(attention(1, 7), "faulty", explode=True)
    _attributed(info, ValueError, "compile")
    exe = ncd.compile(attention(301, 7), "faulty")
    with pytest.raises(ncd.PluginError) as info:
        exe(*inputs(301, 7))
    _attributed(info, ZeroDivisionError, "executable")
    with pytest.raises(ncd.PluginError) as info:
        ncd.export(ncd.nn.mlp(), "faulty_export")
    _attributed(info, KeyError, "exporter")
    with pytest.raises(ncd.PluginError) as info:
        reg.render(ncd.nn.mlp(), "faulty-fmt")
    _attributed(info, RuntimeError, "renderer")


@pytest.mark.parametrize(("q", "x"), [(1, 1), (7, 13), (13, 7)])
def test_a_plugins_executable_keeps_its_numbers_errors_and_attributes(
    fakes: Fakes, q: int, x: int
) -> None:
    fakes.add("faulty-plugin", FAULTY, entry="faulty", version="2.1")
    load()
    exe = ncd.compile(attention(q, x), "faulty")
    xs = inputs(q, x)
    xs[2][0, 0] = np.inf  # a non-finite input goes through unchanged
    np.testing.assert_array_equal(exe(*xs), ncd.run(attention(q, x), *xs))
    assert exe.calls == 1 and exe.model is not None  # the plugin's own attributes
    exe.calls = 10
    assert exe.wrapped.calls == 10  # written through, not onto the wrapper
    with pytest.raises(ncd.SizeError, match="last axis must be 5") as info:  # bad input: as is
        exe(np.ones((q, 4)), np.ones((x, 4)), np.ones((x, 3)))
    assert any("faulty-plugin 2.1" in n for n in info.value.__notes__)


def test_a_plugins_executable_copies_and_pickles(fakes: Fakes) -> None:
    """The wrapper that attributes errors must not make an executable uncopyable (it recursed
    in __getattr__ before __init__ had run)."""
    import copy
    import pickle

    fakes.add("faulty-plugin", FAULTY, entry="faulty", version="2.1")
    load()
    exe = ncd.compile(attention(7, 13), "faulty")
    xs = inputs(7, 13)
    for clone in (copy.copy(exe), copy.deepcopy(exe), pickle.loads(pickle.dumps(exe))):
        np.testing.assert_array_equal(clone(*xs), ncd.run(attention(7, 13), *xs))
        with pytest.raises(ncd.PluginError) as info:
            clone(*inputs(301, 7))
        _attributed(info, ZeroDivisionError, "executable")
    assert copy.copy(exe).wrapped is exe.wrapped


FAILING_STEP = """
    from ncd.plugins import DemoStep, hookimpl

    def crash(ctx):
        raise IndexError("step bug")

    def fine(ctx):
        print("fine step saw logits", ctx["logits"].shape)

    @hookimpl
    def ncd_demo_steps():
        return [DemoStep("crashing step", 1, crash), DemoStep("fine step", 2, fine)]
"""


def test_a_failing_demo_step_is_named_and_the_others_run(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    from ncd._demo import demo

    fakes.add("step-plugin", FAILING_STEP, version="0.3")
    first_party = [p.name for p in registry().plugins if p.distribution.startswith("ncd-")]
    reset(disabled=first_party)  # only the fake plugin's steps
    assert demo(str(fakes.root / "out"), layers=1) == 1
    out, err = capsys.readouterr()
    assert "IndexError: step bug" in err
    assert "demo step 'crashing step' of step-plugin 0.3 (plugin 'step-plugin') failed" in out
    assert "fine step saw logits (64, 256)" in out
    assert "demo steps failed: crashing step (step-plugin)" in out


def test_the_registry_loads_once_whichever_thread_asks_first(fakes: Fakes) -> None:
    import threading

    fakes.add(
        "slow-plugin", backend_source("slow") + "\n        import time\n        time.sleep(0.05)\n"
    )
    reset()
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(registry())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in got}) == 1 and "slow" in got[0].backends
    assert [p.distribution for p in got[0].plugins].count("slow-plugin") == 1
