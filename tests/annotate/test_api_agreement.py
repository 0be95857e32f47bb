"""The JSON API's agreement, disagreement and adjudication endpoints: admin tokens only, the same numbers as the
agreement page, refused adjudications store nothing."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate import api_agreement, queue
from annotate.models import Adjudication, AdjudicationRevision, Answer, ApiToken, Item, Membership, Project, Role
from annotate.views import targets
from tests.annotate.conftest import make_ready_items as ready_items

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_key(project, project_admin) -> str:
    return ApiToken.objects.issue(project_admin, name="ci")[1]


@pytest.fixture
def labelled(project, reviewer, second_reviewer):
    """Overlap 2: rita and sam disagree on the first item ("db" / "dns") and agree on the second."""
    return _label(project, [reviewer, second_reviewer], [("db", "dns"), ("db", "db")])


def _label(project, users, answers) -> list[Item]:
    """Items of `project` answered in turn by `users` with the targets of each row of `answers`."""
    Project.objects.filter(pk=project.pk).update(overlap=len(users))
    project.refresh_from_db()
    items = ready_items(project, [0.1 * (n + 1) for n in range(len(answers))])
    for item, row in zip(items, answers, strict=True):
        for user, target in zip(users, row, strict=True):
            assert queue.claim_next(project, user) == item
            queue.submit(item, user, target)
    for item in items:
        item.refresh_from_db()
    return items


def _get(client, url: str, key: str | None):
    return client.get(url, **({"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}))


def _post(client, url: str, body, key: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **headers)


def _adjudication_url(item) -> str:
    return f"/api/projects/{item.project.slug}/items/{item.pk}/adjudication"


def _nothing_stored(*items) -> bool:
    """No adjudication and no revision, and each item's disagreement flag as before."""
    return (not Adjudication.objects.exists() and not AdjudicationRevision.objects.exists()
            and all(Item.objects.get(pk=i.pk).disagreement == i.disagreement for i in items))


# -- GET agreement ---------------------------------------------------------------------------------------------
def test_agreement_reports_the_measure_percent_kappa_pairs_and_counts(client, project, admin_key, labelled) -> None:
    body = _get(client, "/api/projects/outages/agreement", admin_key).json()

    assert body["kappa"] == pytest.approx(-1 / 3)  # Fleiss: labels db/dns and db/db
    assert body.pop("stale") is False and datetime.fromisoformat(body.pop("computed_at")) <= timezone.now()
    assert {k: v for k, v in body.items() if k != "kappa"} == {
        "measure": "categorical", "measure_name": "Percent agreement and kappa", "items": 2, "agreed": 1,
        "percent": 50.0, "mean_score": 0.5,
        "pairs": [{"reviewers": ["rita", "sam"], "items": 2, "agreed": 1, "percent": 50.0, "score": 0.5,
                   "kappa": 0.0}],
        "reviewers": [{"reviewer": name, "co_reviewers": 1, "items": 2, "agreed": 1, "percent": 50.0, "score": 0.5}
                      for name in ("rita", "sam")],
        "disagreements": 1, "adjudicated": 0, "open": 1,
    }


def test_agreement_counts_an_adjudicated_disagreement(client, project, admin_key, labelled) -> None:
    _post(client, _adjudication_url(labelled[0]), {"target": "db"}, admin_key)

    body = _get(client, "/api/projects/outages/agreement", admin_key).json()

    assert (body["disagreements"], body["adjudicated"], body["open"]) == (1, 1, 0)


