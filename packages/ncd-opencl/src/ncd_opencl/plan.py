"""Which kernels ncd-opencl generates: core's ``ncd.codegen.plans`` (shared with ncd-cuda),
re-exported under the names ncd-opencl has always used."""

from ncd.codegen.plans import choose_layouts, local_plan, plan_for

__all__ = ["choose_layouts", "local_plan", "plan_for"]
