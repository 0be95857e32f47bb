"""Progress figures: counts by status, each reviewer's done/skipped/drafts, last hour, rate per active hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django.utils.timezone import override as override_timezone

from annotate.models import Answer, AnswerKind, Claim, Item, ItemStatus
from annotate.progress import DAYS, HOURS, bars, columns, name_order, project_progress, sparkline
from tests.annotate.conftest import make_ready_items

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 15, 30, tzinfo=UTC)


def answer(item, user, kind, when) -> None:
    Answer.objects.create(item=item, reviewer=user, kind=kind, target="db" if kind == AnswerKind.TARGET else None,
                          source=item.project.source_for(item.pk, user), created_at=when, updated_at=when)


def test_reviewer_figures(project, reviewer, second_reviewer) -> None:
    items = make_ready_items(project, [0.1] * 8)
    # rita: three answers between 9:00 and 9:59 and one at 15:10 -> 4 final answers in 2 active hours.
    for item, minute in zip(items[:3], (0, 20, 59), strict=True):
        answer(item, reviewer, AnswerKind.TARGET, NOW.replace(hour=9, minute=minute))
    answer(items[3], reviewer, AnswerKind.SKIP, NOW.replace(minute=10))
    answer(items[4], reviewer, AnswerKind.DRAFT, NOW.replace(minute=12))
    # sam: one answer two days ago, one draft.
    answer(items[5], second_reviewer, AnswerKind.TARGET, NOW - timedelta(days=2))
    answer(items[6], second_reviewer, AnswerKind.DRAFT, NOW)

    figures = project_progress(project, now=NOW)

    rita, sam = figures.reviewers
    assert (rita.name, rita.done, rita.skipped, rita.drafts) == ("rita", 3, 1, 1)
    assert (rita.last_hour, rita.active_hours, rita.rate) == (1, 2, 2.0)
    assert rita.daily[-1] == 4 and sum(rita.daily) == 4
    assert (sam.done, sam.skipped, sam.drafts, sam.last_hour, sam.rate) == (1, 0, 1, 0, 1.0)
    assert sam.daily[-3] == 1
    assert figures.daily[-1] == 4 and figures.daily[-3] == 1 and len(figures.daily) == DAYS
    assert figures.hourly[-1] == 1 and figures.hourly[HOURS - 1 - 6] == 3  # 15:xx and 9:xx
    assert figures.active_reviewers == 2 and figures.members == 3


def test_holding_counts_the_leases_a_reviewer_holds_now(project, reviewer, second_reviewer) -> None:
    """Who is at work: sam, on his first item, is listed before any answer of his; an ended lease is not held."""
    items = make_ready_items(project, [0.1] * 4)
    answer(items[0], reviewer, AnswerKind.TARGET, NOW - timedelta(minutes=5))
    Claim.objects.create(item=items[1], reviewer=reviewer, expires_at=NOW + timedelta(minutes=9))
    Claim.objects.create(item=items[2], reviewer=reviewer, expires_at=NOW - timedelta(seconds=1))
    Claim.objects.create(item=items[3], reviewer=second_reviewer, expires_at=NOW + timedelta(minutes=3))

    rita, sam = project_progress(project, now=NOW).reviewers

    assert (rita.name, rita.done, rita.holding) == ("rita", 1, 1)
    assert (sam.name, sam.finished, sam.holding) == ("sam", 0, 1)


def test_the_progress_page_shows_who_holds_items_now(client, project, project_admin, reviewer) -> None:
    from django.core.cache import cache
    from django.urls import reverse

    from annotate import queue

    cache.clear()  # the figures are shared for 30 s under the project's id, which tests reuse
    make_ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)  # rita opens her first item
    client.force_login(project_admin)

    page = client.get(reverse("project_progress", args=[project.slug])).content.decode()

    assert ">Holding</abbr></th>" in page
    # Every reviewer at work is a row: hundreds at once scroll in the table's own box, counted in its heading.
    assert '<div class="table-scroll scroll-box">' in page and "<span>Reviewers</span>" in page
    row = page.split(">rita</a></th>")[1].split("</tr>")[0]
    assert row.count('<td class="num">') == 6 and '<td class="num">1</td>' in row  # done 0 ... holding 1
    cache.clear()


def test_reviewers_are_listed_by_name_with_numbers_by_value(project, django_user_model) -> None:
    items = make_ready_items(project, [0.1] * 4)
    for item, name in zip(items, ("reviewer10", "Reviewer2", "reviewer1", "bea"), strict=True):
        answer(item, django_user_model.objects.create_user(name), AnswerKind.TARGET, NOW)
    assert [r.name for r in project_progress(project, now=NOW).reviewers] == [
        "bea", "reviewer1", "Reviewer2", "reviewer10"]
    assert sorted(["b", "a10", "a9", "a", "A1"], key=name_order) == ["a", "A1", "a9", "a10", "b"]


def test_status_counts_and_bars(project) -> None:
    items = make_ready_items(project, [0.1, 0.2, 0.3, 0.4])
    Item.objects.filter(pk=items[0].pk).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=items[1].pk).update(status=ItemStatus.SKIPPED)

    figures = project_progress(project, now=NOW)

    assert figures.counts == [("pending", "Waiting for a prediction", 0), ("ready", "Ready for review", 2),
                              ("done", "Done", 1), ("skipped", "Skipped", 1)]
    assert (figures.total, figures.finished) == (4, 2)
    assert [s["width"] for s in figures.status_bars] == [0.0, 50.0, 25.0, 25.0]
    assert [s["x"] for s in figures.status_bars] == [0.0, 0.0, 50.0, 75.0]


def test_no_answers_gives_empty_figures(project) -> None:
    figures = project_progress(project, now=NOW)

    assert figures.reviewers == [] and figures.total == 0 and sum(figures.daily) == 0


def test_progress_takes_a_fixed_number_of_queries(project, reviewer, django_assert_max_num_queries) -> None:
    """The page's cost grows with reviewers and days, not items: the same few grouped queries at any size."""
    items = make_ready_items(project, [0.1] * 30)
    for n, item in enumerate(items):
        answer(item, reviewer, AnswerKind.TARGET, NOW - timedelta(hours=n))

    with django_assert_max_num_queries(6):
        project_progress(project, now=NOW)


