#!/usr/bin/env bash
# One command for the GPU machine: run the cuda tests (and the cuda benchmark, when there is
# one) against this checkout, with nothing from the network.
#
#   bash benchmarks/cuda_gpu_check.sh            # PYTHON=python3 by default
#
# The machine has torch, triton, cupy and cuda-bindings but no network, so nothing is
# installed: the packages' sources go on PYTHONPATH, and a throwaway folder of .dist-info
# records (name, version, entry points; read from each pyproject.toml) makes the plugins
# visible to importlib.metadata, which is how ncd finds them. NCD_CHECK_PACKAGES lists the
# packages registered that way (default: ncd-core, ncd-cuda, ncd-perf and ncd-torch: sympy
# and torch are there). Everything runs under
# `timeout`; the whole check stays under 8 minutes.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
PACKAGES="${NCD_CHECK_PACKAGES:-ncd-core ncd-cuda ncd-perf ncd-torch}"
SHIM="$(mktemp -d "${TMPDIR:-/tmp}/ncd-gpu-check.XXXXXX")"
trap 'rm -rf "$SHIM"' EXIT

SRC=""
for d in "$ROOT"/packages/*/src; do
    SRC="${SRC:+$SRC:}$d"
done
export PYTHONPATH="$SHIM:$SRC${PYTHONPATH:+:$PYTHONPATH}"

timeout 60 "$PY" - "$SHIM" "$ROOT" $PACKAGES <<'PYEOF' || { echo "cuda_gpu_check: could not prepare the packages" >&2; exit 2; }
"""Write a .dist-info record per package so importlib.metadata sees its entry points."""
import pathlib
import sys
import tomllib

shim, root, names = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
for name in names:
    project = tomllib.loads((root / "packages" / name / "pyproject.toml").read_text())["project"]
    info = shim / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, eps in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    tops = [p.name for p in (root / "packages" / name / "src").iterdir() if p.is_dir()]
    (info / "top_level.txt").write_text("\n".join(t for t in tops if not t.startswith(".")) + "\n")
    print(f"registered {project['name']} {project['version']}: {', '.join(project.get('entry-points', {})) or 'no entry points'}")
PYEOF

echo "== environment"
timeout 60 "$PY" - <<'PYEOF'
import importlib

for mod in ("numpy", "ml_dtypes", "attrs", "pluggy", "pytest", "cuda.bindings", "torch"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod}: {getattr(m, '__version__', 'ok')}")
    except Exception as e:  # report, do not stop: pytest says what fails
        print(f"{mod}: MISSING ({type(e).__name__}: {e})")
try:
    from cuda.bindings import nvrtc

    print("nvrtc:", nvrtc.nvrtcVersion())
except Exception as e:
    print(f"nvrtc: MISSING ({type(e).__name__}: {e})")
import ncd
import ncd_cuda

print("cuda probe:", ncd_cuda.probe())
print("backends:", sorted(ncd.plugins.registry().backends))
PYEOF

status=0
echo "== pytest tests/cuda"
timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/cuda || status=$?

if [ -f benchmarks/cuda_bench.py ]; then
    echo "== benchmarks/cuda_bench.py"
    timeout 150 "$PY" benchmarks/cuda_bench.py --reps 10 || status=$?
fi
echo "cuda_gpu_check: exit $status"
exit $status
