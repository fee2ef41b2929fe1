"""Test sessions: each package alone in its own environment, plus integration, lint, types.

pip + virtualenv only (no uv): torch is pinned to the CPU wheel ``torch==2.13.0`` explicitly,
because a looser requirement would pull a multi-GB CUDA build.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "lint",
    "typecheck",
    "minimal",
    "core",
    "torch",
    "diagram",
    "perf",
    "opencl",
    "cuda",
    "integration",
    "reliability",
    "fuzz",
]

TORCH = "torch==2.13.0"
OPENCL = "pyopencl[pocl]"
RUFF = "ruff==0.17.6"
TEST = ["pytest>=8", "hypothesis>=6.90", "pytest-xdist"]
CORE = "./packages/ncd-core"
#: tests/torch files whose checks include OpenCL (run again in the integration session)
IMPORT_TESTS = tuple(
    f"tests/torch/test_{name}.py"
    for name in (
        "real_models",
        "llama",
        "bert_zoo",
        "import_index",
        "import_casts",
        "conv",
        "torch_nn_transformer",
        "shared_weights",
        "elementwise",
        "import_elementwise",
        "nn_convnets",
        "import_reduce",
        "import_shape",
        "rnn",
    )
)
PLUGINS = ("torch", "opencl", "cuda", "diagram", "perf")


def _pytest(session: nox.Session, *paths: str) -> None:
    session.run("pytest", "-q", "-p", "no:cacheprovider", *paths, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint, 100 columns, and format) over every package, the tests, benchmarks, examples."""
    session.install(RUFF)  # pinned: a newer formatter may format differently
    paths = ("packages", "tests", "benchmarks", "examples", "noxfile.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy, strict on ncd-core; on every plugin's sources too (their heavy dependencies are not
    installed here, so their types are unknown: ``ignore_missing_imports``)."""
    session.install("mypy", "pytest", CORE)
    session.run("mypy", "--strict", "packages/ncd-core/src/ncd")
    for p in PLUGINS:
        session.run("mypy", f"packages/ncd-{p}/src")


@nox.session
def minimal(session: nox.Session) -> None:
    """Only ncd-core installed: ``import ncd`` works and loads no heavy library."""
    session.install(CORE)
    session.run("python", "tests/minimal_import.py")


@nox.session
def core(session: nox.Session) -> None:
    session.install(*TEST, CORE)
    _pytest(session, "tests/core")


@nox.session
def torch(session: nox.Session) -> None:
    """ncd-torch alone, with its pinned test dependency (transformers: real models built from
    configs); the checks on OpenCL in these tests run in the integration session."""
    session.install(*TEST, TORCH)
    session.install(CORE, "./packages/ncd-torch[test]")
    _pytest(session, "tests/torch")


@nox.session
def diagram(session: nox.Session) -> None:
    session.install(*TEST, CORE, "./packages/ncd-diagram")
    _pytest(session, "tests/diagram")


@nox.session
def perf(session: nox.Session) -> None:
    session.install(*TEST, CORE, "./packages/ncd-perf")
    _pytest(session, "tests/perf")


@nox.session
def opencl(session: nox.Session) -> None:
    session.install(*TEST, OPENCL, CORE, "./packages/ncd-opencl")
    _pytest(session, "tests/opencl")


@nox.session
def cuda(session: nox.Session) -> None:
    """Compiles generated CUDA with NVRTC (and nvcc/ptxas where installed); the executing
    tests run only where a GPU is present."""
    session.install(*TEST, CORE, "./packages/ncd-cuda")
    _pytest(session, "tests/cuda")


@nox.session
def integration(session: nox.Session) -> None:
    """Every package together, the example third-party backend, and the demo; the real-model
    import tests again, with their OpenCL halves."""
    session.install(*TEST, TORCH, OPENCL)
    session.install(
        CORE,
        *(f"./packages/ncd-{p}" for p in PLUGINS if p != "torch"),
        "./packages/ncd-torch[test]",
        "./examples/ncd-example-backend",
    )
    _pytest(session, "tests/integration", *IMPORT_TESTS)
    session.run("ncd", "demo", "--out", f"{session.create_tmp()}/demo")


@nox.session
def reliability(session: nox.Session) -> None:
    """Regression tests of docs/reliability.md's promises: every package and the example
    third-party backend together."""
    session.install(*TEST, TORCH, OPENCL)
    session.install(
        CORE, *(f"./packages/ncd-{p}" for p in PLUGINS), "./examples/ncd-example-backend"
    )
    _pytest(session, "tests/reliability")


@nox.session
def fuzz(session: nox.Session) -> None:
    """Bounded fuzzing of ``ncd.from_json`` (hypothesis; NCD_FUZZ_EXAMPLES sets the budget)."""
    session.install(*TEST, CORE)
    session.run("python", "tests/fuzz/fuzz_json.py", *session.posargs)
