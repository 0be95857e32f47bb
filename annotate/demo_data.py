"""Demo data made by the project: authored text items for the text tools and generated pictures for Scene.

Each generator returns ``(inputs, target)`` pairs in the JSON form the import accepts (one example's payload,
without a mode envelope) with the answer a reviewer would give. `manage.py demo` trains a small model briefly on
some of them, so the predictions a newcomer sees are plausible, and imports the rest for review. Everything is
seeded: running the demo twice makes the same items.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# (id, hypothesis, evidence clue) for incident investigations.
CAUSES = [
    ("disk", "The disk on the database host filled up.", "df reports 100% usage on /var/lib/postgresql."),
    ("dns", "A DNS record pointed at the old load balancer.", "dig returns the retired address 10.0.0.7."),
    ("cert", "The TLS certificate expired.", "Browsers report the certificate expired at midnight."),
    ("memory", "The worker ran out of memory.", "The kernel log shows the OOM killer ended the worker."),
    ("deploy", "A bad deploy shipped a config typo.", "The deploy at 14:02 changed database_url to databse_url."),
    ("network", "A network partition split the cluster.", "Nodes in zone b could not reach zone a for ten minutes."),
]
SERVICES = ["checkout", "search", "billing", "login", "reports", "uploads", "email", "maps"]
QUESTIONS = ["Why did the {s} service fail?", "What caused the {s} outage?", "Why was {s} down this morning?"]
NOISE = [
    "The on-call engineer was paged at 09:14.",
    "Traffic was normal for a weekday.",
    "The status page was updated twice.",
    "No customer data was lost.",
]

NLI = [
    ("The connection was refused.", "The connection succeeded.", "contradiction"),
    ("The connection was refused.", "The connection failed.", "entailment"),
    ("The connection was refused.", "The server runs in Frankfurt.", "neutral"),
    ("The backup finished at noon.", "The backup completed.", "entailment"),
    ("The backup finished at noon.", "The backup never ran.", "contradiction"),
    ("The backup finished at noon.", "The backup was encrypted.", "neutral"),
    ("All tests passed on main.", "No test failed on main.", "entailment"),
    ("All tests passed on main.", "Two tests failed on main.", "contradiction"),
    ("All tests passed on main.", "The tests took four minutes.", "neutral"),
    ("The disk is full.", "There is no free space on the disk.", "entailment"),
    ("The disk is full.", "The disk is empty.", "contradiction"),
    ("The disk is full.", "The disk was bought last year.", "neutral"),
]

PLANS = [
    ("rollback", "Roll back to the previous release."),
    ("restart", "Restart the failing workers."),
    ("scale", "Add two more application servers."),
    ("wait", "Wait and watch the dashboards."),
]
# How well each plan works (0-10) for each cause.
PLAN_OUTCOMES = {
    "disk": {"rollback": 2, "restart": 3, "scale": 4, "wait": 0},
    "dns": {"rollback": 3, "restart": 1, "scale": 1, "wait": 2},
    "cert": {"rollback": 1, "restart": 1, "scale": 0, "wait": 0},
    "memory": {"rollback": 4, "restart": 7, "scale": 8, "wait": 1},
    "deploy": {"rollback": 9, "restart": 2, "scale": 1, "wait": 0},
    "network": {"rollback": 1, "restart": 3, "scale": 2, "wait": 6},
}
PLAN_TEXT = {
    "disk": "Free space on the database host.",
    "dns": "Point the DNS record at the new balancer.",
    "cert": "Renew the TLS certificate.",
    "memory": "Add memory to the workers.",
    "deploy": "Roll back the bad deploy.",
    "network": "Wait for the network to heal.",
}

CHAT = [
    ("hello", "Hello! How can I help?"),
    ("hi there", "Hello! How can I help?"),
    ("good morning", "Good morning! How can I help?"),
    ("thanks a lot", "You are welcome."),
    ("thank you", "You are welcome."),
    ("bye", "Goodbye, have a nice day."),
    ("see you later", "Goodbye, have a nice day."),
    ("what is your name", "I am the demo bot."),
    ("who are you", "I am the demo bot."),
    ("can you help me", "Yes. What do you need?"),
    ("i need help", "Yes. What do you need?"),
    ("how are you", "I am fine, thank you."),
]

COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.75, 0.15), "blue": (0.15, 0.3, 0.95)}
SHAPES = ("circle", "square", "cross")
SCENE_QUESTIONS = ("What is in the picture?", "Which description fits the image?")
IMAGE_SIZE = 24


def examples(tool: str, mode: str, count: int, *, seed: int = 0) -> list[tuple[dict, object]]:
    """``count`` demo ``(inputs, target)`` pairs for a tool and mode."""
    try:
        make = _MAKERS[(tool, mode)]
    except KeyError:
        raise ValueError(f"no demo data for {tool}/{mode}; known: {sorted(_MAKERS)}") from None
    rng = random.Random(f"{tool}/{mode}/{seed}")
    return [make(rng, i) for i in range(count)]


def pairs() -> list[tuple[str, str]]:
    """Every (tool, mode) with demo data."""
    return sorted(_MAKERS)


def _incident(rng: random.Random) -> tuple[str, str, list[dict], str]:
    cause_id, _, clue = rng.choice(CAUSES)
    service = rng.choice(SERVICES)
    question = rng.choice(QUESTIONS).format(s=service)
    evidence = [{"source_id": "log", "text": clue}, {"source_id": "notes", "text": rng.choice(NOISE)}]
    rng.shuffle(evidence)
    return cause_id, question, evidence, service


def _rank(rng: random.Random, index: int) -> tuple[dict, object]:
    cause_id, question, evidence, _ = _incident(rng)
    others = [c for c in CAUSES if c[0] != cause_id]
    chosen = [c for c in CAUSES if c[0] == cause_id] + rng.sample(others, 2)
    rng.shuffle(chosen)
    hypotheses = [{"id": cid, "text": text} for cid, text, _ in chosen]
    return {"question": question, "evidence": evidence, "hypotheses": hypotheses}, cause_id


def _verification(rng: random.Random, index: int) -> tuple[dict, object]:
    premise, hypothesis, label = NLI[index % len(NLI)] if index < len(NLI) else rng.choice(NLI)
    return {"premise": premise, "hypothesis": hypothesis}, label


def _proposal(rng: random.Random, index: int) -> tuple[dict, object]:
    cause_id, question, evidence, _ = _incident(rng)
    text = next(text for cid, text, _ in CAUSES if cid == cause_id)
    return {"question": question, "evidence": evidence}, text


def _retrieval(rng: random.Random, index: int) -> tuple[dict, object]:
    chosen = rng.sample(CAUSES, 4)
    truth = rng.randrange(4)
    service = rng.choice(SERVICES)
    query = f"Evidence that the {service} outage was caused by: {chosen[truth][1].lower()}"
    documents = [clue for _, _, clue in chosen]
    mask = [[k == truth for k in range(4)]]
    return {"queries": [query], "documents": documents}, mask


def _planner_outcomes(rng: random.Random, index: int) -> tuple[dict, object]:
    cause_id, _, evidence, service = _incident(rng)
    plans = [{"id": pid, "text": text} for pid, text in PLANS]
    outcomes = [float(PLAN_OUTCOMES[cause_id][pid]) for pid, _ in PLANS]
    return {"goal": f"Restore the {service} service.", "evidence": evidence, "plans": plans}, outcomes


def _planner_proposal(rng: random.Random, index: int) -> tuple[dict, object]:
    cause_id, _, evidence, service = _incident(rng)
    return {"goal": f"Restore the {service} service.", "evidence": evidence}, PLAN_TEXT[cause_id]


def _chat(rng: random.Random, index: int) -> tuple[str, object]:
    text, reply = CHAT[index % len(CHAT)] if index < len(CHAT) else rng.choice(CHAT)
    return text, reply


def draw(colour: str, shape: str, rng: random.Random, size: int = IMAGE_SIZE) -> list[list[list[float]]]:
    """A coloured shape on a dark noisy background, as ``[3][size][size]`` floats in [0, 1]."""
    r = rng.randint(4, 7)
    cy, cx = rng.randint(r + 1, size - r - 2), rng.randint(r + 1, size - r - 2)
    back = [rng.uniform(0.03, 0.3) for _ in range(3)]
    tint = COLOURS[colour]
    arm = max(1, r // 3)
    channels = []
    for c in range(3):
        rows = []
        for y in range(size):
            row = []
            for x in range(size):
                dy, dx = y - cy, x - cx
                if shape == "circle":
                    inside = dy * dy + dx * dx <= (r + 0.5) ** 2
                elif shape == "square":
                    inside = abs(dy) <= r and abs(dx) <= r
                else:
                    inside = (abs(dy) <= r and abs(dx) <= arm) or (abs(dx) <= r and abs(dy) <= arm)
                value = tint[c] if inside else back[c] + rng.uniform(-0.03, 0.03)
                row.append(round(min(1.0, max(0.0, value)), 3))
            rows.append(row)
        channels.append(rows)
    return channels


def _scene(rng: random.Random, index: int) -> tuple[str, str, dict]:
    colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    item = {"pixels": draw(colour, shape, rng), "source_id": f"image:{index}",
            "question": rng.choice(SCENE_QUESTIONS)}
    return colour, shape, item


def _scene_rank(rng: random.Random, index: int) -> tuple[dict, object]:
    colour, shape, item = _scene(rng, index)
    names = [(c, s) for c in COLOURS for s in SHAPES if (c, s) != (colour, shape)]
    chosen = [(colour, shape), *rng.sample(names, 3)]
    rng.shuffle(chosen)
    item["candidates"] = [{"id": f"{c}-{s}", "text": f"a {c} {s}"} for c, s in chosen]
    return item, f"{colour}-{shape}"


def _scene_language(rng: random.Random, index: int) -> tuple[dict, object]:
    colour, shape, item = _scene(rng, index)
    return item, f"a {colour} {shape}"


_MAKERS: dict[tuple[str, str], Callable[[random.Random, int], tuple[dict, object]]] = {
    ("investigator", "rank"): _rank,
    ("investigator", "verification"): _verification,
    ("investigator", "proposal"): _proposal,
    ("investigator", "retrieval"): _retrieval,
    ("decision", "rank"): _rank,
    ("planner", "outcomes"): _planner_outcomes,
    ("planner", "proposal"): _planner_proposal,
    ("scene", "rank"): _scene_rank,
    ("scene", "language"): _scene_language,
    ("chatbot", "reply"): _chat,
}