def test_chart_geometry() -> None:
    assert bars([0, 0]) == [{"x": 0.0, "width": 0.0, "percent": 0.0}] * 2
    assert [c["height"] for c in columns([0, 5, 10], ["a", "b", "c"])] == [0.0, 20.0, 40.0]
    assert sparkline([0, 2, 1], width=10, height=10) == "0.0,10.0 5.0,0.0 10.0,5.0"
    assert sparkline([]) == ""


def test_glance_counts_the_reviewers_final_answers_today_and_the_projects_finished_items(
        project, reviewer, second_reviewer) -> None:
    from annotate.models import Membership, Project
    from annotate.progress import glance

    other_project = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank",
                                           configuration=project.configuration)
    Membership.objects.create(project=other_project, user=reviewer)

    items = make_ready_items(project, [0.1] * 6)
    answer(items[0], reviewer, AnswerKind.TARGET, NOW.replace(hour=0, minute=0))  # today, at midnight
    answer(items[1], reviewer, AnswerKind.SKIP, NOW.replace(minute=0))
    answer(items[2], reviewer, AnswerKind.DRAFT, NOW.replace(minute=1))  # a draft is not finished
    answer(items[3], reviewer, AnswerKind.TARGET, NOW.replace(hour=0, minute=0) - timedelta(seconds=1))  # yesterday
    answer(items[4], second_reviewer, AnswerKind.TARGET, NOW)  # someone else's
    (elsewhere,) = make_ready_items(other_project, [0.1])
    answer(elsewhere, reviewer, AnswerKind.TARGET, NOW)  # another project's
    Item.objects.filter(pk__in=[items[0].pk, items[3].pk]).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=items[1].pk).update(status=ItemStatus.SKIPPED)

    seen = glance(project, reviewer, now=NOW)

    assert (seen.today, seen.finished, seen.total, seen.percent) == (2, 3, 6, 50.0)


