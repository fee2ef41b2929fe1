"""The machine ``"host"``: the running system, detected from the OS and calibrated once.

``detect()`` reads what the OS reports (CPU model and flags from ``/proc/cpuinfo``, caches from
``/sys/devices/system/cpu/cpu0/cache``, the cores this process may use, memory), with portable
fallbacks where a file is missing. ``measure()`` runs NumPy microbenchmarks on all those cores
at once: read and write bandwidth of a working set resident in each level, a ``memcpy`` copy
(non-temporal stores, no write-allocate) beside ordinary stores, BLAS matmul, elementwise,
``exp`` and ``erf`` rates. ``calibration()`` caches the result per host (CPU model and core
count) under the user cache directory; ``host_machine()`` builds the ``Machine``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from ncd_perf.machine import Level, Machine

__all__ = [
    "Cache",
    "Calibration",
    "HostInfo",
    "cache_dir",
    "calibration",
    "detect",
    "host_machine",
    "machine_toml",
    "measure",
]

#: bump when ``measure`` changes what it records: older cached files are measured again
VERSION = 4

#: assumed cache sizes where the OS reports none (level -> bytes), said so in ``sources``
FALLBACK_CACHES = {1: 32 << 10, 2: 512 << 10, 3: 8 << 20}


@attrs.frozen
class Cache:
    """One data (or unified) cache level: size per instance, CPUs sharing one instance."""

    level: int
    size: int
    shared_by: int = 1
    reported: bool = True  # False: assumed (FALLBACK_CACHES)


def _caches_tuple(value: Any) -> tuple[Cache, ...]:
    return tuple(value)


@attrs.frozen
class HostInfo:
    """What the OS says about the running system."""

    model: str
    cores: int
    vector_bits: int
    isa: str
    caches: tuple[Cache, ...] = attrs.field(converter=_caches_tuple)
    memory: int

    @property
    def key(self) -> str:
        """The cache key: CPU model and core count (a different VM on the same part shares it)."""
        return f"{self.model} x{self.cores}"

    def describe(self) -> str:
        caches = ", ".join(
            f"L{c.level} {_size(c.size)}"
            + (f" per {c.shared_by} CPUs" if c.shared_by > 1 else "")
            + ("" if c.reported else " (assumed)")
            for c in self.caches
        )
        return (
            f"{self.model}: {self.cores} cores, {self.isa} ({self.vector_bits}-bit vectors), "
            f"{caches}, {_size(self.memory)} memory"
        )


def _size(n: float) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n:g} B"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpuinfo() -> dict[str, str]:
    text = _read("/proc/cpuinfo") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in out:  # the first processor's entry
            out[key.strip()] = value.strip()
    return out


#: flag in /proc/cpuinfo -> (ISA name, vector bits), widest first
ISA_FLAGS = (
    ("avx512f", "AVX-512", 512),
    ("avx2", "AVX2", 256),
    ("avx", "AVX", 256),
    ("sve", "SVE", 128),  # the vector length is not in the flags: 128 is SVE's minimum
    ("asimd", "NEON", 128),
    ("sse2", "SSE2", 128),
)


def _cpu_list(text: str) -> int:
    """CPUs in a sysfs list such as ``0-3,8``."""
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            count += int(hi) - int(lo) + 1 if hi.strip().isdigit() else 1
    return max(1, count)


def _caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> tuple[Cache, ...]:
    found: dict[int, Cache] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        base = os.path.join(root, entry)
        kind, level, size = (_read(os.path.join(base, f)) for f in ("type", "level", "size"))
        if kind == "Instruction" or not level or not size:
            continue
        m = re.fullmatch(r"(\d+)\s*([KMG]?)", size)
        if m is None:
            continue
        nbytes = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
        shared = _cpu_list(_read(os.path.join(base, "shared_cpu_list")) or "0")
        found[int(level)] = Cache(int(level), nbytes, shared)
    reported = bool(found)  # some parts have no L3: assume one only when nothing is reported
    for lv, default in FALLBACK_CACHES.items():
        if lv not in found and (lv < 3 or not reported):
            found[lv] = Cache(lv, default, 1, reported=False)
    return tuple(found[k] for k in sorted(found))


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def _memory() -> int:
    meminfo = _read("/proc/meminfo") or ""
    m = re.search(r"MemTotal:\s*(\d+)\s*kB", meminfo)
    if m:
        return int(m.group(1)) << 10
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30  # assumed


def detect() -> HostInfo:
    """The running system as the OS reports it (see the module docstring for the fallbacks)."""
    info = _cpuinfo()
    model = info.get("model name") or info.get("Model") or platform.processor()
    model = re.sub(r"\s+", " ", model or platform.machine() or "unknown CPU").strip()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    if not flags and platform.machine().lower() in ("arm64", "aarch64"):
        flags = {"asimd"}  # NEON is part of every AArch64 core
    isa, bits = next(((n, b) for f, n, b in ISA_FLAGS if f in flags), ("scalar", 64))
    if isa == "scalar" and platform.machine().lower() in ("x86_64", "amd64"):
        isa, bits = "SSE2", 128  # the x86-64 baseline
    return HostInfo(model, _cores(), bits, isa, _caches(), _memory())


# -- microbenchmarks ----------------------------------------------------------------------------


def _parallel(work: list[Callable[[], Any]], repeats: int) -> float:
    """Best wall time of running every callable at once, one thread each (NumPy's loops
    release the GIL); the best of ``repeats`` because other processes share the cores."""
    best = float("inf")
    for _ in range(repeats + 1):  # the first run warms caches and pages
        barrier = threading.Barrier(len(work) + 1)

        def run(fn: Callable[[], Any], barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            fn()

        threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return best


def _repeated(np: Any, n: int, dtype: Any, reps: int) -> tuple[Any, Any]:
    """An ``n``-element buffer read ``reps`` times in one NumPy call (a stride-0 view), and a
    writable stride-0 view of another for the output: the loop stays in C, so small working
    sets measure the cache, not Python."""
    from numpy.lib.stride_tricks import as_strided

    a = np.ones(n, dtype)
    b = np.zeros(n, dtype)
    return np.broadcast_to(a, (reps, n)), as_strided(b, (reps, n), (0, b.itemsize), writeable=True)


def _erf(np: Any, x: Any, out: Any, loops: int) -> None:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), an exp and a degree-5 polynomial: the way
    # a vectorised erf is computed
    c = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    for _ in range(loops):
        t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
        p = t * (c[0] + t * (c[1] + t * (c[2] + t * (c[3] + t * c[4]))))
        np.multiply(p, np.exp(-x * x), out=out)
        np.subtract(1.0, out, out=out)
        np.copysign(out, x, out=out)


def measure(info: HostInfo, *, repeats: int = 3, volume: int = 48 << 20) -> dict[str, float]:
    """Rates of this system with ``info.cores`` threads at once: for each cache level and DRAM,
    ``read_<L>`` (bytes/s read from a working set resident there), ``write_<L>`` (bytes/s read +
    written by an elementwise loop: ordinary stores, write-allocate where the cache does it);
    ``copy_DRAM`` (read + written by ``memcpy``, whose non-temporal stores skip the
    write-allocate); ``matmul_float32``/``float64`` (BLAS), ``vector_float32``/``float64``
    (multiplies per second in cache), ``exp_float32``/``float64`` and ``erf_float32`` (values per
    second). ``volume`` is the bytes each thread moves per measurement."""
    import numpy as np

    cores = max(1, info.cores)
    out: dict[str, float] = {}

    def each(fn: Callable[..., Any], args: list[tuple[Any, ...]], best_of: int = repeats) -> float:
        return _parallel([partial(fn, *a) for a in args], best_of)

    # a working set half the size of the level per thread sharing it, DRAM past the last level
    sets = {f"L{c.level}": c.size // 2 // max(1, min(c.shared_by, cores)) for c in info.caches}
    sets = {k: max(4096, v) for k, v in sets.items()}
    sets["DRAM"] = max(4 * max(c.size for c in info.caches) // cores, 32 << 20)
    for name, nbytes in sets.items():
        n, reps = nbytes // 4, max(1, volume // nbytes)
        bufs = [_repeated(np, n, np.float32, reps) for _ in range(cores)]
        t = each(partial(np.maximum.reduce, axis=-1), [(a,) for a, _ in bufs])
        out[f"read_{name}"] = cores * reps * nbytes / t
        t = each(np.multiply, [(a, np.float32(2), b) for a, b in bufs])
        out[f"write_{name}"] = 2 * cores * reps * nbytes / t
        if name == "DRAM":
            pairs = [(np.zeros(n, np.float32), np.ones(n, np.float32)) for _ in range(cores)]
            out["copy_DRAM"] = 2 * cores * nbytes / each(np.copyto, pairs)
        del bufs
    l1 = next((c.size for c in info.caches if c.level == 1), FALLBACK_CACHES[1])
    for dtype in ("float32", "float64"):
        size = 1024
        m = np.ones((size, size), dtype)
        out[f"matmul_{dtype}"] = 2 * size**3 / each(np.matmul, [(m, m)], 5)  # BLAS threads
        item = np.dtype(dtype).itemsize
        n = l1 // 2 // item
        reps = max(1, volume // 8 // (n * item))
        bufs = [_repeated(np, n, dtype, reps) for _ in range(cores)]
        three = np.dtype(dtype).type(3)
        t = each(np.multiply, [(a, three, b) for a, b in bufs])
        out[f"vector_{dtype}"] = cores * reps * n / t
        t = each(partial(np.add.reduce, axis=-1), [(a,) for a, _ in bufs])
        out[f"reduce_{dtype}"] = cores * reps * n / t
        reps = max(1, reps // 16)
        bufs = [_repeated(np, n, dtype, reps) for _ in range(cores)]
        out[f"exp_{dtype}"] = cores * reps * n / each(np.exp, list(bufs))
    loops, n = 64, 4096
    chunks = [
        (np, np.linspace(-3, 3, n, dtype=np.float32), np.empty(n, np.float32), loops)
        for _ in range(cores)
    ]
    out["erf_float32"] = cores * loops * n / each(_erf, chunks)
    return out


# -- the cache and the machine ------------------------------------------------------------------


def cache_dir() -> str:
    """Where ncd caches what it measures: ``$NCD_CACHE_DIR``, else the platform's user cache
    directory (``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS,
    ``%LOCALAPPDATA%`` on Windows) + ``/ncd``."""
    if os.environ.get("NCD_CACHE_DIR"):
        return os.environ["NCD_CACHE_DIR"]
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        base = os.path.join(home, "Library", "Caches")
    elif sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "ncd")


@attrs.frozen
class Calibration:
    """A host's detected facts and measured rates, and where they are cached."""

    info: HostInfo
    measured: dict[str, float]
    stamp: str
    path: str
    fresh: bool  # measured by this call, not read from the cache
    #: achieved rates of the code a target generates (``measure_target``), by target
    targets: dict[str, dict[str, float]] = attrs.field(factory=dict)

    def describe(self) -> str:
        m = self.measured
        lines = [self.info.describe(), f"measured {self.stamp} ({self.path})"]
        names = [f"L{c.level}" for c in self.info.caches] + ["DRAM"]
        for name in names:
            if f"read_{name}" in m:
                lines.append(
                    f"  {name:<5} resident: read {m[f'read_{name}'] / 1e9:7.1f} GB/s, "
                    f"read+write (ordinary stores) {m[f'write_{name}'] / 1e9:7.1f} GB/s, "
                    f"write costs {write_factor(m, name):.2f} reads"
                )
        if "copy_DRAM" in m:
            lines.append(
                f"  DRAM copy without write-allocate (memcpy): {m['copy_DRAM'] / 1e9:.1f} GB/s"
            )
        for key, unit in (
            ("matmul", "FLOP/s"),
            ("vector", "FLOP/s"),
            ("reduce", "FLOP/s"),
            ("exp", "/s"),
        ):
            lines.append(
                f"  {key:<7} "
                + ", ".join(
                    f"{d} {m[f'{key}_{d}'] / 1e9:.3g} G{unit}" for d in ("float32", "float64")
                )
            )
        lines.append(f"  erf     float32 {m['erf_float32'] / 1e9:.3g} G/s")
        for target, rates in sorted(self.targets.items()):
            shown = [f"{k} {v / 1e9:.3g} G/s" for k, v in sorted(rates.items()) if k != "launch"]
            if "launch" in rates:
                shown.append(f"launch {rates['launch'] * 1e6:.0f} us")
            lines.append(f"  code {target} generates: " + ", ".join(shown))
        return "\n".join(lines)


