"""What differs between C-like kernel languages: qualifiers, work-item ids, barriers, math.

The generator writes every target-specific token through a ``Dialect``; OpenCL and CUDA are two
instances of this class, not two generators.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["C_MATH", "Dialect"]

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
}


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


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
    inf: str = "INFINITY"
    preamble: str = ""
    math: Mapping[str, str] = attrs.field(factory=lambda: dict(C_MATH), converter=_frozen_map)
    #: Attribute written before a kernel to fix its work-group shape, ``{x} {y} {z}``; "" for none.
    reqd_local: str = ""
    #: Lanes of the float vector type used for row kernels (``float8``); 0: no vector types.
    vector_width: int = 0
    #: Type for vector loads/stores at any element alignment (a typedef the preamble declares,
    #: so buffers need only element alignment); "" means the aligned vector type itself.
    unaligned_vector: str = ""
    #: Index type of kernels where an element offset can pass 2^31 - 1 (``long`` in OpenCL C,
    #: ``long long`` in CUDA), and the global id read at that width; others index with ``int``.
    index64: str = "long"
    global_id64: str = "(long)get_global_id({d})"

    def fn(self, name: str) -> str:
        """The builtin spelling of the portable math function ``name``."""
        return self.math.get(name, name)

    def gid(self, d: int, wide: bool = False) -> str:
        return (self.global_id64 if wide else self.global_id).format(d=d)

    def lid(self, d: int) -> str:
        return self.local_id.format(d=d)

    def grp(self, d: int) -> str:
        return self.group_id.format(d=d)

    def pointer(self, ctype: str, *, const: bool) -> str:
        """A kernel argument type for a buffer of ``ctype`` in global memory."""
        qual = f"{self.global_} " if self.global_ else ""
        c = f"{self.const} " if const else ""
        r = f" {self.restrict}" if self.restrict else ""
        return f"{qual}{c}{ctype}*{r}"