def test_agreement_of_text_targets_has_a_mean_score_and_no_kappa(client, project_admin, reviewer, second_reviewer,
                                                                 admin_key) -> None:
    from annotate import agreement

    chat = Project.objects.create(slug="chat", name="Chat", tool="chatbot", mode="reply", overlap=2)
    Membership.objects.create(project=chat, user=project_admin, role=Role.ADMIN)
    item = chat.items.create(inputs="hello there", status="done", final_answers=2)
    for user, text in ((reviewer, "the disk"), (second_reviewer, "the dusk")):
        Answer.objects.create(item=item, reviewer=user, kind="target", target=text, source="s")
    item.disagreement = agreement.item_disagreement(item)
    item.save()

    body = _get(client, "/api/projects/chat/agreement", admin_key).json()

    assert (body["measure"], body["measure_name"], body["kappa"]) == ("text", "Text similarity", None)
    assert (body["items"], body["agreed"], body["percent"], body["disagreements"]) == (1, 0, 0.0, 1)
    assert body["mean_score"] == pytest.approx(0.875) and body["pairs"][0]["score"] == pytest.approx(0.875)
    assert body["pairs"][0]["kappa"] is None


def test_api_and_agreement_page_report_the_same_numbers(client, project, project_admin, reviewer, second_reviewer,
                                                        django_user_model, admin_key) -> None:
    tom = django_user_model.objects.create_user("tom", password="a-long-password")
    Membership.objects.create(project=project, user=tom, role=Role.REVIEWER)
    items = _label(project, [reviewer, second_reviewer, tom],
                   [("db", "db", "dns"), ("db", "db", "db"), ("dns", "db", "dns"), ("dns", "dns", "dns")])
    _post(client, _adjudication_url(items[0]), {"target": "db"}, admin_key)
    client.force_login(project_admin)

    api = _get(client, "/api/projects/outages/agreement", admin_key).json()
    page = client.get(reverse("agreement_page", args=["outages"])).content.decode()

    figures = dict(re.findall(r'<strong id="(percent-agreement|fleiss-kappa)">([^<]*)</strong>', page))
    assert figures == {"percent-agreement": targets.percent(api["percent"]),
                       "fleiss-kappa": targets.fixed(api["kappa"])}
    rows = re.findall(r"<tr><td>(\w+) · (\w+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td>\s*<td>([^< ]*)", page)
    assert rows == [(*p["reviewers"], str(p["items"]), str(p["agreed"]), targets.percent(p["percent"]),
                     targets.fixed(p["kappa"])) for p in api["pairs"]]
    assert len(rows) == 3 and api["items"] == 4
    assert f'<strong>{api["open"]}</strong><span class="muted small"><a' in page
    assert f'<strong>{api["adjudicated"]}</strong><span class="muted small">adjudicated' in page
    assert (api["disagreements"], api["adjudicated"]) == (2, 1)


# -- GET disagreements -----------------------------------------------------------------------------------------
def test_disagreements_list_each_reviewers_answer_and_the_adjudication(client, project, admin_key,
                                                                       second_reviewer, labelled) -> None:
    split, _ = labelled
    before = _get(client, "/api/projects/outages/disagreements", admin_key).json()
    sams = Answer.objects.get(item=split, reviewer=second_reviewer)
    _post(client, _adjudication_url(split), {"answer": sams.pk, "note": "the log says DNS"}, admin_key)

    after = _get(client, "/api/projects/outages/disagreements", admin_key).json()

    assert before["next"] is None and [i["id"] for i in before["items"]] == [split.pk]
    answers = [{k: a[k] for k in ("id", "reviewer", "kind", "target", "source")} for a in before["items"][0]["answers"]]
    assert answers == [
        {"id": Answer.objects.get(item=split, reviewer__username="rita").pk, "reviewer": "rita", "kind": "target",
         "target": "db", "source": f"review:outages/{split.pk}/rita"},
        {"id": sams.pk, "reviewer": "sam", "kind": "target", "target": "dns",
         "source": f"review:outages/{split.pk}/sam"},
    ]
    assert (before["items"][0]["adjudicated"], before["items"][0]["adjudication"]) == (False, None)
    settled = after["items"][0]
    assert settled["adjudicated"] is True
    assert {k: v for k, v in settled["adjudication"].items() if k != "updated_at"} == {
        "kind": "picked", "target": "dns", "source": f"adjudication:outages/{split.pk}/ada", "answer": sams.pk,
        "admin": "ada", "note": "the log says DNS", "revision": 1,
    }