def write_factor(measured: dict[str, float], name: str) -> float:
    """What writing a byte costs in bytes read, from a level's read and read+write rates:
    ``2N / write = N / read + w N / read``; 1 without write-allocate, about 2 with it."""
    read, both = measured[f"read_{name}"], measured[f"write_{name}"]
    return min(3.0, max(1.0, 2 * read / both - 1))


def _path(info: HostInfo) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", info.key.lower()).strip("-")[:48]
    digest = hashlib.sha1(info.key.encode()).hexdigest()[:8]
    return os.path.join(cache_dir(), "perf", f"host-{slug}-{digest}.json")


def calibration(refresh: bool = False) -> Calibration:
    """This host's calibration: read from the cache when one matches (same key, same
    ``VERSION``), else measured now (a few seconds) and written there. ``refresh`` measures
    again."""
    info = detect()
    path = _path(info)
    if not refresh:
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("version") == VERSION and data.get("key") == info.key:
                targets = {t: dict(r) for t, r in data.get("targets", {}).items()}
                return Calibration(
                    info, dict(data["measured"]), data["stamp"], path, False, targets
                )
        except (OSError, ValueError, KeyError):
            pass
    measured = measure(info)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cal = Calibration(info, measured, stamp, path, True)
    _write(cal)
    return cal


