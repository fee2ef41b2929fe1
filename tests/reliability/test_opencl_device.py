"""Findings 11 and 10 (device side): no OpenCL platform is a TargetNotFoundError with the fix;
buffers beyond the device's limits are a SizeError naming the axes, before anything is built
or allocated."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ncd
from ncd import nn, ops

pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl

from ncd_opencl import program  # noqa: E402
from ncd_opencl.backend import check_fits  # noqa: E402
from ncd_opencl.generate import generate  # noqa: E402

# pyopencl's wheel ships its own ocl-icd loader, which reads OCL_ICD_VENDORS and then
# $PYOPENCL_HOME/.libs (where pyopencl[pocl] puts pocl.icd; pyopencl sets PYOPENCL_HOME on
# import, and the loader reads it on the first OpenCL call): pointing both at an empty
# folder is a machine with pyopencl and no driver.
_NO_DRIVER = r"""
import os, sys
import numpy as np
import pyopencl
os.environ["PYOPENCL_HOME"] = os.environ["OCL_ICD_VENDORS"] = sys.argv[1]
import ncd
from ncd import ops
try:
    ncd.compile(ops.relu().over(ncd.Axis("r", size=7)), "opencl")(np.ones(7, np.float32))
except ncd.TargetNotFoundError as e:
    print("TargetNotFoundError:", e)
"""


def test_no_platform_is_a_target_error_with_the_fix(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_DRIVER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TargetNotFoundError: no OpenCL platform found" in done.stdout
    assert 'pip install "pyopencl[pocl]"' in done.stdout


def test_package_depends_on_pocl() -> None:
    meta = Path(__file__).parents[2] / "packages" / "ncd-opencl" / "pyproject.toml"
    deps = tomllib.loads(meta.read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("pyopencl[pocl]") for d in deps)


def test_huge_intermediate_is_a_size_error_before_building() -> None:
    att = nn.attention().bind(q=10**6, x=10**6, d=1, v=1)  # scores: 10^12 floats unfused
    q = np.zeros((10**6, 1), np.float32)
    builds = program.STATS["builds"]
    with pytest.raises(
        ncd.SizeError,
        match=r"q#\w+ \(1000000\).*x#\w+ \(1000000\)|"
        r"x#\w+ \(1000000\).*q#\w+ \(1000000\)",
    ) as e:
        ncd.compile(att, "opencl", fuse=False)(q, q, q)
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in str(e.value) and "Fix:" in str(e.value)
    assert program.STATS["builds"] == builds


def test_huge_embedding_table_is_a_size_error() -> None:
    emb = ops.embedding("vocab -> d", vocab=10**9, d=7).over(ncd.Axis("s", size=13))
    table = np.broadcast_to(np.zeros(1, np.float32), (10**9, 7))  # no memory behind it
    with pytest.raises(ncd.SizeError, match=r"parameter embedding.*vocab#\w+ \(1000000000\)"):
        ncd.compile(emb, "opencl")(np.arange(13) % 5, params={"embedding.weight": table})


def test_total_beyond_device_memory_is_a_size_error() -> None:
    r = ncd.Axis("r", size=301)
    model = (ops.softmax(ncd.Axis("x", size=13)) >> ops.mul(2.0)).over(r)
    gen = generate(model.graph, fuse=False)
    small = SimpleNamespace(
        name="tiny", max_mem_alloc_size=301 * 13 * 4, global_mem_size=2 * 301 * 13 * 4
    )
    with pytest.raises(ncd.SizeError, match=r"CL_DEVICE_GLOBAL_MEM_SIZE.*r#\w+ \(301\)"):
        check_fits(model.graph, gen, small)
    check_fits(
        model.graph,
        gen,
        SimpleNamespace(name="big", max_mem_alloc_size=2**31, global_mem_size=2**32),
    )
