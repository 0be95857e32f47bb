"""Receipt pieces that need a tool or tensors: the model fingerprint, cached, and text attention from words.

The receipt shapes themselves are built by :mod:`tensorcode.receipts` (torch-free); this module turns what the
models computed into its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import receipts
from ._text import Tokenizer


def model_id(tool) -> str:
    """The tool's ``model`` fingerprint, computed once per instance (and again after ``forget_model_id``)."""
    cached = getattr(tool, "_receipt_model", None)
    if cached is None:
        cached = receipts.fingerprint(tool.NAME, tool.configuration())
        object.__setattr__(tool, "_receipt_model", cached)
    return cached


def forget_model_id(tool) -> None:
    """Call after changing a tool's configuration in place, so receipts carry the new fingerprint."""
    tool.__dict__.pop("_receipt_model", None)


def text_attention(
    tokenizer: Tokenizer,
    sources: Sequence[dict],
    weights: Sequence[float],
    words: Sequence[Sequence[float]],
) -> dict | None:
    """Text attention over ``sources`` (``{"source_id", "text"}``); ``None`` when there are none.

    ``weights[j]`` is source ``j``'s weight and ``words[j][t]`` the share of it that word ``t`` of its text
    (as the tokenizer splits it) carries; entries past the source's words (padding) are ignored.
    """
    if not sources:
        return None
    return receipts.text_attention([
        (source["source_id"], weight, [
            (start, end, weight * share)
            for (start, end), share in zip(tokenizer.spans(source["text"]), shares, strict=False)
        ])
        for source, weight, shares in zip(sources, weights, words, strict=True)
    ])
