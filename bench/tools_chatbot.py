"""Chatbot's section of ``bench/tools.py``: one reply, and a batch of 32 inputs with reviewed replies."""

from __future__ import annotations

from tensorcode.tools.chatbot import Chatbot

PLACES = ["library", "museum", "bakery", "pool", "station", "market", "clinic", "garden"]
HOURS = ["seven", "eight", "nine", "ten"]


def cases(device) -> list[tuple]:
    """``[(name, tool, single_input, batch_inputs, batch_targets)]`` with the tool on ``device``."""
    pairs = [
        (f"When does the {p} open on day {d}?", f"The {p} opens at {HOURS[(i + d) % 4]}.")
        for d in range(4)
        for i, p in enumerate(PLACES)
    ]
    tool = Chatbot().to(device)
    return [("chatbot", tool, pairs[0][0], [x for x, _ in pairs], [y for _, y in pairs])]
