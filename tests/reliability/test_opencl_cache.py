"""Finding 4: the on-disk program cache is verified, atomic, bounded and private.

Corruption is checked in fresh processes (the in-memory cache would hide it): every later
process must compute the right function and exit 0.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl

from ncd_opencl import program  # noqa: E402

_CHILD = r"""
import json, os, sys
import numpy as np
import ncd
from ncd import ops
from ncd_opencl import program

r = ncd.Axis("r", size=301)
models = {"double": ops.mul(2.0).over(r), "tanh": ops.tanh().over(r)}
x = np.linspace(-3, 3, 301).astype(np.float32)
made = {}
for name in sys.argv[1:]:
    before = set(os.listdir(program.usable_cache_dir()))
    got = ncd.compile(models[name], "opencl")(x)
    np.testing.assert_allclose(got, ncd.run(models[name], x), rtol=1e-5, atol=1e-6)
    made[name] = sorted(set(os.listdir(program.cache_dir())) - before)
print(json.dumps({"stats": program.STATS, "made": made}))
"""


def _child(cache: Path, *models: str) -> dict[str, object]:
    env = dict(os.environ, NCD_OPENCL_CACHE=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *models],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _valid(path: Path) -> bool:
    return program.unpack_entry(path.stem, path.read_bytes()) is not None


def test_corrupt_entries_are_rebuilt_in_later_processes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _child(cache, "double", "tanh")
    made = first["made"]
    assert isinstance(made, dict)
    a, b = (cache / made[n][0] for n in ("double", "tanh"))
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 and _valid(p) for p in (a, b))

    # the original attack: the two entries' binaries swapped between the two models
    blob_a, blob_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(blob_b)
    b.write_bytes(blob_a)
    swapped = _child(cache, "double", "tanh")["stats"]
    assert swapped == {"memory_hits": 0, "disk_hits": 0, "builds": 2, "disk_rejected": 2}
    assert _valid(a) and _valid(b)  # the bad entries were replaced

    # payloads swapped under intact headers, then a truncated binary and plain garbage
    head = len(blob_a) - len(blob_a.split(b"\n", 4)[4])
    a.write_bytes(b.read_bytes()[:head] + a.read_bytes()[head:])
    rerun = _child(cache, "double", "tanh")["stats"]
    assert rerun == {"memory_hits": 0, "disk_hits": 1, "builds": 1, "disk_rejected": 1}
    a.write_bytes(a.read_bytes()[: len(a.read_bytes()) // 2])
    b.write_bytes(os.urandom(4096))
    broken = _child(cache, "double", "tanh")["stats"]
    assert broken == {"memory_hits": 0, "disk_hits": 0, "builds": 2, "disk_rejected": 2}
    assert _child(cache, "double", "tanh")["stats"] == {
        "memory_hits": 0,
        "disk_hits": 2,
        "builds": 0,
        "disk_rejected": 0,
    }


def _source() -> str:  # a program no earlier test built (the memory cache would answer)
    return (
        f"// {uuid.uuid4()}\n"
        "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }\n"
    )


def test_cache_is_bounded_by_size_evicting_least_recently_used(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NCD_OPENCL_CACHE", str(tmp_path))
    monkeypatch.setenv("NCD_OPENCL_CACHE_MB", "2.5")
    old = []
    for k in range(4):  # 1 MiB entries, oldest first
        p = tmp_path / f"{k:064x}.bin"
        p.write_bytes(b"\0" * 2**20)
        os.utime(p, (1000 + k, 1000 + k))
        old.append(p)
    program.build(_source())
    left = sorted(p.name for p in tmp_path.glob("*.bin"))
    assert sum(p.stat().st_size for p in tmp_path.glob("*.bin")) <= 2.5 * 2**20
    assert old[3].name in left and old[0].name not in left and old[1].name not in left
    assert len(left) == 3  # the two newest old entries would not both fit with the new one


def test_cache_refuses_a_directory_others_can_write(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("NCD_OPENCL_CACHE", str(shared))
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        assert program.usable_cache_dir() is None
    program.build(_source())  # still builds, without a disk cache
    assert not list(shared.iterdir())


def test_cache_refuses_a_directory_of_another_user(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    monkeypatch.setenv("NCD_OPENCL_CACHE", str(theirs))
    monkeypatch.setattr(os, "getuid", lambda: theirs.stat().st_uid + 1)
    with pytest.warns(RuntimeWarning, match="owned by another user"):
        assert program.usable_cache_dir() is None


def test_default_cache_is_per_user(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("NCD_OPENCL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert program.cache_dir() == str(tmp_path / "xdg" / "ncd-opencl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert program.cache_dir() == str(tmp_path / "home" / ".cache" / "ncd-opencl")
    assert program.usable_cache_dir() == program.cache_dir()
    assert stat.S_IMODE(os.stat(program.cache_dir()).st_mode) == 0o700


def test_entry_format_rejects_every_mismatch() -> None:
    key, other = "a" * 64, "b" * 64
    blob = program.pack_entry(key, b"binary bytes")
    assert program.unpack_entry(key, blob) == b"binary bytes"
    assert program.unpack_entry(other, blob) is None  # another key
    assert program.unpack_entry(key, blob[:-1]) is None  # truncated
    assert program.unpack_entry(key, blob[:-1] + b"X") is None  # altered
    assert program.unpack_entry(key, blob + b"X") is None  # extended
    assert program.unpack_entry(key, b"binary bytes") is None  # an old raw binary
    assert program.unpack_entry(key, b"") is None


def test_stale_temp_files_of_killed_writers_are_removed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NCD_OPENCL_CACHE", str(tmp_path))
    old, fresh = tmp_path / ".deadbeef.old.tmp", tmp_path / ".deadbeef.new.tmp"
    for p in (old, fresh):
        p.write_bytes(b"half an entry")
    os.utime(old, (1000, 1000))
    program.build(_source())
    assert not old.exists() and fresh.exists()  # a writer may still be busy with the new one
    assert len(list(tmp_path.glob("*.bin"))) == 1
