"""Helpers shared by the tool tests: held-out splits and state snapshots."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import torch


def held_out_split(make: Callable[[random.Random], tuple], train: int, held_out: int, seed: int) -> tuple[list, list]:
    """``train`` examples from ``make`` and ``held_out`` more whose inputs never occur in the training set."""
    rng = random.Random(seed)
    train_set = [make(rng) for _ in range(train)]
    seen = {json.dumps(x, sort_keys=True) for x, *_ in train_set}
    test_set = []
    while len(test_set) < held_out:
        example = make(rng)
        if json.dumps(example[0], sort_keys=True) not in seen:
            test_set.append(example)
    return train_set, test_set


def state_copy(tool: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter and buffer, to compare against after a refused call."""
    return {k: v.clone() for k, v in tool.state_dict().items()}


def source_weights(attention: dict | None) -> dict[str, float]:
    """A receipt's text attention as ``{source_id: weight}`` (empty for ``None``)."""
    return {} if attention is None else {s["source_id"]: s["weight"] for s in attention["sources"]}
