"""ncd: deep-learning models as algebra over named axes (neural circuit diagrams).

One symbolic model; plugins interpret it as a PyTorch module, fused kernels, a diagram or a
performance model. ``import ncd`` loads no heavy library.
"""

from ncd import nn, ops
from ncd._term import GraphTerm, Term, copy, discard, identity, swap
from ncd._trace import Tensor, trace
from ncd.api import compile, export
from ncd.axis import DTYPES, ArrayType, Axis, axes, dtype_bytes
from ncd.errors import (
    AlignmentError,
    CompileError,
    DefinitionError,
    DTypeError,
    GraphError,
    IndexRangeError,
    NcdError,
    ParameterError,
    PluginError,
    ScheduleError,
    SerializationError,
    SizeError,
    TargetNotFoundError,
    TraceError,
)
from ncd.fusion import fuse
from ncd.graph import Graph, Node, Scope
from ncd.kernel import Boundary, FusionPlan, Kernel, Partition
from ncd.params import init
from ncd.reference import run
from ncd.serialize import from_json, to_json
from ncd.sizes import Config, SizeVar

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "AlignmentError",
    "ArrayType",
    "Axis",
    "CompileError",
    "Config",
    "DTypeError",
    "DefinitionError",
    "Graph",
    "GraphError",
    "IndexRangeError",
    "GraphTerm",
    "NcdError",
    "Node",
    "ParameterError",
    "PluginError",
    "ScheduleError",
    "Scope",
    "SerializationError",
    "SizeError",
    "SizeVar",
    "TargetNotFoundError",
    "Tensor",
    "Term",
    "TraceError",
    "__version__",
    "axes",
    "compile",
    "copy",
    "discard",
    "dtype_bytes",
    "export",
    "from_json",
    "identity",
    "init",
    "nn",
    "ops",
    "run",
    "swap",
    "to_json",
    "trace",
    "Boundary",
    "FusionPlan",
    "Kernel",
    "Partition",
    "fuse",
]