def test_disagreements_show_open_leaves_out_adjudicated_items(client, project, admin_key, reviewer,
                                                              second_reviewer) -> None:
    first, second = _label(project, [reviewer, second_reviewer], [("db", "dns"), ("dns", "db")])
    _post(client, _adjudication_url(first), {"distribution": True}, admin_key)

    every = _get(client, "/api/projects/outages/disagreements", admin_key).json()
    still_open = _get(client, "/api/projects/outages/disagreements?show=open", admin_key).json()

    assert [i["id"] for i in every["items"]] == [first.pk, second.pk]
    assert [i["id"] for i in still_open["items"]] == [second.pk]


def test_disagreements_are_paged_with_a_keyset_cursor(client, project, admin_key, reviewer, second_reviewer,
                                                      monkeypatch) -> None:
    monkeypatch.setattr(api_agreement, "PAGE_SIZE", 2)
    items = _label(project, [reviewer, second_reviewer],
                   [("db", "dns"), ("db", "db"), ("dns", "db"), ("db", "dns"), ("dns", "db")])
    split = [items[0].pk, items[2].pk, items[3].pk, items[4].pk]

    pages, after = [], ""
    for _ in range(3):
        body = _get(client, f"/api/projects/outages/disagreements?after={after}", admin_key).json()
        pages.append([i["id"] for i in body["items"]])
        if body["next"] is None:
            break
        after = body["next"]

    assert pages == [split[:2], split[2:]]


def test_disagreements_refuse_a_bad_cursor_or_show(client, project, admin_key, labelled) -> None:
    response = _get(client, "/api/projects/outages/disagreements?after=abc&show=some", admin_key)

    assert response.status_code == 400
    assert response.json()["errors"] == {"after": "expected an item id (the previous page's 'next'), got 'abc'",
                                         "show": "expected 'all' or 'open', got 'some'"}


# -- POST adjudication -----------------------------------------------------------------------------------------
def test_picking_an_answer_stores_it_and_answers_201_with_the_adjudication(client, project, admin_key,
                                                                           second_reviewer, labelled) -> None:
    split, _ = labelled
    sams = Answer.objects.get(item=split, reviewer=second_reviewer)

    response = _post(client, _adjudication_url(split), {"answer": sams.pk}, admin_key)

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["item"], body["status"], body["message"]) == (
        split.pk, "adjudicated", f"Item {split.pk} adjudicated: picked sam's answer.")
    assert {k: v for k, v in body["adjudication"].items() if k != "updated_at"} == {
        "kind": "picked", "target": "dns", "source": f"adjudication:outages/{split.pk}/ada", "answer": sams.pk,
        "admin": "ada", "note": "", "revision": 1,
    }
    stored = Adjudication.objects.get(item=split)
    assert (stored.target, stored.chosen_answer, stored.adjudicator.username) == ("dns", sams, "ada")


def test_a_written_target_is_normalized_and_the_same_again_is_200_unchanged(client, project, admin_key,
                                                                            labelled) -> None:
    url = _adjudication_url(labelled[0])

    written = _post(client, url, {"target": 1}, admin_key)  # an index: the second candidate
    again = _post(client, url, {"target": "dns"}, admin_key)
    replaced = _post(client, url, {"target": "db"}, admin_key)

    assert written.status_code == 201 and written.json()["adjudication"]["target"] == "dns"
    assert written.json()["adjudication"]["kind"] == "written" and written.json()["adjudication"]["answer"] is None
    assert again.status_code == 200 and again.json()["status"] == "unchanged"
    assert again.json()["adjudication"]["revision"] == 1
    assert replaced.status_code == 201 and replaced.json()["status"] == "replaced"
    assert replaced.json()["adjudication"]["revision"] == 2
    assert list(AdjudicationRevision.objects.values_list("target", flat=True)) == ["dns", "db"]


def test_the_reviewers_distribution_is_stored_for_a_ranking_tool(client, project, admin_key, labelled) -> None:
    response = _post(client, _adjudication_url(labelled[0]), {"distribution": True}, admin_key)

    assert response.status_code == 201
    assert (response.json()["adjudication"]["kind"], response.json()["adjudication"]["target"]) == (
        "distribution", [0.5, 0.5])
    assert Adjudication.objects.get().target == [0.5, 0.5]


