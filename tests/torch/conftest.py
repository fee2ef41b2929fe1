"""Shared fixtures: small bound models and a plain-PyTorch GPT-2-style block."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

torch.set_num_threads(1)  # the test machine's cores are shared