def _write(cal: Calibration) -> None:
    os.makedirs(os.path.dirname(cal.path), exist_ok=True)
    tmp = f"{cal.path}.{os.getpid()}.tmp"
    data = {
        "version": VERSION,
        "key": cal.info.key,
        "info": attrs.asdict(cal.info),
        "measured": cal.measured,
        "stamp": cal.stamp,
        "targets": cal.targets,
    }
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, cal.path)  # atomic: a concurrent reader sees the old file or the new one


def measure_target(target: str, *, repeats: int = 5) -> dict[str, float]:
    """Achieved rates of the code ``target`` generates on this host, each from one op class
    compiled with ``ncd.compile(model, target)`` on cache-resident data (best of
    ``repeats`` after a warm-up): ``matrix`` (FLOP/s of a 512 x 512 -> 512 float32 linear),
    ``special`` (``exp`` values per second over 1024 x 1024), ``erf`` (exact GELU, the same),
    ``reduce`` (elements per second summed along rows of 1024 x 1024), ``streamed`` (FLOP/s of
    the contractions of a streamed kernel: L2-normalised attention, 2 heads x 256 x 64, the
    chunk-loop template softmax attention shares), ``launch`` (seconds of
    a call of a one-kernel program on 16 elements, priced per kernel: an upper bound, since
    part of it is the call's)."""
    import numpy as np

    import ncd
    from ncd import ops

    rng = np.random.default_rng(0)
    n = 1024
    rows, cols = ncd.Axis("r", size=n), ncd.Axis("c", size=n)
    m = 512
    mm = ops.linear(ncd.Axis("i", size=m), ncd.Axis("o", size=m), bias=False)
    cases: list[tuple[str, Any, list[Any], float]] = [
        (
            "matrix",
            mm.over(ncd.Axis("t", size=m)),
            [rng.standard_normal((m, m), np.float32)],
            2.0 * m**3,
        ),
        ("special", ops.unary("exp").over(cols).over(rows), [np.ones((n, n), np.float32)], n * n),
        ("erf", ops.gelu().over(cols).over(rows), [np.ones((n, n), np.float32)], n * n),
        ("reduce", ops.sum(cols).over(rows), [np.ones((n, n), np.float32)], n * n),
        ("launch", ops.unary("exp").over(ncd.Axis("e", size=16)), [np.ones(16, np.float32)], 0.0),
    ]
    # a streamed contraction that is no workload of the benchmarks: L2-normalised attention
    h, q, d = 2, 256, 64
    sph = ncd.nn.spherical_attention().over("h").bind(h=h, q=q, x=q, d=d, v=d)
    qkv = [rng.standard_normal((h, q, d), np.float32) for _ in range(3)]
    cases.append(("streamed", sph, qkv, 2.0 * 2 * h * q * q * d))
    out = {}
    for kind, model, xs, count in cases:
        exe: Any = ncd.compile(model, target)  # a backend's executable takes out=
        params = ncd.init(model, seed=0)
        got = exe(*xs, params=params)
        keep = got.copy()
        best = float("inf")
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            exe(*xs, params=params, out=keep)
            best = min(best, time.perf_counter() - t0)
        out[kind] = count / best if count else best
    return out


