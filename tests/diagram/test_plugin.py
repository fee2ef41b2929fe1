"""Everywhere a user looks: the renderer registry, notebooks, ``ncd draw``, ``ncd demo``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from diagram_helpers import HAS_DOT, attention, cairo_available, parse

import ncd
import ncd_diagram as nd
from ncd.cli import main
from ncd.plugins import registry


def test_renderers_are_registered_by_format():
    reg = registry()
    assert reg.renderer("svg").name == "diagram"
    assert set(reg.renderer("svg").formats) == {"svg", "json", "dot"}
    assert reg.renderer("png").name == "graphviz"
    assert "draw" in reg.commands


def test_renderer_renders_and_rejects_unknown_options():
    r = registry().renderer("svg")
    assert parse(str(r.render(attention(), "svg", depth=0, legend=True)))
    assert json.loads(r.render(attention(), "json"))["version"] == 1
    with pytest.raises(nd.DiagramError, match="unknown diagram option"):
        r.render(attention(), "svg", zoom=2)


def test_models_show_themselves_in_notebooks():
    svg = ncd.nn.transformer_block()._repr_svg_()
    assert svg is not None and parse(svg).tag.endswith("svg")


def test_ncd_draw_writes_svg_json_dot(tmp_path, capsys):
    out = tmp_path / "gpt.svg"
    assert main(["draw", "gpt12", "-o", str(out), "--depth", "1", "--legend"]) == 0
    root = parse(out.read_text())
    assert any("legend" in (el.get("class") or "") for el in root.iter())
    assert main(["draw", "attention", "--format", "json", "-o", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["format"] == "ncd-diagram"
    assert main(["draw", "mlp", "--format", "dot", "--bind", "d_model=7"]) == 0
    assert "digraph" in capsys.readouterr().out
    assert (
        main(["draw", "gpt", "-o", str(tmp_path / "g.dark.svg"), "--theme", "dark", "--no-repeat"])
        == 0
    )


def test_ncd_draw_kernel_plans(tmp_path):
    for plan in ("fuse", "unfused"):
        out = tmp_path / f"{plan}.svg"
        assert main(["draw", "attention", "--plan", plan, "-o", str(out)]) == 0
        kernels = [
            el
            for el in parse(out.read_text()).iter()
            if "kernel" in (el.get("class") or "").split()
        ]
        assert kernels


def test_ncd_draw_png(tmp_path):
    ok, why = cairo_available()
    if not ok and not HAS_DOT:
        pytest.skip(f"no PNG engine: {why}; Graphviz's dot is not installed either")
    out = tmp_path / "mha.png"
    assert main(["draw", "mha", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


def test_ncd_draw_without_dot_writes_the_dot_text(tmp_path, no_dot, capsys):
    out = tmp_path / "a.pdf"
    assert main(["draw", "attention", "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert "apt-get install graphviz" in err and "a.dot" in err
    assert (tmp_path / "a.dot").read_text().startswith("digraph")


def test_ncd_draw_bad_input_is_reported(capsys):
    assert main(["draw", "nosuchmodel"]) == 2
    assert main(["draw", "attention", "-o", "x.weird"]) == 2
    assert "cannot tell the format" in capsys.readouterr().err


def test_demo_step_writes_the_transformers_diagram(tmp_path):
    step = next(s for s in registry().demo_steps if s.name.startswith("diagram"))
    assert step.order == 30
    model = ncd.nn.gpt(layers=2).bind(seq=5, d_model=8, heads=2, d_head=4, d_ff=16, vocab=11)
    ctx = {"model": model, "out": str(tmp_path), "params": {}, "tokens": np.zeros(5, np.int64)}
    step.run(ctx)
    assert parse((tmp_path / "gpt.svg").read_text())
    assert json.loads((tmp_path / "gpt.diagram.json").read_text())["version"] == 1
    assert ctx["diagram"].endswith("gpt.svg")


def test_ncd_draw_a_users_own_model(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import ncd\n\ndef tiny():\n    return ncd.nn.mlp(7, 13)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["draw", "my_models:tiny", "-o", "tiny.svg"]) == 0
    labels = [el.text for el in parse((tmp_path / "tiny.svg").read_text()).iter() if el.text]
    assert "d_model 7" in labels and "d_ff 13" in labels


def test_save_picks_the_format_from_the_extension(tmp_path):
    model = attention()
    assert parse(open(nd.save(model, tmp_path / "a.svg")).read())
    assert json.loads(open(nd.save(model, tmp_path / "a.json")).read())["version"] == 1
    assert open(nd.save(model, tmp_path / "a.gv")).read().startswith("digraph")
    with pytest.raises(nd.DiagramError, match="unknown diagram format"):
        nd.save(model, tmp_path / "a.bmp")
