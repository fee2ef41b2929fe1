"""Names: control characters are refused at construction, and ncd-diagram's SVG and DOT escape
whatever they write, so both stay valid for any printable name (issue 10, finding 10)."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

import ncd
from ncd import ops

ncd_diagram = pytest.importorskip("ncd_diagram")

NAMES = ["a<b&\"c'", "ünïcødé λ 名前", "]]> --> <!--", "back\\slash\\n", "}; digraph x {"]


def _model(name: str) -> ncd.Term:
    x, u = ncd.Axis(name, size=3), ncd.Axis(name + "2", size=7)
    body = ops.softmax(x, name=name) >> ops.linear(x, u, name=name + "fc")
    return body.named(name, name + "label").over(ncd.Axis(name + "b", size=2)) >> ops.exp()


def _dot_is_valid(dot: str) -> None:
    exe = shutil.which("dot")
    if exe is None:
        return
    out = subprocess.run(
        [exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=20, check=False
    )
    assert out.returncode == 0, out.stderr.decode()
    ET.fromstring(out.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_svg_and_dot_stay_valid_for_any_printable_name(name: str) -> None:
    d = ncd_diagram.diagram(_model(name))
    root = ET.fromstring(d.to_svg(legend=True))
    texts = "".join(root.itertext())
    assert name in texts  # written, escaped, and read back intact
    _dot_is_valid(d.to_dot(legend=True))


def test_output_stays_valid_even_for_a_name_that_bypassed_the_checks() -> None:
    op = ops.Softmax(ncd.Axis("x", size=3))
    object.__setattr__(op, "name", "nul\x00esc\x1b")
    d = ncd_diagram.diagram(ops.prim(op).over(ncd.Axis("r", size=2)))
    svg = d.to_svg(legend=True)
    ET.fromstring(svg)
    assert "\x00" not in svg and "\x00" not in d.to_dot()
    _dot_is_valid(d.to_dot(legend=True))


@pytest.mark.parametrize("bad", ["\x00", "\n", "\r", "\t", "\x7f", "\x85", "\ud800"])
def test_control_characters_are_refused_in_every_name(bad: str) -> None:
    for make in (
        lambda: ncd.Axis("a" + bad),
        lambda: ops.exp(name="a" + bad),
        lambda: ops.exp().named("a" + bad),
        lambda: ops.exp().named("a", "l" + bad),
    ):
        with pytest.raises(ncd.DefinitionError, match="control character"):
            make()
