"""Every ``python`` block of docs/perf.md runs, in order, in one namespace (the worked
FlashAttention derivation included)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "perf.md"


def test_perf_doc_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 8
    namespace: dict[str, object] = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name}[block {i}]", "exec"), namespace)
