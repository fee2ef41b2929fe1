"""Building OpenCL programs: device choice, in-memory and on-disk caches, readable errors.

Programs are keyed by the SHA-256 of (source, build options, device, driver version). The
process keeps the most recently used ones in memory (``NCD_OPENCL_PROGRAMS``, default 64);
device binaries go to a private on-disk cache (``NCD_OPENCL_CACHE``, else
``$XDG_CACHE_HOME/ncd-opencl``, else ``~/.cache/ncd-opencl``) bounded by
``NCD_OPENCL_CACHE_MB`` (default 256; 0 turns it off). Each entry carries its key and the
SHA-256 of its binary and is written atomically; an entry that does not verify is rebuilt and
replaced, so only a binary this driver produced for this exact key is ever loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from typing import Any

from ncd.errors import CompileError, TargetNotFoundError
from ncd.errors import source_excerpt as excerpt

__all__ = [
    "build",
    "cache_dir",
    "default_options",
    "get_context",
    "source_excerpt",
    "usable_cache_dir",
]

_LOCK = threading.RLock()  # guards the tables below; per-key locks serialise one build
_CONTEXTS: dict[str, tuple[Any, Any, Any]] = {}
_PROGRAMS: OrderedDict[str, Any] = OrderedDict()
_BUILDING: dict[str, threading.Lock] = {}
_CHECKED: dict[str, str | None] = {}  # cache path -> usable path (None: refused, warned once)
STATS = {"memory_hits": 0, "disk_hits": 0, "builds": 0, "disk_rejected": 0}

_MAGIC = b"NCD-OPENCL-BIN 1\n"
_HEADER = len(_MAGIC) + 64 + 1 + 64 + 1 + 16 + 1  # magic, key, sha256(binary), length (hex)
_NO_DEVICE = (
    'Fix: pip install "pyopencl[pocl]" for PoCL\'s CPU device (ncd-opencl depends on '
    "it), or install the OpenCL driver (ICD) of your GPU."
)


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def cache_dir() -> str:
    """Where device binaries go (see the module docstring); not checked, see
    ``usable_cache_dir``."""
    if os.environ.get("NCD_OPENCL_CACHE"):
        return os.environ["NCD_OPENCL_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ncd-opencl")


def usable_cache_dir() -> str | None:
    """``cache_dir()``, created with mode 0700, when it is private to this user; ``None`` (no
    disk cache, one warning) when it is owned by someone else or writable by group or others,
    since anyone who can write there could make this process load their binary."""
    path = cache_dir()
    with _LOCK:
        if path in _CHECKED:
            return _CHECKED[path]
        _CHECKED[path] = _check_private(path)
        return _CHECKED[path]


def _check_private(path: str) -> str | None:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        warnings.warn(f"ncd-opencl: no disk cache ({path}: {e})", RuntimeWarning, stacklevel=3)
        return None
    getuid = getattr(os, "getuid", None)
    owner_ok = getuid is None or st.st_uid == getuid()
    if owner_ok and not st.st_mode & 0o022:
        return path
    why = "is owned by another user" if not owner_ok else "is writable by group or others"
    warnings.warn(
        f"ncd-opencl: not using the program cache {path}: it {why}, so another user "
        "could plant binaries there. Fix: chmod 700 it, or point NCD_OPENCL_CACHE at a "
        "directory of your own.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def _platforms(cl: Any) -> list[tuple[Any, list[Any]]]:
    """Every platform with its devices; ``TargetNotFoundError`` with the fix when none."""
    try:
        platforms = cl.get_platforms()
    except (cl.Error, RuntimeError) as e:  # PLATFORM_NOT_FOUND_KHR: a loader with no driver
        raise TargetNotFoundError(f"no OpenCL platform found ({e}). {_NO_DEVICE}") from None
    found = []
    for p in platforms:
        try:
            found.append((p, list(p.get_devices())))
        except (cl.Error, RuntimeError):  # DEVICE_NOT_FOUND: a platform without devices
            found.append((p, []))
    if not any(devs for _, devs in found):
        names = ", ".join(p.name for p, _ in found) or "none"
        raise TargetNotFoundError(f"no OpenCL device found (platforms: {names}). {_NO_DEVICE}")
    return found


def get_context(device: str | None = None) -> tuple[Any, Any, Any]:
    """(context, queue, device) for ``device``: ``None`` = the first device of the first
    platform (PoCL's CPU device with pyopencl[pocl]); ``"P:D"`` indices; or a substring of
    the platform or device name."""
    key = device or ""
    with _LOCK:
        if key not in _CONTEXTS:
            _CONTEXTS[key] = _open(device)
        return _CONTEXTS[key]


def _open(device: str | None) -> tuple[Any, Any, Any]:
    from ncd_opencl._pocl import ensure_usable_pocl, needs_fix

    if needs_fix():  # the patched PoCL goes where only this user can write
        ensure_usable_pocl(usable_cache_dir() or tempfile.mkdtemp(prefix="ncd-opencl-"))
    import pyopencl as cl

    platforms = _platforms(cl)
    choices = [(p, d) for p, devs in platforms for d in devs]
    chosen: tuple[Any, Any] | None = choices[0]
    if device:
        if re.fullmatch(r"\d+:\d+", device):
            pi, di = (int(t) for t in device.split(":"))
            devs = platforms[pi][1] if pi < len(platforms) else []
            chosen = (platforms[pi][0], devs[di]) if di < len(devs) else None
        else:
            hits = [(p, d) for p, d in choices if device.lower() in f"{p.name} {d.name}".lower()]
            chosen = hits[0] if hits else None
        if chosen is None:
            have = "; ".join(f"{p.name} / {d.name}" for p, d in choices)
            raise TargetNotFoundError(
                f"no OpenCL device matches {device!r}; have: {have}. Fix: "
                'pass device= as one of these names or as "P:D" indices.'
            )
    assert chosen is not None
    ctx = cl.Context([chosen[1]])
    return ctx, cl.CommandQueue(ctx), chosen[1]


#: The default: re-association (vectorised reductions, PERF-NOTES), contraction to fma and
#: unsigned zeros, but IEEE infinities and NaNs, as the reference computes them.
IEEE_OPTIONS = ("-cl-unsafe-math-optimizations", "-cl-mad-enable", "-cl-no-signed-zeros")
#: ``fast_math=True``: the above plus ``-cl-finite-math-only`` (what ``-cl-fast-relaxed-math``
#: adds): the compiler may assume no value is inf or NaN, so a non-finite input or overflow
#: gives unspecified results (even an output left unwritten).
FAST_OPTIONS = ("-cl-fast-relaxed-math", "-cl-mad-enable")


def default_options(fast_math: bool = False) -> list[str]:
    """Build options: IEEE non-finite semantics by default, finite-math-only on request."""
    return list(FAST_OPTIONS if fast_math else IEEE_OPTIONS)


def source_excerpt(source: str, log: str, context: int = 4) -> str:
    """The build log's first error, with the generated lines around it."""
    m = re.search(r":(\d+):(\d+):\s*error", log) or re.search(r":(\d+):(\d+):", log)
    return excerpt(source, int(m.group(1)) if m else None, context)


def build(source: str, device: str | None = None, options: list[str] | None = None) -> Any:
    """A built ``pyopencl.Program`` for ``source`` (cached); ``CompileError`` on failure.
    Thread-safe: concurrent calls for one program build it once."""
    ctx, _, dev = get_context(device)
    opts = list(options if options is not None else default_options())
    ident = "\0".join([source, " ".join(opts), dev.name, dev.platform.name, dev.driver_version])
    key = hashlib.sha256(ident.encode()).hexdigest()
    with _LOCK:
        prog = _remembered(key)
        if prog is not None:
            return prog
        lock = _BUILDING.setdefault(key, threading.Lock())
    with lock:
        with _LOCK:
            prog = _remembered(key)
        if prog is None:
            prog = _from_disk(key, ctx, dev, opts) or _compile(key, source, ctx, dev, opts)
        with _LOCK:
            _PROGRAMS[key] = prog
            while len(_PROGRAMS) > max(1, int(_env_number("NCD_OPENCL_PROGRAMS", 64))):
                _PROGRAMS.popitem(last=False)  # least recently used
            _BUILDING.pop(key, None)
    return prog


def _remembered(key: str) -> Any:
    prog = _PROGRAMS.get(key)
    if prog is not None:
        _PROGRAMS.move_to_end(key)
        STATS["memory_hits"] += 1
    return prog


def _compile(key: str, source: str, ctx: Any, dev: Any, opts: list[str]) -> Any:
    import pyopencl as cl

    try:
        prog = cl.Program(ctx, source).build(options=opts)
    except cl.RuntimeError as e:
        log = str(e)
        raise CompileError(
            f"OpenCL build failed on {dev.name}:\n{_first_errors(log)}\n\ngenerated source near "
            f"the error:\n{source_excerpt(source, log)}\n\nFix: this is a code generation bug "
            "or an unsupported op; report it with the model (ncd compile --emit writes the "
            "full source)."
        ) from None
    with _LOCK:
        STATS["builds"] += 1
    binaries = prog.get_info(cl.program_info.BINARIES)
    if binaries and binaries[0]:
        _store(key, bytes(binaries[0]))
    return prog


def _first_errors(log: str, n: int = 6) -> str:
    hits = [ln for ln in log.splitlines() if "error" in ln.lower()]
    return "\n".join(hits[:n]) or log[:800]


# ---- the on-disk cache: verified entries, atomic writes, LRU by modification time ----------


def _limit_bytes() -> int:
    return int(_env_number("NCD_OPENCL_CACHE_MB", 256) * 2**20)


def _entry(key: str) -> str | None:
    folder = usable_cache_dir() if _limit_bytes() > 0 else None
    return None if folder is None else os.path.join(folder, f"{key}.bin")


def pack_entry(key: str, binary: bytes) -> bytes:
    """An entry: magic, its key, the SHA-256 of the binary and its length, then the binary."""
    digest = hashlib.sha256(binary).hexdigest()
    return b"".join(
        [
            _MAGIC,
            key.encode(),
            b"\n",
            digest.encode(),
            b"\n",
            f"{len(binary):016x}".encode(),
            b"\n",
            binary,
        ]
    )


def unpack_entry(key: str, blob: bytes) -> bytes | None:
    """The binary of an entry for ``key``; ``None`` on any mismatch (another key, a truncated
    or altered binary, a foreign or older file format)."""
    head, binary = blob[:_HEADER], blob[_HEADER:]
    if len(head) != _HEADER or not head.startswith(_MAGIC):
        return None
    fields = head[len(_MAGIC) :].split(b"\n")
    if len(fields) != 4 or fields[0] != key.encode() or fields[3] != b"":
        return None
    try:
        length = int(fields[2], 16)
    except ValueError:
        return None
    if length != len(binary) or hashlib.sha256(binary).hexdigest().encode() != fields[1]:
        return None
    return binary


def _from_disk(key: str, ctx: Any, dev: Any, opts: list[str]) -> Any:
    import pyopencl as cl

    path = _entry(key)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    binary = unpack_entry(key, blob)
    prog = None
    if binary is not None:
        try:
            prog = cl.Program(ctx, [dev], [binary]).build(options=opts)
        except (cl.Error, RuntimeError):  # the driver refused its own binary: rebuild
            prog = None
    with _LOCK:
        STATS["disk_hits" if prog is not None else "disk_rejected"] += 1
    if prog is not None:
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: last to be evicted
    return prog


def _store(key: str, binary: bytes) -> None:
    """Write an entry atomically (a private temp file, fsync, rename), then evict."""
    path = _entry(key)
    if path is None:
        return
    folder = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=folder)  # 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pack_entry(key, binary))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _evict(folder, _limit_bytes())
    except OSError:
        pass  # the disk cache is an optimisation; a full or read-only disk must not break builds


def _evict(folder: str, limit: int) -> None:
    """Remove the least recently used entries until the cache holds at most ``limit`` bytes
    (and temp files a killed writer left behind an hour ago)."""
    entries = []
    stale = time.time() - 3600
    with os.scandir(folder) as it:
        for e in it:
            if not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
            if e.name.endswith(".bin"):
                entries.append((st.st_mtime, st.st_size, e.path))
            elif e.name.endswith(".tmp") and st.st_mtime < stale:
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
