import ncd


def test_plugin_is_registered():
    names = [p.name for p in ncd.plugins.registry().plugins]
    assert "cuda" in names
