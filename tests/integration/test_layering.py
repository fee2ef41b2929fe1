"""Layering, checked mechanically: a plugin package imports ncd-core and its own modules, never
another plugin (they meet only through core's plugin registry), and ncd-core imports no plugin;
below the front end, nothing imports the term classes or the op constructors: the low layers
reach models through ``ncd.graph.as_graph`` and op classes through ``ncd.primitives``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
IMPORTS = {
    "ncd-core": "ncd",
    "ncd-torch": "ncd_torch",
    "ncd-opencl": "ncd_opencl",
    "ncd-cuda": "ncd_cuda",
    "ncd-diagram": "ncd_diagram",
    "ncd-perf": "ncd_perf",
}


#: The front end of ncd-core: what builds terms (and the CLI, demo and tests helpers on top).
FRONT_END = {
    "__init__.py",
    "_term.py",
    "_trace.py",
    "_lower.py",
    "_demo.py",
    "cli.py",
    "nn.py",
    "optim.py",  # optimisers build their update models with ncd.trace
    "testing.py",
    "serialize.py",  # loading a model gives a term (GraphTerm) back
    "ops/__init__.py",
    "ops/_reductions.py",  # logsumexp, var/std, argmax, cumsum built from ops
    "ops/_shape.py",  # flip, roll, edge pads, tile, repeat_interleave, stack from ops
    "ops/_norms.py",  # batch norm's training form from a layernorm, parameters and reductions
    "conv.py",  # nn.conv1d/conv2d and pooling built from windows and einsums
    "scan.py",  # ncd.scan: a cell term repeated along an axis
    "rnn.py",  # nn.rnn/gru/lstm built from scans, einsums and parameters
    "_llama.py",  # nn.llama and its blocks
    "_bert.py",  # nn.bert and its layers
    "training.py",  # char_gpt builds the model it trains
}
TERM_MODULES = {"ncd._term", "ncd.ops", "ncd._trace", "ncd.nn"}
#: A plugin's own front end: ncd-torch's importer builds models with ncd.ops and ncd.trace.
PLUGIN_FRONT_ENDS = ("_import", "_capture")
#: plugin modules that build models of their own (not the caller's) through the front end
PLUGIN_MODEL_BUILDERS = {
    "host.py",  # ncd_perf.host.measure_target: the microbenchmark models it times on a target
}


def imported_modules(path: Path, full: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name if full else a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module if full else node.module.split(".")[0])
            if full and node.module == "ncd":
                found.update(f"ncd.{a.name}" for a in node.names)
    return found


@pytest.mark.parametrize("package", sorted(IMPORTS))
def test_a_package_imports_no_other_plugin(package: str) -> None:
    own = IMPORTS[package]
    others = {m for m in IMPORTS.values() if m not in (own, "ncd")}
    bad = {
        str(p.relative_to(PACKAGES)): sorted(imported_modules(p) & others)
        for p in (PACKAGES / package / "src").rglob("*.py")
    }
    assert not {k: v for k, v in bad.items() if v}, "plugins meet through ncd.plugins.registry()"


def test_the_low_layers_import_no_term_and_no_front_end() -> None:
    core = PACKAGES / "ncd-core" / "src" / "ncd"
    files = [p for p in core.rglob("*.py") if str(p.relative_to(core)) not in FRONT_END]
    files += [
        p
        for name in IMPORTS
        if name != "ncd-core"
        for p in (PACKAGES / name / "src").rglob("*.py")
        if not p.name.startswith(PLUGIN_FRONT_ENDS) and p.name not in PLUGIN_MODEL_BUILDERS
    ]
    bad = {
        str(p.relative_to(PACKAGES)): sorted(imported_modules(p, full=True) & TERM_MODULES)
        for p in files
    }
    assert not {k: v for k, v in bad.items() if v}, (
        "reach models through ncd.graph.as_graph and op classes through ncd.primitives"
    )
