"""Progress of a project and of each of its reviewers, from a handful of aggregate queries.

Figures (README, "Progress"):

- per reviewer: **done** (submitted targets), **skipped**, **drafts**, **last hour** (final answers whose last
  change falls in the past 60 minutes), **holding** (items whose lease they hold now: opened, not yet answered)
  and **rate per hour**: final answers divided by the reviewer's *active hours*, the clock hours (of the
  viewer's time zone) in which they finished at least one answer. A reviewer
  who labels 40 items between 9:00 and 9:59 and 20 more between 14:00 and 14:59 has a rate of 30 per hour,
  however long the lunch.
  An answer counts at the time of its last change (an edit moves it).
- per project: items by status, members and active reviewers, finished answers per day for the last `DAYS`
  days, and per hour for the last 24 hours, in the viewer's time zone.

Every query groups in the database (items by status; answers by reviewer, kind and clock hour; the last hour's
answers by reviewer; the leases held, by reviewer), so Python sees reviewers x hours rows, never items. Chart
geometry (`bars`, `sparkline`) is plain numbers for SVG.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db.models import Count, Max
from django.db.models.functions import TruncHour
from django.utils import timezone

from annotate.models import FINAL_KINDS, FINISHED_STATUSES, Answer, AnswerKind, Claim, ItemStatus, Project

DAYS = 14
HOURS = 24


@dataclass
class ReviewerProgress:
    name: str
    done: int = 0
    skipped: int = 0
    drafts: int = 0
    last_hour: int = 0
    holding: int = 0
    active_hours: int = 0
    last_change: datetime | None = None
    daily: list[int] = field(default_factory=lambda: [0] * DAYS)
    _hours: set = field(default_factory=set, repr=False)

    @property
    def finished(self) -> int:
        return self.done + self.skipped

    @property
    def rate(self) -> float | None:
        """Final answers per active hour; None before the first one."""
        return self.finished / self.active_hours if self.active_hours else None

    @property
    def daily_points(self) -> str:
        return sparkline(self.daily)


@dataclass
class ProjectProgress:
    counts: list[tuple[str, str, int]]  # (status, label, items)
    members: int
    reviewers: list[ReviewerProgress]
    days: list[datetime]  # the first instant of each day charted, oldest first
    daily: list[int]
    hourly: list[int]
    at: datetime | None = None  # when the figures were read

    @property
    def total(self) -> int:
        return sum(n for _, _, n in self.counts)

    @property
    def finished(self) -> int:
        return sum(n for status, _, n in self.counts if status in FINISHED_STATUSES)

    @property
    def active_reviewers(self) -> int:
        return sum(1 for r in self.reviewers if r.finished)

    @property
    def status_bars(self) -> list[dict]:
        """One segment per status of a 100-wide stacked bar."""
        return [
            {"status": status, "label": label, "n": n, **segment}
            for (status, label, n), segment in zip(self.counts, bars([n for _, _, n in self.counts]), strict=True)
        ]

    @property
    def recent(self) -> int:
        """Finished answers in the last 14 days: with none, the charts would be empty axes."""
        return sum(self.daily)

    @property
    def hourly_points(self) -> str:
        return sparkline(self.hourly)

    @property
    def daily_columns(self) -> list[dict]:
        return columns(self.daily, [day.strftime("%a %d %b") for day in self.days])


_DIGITS = re.compile(r"(\d+)")


def name_order(name: str) -> list:
    """Sort key for people's names: case aside, numbers by value ("reviewer2" before "reviewer10")."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.casefold()) for part in _DIGITS.split(name)]


