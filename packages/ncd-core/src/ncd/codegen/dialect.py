"""What differs between C-like kernel languages: qualifiers, work-item ids, barriers, math, and
the element formats (storage types, arithmetic types, literals, vectors, load/store conversions).

The generator writes every target-specific token through a ``Dialect``; OpenCL and CUDA are two
instances of this class, not two generators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from ncd.errors import DTypeError

__all__ = ["COMPUTE", "C_MATH", "C_TYPES", "Dialect"]

#: ncd dtype -> C storage type (a buffer's element type). bfloat16 is stored as its 16 bits
#: (``unsigned short``) and converted by the dialect's load/store functions; float16 as C's
#: ``half`` (OpenCL 1.2 allows ``half`` pointers without an extension, read by ``vload_half``).
C_TYPES: dict[str, str] = {
    "float64": "double",
    "float32": "float",
    "float16": "half",
    "bfloat16": "ushort",
    "int64": "long",
    "int32": "int",
    "bool": "uchar",  # 0 or 1, computed as 0.0 / 1.0 in the arithmetic type
}
#: storage dtype -> the dtype its arithmetic runs in (reduced formats compute in float32).
COMPUTE: dict[str, str] = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float32",
    "bfloat16": "float32",
}

#: Portable math names -> the C spelling used by default (OpenCL C's overloaded builtins).
#: ``fmax``/``fmin`` mean the reference's (NumPy's maximum: a NaN operand gives NaN), which C's
#: ``fmax`` is not: a dialect spells them NaN-propagating (OpenCL's ``NCD_FMAX`` select);
#: ``fmax_any``/``fmin_any`` may drop a NaN operand (a softmax's running maximum: a NaN score
#: makes the row NaN through its exponential anyway), which compiles and runs cheaper.
C_MATH: dict[str, str] = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "fabs": "fabs",
    "fmax": "fmax",
    "fmin": "fmin",
    "fmax_any": "fmax",
    "fmin_any": "fmin",
    "erf": "erf",
    "tanh": "tanh",
    "pow": "pow",
    "fmod": "fmod",
    "copysign": "copysign",
    "floor": "floor",
}


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


# C's spellings, the defaults a dialect overrides: ``{buf}``/``{addr}``/``{value}`` are the
# buffer, the element offset and the value in the arithmetic type.
_LOADS = {"float64": "{buf}[{addr}]", "float32": "{buf}[{addr}]"}
_STORES = {"float64": "{buf}[{addr}] = {value};", "float32": "{buf}[{addr}] = {value};"}
_SUFFIX = {"float32": "f", "float64": ""}
_INF = {"float32": "INFINITY", "float64": "HUGE_VAL"}
_NAN = {"float32": "NAN", "float64": "(double)NAN"}
_LOWEST = {"float32": "-3.402823466e38f", "float64": "-1.7976931348623157e308"}


@attrs.frozen
class Dialect:
    """The tokens of one C-like kernel language.

    ``global_id``/``local_id``/``group_id``/``local_size`` are format strings over ``{d}``, the
    dimension (0, 1, 2). ``math`` maps portable names (``exp``, ``rsqrt``...) to builtins.
    """

    name: str
    kernel: str = "__kernel void"
    global_: str = "__global"
    local: str = "__local"
    const: str = "const"
    restrict: str = "restrict"
    barrier: str = "barrier(CLK_LOCAL_MEM_FENCE);"
    global_id: str = "(int)get_global_id({d})"
    local_id: str = "(int)get_local_id({d})"
    group_id: str = "(int)get_group_id({d})"
    local_size: str = "(int)get_local_size({d})"
    inf: str = "INFINITY"  # float32's infinity, kept for callers; the generator uses ``infinity``
    preamble: str = ""
    math: Mapping[str, str] = attrs.field(factory=lambda: dict(C_MATH), converter=_frozen_map)
    #: ``"name:dtype"`` -> the builtin for that intrinsic at that arithmetic type, where it
    #: differs from ``math`` (which serves every dtype: C's overloaded builtins)
    intrinsics: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: Attribute fixing a kernel's work-group shape (``{x} {y} {z}``, ``{n}`` their product); ""
    #: for none. OpenCL writes it on the line before the kernel, CUDA (``attr_inline``) between
    #: the return type and the name (``__launch_bounds__``).
    reqd_local: str = ""
    attr_inline: bool = False
    #: Lanes of the float vector type used for row kernels (``float8``); 0: no vector types.
    vector_width: int = 0
    #: Threads of a warp (a SIMT group exchanging registers) and the shuffle reading
    #: ``{value}`` from the lane whose index is this lane's xor ``{offset}`` (CUDA's
    #: ``__shfl_xor_sync``); 0 / "": no lane mode (``ncd.codegen.lanes``).
    warp_size: int = 0
    shuffle_xor: str = ""
    #: Type for vector loads/stores at any element alignment (a typedef the preamble declares,
    #: so buffers need only element alignment); "" means the aligned vector type itself.
    unaligned_vector: str = ""
    #: Index type of kernels where an element offset can pass 2^31 - 1 (``long`` in OpenCL C,
    #: ``long long`` in CUDA), and the global id read at that width; others index with ``int``.
    index64: str = "long"
    global_id64: str = "(long)get_global_id({d})"
    # -- element formats (a second dialect fills the same tables with its spellings) --------------
    #: dtype -> C storage type of a buffer element.
    ctypes: Mapping[str, str] = attrs.field(factory=lambda: dict(C_TYPES), converter=_frozen_map)
    #: storage dtype -> the dtype arithmetic on it runs in.
    compute: Mapping[str, str] = attrs.field(factory=lambda: dict(COMPUTE), converter=_frozen_map)
    #: arithmetic dtype -> literal suffix (``1.5f``), infinity, NaN and lowest finite spellings.
    suffix: Mapping[str, str] = attrs.field(factory=lambda: dict(_SUFFIX), converter=_frozen_map)
    infinity: Mapping[str, str] = attrs.field(factory=lambda: dict(_INF), converter=_frozen_map)
    nan: Mapping[str, str] = attrs.field(factory=lambda: dict(_NAN), converter=_frozen_map)
    lowest: Mapping[str, str] = attrs.field(factory=lambda: dict(_LOWEST), converter=_frozen_map)
    #: storage dtype -> scalar load expression / store statement (``{buf}``, ``{addr}``,
    #: ``{value}``), converting between the storage and the arithmetic type.
    loads: Mapping[str, str] = attrs.field(factory=lambda: dict(_LOADS), converter=_frozen_map)
    stores: Mapping[str, str] = attrs.field(factory=lambda: dict(_STORES), converter=_frozen_map)
    #: dtype -> ``{value}`` (arithmetic type) rounded to that format and back: what a value of
    #: that format holds when a kernel computes it without storing it.
    rounds: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: storage dtype -> load of ``{n}`` consecutive elements at pointer ``{ptr}`` into an
    #: arithmetic vector (``{space}``: the pointer's address-space qualifier, ``{u}``: the
    #: element-aligned vector type of ``unaligned``); a dtype missing here has no vector loads.
    vector_loads: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: storage dtype -> the statement storing the arithmetic vector ``{value}`` at ``{ptr}``
    #: (same fields as ``vector_loads``); ``vector_rounds``: ``rounds`` for vectors.
    vector_stores: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    vector_rounds: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: storage dtype -> element-aligned vector typedef name at ``vector_width`` lanes.
    unaligned: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: storage or arithmetic dtype -> text the program needs once when a kernel uses it
    #: (conversion functions, an extension pragma), after ``preamble``.
    dtype_preamble: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    #: ``{ctype}{n}``: the vector type of ``n`` lanes; ``{expr}.s{k:x}``: lane ``k`` of a vector.
    vector_type: str = "{ctype}{n}"
    lane_access: str = "{expr}.s{k:x}"

    # -- element formats --------------------------------------------------------------------------
    def _table(self, table: Mapping[str, str], dtype: str, what: str) -> str:
        hit = table.get(str(dtype))
        if hit is None:
            runs = ", ".join(sorted(k for k in self.compute if k in self.loads))
            raise DTypeError(
                f"the {self.name} code generator has no {what} for the format {dtype}; it runs "
                f"{runs}. Fix: cast the model (or this part of it, ops.cast) to one of these."
            )
        return hit

    def ctype(self, dtype: str) -> str:
        """The C storage type of an element of ``dtype``."""
        return self._table(self.ctypes, dtype, "storage type")

    def arith(self, dtype: str) -> str:
        """The dtype arithmetic on ``dtype`` values runs in (float32 for float16/bfloat16)."""
        return self._table(self.compute, dtype, "arithmetic type")

    def literal(self, x: float | str, dtype: str = "float32") -> str:
        """A literal of arithmetic type ``dtype``: ``1.5f`` (float), ``1.5`` (double); ``x`` a
        number or its decimal spelling (kept digit for digit); infinities and NaN spelled per
        dtype."""
        suffix = self._table(self.suffix, dtype, "literal")
        if isinstance(x, str):
            return f"{x}{suffix}"
        if math.isnan(x):
            return self._table(self.nan, dtype, "NaN")
        if math.isinf(x):
            inf = self._table(self.infinity, dtype, "infinity")
            return inf if x > 0 else f"-{inf}"
        return f"{float(x)!r}{suffix}"

    def vector(self, ctype: str, n: int) -> str:
        """The vector type of ``n`` lanes of ``ctype`` (``float8``)."""
        return self.vector_type.format(ctype=ctype, n=n)

    def lane(self, expr: str, k: int) -> str:
        """Lane ``k`` of the vector ``expr``."""
        return self.lane_access.format(expr=expr, k=k)

    def load(self, dtype: str, buf: str, addr: str) -> str:
        """Element ``addr`` of buffer ``buf`` (of storage ``dtype``) in its arithmetic type;
        integer buffers are read as they are."""
        if str(dtype) not in self.compute:
            return f"{buf}[{addr}]"
        return self._table(self.loads, dtype, "load").format(buf=buf, addr=addr)

    def store(self, dtype: str, buf: str, addr: str, value: str) -> str:
        """The statement writing ``value`` (arithmetic type) to element ``addr`` of ``buf``."""
        if str(dtype) not in self.compute:
            return f"{buf}[{addr}] = {value};"
        return self._table(self.stores, dtype, "store").format(buf=buf, addr=addr, value=value)

    def round(self, dtype: str, value: str, vector: bool = False) -> str:
        """``value`` (a vector with ``vector``) rounded to ``dtype`` (unchanged when the dialect
        has no rounding for it)."""
        form = (self.vector_rounds if vector else self.rounds).get(str(dtype))
        return value if form is None else form.format(value=value)

    def vector_store(self, dtype: str, ptr: str, space: str, value: str) -> str | None:
        """The statement storing vector ``value`` at ``ptr``; ``None``: no vector stores."""
        form = self.vector_stores.get(str(dtype))
        if form is None:
            return None
        u = self.unaligned.get(str(dtype), self.vector(self.ctype(dtype), self.vector_width))
        return form.format(ptr=ptr, space=space, u=u, n=self.vector_width, value=value)

    def vectorises(self, dtype: str) -> bool:
        """Vector loads, stores and (if it needs one) rounding exist for ``dtype``."""
        d = str(dtype)
        needs_round = self.compute.get(d, d) != d  # a reduced format (computed wider)
        return (
            d in self.vector_loads
            and d in self.vector_stores
            and (not needs_round or d in self.vector_rounds)
        )

    def vector_load(self, dtype: str, ptr: str, space: str) -> str | None:
        """``vector_width`` elements at ``ptr`` as an arithmetic vector; ``None``: no vector
        loads for ``dtype`` (the caller falls back to scalars)."""
        form = self.vector_loads.get(str(dtype))
        if form is None:
            return None
        u = self.unaligned.get(str(dtype), self.vector(self.ctype(dtype), self.vector_width))
        return form.format(ptr=ptr, space=space, u=u, n=self.vector_width)

    def fn(self, name: str) -> str:
        """The builtin spelling of the portable math function ``name``."""
        return self.math.get(name, name)

    def intrinsic(self, name: str, dtype: str) -> str:
        """The builtin computing the portable function ``name`` on ``dtype`` operands."""
        return self.intrinsics.get(f"{name}:{dtype}") or self.fn(name)

    def gid(self, d: int, wide: bool = False) -> str:
        return (self.global_id64 if wide else self.global_id).format(d=d)

    def lid(self, d: int) -> str:
        return self.local_id.format(d=d)

    def grp(self, d: int) -> str:
        return self.group_id.format(d=d)

    def declaration(self, name: str, local: tuple[int, ...] | None) -> str:
        """The kernel's head up to its argument list: qualifiers, launch attribute, name."""
        attr = ""
        if local is not None and self.reqd_local:
            x, y, z = [*local, 1, 1][:3]
            attr = self.reqd_local.format(x=x, y=y, z=z, n=x * y * z)
        if self.attr_inline:
            return f"{self.kernel} {attr + ' ' if attr else ''}{name}("
        return f"{attr + chr(10) if attr else ''}{self.kernel} {name}("

    def pointer(self, ctype: str, *, const: bool) -> str:
        """A kernel argument type for a buffer of ``ctype`` in global memory."""
        qual = f"{self.global_} " if self.global_ else ""
        c = f"{self.const} " if const else ""
        r = f" {self.restrict}" if self.restrict else ""
        return f"{qual}{c}{ctype}*{r}"
