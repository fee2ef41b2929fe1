"""ncd: deep-learning models as algebra over named axes (neural circuit diagrams).

One symbolic model; plugins interpret it as a PyTorch module, fused kernels, a diagram or a
performance model. ``import ncd`` loads no heavy library.
"""

from ncd import nn, ops, optim
from ncd._term import GraphTerm, Term, copy, discard, identity, swap
from ncd._trace import Tensor, trace
from ncd.api import compile, export
from ncd.autodiff import GradError, GradModel, IntegerGradError, NoGradRuleError, SeedError, grad
from ncd.axis import DTYPES, ArrayType, Axis, axes, dtype_bytes
from ncd.bench import bench
from ncd.dtypes import (
    DType,
    bfloat16,
    dtype,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int32,
    int64,
)
from ncd.dtypes import bool_ as bool  # ncd.bool, the boolean format (shadows the builtin here)
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
    UnknownDTypeError,
)
from ncd.fusion import fuse
from ncd.graph import Graph, Node, Scope
from ncd.kernel import Boundary, FusionPlan, Kernel, Partition, Schedule
from ncd.params import init
from ncd.planning import plan
from ncd.reference import run
from ncd.scan import scan
from ncd.serialize import from_json, to_json
from ncd.sizes import Config, SizeVar
from ncd.tuning import tune

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "AlignmentError",
    "ArrayType",
    "Axis",
    "CompileError",
    "Config",
    "DType",
    "DTypeError",
    "DefinitionError",
    "Graph",
    "GraphError",
    "IndexRangeError",
    "GraphTerm",
    "GradError",
    "GradModel",
    "IntegerGradError",
    "NoGradRuleError",
    "SeedError",
    "NcdError",
    "Node",
    "ParameterError",
    "PluginError",
    "ScheduleError",
    "scan",
    "Scope",
    "SerializationError",
    "SizeError",
    "SizeVar",
    "TargetNotFoundError",
    "Tensor",
    "Term",
    "TraceError",
    "UnknownDTypeError",
    "__version__",
    "axes",
    "bench",
    "bfloat16",
    "bool",
    "dtype",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "compile",
    "copy",
    "discard",
    "dtype_bytes",
    "export",
    "from_json",
    "grad",
    "identity",
    "init",
    "nn",
    "ops",
    "optim",
    "run",
    "swap",
    "to_json",
    "trace",
    "Boundary",
    "FusionPlan",
    "Kernel",
    "Partition",
    "Schedule",
    "fuse",
    "plan",
    "tune",
]
