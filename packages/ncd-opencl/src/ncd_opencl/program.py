"""Building OpenCL programs: device choice, in-memory and on-disk caches, readable errors.

Programs are cached by the SHA-256 of (source, build options, device, driver version): in
memory for the process, and as device binaries under ``NCD_OPENCL_CACHE`` (default
``~/.cache/ncd-opencl``) so a later process skips the compiler.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from ncd.errors import CompileError, TargetNotFoundError

__all__ = ["build", "cache_dir", "default_options", "get_context", "source_excerpt"]

_CONTEXTS: dict[str, tuple[Any, Any, Any]] = {}
_PROGRAMS: dict[str, Any] = {}
STATS = {"memory_hits": 0, "disk_hits": 0, "builds": 0}


def cache_dir() -> str:
    return os.environ.get("NCD_OPENCL_CACHE", os.path.join(os.path.expanduser("~"), ".cache",
                                                            "ncd-opencl"))


def get_context(device: str | None = None) -> tuple[Any, Any, Any]:
    """(context, queue, device) for ``device``: ``None`` = the first device of the first
    platform (PoCL's CPU device with pyopencl[pocl]); ``"P:D"`` indices; or a substring of
    the platform or device name."""
    key = device or ""
    if key in _CONTEXTS:
        return _CONTEXTS[key]
    from ncd_opencl._pocl import ensure_usable_pocl

    ensure_usable_pocl(cache_dir())
    import pyopencl as cl

    choices = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    if not choices:
        raise TargetNotFoundError("no OpenCL device found; install pyopencl[pocl] for a CPU device")
    chosen = choices[0]
    if device:
        if re.fullmatch(r"\d+:\d+", device):
            pi, di = (int(t) for t in device.split(":"))
            found = [(p, d) for p, d in choices if cl.get_platforms().index(p) == pi]
            chosen = found[di] if di < len(found) else None  # type: ignore[assignment]
        else:
            hits = [(p, d) for p, d in choices if device.lower() in f"{p.name} {d.name}".lower()]
            chosen = hits[0] if hits else None  # type: ignore[assignment]
        if chosen is None:
            have = "; ".join(f"{p.name} / {d.name}" for p, d in choices)
            raise TargetNotFoundError(f"no OpenCL device matches {device!r}; have: {have}")
    ctx = cl.Context([chosen[1]])
    queue = cl.CommandQueue(ctx)
    _CONTEXTS[key] = (ctx, queue, chosen[1])
    return _CONTEXTS[key]


def default_options(fast_math: bool = True) -> list[str]:
    # relaxed math lets the compiler re-associate reductions and vectorise exp (PERF-NOTES)
    return ["-cl-fast-relaxed-math", "-cl-mad-enable"] if fast_math else []


def source_excerpt(source: str, log: str, context: int = 4) -> str:
    """The build log's first error, with the generated lines around it."""
    lines = source.splitlines()
    m = re.search(r":(\d+):(\d+):\s*error", log) or re.search(r":(\d+):(\d+):", log)
    if not m:
        return "\n".join(f"{i + 1:5d} | {t}" for i, t in enumerate(lines[:40]))
    n = int(m.group(1))
    lo, hi = max(1, n - context), min(len(lines), n + context)
    return "\n".join(f"{'>' if i == n else ' '}{i:4d} | {lines[i - 1]}" for i in range(lo, hi + 1))


def build(source: str, device: str | None = None, options: list[str] | None = None) -> Any:
    """A built ``pyopencl.Program`` for ``source`` (cached); ``CompileError`` on failure."""
    import pyopencl as cl

    ctx, _, dev = get_context(device)
    opts = list(options if options is not None else default_options())
    ident = "\0".join([source, " ".join(opts), dev.name, dev.platform.name, dev.driver_version])
    key = hashlib.sha256(ident.encode()).hexdigest()
    if key in _PROGRAMS:
        STATS["memory_hits"] += 1
        return _PROGRAMS[key]
    path = os.path.join(cache_dir(), f"{key}.bin")
    prog = None
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                prog = cl.Program(ctx, [dev], [f.read()]).build(options=opts)
            STATS["disk_hits"] += 1
        except Exception:  # a stale or foreign binary: rebuild from source
            prog = None
    if prog is None:
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
        STATS["builds"] += 1
        _store(path, prog)
    _PROGRAMS[key] = prog
    return prog


def _first_errors(log: str, n: int = 6) -> str:
    hits = [ln for ln in log.splitlines() if "error" in ln.lower()]
    return "\n".join(hits[:n]) or log[:800]


def _store(path: str, prog: Any) -> None:
    try:
        binaries = prog.get_info(__import__("pyopencl").program_info.BINARIES)
        if binaries and binaries[0]:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(binaries[0])
            os.replace(tmp, path)
    except OSError:
        pass  # the disk cache is an optimisation; a read-only home must not break compiling