def project_progress(project: Project, *, now: datetime | None = None, zone: tzinfo | None = None) -> ProjectProgress:
    """The progress figures of `project` at `now` (see the module docstring for their definitions).

    Days and clock hours are those of `zone` (the viewer's, `annotate.middleware.BrowserTimeZone`; by default the
    active one), so a reviewer's evening counts on their own day."""
    now = now or timezone.now()
    zone = zone or timezone.get_current_timezone()
    local = timezone.localtime(now, zone)
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=DAYS - 1 - k) for k in range(DAYS)]  # wall-clock steps: each a local midnight
    # Hours step in UTC: wall-clock steps would land on times a DST change skips or repeats.
    hour_start = local.replace(minute=0, second=0, microsecond=0).astimezone(UTC)
    hours = [hour_start - timedelta(hours=HOURS - 1 - k) for k in range(HOURS)]

    counts = project.item_counts()
    answers = Answer.objects.filter(project=project).order_by()

    by_id: dict[int, ReviewerProgress] = {}
    daily, hourly = [0] * DAYS, [0] * HOURS
    # One pass over the project's answers, grouped by reviewer, kind and clock hour: every figure but the exact
    # last 60 minutes is a sum over these groups (reviewers x kinds x active hours rows, however many items).
    # Grouping by the reviewer's id, not name, keeps the sort keys narrow (about half the time at 100,000).
    groups = answers.values("reviewer_id", "kind", hour=TruncHour("updated_at", tzinfo=zone)).annotate(
        n=Count("id"), last=Max("updated_at"))
    for group in groups:
        r = by_id.setdefault(group["reviewer_id"], ReviewerProgress(name=""))
        kind, n, hour = group["kind"], group["n"], group["hour"]
        field_name = {AnswerKind.TARGET: "done", AnswerKind.SKIP: "skipped"}.get(kind, "drafts")
        setattr(r, field_name, getattr(r, field_name) + n)
        r.last_change = max(filter(None, [r.last_change, group["last"]]))
        if kind not in FINAL_KINDS:
            continue
        r._hours.add(hour)
        day = (hour.date() - days[0].date()).days
        if 0 <= day < DAYS:
            r.daily[day] += n
            daily[day] += n
        index = int((hour - hours[0]).total_seconds() // 3600)
        if 0 <= index < HOURS:
            hourly[index] += n
    recent = answers.filter(kind__in=FINAL_KINDS, updated_at__gt=now - timedelta(hours=1), updated_at__lte=now)
    for reviewer_id, n in recent.values_list("reviewer_id").annotate(n=Count("id")):
        by_id[reviewer_id].last_hour = n
    # Who is at work now: a reviewer on their first item holds it before any answer of theirs counts.
    held = Claim.objects.filter(item__project=project, expires_at__gt=now).order_by()
    for reviewer_id, n in held.values_list("reviewer_id").annotate(n=Count("id")):
        by_id.setdefault(reviewer_id, ReviewerProgress(name="")).holding = n
    names = dict(get_user_model().objects.filter(pk__in=list(by_id)).values_list("pk", "username"))
    for reviewer_id, r in by_id.items():
        r.name, r.active_hours = names[reviewer_id], len(r._hours)

    return ProjectProgress(
        counts=ItemStatus.counted(counts),
        members=project.memberships.count(),
        reviewers=sorted(by_id.values(), key=lambda r: name_order(r.name)),
        days=days,
        daily=daily,
        hourly=hourly,
        at=now,
    )


# The item page's progress line (`glance`): a project of this many items or more has its counts shared for up to
# GLANCE_SECONDS. Counting 100,000 items by status takes milliseconds, and every item a reviewer opens asks for
# the line again; below this a project is counted afresh, so a submit shows at once where one is a visible step.
GLANCE_CACHED_FROM = 10_000
GLANCE_SECONDS = 30


@dataclass
class Glance:
    """What a reviewer sees beside an item's title: their finished answers today, the project's items finished."""

    today: int
    finished: int
    total: int
    counted_at: datetime

    @property
    def percent(self) -> float:
        return round(100 * self.finished / self.total, 1) if self.total else 0.0


def glance(project: Project, user, *, now: datetime | None = None, zone: tzinfo | None = None) -> Glance:
    """The reviewer's final answers in `project` since their midnight, and the project's items finished of all.

    `zone`: the reviewer's time zone (by default the active one, their browser's), so "today" starts at their
    midnight. Two statements, each an index range: the reviewer's answers today (`answer_latest_final`) and the
    items by status (counted afresh below `GLANCE_CACHED_FROM` items, else shared for `GLANCE_SECONDS`).
    """
    now = now or timezone.now()
    midnight = timezone.localtime(now, zone or timezone.get_current_timezone()).replace(
        hour=0, minute=0, second=0, microsecond=0)
    today = Answer.objects.filter(project=project, reviewer=user, updated_at__gte=midnight,
                                  kind__in=FINAL_KINDS).count()
    key = f"annotate:glance:{project.pk}"
    counted = cache.get(key)
    if counted is None:
        counts = project.item_counts()
        counted = (sum(counts.get(s, 0) for s in FINISHED_STATUSES), sum(counts.values()), now)
        if counted[1] >= GLANCE_CACHED_FROM:
            cache.set(key, counted, GLANCE_SECONDS)
    return Glance(today, *counted)


def bars(values: list[int], width: float = 100.0) -> list[dict]:
    """Stacked segments `{"x", "width", "percent"}` of `values` across `width` (all zero: all empty)."""
    total = sum(values)
    x, segments = 0.0, []
    for value in values:
        share = value / total if total else 0.0
        segments.append({"x": round(x, 3), "width": round(share * width, 3), "percent": round(100 * share, 1)})
        x += share * width
    return segments


def columns(values: list[int], labels: list[str], height: float = 40.0) -> list[dict]:
    """Bar-chart columns `{"x", "y", "height", "value", "label"}` on a 10-per-column grid, `height` tall."""
    top = max(values, default=0) or 1
    result = []
    for k, (value, label) in enumerate(zip(values, labels, strict=True)):
        h = round(height * value / top, 2)
        result.append({"x": k * 10 + 1, "y": round(height - h, 2), "height": h, "value": value, "label": label})
    return result


def sparkline(values: list[int], width: float = 100.0, height: float = 20.0) -> str:
    """SVG polyline points of `values` scaled into `width` x `height` (higher values are higher up)."""
    if not values:
        return ""
    top = max(values) or 1
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{k * step:.1f},{height - height * v / top:.1f}" for k, v in enumerate(values))
