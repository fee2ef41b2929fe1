"""The machine ``host``: detected from the OS, calibrated once and cached per host. These
tests check structure and caching, never how fast anything ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import ncd
import ncd_perf
from ncd import ops
from ncd_perf import host


def test_detect_reads_the_os() -> None:
    info = host.detect()
    assert info.cores >= 1 and info.memory > 0 and info.vector_bits >= 64
    assert [c.level for c in info.caches] == sorted(c.level for c in info.caches)
    if os.path.exists("/sys/devices/system/cpu/cpu0/cache/index0/size"):
        assert all(c.reported for c in info.caches)
    if os.path.exists("/proc/cpuinfo"):
        flags = Path("/proc/cpuinfo").read_text()
        if " avx512f" in flags:
            assert info.isa == "AVX-512" and info.vector_bits == 512
        elif " avx2" in flags:
            assert info.isa == "AVX2" and info.vector_bits == 256
    assert info.model in info.key and str(info.cores) in info.key


def test_sysfs_lists_and_a_missing_cache_directory_fall_back(tmp_path: Path) -> None:
    assert host._cpu_list("0-3,8,10-11") == 7 and host._cpu_list("5") == 1
    assert [c.level for c in host._caches(str(tmp_path / "absent"))] == [1, 2, 3]
    assert not any(c.reported for c in host._caches(str(tmp_path / "absent")))
    index = tmp_path / "index0"
    index.mkdir()
    for name, text in (
        ("type", "Data"),
        ("level", "1"),
        ("size", "48K"),
        ("shared_cpu_list", "0-1"),
    ):
        (index / name).write_text(text + "\n")
    caches = host._caches(str(tmp_path))
    assert caches[0] == host.Cache(1, 48 << 10, 2) and caches[1].level == 2


def test_the_host_machine_is_built_from_what_was_detected_and_measured() -> None:
    info, cal = host.detect(), ncd_perf.calibrate()
    m = ncd_perf.load_machine("host")
    assert m.name == "host" and "host" in ncd_perf.machine_names()
    assert [lv.name for lv in m.levels] == ["DRAM", *(f"L{c.level}" for c in info.caches[::-1])]
    assert [lv.capacity for lv in m.levels[1:]] == [float(c.size) for c in info.caches[::-1]]
    # each level is filled at the read rate measured with the working set one level out
    assert m.levels[1].bandwidth == cal.measured["read_DRAM"]
    assert all(lv.bandwidth > 0 and 1 <= lv.write_factor <= 3 for lv in m.levels[1:])
    for key in ("matmul", "vector", "exp"):
        assert cal.measured[f"{key}_float32"] > 0 and cal.measured[f"{key}_float64"] > 0
    assert m.rate("special", "float32") == cal.measured["exp_float32"]
    assert m.rate("erf", "float32") == cal.measured["erf_float32"]
    assert m.rate("special", "float64") == cal.measured["exp_float64"]
    assert info.describe() in m.description
    # the aliases of the old shipped file name the detected machine now
    assert ncd_perf.load_machine("this").levels == m.levels


def test_calibration_is_cached_per_host_and_refreshed_on_request() -> None:
    first = host.calibration()
    again = host.calibration()
    assert not again.fresh and again.measured == first.measured and again.path == first.path
    assert first.path.startswith(os.environ["NCD_CACHE_DIR"])
    data = json.loads(Path(first.path).read_text())
    assert data["key"] == host.detect().key and data["version"] == host.VERSION
    # a file for another host (or an older layout) under the same name is measured again
    data["key"] = "another CPU x64"
    Path(first.path).write_text(json.dumps(data))
    other = host.calibration()
    assert other.fresh and json.loads(Path(first.path).read_text())["key"] == host.detect().key
    assert host.calibration(refresh=True).fresh


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCD_CACHE_DIR", "/somewhere/ncd")
    assert host.cache_dir() == "/somewhere/ncd"
    monkeypatch.delenv("NCD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    if host.sys.platform.startswith("linux"):
        assert host.cache_dir() == "/xdg/ncd"


def test_no_shipped_file_describes_this_machine() -> None:
    shipped = Path(ncd_perf.machine.__file__).parent / "machines"
    assert not (shipped / "this.toml").exists()
    model = host.detect().model
    for f in shipped.glob("*.toml"):
        assert model not in f.read_text() or model in ("", "unknown CPU")


def test_the_issues_host_line_runs_as_written() -> None:
    pytest.importorskip("ncd_opencl")  # the line prices ncd-opencl's plan
    sm = ops.softmax("x").over("r").bind(r=4096, x=4096)
    priced = ncd_perf.cost(sm, "host", plan=ncd.plan(sm, target="opencl"))
    text = str(priced)
    assert "performance model on host" in text and "as target 'opencl'" in text
    assert priced.time is not None and priced.time > 0


def test_a_targets_plan_is_priced_at_the_rates_its_code_achieves_here() -> None:
    pytest.importorskip("ncd_opencl")
    sm = ops.softmax("x").over("r").bind(r=256, x=256)
    priced = ncd_perf.cost(sm, "host", plan=ncd.plan(sm, target="opencl"))
    m = priced.machine
    rates = host.calibration().targets["opencl"]  # measured once, cached with the host
    assert set(rates) == {"matrix", "special", "erf", "reduce", "streamed", "launch"}
    assert m.rate("special", "float32", "opencl") == rates["special"]
    assert m.rate("reduce", "float32", "opencl") == rates["reduce"]
    assert m.launch_latency == rates["launch"]
    assert m.rate("streamed", "float32", "opencl") == rates["streamed"]
    # a streamed kernel's contractions are priced at the streamed rate, others at matrix
    att = ncd.nn.attention().over("h").bind(h=2, q=64, x=64, d=16, v=16)
    (k,) = ncd_perf.cost(att, "host", plan=ncd.plan(att, target="opencl")).kernels
    assert k.parts["matrix compute"] == pytest.approx(float(k.flops["matrix"]) / rates["streamed"])
    # without the target, the NumPy rates stand
    assert m.rate("special", "float32") == host.calibration().measured["exp_float32"]
    again = ncd_perf.cost(sm, "host", plan=ncd.plan(sm, target="opencl"))
    assert again.machine.targets == m.targets  # read back from the cache, not measured again
    assert "code opencl generates" in host.calibration().describe()


def test_the_host_adds_op_classes_and_overlaps_memory() -> None:
    m = ncd_perf.load_machine("host")
    assert m.overlap == "compute-sum"
    sm = ops.softmax("x").over("r").bind(r=512, x=512)
    (k,) = ncd_perf.cost(sm, m).kernels
    compute = sum(t for name, t in k.parts.items() if name.endswith("compute"))
    memory = max(t for name, t in k.parts.items() if not name.endswith("compute"))
    assert k.time == pytest.approx(m.launch_latency + max(compute, memory))
