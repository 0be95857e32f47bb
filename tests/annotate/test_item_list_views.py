"""The item list and progress pages: who may see them, htmx fragments, errors answered with 400, links."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotate.models import Answer, AnswerKind, Claim, Item, ItemStatus
from tests.annotate.conftest import make_ready_items

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The progress page and its agreement fragment are cached per project id, which tests reuse."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def items_url(project, query: str = "") -> str:
    return reverse("item_list", args=[project.slug]) + query


def test_item_list_is_for_members_only(client, project, outsider) -> None:
    assert client.get(items_url(project)).status_code == 302  # to the sign-in page
    client.force_login(outsider)
    assert client.get(items_url(project)).status_code == 404
    assert client.get(reverse("project_progress", args=[project.slug])).status_code == 404
    assert client.get(reverse("progress_agreement", args=[project.slug])).status_code == 404


def test_item_list_page_has_the_filter_form_and_the_table(client, project, reviewer) -> None:
    items = make_ready_items(project, [0.25, 0.75])
    client.force_login(reviewer)

    response = client.get(items_url(project))

    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="item-filters"' in page and 'hx-push-url="true"' in page
    assert reverse("item_detail", args=[project.slug, items[0].pk]) in page
    assert "2 matching items" in page and "Why did service 1 stop?" in page


def test_htmx_gets_only_the_results_fragment(client, project, reviewer) -> None:
    make_ready_items(project, [0.25, 0.75])
    client.force_login(reviewer)

    response = client.get(items_url(project, "?confidence_min=0.5"), **HX)

    page = response.content.decode()
    assert response.status_code == 200 and response["Vary"] == "HX-Request, Cookie"
    assert 'id="item-results"' in page and "<html" not in page
    assert "1 matching item" in page and "(filtered)" in page


def test_impossible_filters_are_answered_with_400_and_the_reason(client, project, reviewer) -> None:
    make_ready_items(project, [0.25])
    client.force_login(reviewer)

    for extra in ({}, HX):
        response = client.get(items_url(project, "?confidence_min=0.9&confidence_max=0.1&status=lost"), **extra)
        page = response.content.decode()
        assert response.status_code == 400
        assert "These filters cannot be used" in page
        assert "<strong>Confidence</strong>: the lowest confidence, 0.9, is above the highest, 0.1, so nothing" in page
        assert "<strong>Status</strong>: unknown status &#x27;lost&#x27;" in page  # the form's labels name them
    full = client.get(items_url(project, "?status=lost")).content.decode()
    assert '<option value="lost" selected>lost</option>' in full  # the form shows what was asked


def test_a_nul_character_in_a_filter_is_answered_with_400(client, project, reviewer) -> None:
    """PostgreSQL refuses NUL in text parameters; the list says so instead of failing with a 500."""
    make_ready_items(project, [0.25])
    client.force_login(reviewer)

    for name in ("reviewer", "q", "status", "after"):
        response = client.get(items_url(project, ""), {name: "a\x00b"})
        assert response.status_code == 400, name
        assert f"{name} contains a NUL character" in response.content.decode()


def test_empty_states_say_why(client, project, reviewer) -> None:
    client.force_login(reviewer)
    assert "This project has no items yet" in client.get(items_url(project)).content.decode()

    make_ready_items(project, [0.25])
    page = client.get(items_url(project, "?confidence_min=0.9"), **HX).content.decode()
    assert "No items match these filters" in page


def test_pager_links_keep_the_filters_and_move_by_position(client, project, reviewer, monkeypatch) -> None:
    from annotate import itemlist

    monkeypatch.setattr(itemlist, "PAGE_SIZE", 2)
    items = make_ready_items(project, [0.1, 0.2, 0.3, 0.4, 0.5])
    client.force_login(reviewer)

    first = client.get(items_url(project, "?sort=-confidence")).content.decode()
    next_query = f"?sort=-confidence&amp;after={items[3].confidence!r}~{items[3].pk}"
    assert next_query in first and 'rel="prev"' not in first

    second = client.get(items_url(project, next_query.replace("&amp;", "&")), **HX).content.decode()
    assert f"#{items[2].pk}" in second and f"#{items[1].pk}" in second and f"#{items[4].pk}<" not in second
    assert 'rel="prev"' in second and 'rel="next"' in second and "A later page of the items" in second


def test_project_page_links_to_items_and_progress(client, project, reviewer) -> None:
    client.force_login(reviewer)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert items_url(project) in page and reverse("project_progress", args=[project.slug]) in page
    assert 'id="my-items"' not in page  # nothing answered yet: no list of one's own items

    (item,) = make_ready_items(project, [0.1])
    _answer(item, reviewer, AnswerKind.DRAFT, timezone.now())
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert f'id="my-items" href="{items_url(project, "?reviewer=rita")}"' in page
    listed = client.get(items_url(project, "?reviewer=rita")).content.decode()
    assert f'href="{reverse("item_detail", args=[project.slug, item.pk])}"' in listed


def _answer(item, user, kind, when):
    Answer.objects.create(item=item, reviewer=user, kind=kind, target="db" if kind == AnswerKind.TARGET else None,
                          source=item.project.source_for(item.pk, user), created_at=when, updated_at=when)


def test_progress_page_shows_status_counts_and_reviewer_figures(client, project, reviewer, second_reviewer,
                                                                project_admin) -> None:
    items = make_ready_items(project, [0.1, 0.2, 0.3, 0.4])
    now = timezone.now()
    _answer(items[0], reviewer, AnswerKind.TARGET, now - timedelta(minutes=5))
    _answer(items[1], reviewer, AnswerKind.SKIP, now - timedelta(minutes=10))
    _answer(items[2], second_reviewer, AnswerKind.DRAFT, now)
    Item.objects.filter(pk=items[0].pk).update(status=ItemStatus.DONE)

    client.force_login(project_admin)
    page = client.get(reverse("project_progress", args=[project.slug])).content.decode()
    assert "Items by status" in page and "<svg" in page
    assert ">rita<" in page and ">sam<" in page
    assert f'<a href="{items_url(project, "?reviewer=sam")}">sam</a>' in page  # a name opens their items
    assert reverse("progress_agreement", args=[project.slug]) in page

    client.force_login(reviewer)
    own = client.get(reverse("project_progress", args=[project.slug])).content.decode()
    assert ">rita<" in own and ">sam<" not in own  # reviewers see their own row only


def test_agreement_fragment(client, project, reviewer, second_reviewer) -> None:
    (item,) = make_ready_items(project, [0.1])
    now = timezone.now()
    _answer(item, reviewer, AnswerKind.TARGET, now)
    _answer(item, second_reviewer, AnswerKind.TARGET, now)
    client.force_login(reviewer)

    fragment = client.get(reverse("progress_agreement", args=[project.slug]), **HX).content.decode()
    full = client.get(reverse("progress_agreement", args=[project.slug])).content.decode()

    assert "100.0%" in fragment and "all reviewers agree" in fragment and "<html" not in fragment
    assert "<html" in full and "all reviewers agree" in full


def test_the_progress_fragment_and_the_agreement_page_share_one_computation(
        client, project, reviewer, second_reviewer, project_admin, monkeypatch) -> None:
    from annotate import agreement

    (item,) = make_ready_items(project, [0.1])
    _answer(item, reviewer, AnswerKind.TARGET, timezone.now())
    _answer(item, second_reviewer, AnswerKind.TARGET, timezone.now())
    computed = []
    compute = agreement.project_report
    monkeypatch.setattr(agreement, "project_report", lambda p: computed.append(p.pk) or compute(p))
    client.force_login(project_admin)

    assert client.get(reverse("progress_agreement", args=[project.slug]), **HX).status_code == 200
    assert client.get(reverse("agreement_page", args=[project.slug])).status_code == 200
    assert computed == [project.pk]


def _bearer(user, project) -> dict:
    from annotate.models import ApiToken

    _, key = ApiToken.objects.issue(user, name="test")
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def test_api_lists_items_with_the_same_filters_and_cursors(client, project, reviewer, monkeypatch) -> None:
    from annotate import itemlist

    monkeypatch.setattr(itemlist, "PAGE_SIZE", 2)
    items = make_ready_items(project, [0.1, 0.2, 0.3, 0.9])
    url = reverse("api:items", args=[project.slug])

    first = client.get(url, {"confidence_max": "0.5"}, **_bearer(reviewer, project)).json()
    second = client.get(url, {"confidence_max": "0.5", "after": first["next"]}, **_bearer(reviewer, project)).json()

    assert [row["id"] for row in first["items"]] == [items[0].pk, items[1].pk] and first["matching"] == 3
    assert [row["id"] for row in second["items"]] == [items[2].pk] and second["next"] is None
    assert second["previous"] == str(items[2].pk) and second["matching"] is None  # counted on the first page only


def test_api_answers_impossible_filters_with_400(client, project, reviewer, outsider) -> None:
    url = reverse("api:items", args=[project.slug])

    response = client.get(url, {"confidence_min": "2", "version": "x"}, **_bearer(reviewer, project))

    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"confidence_min", "version"}
    assert client.get(url, **_bearer(outsider, project)).status_code == 404


def test_progress_figures_are_cached_briefly(client, project, reviewer) -> None:
    (item,) = make_ready_items(project, [0.1])
    client.force_login(reviewer)
    url = reverse("project_progress", args=[project.slug])
    assert "No answers yet" in client.get(url).content.decode()

    _answer(item, reviewer, AnswerKind.TARGET, timezone.now())

    assert "No answers yet" in client.get(url).content.decode()  # within PROGRESS_CACHE_SECONDS
    from django.core.cache import cache

    cache.clear()
    assert ">rita<" in client.get(url).content.decode()


def test_progress_charts_only_what_happened_and_groups_a_large_rate(client, project, reviewer,
                                                                     second_reviewer) -> None:
    from django.core.cache import cache

    (item,) = make_ready_items(project, [0.1])
    client.force_login(reviewer)
    url = reverse("project_progress", args=[project.slug])
    empty = client.get(url).content.decode()
    assert "No answers finished in the last 14 days." in empty and 'id="daily-title"' not in empty

    _answer(item, second_reviewer, AnswerKind.TARGET, timezone.now() - timedelta(days=30))
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.DONE)
    cache.clear()
    old = client.get(url).content.decode()
    assert "No answers finished in the last 14 days (1 item finished earlier)." in old
    assert 'id="daily-title"' not in old

    now = timezone.now()
    Answer.objects.bulk_create(
        Answer(item=item, project=project, reviewer=reviewer, kind=AnswerKind.TARGET, target="db", source="s",
               created_at=now, updated_at=now)
        for item in make_ready_items(project, [0.5] * 1500))
    cache.clear()
    busy = client.get(url).content.decode()
    assert 'id="daily-title"' in busy
    assert '<td class="num">1,500</td>' in busy  # the rate: 1,500 finished in one active hour, not "1500.0"


def test_the_list_shows_each_viewer_their_own_answer_to_each_item(client, project, reviewer, second_reviewer) -> None:
    answered, skipped, drafted, untouched = make_ready_items(project, [0.1, 0.2, 0.3, 0.4])
    now = timezone.now()
    _answer(answered, reviewer, AnswerKind.TARGET, now)
    _answer(skipped, reviewer, AnswerKind.SKIP, now)
    _answer(drafted, reviewer, AnswerKind.DRAFT, now)
    _answer(untouched, second_reviewer, AnswerKind.TARGET, now)  # someone else's answer is not "yours"
    client.force_login(reviewer)

    rows = client.get(items_url(project), **HX).content.decode().split("<tr>")[2:]

    def own(item) -> str:
        (row,) = [r for r in rows if f"/items/{item.pk}/" in r]
        return row.rsplit("<td>", 1)[1]

    assert 'badge-target">answered' in own(answered) and 'badge-skip">skipped' in own(skipped)
    assert 'badge-draft">draft' in own(drafted) and "badge" not in own(untouched)
    client.force_login(second_reviewer)
    assert 'badge-target">answered' in client.get(items_url(project), **HX).content.decode().split(
        f"/items/{untouched.pk}/")[1].split("</tr>")[0]


def test_admins_see_who_holds_each_item_now(client, project, reviewer, second_reviewer, project_admin) -> None:
    project.overlap = 2
    project.save(update_fields=["overlap"])
    first, second = make_ready_items(project, [0.1, 0.2])
    Claim.objects.create(item=first, reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    Claim.objects.create(item=first, reviewer=second_reviewer, expires_at=timezone.now() + timedelta(minutes=9))
    Claim.objects.create(item=second, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(project_admin)

    page = client.get(items_url(project), **HX).content.decode()

    def status(item) -> str:
        return page.split(f"/items/{item.pk}/")[1].split("</tr>")[0]

    assert 'title="Working on it now: rita, sam">held by rita, sam</span>' in status(first)
    assert "held by" not in status(second)  # its lease ended
    client.force_login(reviewer)
    assert "held by" not in client.get(items_url(project), **HX).content.decode()  # for the project's admins
    client.force_login(project_admin)
    with CaptureQueriesContext(connection) as few:
        client.get(items_url(project), **HX)
    for item in make_ready_items(project, [0.3] * 10):
        Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    with CaptureQueriesContext(connection) as many:
        client.get(items_url(project), **HX)
    assert len(many) == len(few)  # one query for the page's claims, however many rows hold some
