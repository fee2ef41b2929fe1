"""Fake plugin distributions for the plugin tests: a module and a dist-info directory with an
entry point, put on ``sys.path``, loaded by the same ``importlib.metadata`` scan as installed
ones (the ``fakes`` fixture lives in conftest.py)."""

from __future__ import annotations

import itertools
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import ncd
from ncd.plugins import PluginWarning, registry, reset

SEQ = itertools.count()


class Fakes:
    """Writes fake plugin distributions into one folder on ``sys.path``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(self, dist: str, source: str, entry: str | None = None, version: str = "1.0") -> str:
        module = f"fake_{dist.replace('-', '_')}_{next(SEQ)}"
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[ncd]\n{entry or dist} = {module}\n")
        self.modules.append(module)
        return module


def load(**settings: Any) -> tuple[Any, list[str]]:
    """The registry, freshly loaded, and the plugin warnings it emitted."""
    reset(**settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = registry()
    return reg, [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


def backend_source(name: str, *, override: bool = False, scale: float = 2.0) -> str:
    """A plugin whose backend ``name`` returns ``scale`` times the reference (so a hijack shows
    in the numbers)."""
    return f"""
        from ncd.plugins import Backend, Executable, hookimpl

        class Exe(Executable):
            def __init__(self, model):
                self.model = model
            def __call__(self, *inputs, params=None):
                import ncd
                return {scale} * ncd.run(self.model, *inputs, params=params)

        class Fake(Backend):
            name = {name!r}
            override = {override}
            def compile(self, model, **options):
                return Exe(model)

        @hookimpl
        def ncd_register_backends():
            return [Fake()]
    """


def attention(q: int, x: int) -> Any:
    return ncd.nn.attention().bind(q=q, x=x, d=5, v=3)


def inputs(q: int, x: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((q, 5), (x, 5), (x, 3))]