@pytest.mark.parametrize(("body", "message"), [
    ({}, "missing field: give one of 'target', 'answer' or 'distribution'"),
    ({"note": "only a note"}, "missing field: give one of 'target', 'answer' or 'distribution'"),
    ({"target": "db", "answer": 1}, "give exactly one of 'target', 'answer' or 'distribution', got target, answer"),
    ({"target": "db", "colour": "red", "reason": "x"},
     "unknown fields 'colour', 'reason'; valid fields: answer, distribution, note, target"),
    ({"target": None}, "target: null is not a target; give the target in the tool's form, or 'answer' to pick one"),
    ({"target": "disk"}, "target: the tool would not train on this target: "),
    ({"target": [0.9, 0.9]}, "target: the tool would not train on this target: "),
    ({"answer": "1"}, 'answer: expected an answer id (an integer), got "1"'),
    ({"answer": True}, "answer: expected an answer id (an integer), got true"),
    ({"distribution": False}, "distribution: expected true, got false"),
    ({"target": "db", "note": 5}, "note: expected a string of at most 500 characters"),
    ({"target": "db", "note": "x" * 501}, "note: expected a string of at most 500 characters"),
    (["db"], "expected a JSON object with one of 'target', 'answer' or 'distribution'"),
    (b'{"target": ', "the body is not valid JSON"),
])
def test_a_bad_request_is_refused_with_400_naming_the_problem_and_nothing_stored(client, project, admin_key,
                                                                                 labelled, body, message) -> None:
    response = _post(client, _adjudication_url(labelled[0]), body, admin_key)

    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert _nothing_stored(*labelled)


def test_a_target_the_trainer_refuses_says_why(client, project, admin_key, labelled) -> None:
    response = _post(client, _adjudication_url(labelled[0]), {"target": "disk"}, admin_key)

    assert "unknown hypothesis id 'disk'" in response.json()["error"]


def test_an_item_without_disagreement_is_refused_with_the_services_message(client, project, admin_key,
                                                                            labelled) -> None:
    _, agreed = labelled

    response = _post(client, _adjudication_url(agreed), {"target": "dns"}, admin_key)

    assert response.status_code == 400
    assert response.json()["error"] == (
        f"Item {agreed.pk} has nothing to adjudicate: its reviewers do not disagree (all 2 final targets agree). "
        "Adjudication settles items where reviewers gave different targets.")
    assert _nothing_stored(*labelled)


def test_an_answer_of_another_item_or_a_skip_is_refused(client, project, admin_key, outsider, labelled) -> None:
    split, agreed = labelled
    foreign = Answer.objects.filter(item=agreed).first()
    skip = Answer.objects.create(item=split, reviewer=outsider, kind="skip", skip_reason="unsure", source="s")

    refused = [_post(client, _adjudication_url(split), {"answer": pk}, admin_key) for pk in (foreign.pk, 10**9)]
    skipped = _post(client, _adjudication_url(split), {"answer": skip.pk}, admin_key)

    assert [r.status_code for r in refused] == [400, 400]
    assert refused[0].json()["error"] == f"answer: {foreign.pk} is not an answer to item {split.pk}"
    assert refused[1].json()["error"] == f"answer: {10**9} is not an answer to item {split.pk}"
    assert skipped.status_code == 400 and "olga's answer to item" in skipped.json()["error"]
    assert "is a skipped, not a target" in skipped.json()["error"]
    assert _nothing_stored(*labelled)


