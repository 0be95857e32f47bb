"""Decision's section of ``bench/tools.py``: one ranking input, and a batch of 32 with targets."""

from __future__ import annotations

import random

from tensorcode.tools.decision import Decision

SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage", "billing", "search"]
EVENTS = [
    ("Why did the outage happen?", "The root cause turned out to be the {x}."),
    ("Which component did operators reboot?", "Operators restarted the {x} at noon."),
    ("Where did the first alarm fire?", "The earliest alert came from the {x}."),
    ("What was scaled up afterwards?", "Capacity was added to the {x} later."),
]


def _incident(rng: random.Random) -> tuple[dict, str]:
    services = rng.sample(SERVICES, 3)
    events = rng.sample(range(len(EVENTS)), 3)
    evidence = [
        {"source_id": f"log-{i}", "text": EVENTS[e][1].format(x=s)}
        for i, (e, s) in enumerate(zip(events, services, strict=True))
    ]
    hypotheses = [{"id": f"h{i}", "text": f"the {s}"} for i, s in enumerate(services)]
    asked = rng.randrange(3)
    return {"question": EVENTS[events[asked]][0], "evidence": evidence, "hypotheses": hypotheses}, f"h{asked}"


def cases(device) -> list[tuple]:
    """``[(name, tool, single_input, batch_inputs, batch_targets)]`` with the tool on ``device``."""
    rng = random.Random(0)
    batch = [_incident(rng) for _ in range(32)]
    tool = Decision().to(device)
    return [("decision", tool, batch[0][0], [x for x, _ in batch], [y for _, y in batch])]
