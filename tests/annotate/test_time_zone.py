"""Times read in the user's own time zone: the browser names it in the `tc_tz` cookie (`static/timezone.js`) and
`annotate.middleware.BrowserTimeZone` activates it for the request."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from annotate import queue
from annotate.forms import ExportForm
from annotate.models import Answer, AnswerKind, Claim

pytestmark = pytest.mark.django_db


def lease_text(client, project, item) -> str:
    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()
    return page.split('id="lease"', 1)[1].split("</span>", 1)[0]


def test_times_read_in_the_zone_the_browser_names(client, project, reviewer, ready_items) -> None:
    item = ready_items(project, [0.2])[0]
    queue.claim_next(project, reviewer)
    expires = Claim.objects.get(item=item, reviewer=reviewer).expires_at
    client.force_login(reviewer)

    utc = lease_text(client, project, item)
    assert f">{expires.astimezone(UTC):%H:%M}</time>" in utc
    assert "Times are shown in UTC." in client.get(reverse("home")).content.decode()

    client.cookies["tc_tz"] = "Asia/Kolkata"  # UTC+05:30: no whole-hour shift hides a mistake
    kolkata = lease_text(client, project, item)
    assert f">{expires.astimezone(ZoneInfo('Asia/Kolkata')):%H:%M}</time>" in kolkata
    assert "+05:30" in kolkata  # the machine-readable time says its offset
    assert "Times are shown in Asia/Kolkata." in client.get(reverse("home")).content.decode()

    del client.cookies["tc_tz"]  # the zone is the request's, never left over for the next one
    assert lease_text(client, project, item) == utc


@pytest.mark.parametrize("junk", ["../../../etc/passwd", "/etc/localtime", "Mars/Olympus_Mons", "zone.tab",
                                  "right/UTC" * 50, "", "Asia/Kolkata\x00"])
def test_a_cookie_naming_no_zone_leaves_times_in_utc(client, reviewer, project, junk) -> None:
    client.force_login(reviewer)
    client.cookies["tc_tz"] = junk

    response = client.get(reverse("home"))

    assert response.status_code == 200
    assert "Times are shown in UTC." in response.content.decode()


def test_every_page_runs_the_script_that_names_the_zone(client, reviewer) -> None:
    client.force_login(reviewer)
    assert '<script src="/static/timezone.js" defer></script>' in client.get(reverse("home")).content.decode()
    script = (Path(settings.BASE_DIR) / "static" / "timezone.js").read_text()
    assert '"tc_tz=" + zone' in script and "resolvedOptions().timeZone" in script  # the browser test runs it


def test_progress_page_charts_the_viewers_days(client, project, reviewer, ready_items) -> None:
    """A reviewer in Bogotá (UTC-5) finishes an item at 21:00 their time: yesterday for them, today in UTC."""
    now = timezone.now()
    evening = now.astimezone(ZoneInfo("America/Bogota")).replace(hour=21, minute=0, second=0, microsecond=0)
    if evening > now:
        evening -= timedelta(days=1)  # the last 21:00 in Bogotá
    item = ready_items(project, [0.3])[0]
    Answer.objects.create(item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target="db", source="s",
                          created_at=evening, updated_at=evening)
    client.force_login(reviewer)
    url = reverse("project_progress", args=[project.slug])

    def page_in(zone: str | None) -> str:
        client.cookies.pop("tc_tz", None)
        if zone:
            client.cookies["tc_tz"] = zone
        return client.get(url).content.decode()

    def days_with_an_answer(page: str) -> list[str]:
        return re.findall(r"<rect [^>]*><title>([^<]*): 1</title>", page)

    bogota = page_in("America/Bogota")
    assert days_with_an_answer(bogota) == [evening.strftime("%a %d %b")]
    assert "by last change (America/Bogota)" in bogota
    utc = page_in(None)  # the figures are shared for a while, but per zone
    assert days_with_an_answer(utc) == [evening.astimezone(UTC).strftime("%a %d %b")]
    assert days_with_an_answer(utc) != days_with_an_answer(bogota)


def test_export_since_starts_at_the_admins_midnight(project) -> None:
    form = ExportForm({"format": "jsonl", "minibatch_size": 32, "since": "2026-03-10"}, project=project)
    assert form.is_valid(), form.errors

    assert datetime.fromisoformat(form.filters()["after"]) == datetime(2026, 3, 10, tzinfo=UTC)
    with timezone.override(ZoneInfo("Asia/Kolkata")):
        assert datetime.fromisoformat(form.filters()["after"]) == datetime(2026, 3, 9, 18, 30, tzinfo=UTC)


def test_export_until_takes_the_whole_last_day_to_the_admins_next_midnight(project) -> None:
    form = ExportForm({"format": "jsonl", "minibatch_size": 32, "since": "2026-03-10", "until": "2026-03-10"},
                      project=project)
    assert form.is_valid(), form.errors

    assert datetime.fromisoformat(form.filters()["before"]) == datetime(2026, 3, 11, tzinfo=UTC)
    with timezone.override(ZoneInfo("Asia/Kolkata")):
        filters = form.filters()
    assert datetime.fromisoformat(filters["after"]) == datetime(2026, 3, 9, 18, 30, tzinfo=UTC)
    assert datetime.fromisoformat(filters["before"]) == datetime(2026, 3, 10, 18, 30, tzinfo=UTC)


def test_a_zone_chosen_on_the_account_page_holds_on_every_browser_before_any_script_ran(
        client, project, reviewer, ready_items) -> None:
    from django.test import Client

    item = ready_items(project, [0.2])[0]
    queue.claim_next(project, reviewer)
    expires = Claim.objects.get(item=item, reviewer=reviewer).expires_at
    client.force_login(reviewer)
    client.cookies["tc_tz"] = "Europe/Berlin"
    page = client.get(reverse("password_change")).content.decode()
    assert "This browser is in Europe/Berlin." in page
    assert '<option value="" selected>Follow this browser</option>' in page
    assert "autofocus" not in page  # whoever came for the time zone is not pulled to the password

    saved = client.post(reverse("account_time_zone"), {"time_zone": "Asia/Kolkata"}, follow=True)
    assert "Times are now shown in Asia/Kolkata on every browser you use." in saved.content.decode()
    assert '<option value="Asia/Kolkata" selected>' in saved.content.decode()
    # The account's choice wins over this browser's cookie ...
    assert f">{expires.astimezone(ZoneInfo('Asia/Kolkata')):%H:%M}</time>" in lease_text(client, project, item)
    assert "Times are shown in Asia/Kolkata, as your account sets." in client.get(reverse("home")).content.decode()
    # ... and holds on a browser that never ran timezone.js, from its first page.
    other = Client()
    other.force_login(reviewer)
    assert f">{expires.astimezone(ZoneInfo('Asia/Kolkata')):%H:%M}</time>" in lease_text(other, project, item)

    client.post(reverse("account_time_zone"), {"time_zone": ""})
    assert "Times are shown in Europe/Berlin." in client.get(reverse("home")).content.decode()
    assert "Times are shown in UTC." in other.get(reverse("home")).content.decode()


@pytest.mark.parametrize("junk", ["Mars/Olympus_Mons", "../../../etc/passwd", "Asia/Kolkata\x00", "x" * 100])
def test_a_zone_the_database_lacks_is_refused_and_nothing_changes(client, reviewer, junk) -> None:
    client.force_login(reviewer)
    client.post(reverse("account_time_zone"), {"time_zone": "Asia/Tokyo"})
    refused = client.post(reverse("account_time_zone"), {"time_zone": junk})
    assert refused.status_code == 400
    assert "No time zone is named" in refused.content.decode()
    assert reviewer.account_settings.time_zone == "Asia/Tokyo"
    assert "Times are shown in Asia/Tokyo" in client.get(reverse("home")).content.decode()


def test_a_chosen_zone_the_database_no_longer_has_falls_back_to_the_browsers(client, reviewer) -> None:
    from annotate.models import AccountSettings

    AccountSettings.objects.create(user=reviewer, time_zone="Gone/Zone")  # say, after a tzdata upgrade
    client.force_login(reviewer)
    client.cookies["tc_tz"] = "Asia/Tokyo"
    assert "Times are shown in Asia/Tokyo." in client.get(reverse("home")).content.decode()


def test_the_time_zone_needs_a_signed_in_post(client, reviewer) -> None:
    assert client.post(reverse("account_time_zone"), {"time_zone": "Asia/Tokyo"})["Location"].startswith(
        reverse("login"))
    client.force_login(reviewer)
    assert client.get(reverse("account_time_zone")).status_code == 405


def test_the_user_and_their_settings_are_one_query(client, reviewer, django_assert_num_queries) -> None:
    from annotate.models import AccountSettings

    AccountSettings.objects.create(user=reviewer, time_zone="Asia/Tokyo")
    client.force_login(reviewer)
    with django_assert_num_queries(2) as queries:  # the session (in the database here) and the user
        page = client.get(reverse("password_reset"))  # a page that reads nothing else
    assert "Times are shown in Asia/Tokyo" in page.content.decode()
    assert "annotate_accountsettings" in queries.captured_queries[1]["sql"]