def test_glance_counts_a_small_project_afresh_and_shares_a_large_ones_counts(project, reviewer,
                                                                             monkeypatch) -> None:
    from django.core.cache import cache

    from annotate import progress

    cache.delete(f"annotate:glance:{project.pk}")
    items = make_ready_items(project, [0.1] * 3)
    assert progress.glance(project, reviewer).finished == 0
    Item.objects.filter(pk=items[0].pk).update(status=ItemStatus.DONE)
    assert progress.glance(project, reviewer).finished == 1  # small: counted again at once

    monkeypatch.setattr(progress, "GLANCE_CACHED_FROM", 3)
    assert progress.glance(project, reviewer).finished == 1  # counted, and now kept
    Item.objects.filter(pk=items[1].pk).update(status=ItemStatus.DONE)
    try:
        assert progress.glance(project, reviewer).finished == 1  # shared for GLANCE_SECONDS
    finally:
        cache.delete(f"annotate:glance:{project.pk}")
    assert progress.glance(project, reviewer).finished == 2


def test_glance_starts_the_reviewers_day_at_their_own_midnight(project, reviewer) -> None:
    from annotate.progress import glance

    items = make_ready_items(project, [0.1] * 3)
    answer(items[0], reviewer, AnswerKind.TARGET, NOW.replace(hour=4, minute=59))  # 23:59 the day before in UTC-5
    answer(items[1], reviewer, AnswerKind.TARGET, NOW.replace(hour=5, minute=0))  # 00:00 in UTC-5
    answer(items[2], reviewer, AnswerKind.TARGET, NOW.replace(hour=14, minute=30))  # 00:30 the next day in UTC+10

    assert glance(project, reviewer, now=NOW).today == 3  # UTC: all three on March 10
    assert glance(project, reviewer, now=NOW, zone=timezone(timedelta(hours=-5))).today == 2  # 10:30 in UTC-5
    assert glance(project, reviewer, now=NOW, zone=timezone(timedelta(hours=10))).today == 1  # 01:30 on March 11
    with override_timezone(ZoneInfo("Australia/Brisbane")):  # UTC+10: by default, the active zone (the browser's)
        assert glance(project, reviewer, now=NOW).today == 1


def test_progress_counts_days_and_hours_in_the_viewers_time_zone(project, reviewer) -> None:
    items = make_ready_items(project, [0.1] * 4)
    answer(items[0], reviewer, AnswerKind.TARGET, NOW.replace(hour=2))  # 21:00 on March 9 in Bogotá (UTC-5)
    answer(items[1], reviewer, AnswerKind.TARGET, NOW.replace(hour=5, minute=10))  # 00:10 on March 10 there
    answer(items[2], reviewer, AnswerKind.SKIP, NOW.replace(hour=14, minute=50))  # 20:20 in Kolkata (UTC+5:30)
    answer(items[3], reviewer, AnswerKind.TARGET, NOW.replace(hour=15, minute=10))  # 20:40 in Kolkata

    utc = project_progress(project, now=NOW)
    assert utc.daily[-1] == 4 and utc.days[-1] == NOW.replace(hour=0, minute=0)
    assert (utc.hourly[-1], utc.hourly[-2]) == (1, 1)  # 15:00-15:59 and 14:00-14:59 UTC

    bogota = project_progress(project, now=NOW, zone=ZoneInfo("America/Bogota"))
    assert (bogota.daily[-1], bogota.daily[-2]) == (3, 1)
    assert bogota.days[-1].isoformat() == "2026-03-10T00:00:00-05:00"
    assert bogota.reviewers[0].active_hours == 4

    # A half-hour zone: NOW is 21:00 in Kolkata, whose clock hour runs from 15:30 UTC; 20:20 and 20:40 fall in the
    # hour before it.
    kolkata = project_progress(project, now=NOW, zone=ZoneInfo("Asia/Kolkata"))
    assert kolkata.hourly[-1] == 0 and kolkata.hourly[-2] == 2
    assert kolkata.reviewers[0].active_hours == 3  # 07:30, 10:40 and 20:xx Kolkata time
    assert kolkata.daily[-1] == 4
