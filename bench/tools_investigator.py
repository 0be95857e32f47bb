"""Investigator's section of ``bench/tools.py``: each of its four modes, one input and a batch of 32 with targets.

Batches are lists of one-example envelopes ``{"mode", "inputs"}``, the form reviewed examples are collected in.
"""

from __future__ import annotations

import random

from tensorcode.tools.investigator import Investigator

CAUSES = [
    ("the disk was full", "{s} logs say the disk was full and writes stopped."),
    ("an expired certificate", "{s} handshakes failed because a certificate had expired."),
    ("a memory leak", "{s} memory grew until the process was killed by a leak."),
    ("a bad deploy", "{s} broke right after a bad deploy went out."),
    ("a network partition", "{s} lost contact with its peers during a network partition."),
]
SERVICES = ["billing", "search", "gateway", "queue", "scheduler", "storage", "payments", "auth"]
LABELS = ["entailment", "neutral", "contradiction"]


def _incident(rng: random.Random) -> dict:
    service, other = rng.sample(SERVICES, 2)
    causes = rng.sample(range(len(CAUSES)), 3)
    texts = [CAUSES[causes[0]][1].format(s=service), CAUSES[causes[1]][1].format(s=other),
             f"{service} owners were paged at night."]
    return {"question": f"Why did {service} go down?",
            "evidence": [{"source_id": f"src-{i}", "text": t} for i, t in enumerate(texts)],
            "hypotheses": [{"id": f"h{i}", "text": CAUSES[c][0]} for i, c in enumerate(causes)]}


def _batches(rng: random.Random) -> dict[str, tuple[list, list]]:
    incidents = [_incident(rng) for _ in range(32)]
    pairs = [{"premise": x["evidence"][0]["text"], "hypothesis": x["hypotheses"][i % 3]["text"]}
             for i, x in enumerate(incidents)]
    groups = []
    for _ in range(32):
        services = rng.sample(SERVICES, 4)
        groups.append({"queries": [f"How was the {s} outage resolved?" for s in services[:2]],
                       "documents": [f"{s}: the team restarted the workers." for s in services]})
    return {
        "rank": ([{"mode": "rank", "inputs": x} for x in incidents], ["h0"] * 32),
        "verification": ([{"mode": "verification", "inputs": p} for p in pairs],
                         [LABELS[i % 3] for i in range(32)]),
        "proposal": ([{"mode": "proposal", "inputs": {"question": x["question"], "evidence": x["evidence"]}}
                      for x in incidents], [x["hypotheses"][0]["text"] for x in incidents]),
        "retrieval": ([{"mode": "retrieval", "inputs": g} for g in groups],
                      [[[True, False, False, False], [False, True, False, False]]] * 32),
    }


def cases(device) -> list[tuple]:
    """``[(name, tool, single_input, batch_inputs, batch_targets)]``, one per mode, with tools on ``device``.

    Each case has its own default Investigator (all four modes), so a rank receipt includes the source-wise
    verification of every hypothesis, as in use.
    """
    rng = random.Random(0)
    return [(f"investigator.{mode}", Investigator().to(device), inputs[0], inputs, targets)
            for mode, (inputs, targets) in _batches(rng).items()]
