"""Placeholder replaced below."""
from __future__ import annotations

from typing import Any


def tiled_template(gen: Any) -> Any:
    return None