def test_distribution_is_refused_for_a_tool_that_does_not_rank(client, project_admin, reviewer, second_reviewer,
                                                               admin_key) -> None:
    from annotate import agreement

    nli = Project.objects.create(slug="nli", name="NLI", tool="investigator", mode="verification", overlap=2)
    Membership.objects.create(project=nli, user=project_admin, role=Role.ADMIN)
    item = nli.items.create(inputs={"premise": "the disk is full", "hypothesis": "the disk has space"},
                            status="done", final_answers=2)
    for user, label in ((reviewer, "entailment"), (second_reviewer, "contradiction")):
        Answer.objects.create(item=item, reviewer=user, kind="target", target=label, source="s")
    item.disagreement = agreement.item_disagreement(item)
    item.save()

    response = _post(client, _adjudication_url(item), {"distribution": True}, admin_key)

    assert response.status_code == 400
    assert response.json()["error"] == ("distribution: the reviewers' distribution is a target of ranking tools "
                                        "only, not investigator/verification")
    assert _nothing_stored(item)


def test_an_oversize_body_is_refused_with_413(client, project, admin_key, labelled, monkeypatch) -> None:
    monkeypatch.setattr(api_agreement, "MAX_BODY_BYTES", 64)

    response = _post(client, _adjudication_url(labelled[0]), {"target": "db", "note": "x" * 100}, admin_key)

    assert response.status_code == 413
    assert response.json()["error"] == "request body larger than 64 bytes, the limit of an adjudication"
    assert _nothing_stored(*labelled)


def test_an_item_of_another_project_or_none_is_not_found(client, project, project_admin, admin_key,
                                                         labelled) -> None:
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=project_admin, role=Role.ADMIN)

    elsewhere = _post(client, f"/api/projects/other/items/{labelled[0].pk}/adjudication", {"target": "db"}, admin_key)
    missing = _post(client, "/api/projects/outages/items/999999/adjudication", {"target": "db"}, admin_key)

    assert (elsewhere.status_code, missing.status_code) == (404, 404)
    assert missing.json()["error"] == "no item 999999 in project 'outages'"
    assert _nothing_stored(*labelled)


def test_adjudication_takes_only_post_and_needs_no_csrf_token(project, admin_key, labelled) -> None:
    client = Client(enforce_csrf_checks=True)

    assert _get(client, _adjudication_url(labelled[0]), admin_key).status_code == 405
    assert _post(client, _adjudication_url(labelled[0]), {"target": "db"}, admin_key).status_code == 201


# -- who may -----------------------------------------------------------------------------------------------------
def _every_endpoint(client, item, key):
    return [
        _get(client, "/api/projects/outages/agreement", key),
        _get(client, "/api/projects/outages/disagreements", key),
        _post(client, _adjudication_url(item), {"target": "db"}, key),
    ]


def test_a_reviewers_token_gets_403_everywhere(client, project, reviewer, labelled) -> None:
    key = ApiToken.objects.issue(reviewer)[1]

    responses = _every_endpoint(client, labelled[0], key)

    assert [r.status_code for r in responses] == [403, 403, 403]
    assert [r.json()["error"] for r in responses] == [
        "reading agreement of 'outages' needs the project's admin role",
        "listing disagreements of 'outages' needs the project's admin role",
        "adjudicating in 'outages' needs the project's admin role",
    ]
    assert _nothing_stored(*labelled)


def test_an_unrelated_token_gets_404_everywhere(client, project, outsider, project_admin, labelled) -> None:
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=outsider, role=Role.ADMIN)
    Membership.objects.create(project=other, user=project_admin, role=Role.ADMIN)
    keys = [ApiToken.objects.issue(outsider)[1],  # another project's admin
            ApiToken.objects.issue(project_admin, project=other)[1]]  # this project's admin, limited to another

    for key in keys:
        responses = _every_endpoint(client, labelled[0], key)
        assert [r.status_code for r in responses] == [404, 404, 404]
        assert {r.json()["error"] for r in responses} == {"no project 'outages' that this token can reach"}
    assert _nothing_stored(*labelled)


def test_no_token_gets_401_everywhere(client, project, project_admin, labelled) -> None:
    client.force_login(project_admin)  # a session is not a token

    responses = _every_endpoint(client, labelled[0], None)

    assert [r.status_code for r in responses] == [401, 401, 401]
    assert all(r["WWW-Authenticate"].startswith("Bearer") for r in responses)
    assert _nothing_stored(*labelled)
