"""ncd-perf: multi-level performance models derived from ncd models.

``cost(model, machine)`` prices the fusion plan of a model on a machine described as data
(``Machine``, built-ins ``h100``, ``h200``, ``a100``, ``cpu``, ``this``): per kernel and per
memory level, transfers and resident memory as sympy formulas in the model's config labels and
tile sizes, FLOPs by kind, tiles chosen under every capacity, roofline time and bottleneck.
``optimise`` returns the fused, tiled schedule. Nothing here is specific to attention or
matmul: formulas follow from the kernels' partitions and ``ncd.streaming``.
"""

from ncd_perf.distributed import Collective
from ncd_perf.formulas import KernelFormulas
from ncd_perf.machine import Level, Link, Machine, load_machine, machine_names
from ncd_perf.model import KernelCost, LevelCost, ModelCost, cost, optimise

__all__ = ["Collective", "KernelCost", "KernelFormulas", "Level", "LevelCost", "Link", "Machine",
           "ModelCost", "cost", "load_machine", "machine_names", "optimise"]
