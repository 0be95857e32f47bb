"""Agreement between reviewers who labelled the same items, and the items where they disagree.

Measures by target form (README, "Agreement"):

- categorical targets (a candidate id or index, an NLI label): percent agreement, Cohen's kappa per reviewer
  pair and Fleiss' kappa for the project (items with any number of raters >= 2; per-item rater counts may vary).
  A distribution target counts as its most likely candidate.
- relevance masks: the Jaccard overlap of the positive (query, document) cells, averaged over pairs; two
  identical masks score 1.
- text: a similarity in [0, 1] (difflib's ratio after collapsing whitespace and case); two reviewers agree when
  the normalized texts are equal.
- numeric outcomes: two reviewers agree when every outcome differs by at most `OUTCOME_TOLERANCE`; the score is
  that fraction.

Pure functions at the top take plain values; `project_report` reads a project's final answers in one query.
"""

from __future__ import annotations

import difflib
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

OUTCOME_TOLERANCE = 1.0

CATEGORICAL = {("investigator", "rank"), ("investigator", "verification"), ("decision", "rank"), ("scene", "rank")}
RANKING = {("investigator", "rank"), ("decision", "rank"), ("scene", "rank")}
TEXT = {("investigator", "proposal"), ("planner", "proposal"), ("scene", "language"), ("chatbot", "reply")}
MASK = {("investigator", "retrieval")}
NUMERIC = {("planner", "outcomes")}

# What each measure is called where people read it (the agreement page, the JSON API).
MEASURE_NAMES = {
    "categorical": "Percent agreement and kappa",
    "mask": "Jaccard overlap of relevance masks",
    "text": "Text similarity",
    "numeric": "Outcomes within tolerance",
}


def measure_of(tool: str, mode: str) -> str:
    """The documented measure for a tool and mode: categorical, mask, text or numeric."""
    pair = (tool, mode)
    if pair in CATEGORICAL:
        return "categorical"
    if pair in MASK:
        return "mask"
    if pair in TEXT:
        return "text"
    if pair in NUMERIC:
        return "numeric"
    raise ValueError(f"no agreement measure for {tool}/{mode}")


def candidate_ids(inputs: Any) -> list[str]:
    """The ids of a ranking item's candidates, in order (hypotheses or Scene's candidates)."""
    if not isinstance(inputs, dict):
        return []
    items = inputs.get("hypotheses", inputs.get("candidates", []))
    return [str(c.get("id")) for c in items if isinstance(c, dict)]


def category(target: Any, inputs: Any) -> str | None:
    """A categorical target as one label: an id, an index's id, or a distribution's most likely id."""
    if isinstance(target, str):
        return target
    if isinstance(target, bool):
        return None
    ids = candidate_ids(inputs)
    if isinstance(target, int):
        return ids[target] if 0 <= target < len(ids) else str(target)
    if isinstance(target, list) and target and all(isinstance(p, (int, float)) for p in target):
        best = max(range(len(target)), key=lambda k: target[k])
        return ids[best] if best < len(ids) else str(best)
    return None


def pair_score(measure: str, a: Any, b: Any, inputs: Any = None) -> float:
    """How much two targets agree, in [0, 1]."""
    if measure == "categorical":
        return float(category(a, inputs) == category(b, inputs))
    if measure == "mask":
        cells_a, cells_b = _positives(a), _positives(b)
        union = cells_a | cells_b
        return 1.0 if not union else len(cells_a & cells_b) / len(union)
    if measure == "text":
        x, y = _normal(a), _normal(b)
        return 1.0 if x == y else difflib.SequenceMatcher(None, x, y).ratio()
    if measure == "numeric":
        xs, ys = _outcomes(a, inputs), _outcomes(b, inputs)
        keys = set(xs) & set(ys)
        if not keys:
            return 0.0
        return sum(abs(xs[k] - ys[k]) <= OUTCOME_TOLERANCE for k in keys) / len(keys)
    raise ValueError(f"unknown measure {measure!r}")


