"""Planner's section of ``bench/tools.py``: outcomes and proposals, one input and a batch of 32."""

from __future__ import annotations

import random

from tensorcode.tools.planner import Planner

SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage", "billing", "search"]
ACTIONS = ["Restart the {s}.", "Roll back the last deploy of the {s}.", "Add capacity to the {s}.", "Wait."]
SYMPTOMS = ["a memory leak", "a bad deploy", "a traffic spike", "a flaky disk"]


def _incident(rng: random.Random) -> tuple[dict, list[float], str]:
    service, symptom = rng.choice(SERVICES), rng.randrange(len(SYMPTOMS))
    evidence = [{"source_id": "monitor", "text": f"The {service} is suffering from {SYMPTOMS[symptom]}."}]
    plans = [{"id": f"p{i}", "text": a.format(s=service)} for i, a in enumerate(ACTIONS)]
    outcomes = [rng.uniform(-1.0, 4.0) for _ in plans]
    example = {"goal": f"Recover the {service} quickly.", "evidence": evidence, "plans": plans}
    return example, outcomes, plans[symptom % len(plans)]["text"]


def cases(device) -> list[tuple]:
    """``[(name, tool, single_input, batch_inputs, batch_targets)]`` with the tool on ``device``."""
    rng = random.Random(0)
    batch = [_incident(rng) for _ in range(32)]
    tool = Planner().to(device)
    outcome_inputs = [x for x, _, _ in batch]
    outcome_targets = [
        ys if i % 2 else {"candidate_id": "p0", "outcome": ys[0]} for i, (_, ys, _) in enumerate(batch)
    ]
    proposal_inputs = [{"goal": x["goal"], "evidence": x["evidence"]} for x, _, _ in batch]
    return [
        ("planner", tool, outcome_inputs[0], outcome_inputs, outcome_targets),
        (
            "planner-proposal",
            tool,
            {"mode": "proposal", "inputs": proposal_inputs[0]},
            {"mode": "proposal", "inputs": proposal_inputs},
            [text for _, _, text in batch],
        ),
    ]
