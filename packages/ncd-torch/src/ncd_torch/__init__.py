"""ncd-torch: ncd models to PyTorch modules and back.

``to_module(model)`` exports a model as a ``torch.fx.GraphModule``; ``from_torch(module,
example_inputs)`` imports a PyTorch module as an ncd model. The plugin also registers the
``torch`` backend and exporter and an ``ncd demo`` step. Attributes load lazily, so the plugin
host can import ``ncd_torch._hooks`` without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "TORCH_RULES",
    "Imported",
    "TorchImportError",
    "from_torch",
    "load_state_dict",
    "state_dict",
    "supported_ops",
    "to_module",
    "torch_shapes",
    "torch_rule",
]

_WHERE = {
    "to_module": "ncd_torch._export",
    "TORCH_RULES": "ncd_torch._rules",
    "torch_rule": "ncd_torch._rules",
    "state_dict": "ncd_torch._backend",
    "load_state_dict": "ncd_torch._checkpoint",
    "torch_shapes": "ncd_torch._checkpoint",
    "from_torch": "ncd_torch._import",
    "Imported": "ncd_torch._import",
    "supported_ops": "ncd_torch._import_errors",
    "TorchImportError": "ncd_torch._import_rules",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'ncd_torch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