def agrees(measure: str, a: Any, b: Any, inputs: Any = None) -> bool:
    """Whether two targets agree outright (the basis of percent agreement and of the disagreement list)."""
    if measure == "text":
        return _normal(a) == _normal(b)
    return pair_score(measure, a, b, inputs) >= 1.0


def disagree(measure: str, targets: Sequence[Any], inputs: Any = None) -> bool:
    """Whether one item's final targets disagree: two or more of them, and some pair does not agree outright."""
    return len(targets) >= 2 and not all(
        agrees(measure, a, b, inputs) for a, b in itertools.combinations(targets, 2)
    )


def item_disagreement(item) -> bool:
    """`disagree` over `item`'s final targets as stored now (what `Item.disagreement` holds)."""
    from annotate.models import Answer, AnswerKind

    project = item.project
    targets = list(Answer.objects.filter(item=item, kind=AnswerKind.TARGET).values_list("target", flat=True))
    return disagree(measure_of(project.tool, project.mode), targets, item.inputs)


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels on the same items; None with no items or no variation possible."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(x == y for x, y in pairs) / n
    left, right = Counter(x for x, _ in pairs), Counter(y for _, y in pairs)
    expected = sum(left[label] * right[label] for label in set(left) | set(right)) / (n * n)
    if expected >= 1.0:
        return None if observed < 1.0 else 1.0
    return (observed - expected) / (1.0 - expected)


def fleiss_kappa(ratings: Iterable[Sequence[str]]) -> float | None:
    """Fleiss' kappa over items each rated by >= 2 raters (rater counts may differ between items)."""
    agreement, totals, items = 0.0, Counter(), 0
    raters_total = 0
    for labels in ratings:
        n = len(labels)
        if n < 2:
            continue
        counts = Counter(labels)
        agreement += (sum(c * c for c in counts.values()) - n) / (n * (n - 1))
        totals.update(counts)
        raters_total += n
        items += 1
    if items == 0:
        return None
    observed = agreement / items
    expected = sum((c / raters_total) ** 2 for c in totals.values())
    if expected >= 1.0:
        return None if observed < 1.0 else 1.0
    return (observed - expected) / (1.0 - expected)


def empirical_distribution(targets: Sequence[Any], inputs: Any) -> list[float]:
    """The reviewers' choices as a distribution over the item's candidates (a valid ranking target)."""
    ids = candidate_ids(inputs)
    if not ids:
        raise ValueError("the item has no candidates to distribute over")
    counts = Counter(category(t, inputs) for t in targets)
    chosen = sum(counts[i] for i in ids)
    if chosen == 0:
        raise ValueError("no reviewer chose one of the item's candidates")
    return [counts[i] / chosen for i in ids]


@dataclass
class PairReport:
    reviewers: tuple[str, str]
    items: int = 0
    agreed: int = 0
    score: float = 0.0
    kappa: float | None = None
    _labels: list[tuple[str, str]] = field(default_factory=list, repr=False)

    @property
    def percent(self) -> float | None:
        return None if self.items == 0 else 100.0 * self.agreed / self.items


@dataclass
class ReviewerReport:
    """One reviewer against everyone who answered an item they answered: their pairs' counts summed."""

    reviewer: str
    co_reviewers: int = 0
    items: int = 0  # comparisons: one per co-reviewer and item both answered
    agreed: int = 0
    score: float = 0.0  # the mean pair score over those comparisons

    @property
    def percent(self) -> float | None:
        return None if self.items == 0 else 100.0 * self.agreed / self.items


