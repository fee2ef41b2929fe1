"""ncd-opencl: fused OpenCL kernels generated from ncd models."""

__all__: list[str] = []
