"""C-like kernel code generation shared by the OpenCL and CUDA backends.

A ``Kernel`` (``ncd.kernel``) is rendered by one generator (``lower.render_kernel``) that walks
the kernel's nodes through a rule table keyed by op class (``rules.CODEGEN_RULES``); the
target only supplies a ``Dialect`` (qualifiers, barriers, work-item ids, math builtins). This
package imports no device library.
"""

from ncd.codegen.dialect import C_MATH, Dialect
from ncd.codegen.layout import Buffer, Layouts, row_major
from ncd.codegen.lower import KernelGen, KernelSource, render_kernel
from ncd.codegen.rules import CODEGEN_RULES, Rule, codegen_rule
from ncd.codegen.source import sanitize

__all__ = [
    "CODEGEN_RULES",
    "C_MATH",
    "Buffer",
    "Dialect",
    "KernelGen",
    "KernelSource",
    "Layouts",
    "Rule",
    "codegen_rule",
    "render_kernel",
    "row_major",
    "sanitize",
]
