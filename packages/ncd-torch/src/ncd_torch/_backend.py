"""The ``torch`` backend and exporter, and the ``ncd demo`` step.

The backend's executables take and return NumPy arrays (the contract ``ncd.testing`` checks):
free sizes are bound from the input shapes, the model is exported once per bound graph, the
parameters are loaded with ``load_state_dict`` and the module runs under ``torch.no_grad``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ncd.plugins.interfaces import Backend, Executable, Exporter

__all__ = ["TorchBackend", "TorchExecutable", "TorchExporter", "demo_step", "state_dict"]


def state_dict(
    params: Mapping[str, Any], dtype: Any = None, *, model: Any = None
) -> dict[str, Any]:
    """``{name: array}`` (e.g. ``ncd.init`` output, bf16 arrays included) as tensors for
    ``module.load_state_dict``: of ``to_module(model)`` as they are, or, given ``model``, in
    torch's own form (each Linear's weight one ``(out, in)`` matrix, ``torch_shapes``), which
    a torch module with the same names (HF's Llama for ``ncd.nn.llama``) loads."""
    import torch

    from ncd_torch._checkpoint import torch_shapes
    from ncd_torch._dtypes import to_tensor

    shapes = torch_shapes(model) if model is not None else {}
    out = {}
    for name, array in params.items():
        t = array if isinstance(array, torch.Tensor) else to_tensor(array)
        t = t.reshape(shapes[name]) if name in shapes else t
        out[name] = t if dtype is None else t.to(dtype)
    return out


class TorchExecutable(Executable):
    """Runs a model as an exported module on NumPy inputs. ``compile=True`` wraps the module in
    ``torch.compile``; ``training=True`` enables dropout; ``fuse=False`` exports every block op
    by op (see ``to_module``)."""

    def __init__(
        self,
        model: Any,
        *,
        compile: bool = False,
        training: bool = False,
        device: str = "cpu",
        fuse: bool = True,
    ) -> None:
        self.model, self.use_compile, self.training, self.device = model, compile, training, device
        self.fuse = fuse
        self._modules: dict[tuple[str, Any], Any] = {}

    def module_for(self, graph: Any, dtype: Any) -> Any:
        import torch

        from ncd_torch._export import to_module

        key = (str(dtype), graph.key)
        if key not in self._modules:
            module = (
                to_module(graph, dtype=dtype, fuse=self.fuse).to(self.device).train(self.training)
            )
            self._modules[key] = (module, torch.compile(module) if self.use_compile else module)
        return self._modules[key]

    def __call__(self, *inputs: Any, params: Any = None) -> Any:
        import torch

        from ncd.reference import prepare
        from ncd_torch._dtypes import check_formats, format_of, to_numpy, to_tensor

        graph, arrays, ps = prepare(self.model, inputs, params)
        check_formats(graph)
        dtype: Any = None  # a cast model: every parameter in its own format
        if format_of(graph) is None and not any(
            p.dtype != "float32" for p in graph.params().values()
        ):
            floats = [
                a.dtype for a in (*arrays, *ps.values()) if np.issubdtype(a.dtype, np.floating)
            ]
            dtype = torch.float64 if floats and floats[0] == np.float64 else torch.float32
        module, run = self.module_for(graph, dtype)
        module.load_state_dict(state_dict(ps, dtype))
        with torch.no_grad():
            outs = run(*(to_tensor(a).to(self.device) for a in arrays))
        outs = outs if isinstance(outs, tuple) else (outs,)
        result = [to_numpy(o) for o in outs]
        return result[0] if len(result) == 1 else tuple(result)


class TorchBackend(Backend):
    name = "torch"
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"float32", "float64", "float16", "bfloat16", "training", "gradients"}
    )
    description = "PyTorch: the model exported as a torch.fx GraphModule (ncd-torch)"

    def compile(self, model: Any, **options: Any) -> Executable:
        return TorchExecutable(model, **options)


class TorchExporter(Exporter):
    name = "torch"
    description = "a torch.nn.Module (torch.fx.GraphModule), one submodule per named block"

    def export(self, model: Any, **options: Any) -> Any:
        from ncd_torch._export import to_module

        return to_module(model, **options)


#: Largest |exported - reference| the demo accepts on float32 logits.
DEMO_TOLERANCE = 1e-3


def demo_step(ctx: dict[str, Any]) -> None:
    """Export the demo GPT, load its parameters, and compare logits with the reference."""
    import time

    import torch

    from ncd_torch._export import to_module

    module = to_module(ctx["model"])
    module.load_state_dict(state_dict(ctx["params"]))
    n_sub = sum(1 for _ in module.named_modules())
    with torch.no_grad():
        t0 = time.perf_counter()
        logits = module(torch.from_numpy(np.asarray(ctx["tokens"]))).numpy()
        dt = time.perf_counter() - t0
    diff = float(np.abs(logits - ctx["logits"]).max())
    print(
        f"exported {type(module).__name__} (torch.fx.GraphModule, {n_sub} modules, "
        f"{len(module.state_dict())} parameters); forward in {dt * 1e3:.1f} ms"
    )
    blocks = [
        f"{name} ({type(m).__name__})"
        for name, m in module.named_modules()
        if name and isinstance(m, torch.fx.GraphModule) and name.count(".") <= 1
    ]
    print(f"blocks as submodules: {', '.join(blocks)}")
    print(f"max |torch - reference| = {diff:.2e} (tolerance {DEMO_TOLERANCE:g})")
    ctx["torch_module"] = module
    if not diff <= DEMO_TOLERANCE:
        raise AssertionError(f"the exported module disagrees with the reference: {diff:.2e}")