def by_reviewer(pairs: Iterable[PairReport]) -> list[ReviewerReport]:
    """Each reviewer's agreement with the others, least agreeing first (then the most compared): on a team of
    twenty, 190 pairs of a few items each hide the one reviewer who reads the guidelines differently; this
    shows them at the top."""
    reviewers: dict[str, ReviewerReport] = {}
    for pair in pairs:
        for name in pair.reviewers:
            row = reviewers.setdefault(name, ReviewerReport(reviewer=name))
            row.co_reviewers += 1
            row.items += pair.items
            row.agreed += pair.agreed
            row.score += pair.score * pair.items
    for row in reviewers.values():
        row.score = row.score / row.items if row.items else 0.0
    return sorted(reviewers.values(), key=lambda r: (r.percent if r.percent is not None else 101.0, -r.items,
                                                     r.reviewer))


@dataclass
class Report:
    measure: str
    items: int = 0  # items with >= 2 final targets
    agreed: int = 0
    kappa: float | None = None
    mean_score: float | None = None
    pairs: list[PairReport] = field(default_factory=list)
    disagreements: list[int] = field(default_factory=list)  # item ids, oldest first
    computed_at: datetime | None = None  # set by `cached_project_report`
    seconds: float = 0.0  # how long computing it took
    stale: bool = False  # final targets changed since `computed_at` (a slow report reused, see below)

    @property
    def percent(self) -> float | None:
        return None if self.items == 0 else 100.0 * self.agreed / self.items

    @property
    def stale_note(self) -> str:
        """What the pages say over a reused slow report ("" for a current one)."""
        if not self.stale:
            return ""
        return (f"Answers have changed since these figures were computed at {self.computed_at:%H:%M:%S} UTC; on a "
                f"project this size they are recomputed at most every {REUSE_SECONDS} s.")


def report(measure: str, answers: Iterable[tuple[int, str, Any, Any]]) -> Report:
    """Agreement from `(item_id, reviewer, target, inputs)` rows of final targets."""
    by_item: dict[int, list[tuple[str, Any]]] = defaultdict(list)
    inputs_of: dict[int, Any] = {}
    for item_id, reviewer, target, inputs in answers:
        by_item[item_id].append((reviewer, target))
        inputs_of[item_id] = inputs
    result = Report(measure=measure)
    pairs: dict[tuple[str, str], PairReport] = {}
    ratings, scores = [], []
    for item_id in sorted(by_item):
        rows = sorted(by_item[item_id], key=lambda row: row[0])
        if len(rows) < 2:
            continue
        inputs = inputs_of[item_id]
        result.items += 1
        all_agree = True
        for (ra, ta), (rb, tb) in itertools.combinations(rows, 2):
            pair = pairs.setdefault((ra, rb), PairReport(reviewers=(ra, rb)))
            score = pair_score(measure, ta, tb, inputs)
            agreed = agrees(measure, ta, tb, inputs)
            pair.items += 1
            pair.agreed += agreed
            pair.score += score
            scores.append(score)
            all_agree &= agreed
            if measure == "categorical":
                pair._labels.append((category(ta, inputs) or "", category(tb, inputs) or ""))
        if all_agree:
            result.agreed += 1
        else:
            result.disagreements.append(item_id)
        if measure == "categorical":
            ratings.append([category(t, inputs) or "" for _, t in rows])
    for pair in pairs.values():
        pair.score = pair.score / pair.items if pair.items else 0.0
        if measure == "categorical":
            pair.kappa = cohen_kappa(pair._labels)
        pair._labels = []  # only needed for kappa; a cached report stays small
    result.pairs = sorted(pairs.values(), key=lambda p: p.reviewers)
    result.mean_score = sum(scores) / len(scores) if scores else None
    if measure == "categorical":
        result.kappa = fleiss_kappa(ratings)
    return result


