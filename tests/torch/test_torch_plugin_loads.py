"""The plugin registers through the ``ncd`` entry-point group without importing torch."""

import subprocess
import sys

import ncd


def test_plugin_is_registered():
    names = [p.name for p in ncd.plugins.registry().plugins]
    assert "torch" in names
    reg = ncd.plugins.registry()
    assert "torch" in reg.backends and "torch" in reg.exporters
    assert any(s.order == 20 and "torch" in s.name for s in reg.demo_steps)
    assert {"float32", "float64"} <= reg.backend("torch").capabilities


def test_loading_the_plugin_does_not_import_torch():
    code = (
        "import sys, ncd; r = ncd.plugins.registry(); assert 'torch' in r.backends; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
