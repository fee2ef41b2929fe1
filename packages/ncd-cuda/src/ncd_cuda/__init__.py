"""ncd-cuda: CUDA C kernels generated from ncd models (nvcc; pycuda to run)."""

__all__: list[str] = []
