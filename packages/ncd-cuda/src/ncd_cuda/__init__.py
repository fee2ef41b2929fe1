"""ncd-cuda: CUDA C kernels generated from ncd models by core's renderer in the CUDA dialect,
compiled through named stages (CUDA C -> PTX -> cubin, NVRTC or nvcc) and run through the CUDA
driver (cuda-bindings, or pycuda where installed).

``build(model, arch="sm_90")`` compiles without a GPU; ``ncd.compile(model, "cuda")`` runs where
one is present and otherwise raises ``CudaUnavailableError`` naming what is missing.
"""

from ncd_cuda import generate
from ncd_cuda.program import CudaBuild, CudaKernel, build, default_arch
from ncd_cuda.runtime import CudaUnavailableError, probe
from ncd_cuda.stages import ARCHES, CudaToolchainError, Resources, compile_source

__all__ = [
    "ARCHES",
    "CudaBuild",
    "CudaKernel",
    "CudaToolchainError",
    "CudaUnavailableError",
    "Resources",
    "build",
    "compile_source",
    "default_arch",
    "generate",
    "probe",
]
