"""Generated OpenCL sources of canonical cases against golden files.

Regenerate with ``NCD_UPDATE_GOLDEN=1 pytest tests/opencl/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from ncd.testing import case_by_name
from ncd_opencl.generate import generate

GOLDEN = pathlib.Path(__file__).parent / "golden"
CASES = [
    "softmax_13",
    "layernorm",
    "rmsnorm",
    "linear_bias_lifted",
    "view_merge_permute",
    "causal_softmax",
    "attention_causal_lifted",
    "spherical_attention",
    "mlp",
    "transformer_block",
    "gpt_2_layers",
]


@pytest.mark.parametrize("name", CASES)
def test_generated_source_matches_golden(name: str) -> None:
    text = generate(case_by_name(name).model.graph).source
    path = GOLDEN / f"{name}.cl"
    if os.environ.get("NCD_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with NCD_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name}: generated source changed (NCD_UPDATE_GOLDEN=1)"