def project_report(project) -> Report:
    """Agreement over a project's final targets (skips and drafts are not labels).

    Reads only the items with two or more final targets, and the inputs only of items whose targets need them
    to be read (an index or a distribution, a list of outcomes): decoding every item's inputs was most of the
    time on a big project. The targets per item are counted in the same scan (a window), not by a subquery the
    rows are matched against: a young project's answers are not yet in PostgreSQL's statistics, and with the
    subquery estimated at one row the planner rescanned the project's answers for each of them (100,000 items:
    stuck for 20 minutes).
    """
    from django.db.models import Count, F, Window

    from annotate.models import Answer, AnswerKind, Item

    measure = measure_of(project.tool, project.mode)
    rows = list(
        Answer.objects.filter(project=project, kind=AnswerKind.TARGET)
        .annotate(targets=Window(Count("id"), partition_by=[F("item_id")]))
        .filter(targets__gte=2)
        .order_by("item_id", "reviewer__username")
        .values_list("item_id", "reviewer__username", "target")
        .iterator(chunk_size=5000)
    )
    needed = sorted({item_id for item_id, _, target in rows if _needs_inputs(measure, target)})
    inputs: dict[int, Any] = {}
    for start in range(0, len(needed), 5000):
        inputs.update(Item.objects.filter(pk__in=needed[start:start + 5000]).values_list("pk", "inputs"))
    return report(measure, ((item_id, reviewer, target, inputs.get(item_id)) for item_id, reviewer, target in rows))


SLOW_SECONDS = 0.5  # a report that took longer than this to compute ...
REUSE_SECONDS = 30  # ... is shown for this long after answers change, marked as such, before it is recomputed


def cached_project_report(project, timeout: int = 3600) -> Report:
    """`project_report`, kept in Django's cache until a final target of the project changes (one aggregate query
    to tell: how many targets there are and when the latest changed).

    While reviewers keep answering, every view would otherwise recompute it: 1.6 s at 100,000 compared items.
    So a report that took over `SLOW_SECONDS` is shown for up to `REUSE_SECONDS` after answers change, with
    `stale` set and its `computed_at`, as the progress page shows figures up to 30 s old; quick reports
    (most projects) are always current.
    """
    from django.core.cache import cache
    from django.db.models import Count, Max
    from django.utils import timezone

    from annotate.models import Answer, AnswerKind

    stamp = Answer.objects.filter(project=project, kind=AnswerKind.TARGET).aggregate(
        n=Count("id"), last=Max("updated_at"))
    last = stamp["last"].isoformat() if stamp["last"] else "-"
    base = f"tc-agreement:{project.pk}:{project.tool}:{project.mode}"
    key = f"{base}:{stamp['n']}:{last}"
    result = cache.get(key)
    if result is not None:
        return result
    now = timezone.now()
    latest = cache.get(f"{base}:latest")
    if (latest is not None and latest.seconds > SLOW_SECONDS
            and (now - latest.computed_at).total_seconds() < REUSE_SECONDS):
        latest.stale = True
        return latest
    began = time.perf_counter()
    result = project_report(project)
    result.computed_at, result.seconds = now, time.perf_counter() - began
    cache.set_many({key: result, f"{base}:latest": result}, timeout)
    return result


def _needs_inputs(measure: str, target: Any) -> bool:
    if measure == "categorical":
        return not isinstance(target, str)
    return measure == "numeric" and isinstance(target, list)


def _positives(mask: Any) -> set[tuple[int, int]]:
    if not isinstance(mask, list):
        return set()
    return {(q, d) for q, row in enumerate(mask) if isinstance(row, list) for d, v in enumerate(row) if v is True}


def _normal(text: Any) -> str:
    return " ".join(str(text).split()).casefold() if text is not None else ""


def _outcomes(target: Any, inputs: Any) -> dict[str, float]:
    plans = [str(p.get("id")) for p in inputs.get("plans", [])] if isinstance(inputs, dict) else []
    if isinstance(target, dict) and "candidate_id" in target:
        return {str(target["candidate_id"]): float(target.get("outcome", 0.0))}
    if isinstance(target, list):
        return {(plans[k] if k < len(plans) else str(k)): float(v) for k, v in enumerate(target)
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {}
