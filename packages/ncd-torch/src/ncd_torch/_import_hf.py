"""Hugging Face glue for ``from_torch``: attention masks traced without ``torch.vmap``.

Transformers builds its 4-d attention masks (causal, padding, sliding window, chunked, packed
sequences) from *mask functions* of four indices ``(batch, head, q, kv)`` and evaluates them
with ``torch.vmap`` four times over. ``torch.export`` records that as a higher-order op
(``flat_apply``) that no importer can read, so a model called with an ``attention_mask`` did
not import. Each mask function is elementwise in its indices, so broadcasting the four index
ramps against each other gives the same booleans as the vmap; while ``from_torch`` traces,
``masks_without_vmap`` has transformers do that instead. The trace then holds ordinary
comparisons, ``&`` and a ``mask[batch, kv]`` grid read, which the import rules take.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["masks_without_vmap"]


def _broadcast_bhqkv(mask_function: Callable[..., Any], bh_indices: bool = True) -> Any:
    """What ``transformers.masking_utils._vmap_for_bhqkv`` returns, by broadcasting: the
    mask at every ``[batch, head, q, kv]`` (``[q, kv]`` without ``bh_indices``)."""

    def at(batch: Any, head: Any, q: Any, kv: Any) -> Any:
        if not bh_indices:
            return mask_function(None, None, q[:, None], kv[None, :]).expand(len(q), len(kv))
        out = mask_function(
            batch[:, None, None, None], head[None, :, None, None], q[None, None, :, None], kv
        )
        return out.expand(len(batch), len(head), len(q), len(kv))

    return at


def _noting(make: Callable[..., Any], spans: list[int]) -> Callable[..., Any]:
    """``make`` (a sliding-window or chunked mask function's factory), noting its span."""

    def noted(span: int, *args: Any, **kwargs: Any) -> Any:
        spans.append(int(span))
        return make(span, *args, **kwargs)

    return noted


#: the factories of masks that attend to a span of keys only (a window, a chunk)
_LOCAL = ("sliding_window_causal_mask_function", "chunked_causal_mask_function")


@contextlib.contextmanager
def masks_without_vmap() -> Iterator[list[int]]:
    """Inside the block, transformers (when it is imported) evaluates mask functions by
    broadcasting rather than ``torch.vmap``; restored on leaving, also on an error. Yields
    the spans (sliding windows, chunks) of the local masks built meanwhile: a span no shorter
    than the example reads as a causal mask, which means the same only up to that length."""
    spans: list[int] = []
    utils: Any = sys.modules.get("transformers.masking_utils")
    if utils is None or not hasattr(utils, "_vmap_for_bhqkv"):
        yield spans
        return
    names = ("_vmap_for_bhqkv", "TransformGetItemToIndex", *_LOCAL)
    saved = {k: getattr(utils, k) for k in names if hasattr(utils, k)}
    utils._vmap_for_bhqkv = _broadcast_bhqkv
    if "TransformGetItemToIndex" in saved:  # vmap's indexing helper: plain indexing instead
        utils.TransformGetItemToIndex = contextlib.nullcontext
    for k in _LOCAL:
        if k in saved:
            setattr(utils, k, _noting(saved[k], spans))
    try:
        yield spans
    finally:
        for k, v in saved.items():
            setattr(utils, k, v)
