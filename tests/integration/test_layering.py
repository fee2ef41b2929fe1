"""Layering, checked mechanically: a plugin package imports ncd-core and its own modules, never
another plugin (they meet only through core's plugin registry), and ncd-core imports no plugin."""

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


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
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
