"""Make pyopencl[pocl]'s PoCL 3.0 usable on CPUs its LLVM 14 does not know.

LLVM 14 names an unknown host CPU (AMD family 26, Zen 5, is one) ``generic``, which PoCL passes
to clang as ``-target-cpu`` and every build fails with "unknown target CPU 'generic'" (PoCL
issue #1049). The fix used here: a copy of the wheel's ``libpocl`` whose ``generic`` strings
read ``skylake`` (same length: an AVX2/FMA target every such CPU runs), kept in the cache
directory beside links to PoCL's data files, and registered through ``OCL_ICD_VENDORS``
before the OpenCL loader starts. ``NCD_OPENCL_POCL_FIX=0`` disables it, ``=1`` forces it.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re

__all__ = ["ensure_usable_pocl", "needs_fix"]

_DONE = False


def needs_fix() -> bool:
    forced = os.environ.get("NCD_OPENCL_POCL_FIX", "")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read(4096)
    except OSError:
        return False
    fam = re.search(r"cpu family\s*:\s*(\d+)", info)
    return "AuthenticAMD" in info and fam is not None and int(fam.group(1)) > 25


def _site_dir(package: str) -> str | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(next(iter(spec.submodule_search_locations)))


def ensure_usable_pocl(cache: str) -> str | None:
    """Register a patched PoCL if this CPU needs it; returns the vendors folder used."""
    global _DONE
    if _DONE or not needs_fix() or "OCL_ICD_VENDORS" in os.environ:
        return None
    _DONE = True
    site = _site_dir("pyopencl")
    libs = glob.glob(os.path.join(site or "", "pyopencl", ".libs", "libpocl*.so*"))
    data = os.path.join(site or "", "pocl_binary_distribution", ".libs")
    if not libs or not os.path.isdir(data):
        return None
    lib = libs[0]
    st = os.stat(lib)
    root = os.path.join(cache, f"pocl-{st.st_size}-{int(st.st_mtime)}")
    # PoCL finds its headers relative to itself (../../pocl_binary_distribution/.libs/share)
    libdir = os.path.join(root, "pyopencl", ".libs")
    patched = os.path.join(libdir, os.path.basename(lib))
    if not os.path.exists(patched):
        os.makedirs(libdir, exist_ok=True)
        mirror = os.path.join(root, "pocl_binary_distribution", ".libs")
        os.makedirs(mirror, exist_ok=True)
        for entry in os.listdir(data):
            link = os.path.join(mirror, entry)
            if not os.path.lexists(link):
                os.symlink(os.path.join(data, entry), link)
        with open(lib, "rb") as f:
            blob = bytearray(f.read())
        for m in list(re.finditer(rb"generic\x00", blob)):
            blob[m.start() : m.start() + 7] = b"skylake"
        tmp = f"{patched}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.chmod(tmp, 0o755)
        os.replace(tmp, patched)
    with open(os.path.join(libdir, "ncd-pocl.icd"), "w") as f:
        f.write(patched + "\n")
    os.environ["OCL_ICD_VENDORS"] = libdir + os.sep
    return libdir
