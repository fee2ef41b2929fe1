"""Machines as data: memory levels, compute rates per op kind and dtype, latencies, devices.

Level 0 is the backing store (HBM, DRAM); each later level is faster and smaller (L2, shared
memory, L1...). ``capacity`` is per instance (per SM for shared memory), in ``unit`` (bytes, or
elements for the napkin two-level machine); ``bandwidth`` is the aggregate rate at which the
level is filled from the one above, in bytes/s. A machine may have ``devices`` joined by an
``interconnect`` (NVLink, InfiniBand): the device level of distributed models.

Built-in machines live in ``machines/*.toml`` beside this module, every figure with its source.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs
import sympy as sp

__all__ = ["OVERLAPS", "Level", "Link", "Machine", "load_machine", "machine_names"]

Number = Any  # int | float | sympy expression


@attrs.frozen
class Level:
    """One memory level: name, capacity per instance, fill bandwidth (bytes/s), instances."""

    name: str
    capacity: Number = None  # None: unbounded
    bandwidth: Number = None  # bytes/s from the level above; None: not priced
    instances: int = 1
    unit: str = "bytes"  # or "elements"
    #: what writing a byte costs in bytes read at this level's bandwidth: 2 where a store
    #: first reads the line it writes (write-allocate), 1 where it does not
    write_factor: float = 1.0


@attrs.frozen
class Link:
    """A device interconnect: per-device bandwidth (bytes/s, one direction) and latency (s)."""

    name: str
    bandwidth: float
    latency: float


#: a FLOP kind a machine has no rate for is priced at the next kind's rate
RATE_FALLBACK = {"erf": "special", "special": "vector", "reduce": "vector", "streamed": "matrix"}


def _family(dtype: str) -> str:
    """The rate table's name for a format: ``float8_e4m3`` -> ``float8``; an unknown format is
    an ``UnknownDTypeError`` naming the formats (``tfloat32`` is the TF32 matmul path)."""
    if dtype == "tfloat32":
        return dtype
    from ncd.axis import dtype_bytes

    dtype_bytes(dtype)  # raises UnknownDTypeError for a name that is no format
    return dtype.split("_")[0]


#: ``Machine.overlap`` and ``cost(overlap=)``: everything overlaps (the roofline); everything
#: serialises (the napkin paper's sum); op classes add but memory overlaps them (one
#: instruction stream per core: a CPU's exp polynomial and matmul FMAs share its vector ports)
OVERLAPS = ("max", "sum", "compute-sum")


def _levels(value: Any) -> tuple[Level, ...]:
    return tuple(value)


@attrs.frozen
class Machine:
    """A machine: memory levels (slowest first), compute rates ``{kind: {dtype: flop/s}}`` for
    kinds ``matrix``, ``vector``, ``special``, kernel launch latency (s), devices."""

    name: str
    levels: tuple[Level, ...] = attrs.field(converter=_levels)
    compute: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)
    launch_latency: float = 0.0
    devices: int = 1
    interconnect: Link | None = None
    sources: Mapping[str, str] = attrs.field(factory=dict)
    description: str = ""
    #: a GPU's per-SM limits for occupancy (``ncd_perf.occupancy``): ``registers``,
    #: ``max_threads``, ``max_blocks``, ``shared_bytes`` (usable by blocks),
    #: ``shared_per_block`` (reserved by the driver per block), ``register_unit`` (registers
    #: allocated per warp in multiples of it), ``warp``; empty for machines without SMs
    sm: Mapping[str, int] = attrs.field(factory=dict)
    #: how a kernel's times per level and per op class combine: ``"max"`` (they overlap: the
    #: roofline, ncd's default), ``"sum"`` (they serialise, as the napkin paper writes it) or
    #: ``"compute-sum"`` (op classes add, memory overlaps them: ``OVERLAPS``)
    overlap: str = "max"
    #: achieved rates of the code a target generates, ``{target: {kind: {dtype: op/s}}}``,
    #: used in place of ``compute`` when a target's plan is priced (the host measures them)
    targets: Mapping[str, Mapping[str, Mapping[str, float]]] = attrs.field(factory=dict)

    @classmethod
    def two_level(
        cls,
        fast_capacity: Number,
        *,
        unit: str = "elements",
        bandwidth: Number = None,
        name: str = "two-level",
    ) -> Machine:
        """The napkin machine: unbounded slow memory above a fast one of ``fast_capacity``
        (elements by default; a sympy symbol keeps every formula symbolic)."""
        cap = None if fast_capacity in (None, sp.oo) else fast_capacity
        return cls(name, (Level("slow"), Level("fast", cap, bandwidth, 1, unit)))

    def rate(self, kind: str, dtype: str, target: str | None = None) -> float | None:
        """Op/s for ``kind`` in ``dtype`` (for the code ``target`` generates, where the machine
        holds its achieved rates). A kind the machine does not list falls back along
        ``RATE_FALLBACK`` (``erf`` to ``special`` to ``vector``, ``reduce`` to ``vector``);
        within a kind, a dtype not listed takes float32's rate; a name that is no format is
        an ``UnknownDTypeError``."""
        achieved = self.targets.get(target or "", {})
        compute = {**self.compute, **achieved} if achieved else self.compute
        while kind not in compute and kind in RATE_FALLBACK:
            kind = RATE_FALLBACK[kind]
        table = compute.get(kind) or compute.get("vector") or {}
        for key in (dtype, _family(dtype), "float32"):
            if key in table:
                return float(table[key])
        return float(max(table.values())) if table else None

    def with_devices(self, devices: int) -> Machine:
        return attrs.evolve(self, devices=devices)

    def describe(self) -> str:
        lines = [f"{self.name}: {self.description}".rstrip(": ")]
        for i, lv in enumerate(self.levels):
            cap = "unbounded" if lv.capacity is None else f"{_num(lv.capacity)} {lv.unit}"
            bw = "" if lv.bandwidth is None else f", fill {_num(lv.bandwidth)}B/s"
            lines.append(f"  L{i} {lv.name}: {cap} x {lv.instances}{bw}")
        for kind, table in self.compute.items():
            lines.append(
                f"  {kind}: " + ", ".join(f"{d} {_num(r)}FLOP/s" for d, r in table.items())
            )
        if self.devices > 1 and self.interconnect is not None:
            ic = self.interconnect
            lines.append(
                f"  {self.devices} devices over {ic.name}: {_num(ic.bandwidth)}B/s, "
                f"{ic.latency * 1e6:g} us"
            )
        return "\n".join(lines)


def _num(x: Number) -> str:
    try:
        v = float(x)
    except TypeError:
        return str(x)
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {suffix}"
    return f"{v:.4g} "


_HERE = os.path.join(os.path.dirname(__file__), "machines")


def machine_names() -> list[str]:
    """Built-in machine names: files in ``ncd_perf/machines``, and ``host`` (this system,
    detected and calibrated: ``ncd_perf.host``)."""
    return sorted([*(f[:-5] for f in os.listdir(_HERE) if f.endswith(".toml")), "host"])


def _from_dict(data: Mapping[str, Any], fallback_name: str) -> Machine:
    levels = tuple(
        Level(
            lv["name"],
            lv.get("capacity"),
            lv.get("bandwidth"),
            int(lv.get("instances", 1)),
            lv.get("unit", "bytes"),
            float(lv.get("write_factor", 1.0)),
        )
        for lv in data["levels"]
    )
    link = data.get("interconnect")
    return Machine(
        data.get("name", fallback_name),
        levels,
        {k: dict(v) for k, v in data.get("compute", {}).items()},
        float(data.get("launch_latency", 0.0)),
        int(data.get("devices", 1)),
        Link(link["name"], float(link["bandwidth"]), float(link["latency"])) if link else None,
        dict(data.get("sources", {})),
        data.get("description", ""),
        {k: int(v) for k, v in data.get("sm", {}).items()},
        str(data.get("overlap", "max")),
    )


def load_machine(spec: str | Machine) -> Machine:
    """A machine by built-in name (``h100``, ``a100``, ``h200``, ``cpu``; ``host`` is this
    system, detected and calibrated once per host) or from a ``.toml`` / ``.json`` file with
    the same fields."""
    from ncd.errors import NcdError

    if isinstance(spec, Machine):
        return spec
    aliases = {"h100_sxm": "h100", "h100-sxm": "h100", "this": "host", "local": "host"}
    name = aliases.get(spec.lower(), spec.lower())
    if name == "host":
        from ncd_perf.host import host_machine

        return host_machine()
    path = os.path.join(_HERE, f"{name}.toml") if name in machine_names() else spec
    if not os.path.exists(path):
        raise NcdError(
            f"unknown machine {spec!r}: use one of {', '.join(machine_names())} or a "
            ".toml/.json file"
        )
    with open(path, "rb") as f:
        data = json.load(f) if path.endswith(".json") else tomllib.load(f)
    return _from_dict(data, os.path.splitext(os.path.basename(path))[0])
