"""What a reviewer typed and has not sent, kept on the server with their claim (`review.item_typed`), so that
their other browsers show it: stored as sent, shown only to them while the claim lasts, gone with the claim, and
refused with a reason when it is not the page's own shape. An admin's forms (adjudication, fixed inputs) are kept
for that admin until sent. The browser's side is `tests/e2e/test_drafts.py`."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate import adjudication, queue, tasks
from annotate.forms import TYPED_MAX_CHARS
from annotate.models import AdminTyping, Answer, AnswerKind, Claim, Item, ItemStatus, Membership, Role
from tests.annotate.conftest import decision_input, make_ready_items

HX = {"HTTP_HX_REQUEST": "true"}
ANSWER = [{"index": 1, "name": "choice", "checked": True}, {"index": 2, "name": "choice", "checked": False}]
SKIP = [{"index": 1, "name": "reason", "value": "needs an expert"}]
TYPED = {"answer": ANSWER, "skip": SKIP}


def send(client, project, item, typed) -> object:
    body = typed if isinstance(typed, str) else json.dumps(typed)
    return client.post(reverse("item_typed", args=[project.slug, item.pk]), {"typed": body})


def server_copies(page: str) -> dict[str, dict]:
    """Each form's kept typing as the page hands it to static/drafts.js, by the form's name."""
    found = {}
    for form in re.findall(r"<form [^>]*data-draft=[^>]*>", page):
        kept = re.search(r'data-draft-server="([^"]*)"', form)
        if kept:
            name = re.search(r'data-draft="[^"]*:(\w+)"', form).group(1)
            found[name] = json.loads(html.unescape(kept.group(1)))
    return found


def page_of(client, project, item) -> str:
    return client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()


@pytest.mark.django_db
def test_typing_one_browser_sent_is_shown_in_the_reviewers_other_browsers_only(client, project, reviewer,
                                                                             project_admin) -> None:
    item, _ = make_ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    response = send(client, project, item, TYPED)

    assert response.status_code == 204
    claim = Claim.objects.get(item=item, reviewer=reviewer)
    assert claim.typed == TYPED and claim.typed_at is not None
    other_browser = Client()
    other_browser.force_login(reviewer)
    page = page_of(other_browser, project, item)
    copies = server_copies(page)
    assert {name: kept["fields"] for name, kept in copies.items()} == TYPED
    assert all(0 <= kept["age"] < 60_000 for kept in copies.values())  # milliseconds since the server got it
    assert page.count(f'data-draft-save="{reverse("item_typed", args=[project.slug, item.pk])}"') == 2
    # Claim-next gives the reviewer their held item back, with what they typed.
    fragment = other_browser.post(reverse("review_next", args=[project.slug]), **HX).content.decode()
    assert server_copies(fragment)["skip"]["fields"] == SKIP
    # Nobody else sees it, an admin included.
    client.force_login(project_admin)
    assert server_copies(page_of(client, project, item)) == {}


@pytest.mark.django_db
def test_submitting_takes_the_typing_along_with_the_claim(client, project, reviewer) -> None:
    first, second = make_ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    send(client, project, first, TYPED)

    next_page = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)

    assert server_copies(next_page.content.decode()) == {}  # the next item has nothing typed yet
    assert not Claim.objects.filter(item=first).exists()
    assert server_copies(page_of(client, project, first)) == {}


@pytest.mark.django_db
def test_typing_is_kept_only_while_the_item_is_the_reviewers(client, project, reviewer) -> None:
    (item,) = make_ready_items(project, [0.1])
    client.force_login(reviewer)

    response = send(client, project, item, TYPED)  # never claimed

    assert response.status_code == 409
    assert "no active claim" in response.content.decode()
    assert "data-draft-save" not in page_of(client, project, item)  # the page does not send any

    queue.claim_next(project, reviewer)
    assert send(client, project, item, TYPED).status_code == 204
    Claim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert send(client, project, item, {"skip": []}).status_code == 409
    assert Claim.objects.get().typed == TYPED  # an ended lease keeps it, unchanged, and does not show it
    assert server_copies(page_of(client, project, item)) == {}
    queue.keep(item, reviewer)  # the item is theirs again: so is what they typed
    assert server_copies(page_of(client, project, item))["answer"]["fields"] == ANSWER


@pytest.mark.django_db
def test_typing_older_than_the_reviewers_answer_is_left_out(client, project, reviewer) -> None:
    (item,) = make_ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    Claim.objects.update(typed=TYPED, typed_at=timezone.now() - timedelta(minutes=1))
    client.force_login(reviewer)
    assert set(server_copies(page_of(client, project, item))) == {"answer", "skip"}

    Answer.objects.create(item=item, project=project, reviewer=reviewer, kind=AnswerKind.DRAFT, target="dns",
                          source="s")

    assert server_copies(page_of(client, project, item)) == {}


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "status", "says"), [
    ("{not json", 400, "typed: not JSON"),
    ("[]", 400, "typed: a JSON object of forms"),
    ('{"notes": []}', 400, "unknown form 'notes'; the forms kept are answer, skip, adjudication, inputs"),
    ('{"answer": {"index": 0}}', 400, "typed.answer: a list of at most 1000 fields"),
    ('{"answer": [{"index": 0, "name": "choice", "checked": "yes"}]}', 400, "typed.answer[0]: a field is"),
    ('{"skip": [{"index": -1, "name": "reason", "value": ""}]}', 400, "typed.skip[0]: a field is"),
    ('{"skip": [{"index": 0, "name": "reason", "value": "x", "path": "/etc"}]}', 400, "typed.skip[0]: a field is"),
    ("", 400, "This field is required."),
    ('{"skip": [{"index": 0, "name": "reason", "value": "%s"}]}' % ("x" * TYPED_MAX_CHARS), 413,
     "too large to keep on the server (over 256 KiB); this browser still keeps it"),
])
def test_typing_not_in_the_pages_shape_is_refused_with_a_reason_and_keeps_what_was_kept(
        client, project, reviewer, body, status, says) -> None:
    (item,) = make_ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    send(client, project, item, TYPED)

    response = send(client, project, item, body)

    assert response.status_code == status
    assert says in response.content.decode()
    assert Claim.objects.get().typed == TYPED


@pytest.mark.django_db
def test_typing_needs_a_signed_in_member_and_a_csrf_token(client, project, reviewer, outsider) -> None:
    (item,) = make_ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    url = reverse("item_typed", args=[project.slug, item.pk])

    assert client.post(url, {"typed": "{}"}).status_code == 302  # to the sign-in page
    client.force_login(outsider)
    assert client.post(url, {"typed": "{}"}).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(reviewer)
    assert strict.post(url, {"typed": json.dumps(TYPED)}).status_code == 403
    client.force_login(reviewer)
    assert client.get(url).status_code == 405
    assert Claim.objects.get().typed is None


# -- an admin's forms: the target written when adjudicating, a refused item's fixed inputs -----------------------
WRITTEN = [{"index": 2, "name": "choice", "checked": True}, {"index": 5, "name": "note", "value": "both read the log"}]


def adjudication_copies(client, project, item) -> dict[str, dict]:
    return server_copies(client.get(reverse("adjudication_page", args=[project.slug, item.pk])).content.decode())


@pytest.mark.django_db
def test_what_an_admin_writes_to_adjudicate_is_kept_for_their_other_browsers_until_they_adjudicate(
        client, project, project_admin, django_user_model, split_item) -> None:
    client.force_login(project_admin)

    assert send(client, project, split_item, {"adjudication": WRITTEN}).status_code == 204

    other_browser = Client()
    other_browser.force_login(project_admin)
    kept = adjudication_copies(other_browser, project, split_item)["adjudication"]
    assert kept["fields"] == WRITTEN and 0 <= kept["age"] < 60_000
    page = other_browser.get(reverse("adjudication_page", args=[project.slug, split_item.pk])).content.decode()
    assert 'data-draft-kept="kept for you until you adjudicate this item"' in page
    another_admin = django_user_model.objects.create_user("abe")
    Membership.objects.create(project=project, user=another_admin, role=Role.ADMIN)
    client.force_login(another_admin)
    assert adjudication_copies(client, project, split_item) == {}  # only the admin who typed it

    answer = Answer.objects.get(item=split_item, reviewer__username="sam")
    other_browser.post(reverse("adjudicate", args=[project.slug, split_item.pk]), {"answer": answer.pk}, **HX)

    assert not AdminTyping.objects.exists()
    assert adjudication_copies(other_browser, project, split_item) == {}


@pytest.mark.django_db
def test_an_admins_typing_older_than_the_items_adjudication_or_a_week_is_not_restored(
        client, project, project_admin, django_user_model, split_item) -> None:
    client.force_login(project_admin)
    send(client, project, split_item, {"adjudication": WRITTEN})
    another_admin = django_user_model.objects.create_user("abe")
    Membership.objects.create(project=project, user=another_admin, role=Role.ADMIN)
    adjudication.adjudicate(split_item, another_admin, answer=Answer.objects.get(item=split_item,
                                                                              reviewer__username="sam"))
    assert adjudication_copies(client, project, split_item) == {}  # it came before the target abe gave

    send(client, project, split_item, {"adjudication": WRITTEN})
    assert adjudication_copies(client, project, split_item)["adjudication"]["fields"] == WRITTEN
    AdminTyping.objects.update(updated_at=timezone.now() - timedelta(days=8))
    assert adjudication_copies(client, project, split_item) == {}

    (other,) = make_ready_items(project, [0.3])
    send(client, project, other, {"adjudication": WRITTEN})  # the week-old one goes when the admin types again
    assert list(AdminTyping.objects.values_list("item_id", flat=True)) == [other.pk]


@pytest.mark.django_db
def test_a_reviewer_cannot_keep_typing_for_an_admins_form(client, project, reviewer, split_item) -> None:
    client.force_login(reviewer)

    response = send(client, project, split_item, {"adjudication": WRITTEN})

    assert response.status_code == 403
    assert not AdminTyping.objects.exists()


@pytest.mark.django_db
def test_an_admins_fix_of_refused_inputs_is_kept_until_it_is_saved(client, project, project_admin,
                                                                    monkeypatch) -> None:
    monkeypatch.setattr(tasks.predict_items, "delay_on_commit", lambda *args: None)
    item = Item.objects.create(project=project, inputs={"question": "Why did the cache stop?"})
    tasks.predict_items(project.pk, [item.pk])
    item.refresh_from_db()
    assert item.status == ItemStatus.REFUSED
    fixed = {**decision_input(), "question": "Why did the cache stop?"}
    typed = [{"index": 1, "name": "inputs", "value": json.dumps(fixed)}]
    client.force_login(project_admin)

    assert send(client, project, item, {"inputs": typed}).status_code == 204

    other_browser = Client()
    other_browser.force_login(project_admin)
    assert server_copies(page_of(other_browser, project, item))["inputs"]["fields"] == typed
    other_browser.post(reverse("item_fix_inputs", args=[project.slug, item.pk]), {"inputs": json.dumps(fixed)}, **HX)
    assert Item.objects.get(pk=item.pk).status == ItemStatus.PENDING
    assert not AdminTyping.objects.exists()