def with_target(machine: Machine, target: str) -> Machine:
    """``machine`` (the host) with the achieved rates of ``target``'s code, measured once per
    host and cached beside the calibration; unchanged when the target cannot run here (its
    plugin or device missing), its NumPy rates then standing in."""
    from ncd.errors import NcdError

    cal = calibration()
    if target not in cal.targets:
        try:
            rates = measure_target(target)
        except (NcdError, ImportError, RuntimeError, OSError):
            return machine
        cal = attrs.evolve(cal, targets={**cal.targets, target: rates})
        _write(cal)
    rates = dict(cal.targets[target])
    launch = rates.pop("launch", machine.launch_latency)
    achieved = {k: dict.fromkeys(("float32", "bfloat16", "float16"), r) for k, r in rates.items()}
    sources = {
        **machine.sources,
        f"target {target}": f"ncd_perf.host.measure_target({target!r}): one op class each, "
        f"compiled by ncd, cached in {cal.path}",
    }
    return attrs.evolve(
        machine,
        targets={**machine.targets, target: achieved},
        sources=sources,
        launch_latency=launch,
    )


def host_machine(refresh: bool = False) -> Machine:
    """The machine ``"host"``: levels DRAM and each cache (capacity per instance, instances
    from the cores sharing one), each filled at the read rate measured with the working set
    resident in the level above and charged its write factor; compute rates as measured
    (16-bit formats run converted to float32 on a CPU: float32's rates)."""
    cal = calibration(refresh)
    info, m = cal.info, cal.measured
    caches = sorted(info.caches, key=lambda c: -c.level)  # outermost (L3) first
    levels = [Level("DRAM", float(info.memory))]
    above = "DRAM"
    for c in caches:
        levels.append(
            Level(
                f"L{c.level}",
                float(c.size),
                m[f"read_{above}"],
                max(1, info.cores // max(1, min(c.shared_by, info.cores))),
                write_factor=write_factor(m, above),
            )
        )
        above = f"L{c.level}"
    f32 = {k: m[f"{k}_float32"] for k in ("matmul", "vector", "exp")}
    half = ("bfloat16", "float16", "float8")
    compute = {
        "matrix": {"float32": f32["matmul"], "float64": m["matmul_float64"]}
        | dict.fromkeys(half, f32["matmul"]),
        "vector": {"float32": f32["vector"], "float64": m["vector_float64"]}
        | dict.fromkeys(half, f32["vector"]),
        "reduce": {"float32": m["reduce_float32"], "float64": m["reduce_float64"]}
        | dict.fromkeys(half, m["reduce_float32"]),
        "special": {"float32": f32["exp"], "float64": m["exp_float64"]}
        | dict.fromkeys(half, f32["exp"]),
        "erf": dict.fromkeys(("float32", *half), m["erf_float32"]),
    }
    sources = {
        "detected": f"{info.describe()} (/proc/cpuinfo, /sys/devices/system/cpu/cpu0/cache)",
        "calibrated": f"ncd_perf.host.measure, {cal.stamp}, cached in {cal.path}: NumPy on "
        f"{info.cores} threads at once, best of 3",
        "formats": "16-bit and 8-bit floats are converted to float32 on a CPU: float32's rates",
        "launch": "a parallel region's fork/join, of the order of microseconds: 5 us assumed",
        "overlap": "compute-sum: a core runs one instruction stream, so exp polynomials, "
        "reductions and FMAs share its ports and add; out-of-order execution and prefetch "
        "overlap memory with them",
    }
    return Machine(
        "host",
        tuple(levels),
        compute,
        5e-6,
        sources=sources,
        description=f"this machine, detected and measured: {info.describe()}",
        overlap="compute-sum",  # one instruction stream per core; prefetch hides memory
    )


def machine_toml(machine: Machine) -> str:
    """``machine`` as a machine file ``load_machine`` reads back (sources included)."""

    def value(v: Any) -> str:
        return json.dumps(v) if isinstance(v, str) else repr(float(v))

    lines = [
        f"# written by `ncd calibrate` on {time.strftime('%Y-%m-%d', time.gmtime())}",
        f"name = {value(machine.name)}",
        f"description = {value(machine.description)}",
        f"launch_latency = {value(machine.launch_latency)}",
        f"overlap = {value(machine.overlap)}",
        "",
        "[sources]",
        *(f"{k} = {value(v)}" for k, v in machine.sources.items()),
    ]
    for lv in machine.levels:
        lines += ["", "[[levels]]", f"name = {value(lv.name)}"]
        if lv.capacity is not None:
            lines.append(f"capacity = {value(lv.capacity)}")
        if lv.bandwidth is not None:
            lines.append(f"bandwidth = {value(lv.bandwidth)}  # calibrated")
        lines += [f"instances = {lv.instances}", f"write_factor = {value(lv.write_factor)}"]
    for kind, table in machine.compute.items():
        lines += ["", f"[compute.{kind}]", *(f"{d} = {value(r)}" for d, r in table.items())]
    return "\n".join(lines) + "\n"
