import os
import sys
import textwrap
import warnings

import numpy as np
import pytest

import ncd
from ncd.plugins import registry, reset


@pytest.fixture
def fresh_registry():
    reset()
    yield
    reset()


def test_reference_backend_is_builtin(fresh_registry):
    reg = registry()
    assert "reference" in reg.backends
    assert reg.plugins[0].name == "reference" and "ncd_register_backends" in reg.plugins[0].hooks
    exe = ncd.compile(ncd.nn.attention().bind(q=1, x=2, d=3, v=4))
    assert exe(np.ones((1, 3)), np.ones((2, 3)), np.ones((2, 4))).shape == (1, 4)
    assert '"format": "ncd-graph"' in ncd.export(ncd.nn.mlp(), "json")


def test_missing_target_says_what_is_installed_and_who_provides_it(fresh_registry):
    with pytest.raises(
        ncd.TargetNotFoundError, match=r"'nope' is installed \(installed: .*reference"
    ):
        ncd.compile(ncd.nn.mlp(), "nope")
    os.environ["NCD_DISABLE_PLUGINS"] = "torch"
    try:
        reset()
        with pytest.raises(ncd.TargetNotFoundError, match="ncd-torch"):
            ncd.export(ncd.nn.mlp(), "torch")
    finally:
        del os.environ["NCD_DISABLE_PLUGINS"]


def _fake_distribution(tmp_path, name, module_source):
    """A real installed distribution (dist-info with an entry point) on sys.path."""
    pkg = tmp_path / f"{name}_plugin.py"
    pkg.write_text(textwrap.dedent(module_source))
    info = tmp_path / f"{name}_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ncd]\n{name} = {name}_plugin\n")
    return str(tmp_path)


def test_broken_plugin_warns_and_others_work(fresh_registry, tmp_path):
    path = _fake_distribution(tmp_path, "broken", "raise RuntimeError('boom')\n")
    sys.path.insert(0, path)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            reg = registry()
        assert any("broken" in str(x.message) and "boom" in str(x.message) for x in w)
        status = {p.name: p.status for p in reg.plugins}
        assert status["broken"].startswith("failed") and "reference" in reg.backends
    finally:
        sys.path.remove(path)


def test_plugin_registers_an_op_with_reference_semantics(fresh_registry, tmp_path):
    src = """
        from typing import ClassVar
        import attrs
        from ncd.plugins import hookimpl, OpDefinition
        from ncd.op import Op

        @attrs.frozen
        class Cube(Op):
            kind: ClassVar[str] = "example_cube"
            category: ClassVar[str] = "elementwise"
            def signature(self):
                return ((),), ((),)

        def rule(op, xs, params, ctx):
            return [xs[0] ** 3]

        @hookimpl
        def ncd_register_ops():
            return [OpDefinition(Cube, rule)]
    """
    path = _fake_distribution(tmp_path, "cube", src)
    sys.path.insert(0, path)
    try:
        registry()
        cube = sys.modules["cube_plugin"].Cube
        model = ncd.ops.prim(cube()).over(ncd.Axis("r", size=3))
        np.testing.assert_allclose(ncd.run(model, np.arange(3.0)), np.arange(3.0) ** 3)
        assert ncd.from_json(ncd.to_json(model)) == model
    finally:
        sys.path.remove(path)
