"""The reviewer's workspace over HTTP: fragments for htmx, the database after each action, permissions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from annotate import queue
from annotate.models import Answer, AnswerKind, Claim, Item, ItemStatus, Membership, Prediction, Project, Role
from tests.annotate.conftest import make_ready_items as ready_items
from tests.annotate.ui_samples import SAMPLES, TRACE, sample

HX = {"HTTP_HX_REQUEST": "true"}


def _item_for(project: Project, tool: str, mode: str) -> Item:
    data = sample(tool, mode)
    item = Item.objects.create(project=project, inputs=data["inputs"], status=ItemStatus.READY,
                               confidence=data["receipt"]["confidence"])
    item.prediction = Prediction.objects.create(item=item, model_version=project.current_version,
                                                receipt=data["receipt"], trace=TRACE,
                                                confidence=data["receipt"]["confidence"])
    item.save(update_fields=["prediction"])
    return item


def _kind_project(reviewer, tool: str, mode: str) -> Project:
    from annotate.models import ModelVersion

    project = Project.objects.create(slug=f"{tool}-{mode}", name=f"{tool} {mode}", tool=tool, mode=mode,
                                     guidelines="Be careful.")
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    return project


EDITOR_MARKERS = {
    "rank": ['name="choice"', 'data-shortcut="1"', 'name="split"'],
    "outcomes": ['name="plan"', 'name="outcome"', 'name="outcome-0"', 'data-shortcut="a"'],
    "verification": ['value="entailment" data-shortcut="e"', 'value="neutral" data-shortcut="n"',
                     'value="contradiction" data-shortcut="c"'],
    "retrieval": ['name="relevant" value="0:0"', "data-needs-one"],
    "proposal": ['name="text"', 'id="text-diff"'],
    "language": ['name="text"', 'id="text-diff"'],
    "reply": ['name="text"', 'id="text-diff"'],
}
RECEIPT_MARKERS = {
    "ranking": 'class="ranked"',
    "outcome": 'class="outcomes"',
    "classification": "No calibration fitted",
    "retrieval": 'class="retrieval-query"',
    "generation": 'id="model-text"',
}


@pytest.mark.django_db
@pytest.mark.parametrize(("tool", "mode"), sorted(SAMPLES))
def test_item_page_renders_receipt_kind_and_editor(client, reviewer, tool, mode) -> None:
    project = _kind_project(reviewer, tool, mode)
    item = _item_for(project, tool, mode)
    assert queue.claim_next(project, reviewer) == item
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()

    assert RECEIPT_MARKERS[SAMPLES[(tool, mode)]["receipt"]["kind"]] in page
    for marker in EDITOR_MARKERS[mode]:
        assert marker in page
    assert "Be careful." in page  # guidelines beside the item
    assert "How the model got here" in page and reverse("item_trace", args=[project.slug, item.pk]) in page
    assert "ranker.encoder" not in page  # the trace is read only when the reviewer opens it
    assert "untrained model" in page
    assert 'id="target-form"' in page and 'id="skip-form"' in page


@pytest.mark.django_db
def test_evidence_is_highlighted_by_attention_span(client, reviewer) -> None:
    project = _kind_project(reviewer, "decision", "rank")
    item = _item_for(project, "decision", "rank")
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()

    assert '<mark class="attn" style="--w: 1.000" title="attention 0.500">database</mark>' in page


@pytest.mark.django_db
def test_scene_image_has_heat_map_grid(client, reviewer) -> None:
    project = _kind_project(reviewer, "scene", "rank")
    item = _item_for(project, "scene", "rank")
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()

    assert 'src="data:image/png;base64,' in page
    assert "grid-template-rows: repeat(2, 1fr)" in page
    assert page.count('title="patch ') == 4


@pytest.mark.django_db
def test_start_reviewing_claims_least_confident_item_and_redirects(client, project, reviewer) -> None:
    items = ready_items(project, [0.9, 0.2, 0.5])
    client.force_login(reviewer)

    response = client.post(reverse("review_next", args=[project.slug]))

    assert response.status_code == 302
    assert response["Location"] == reverse("item_detail", args=[project.slug, items[1].pk])
    assert Claim.objects.get(reviewer=reviewer).item == items[1]


@pytest.mark.django_db
def test_htmx_submit_stores_answer_and_returns_next_item_fragment(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith(f"<title>Item {second.pk} · Outages")
    assert '<div id="messages" hx-swap-oob="true"' in page
    assert f'data-item="{second.pk}"' in page and "<html" not in page
    assert f"Item {first.pk}: Submitted." in page
    assert response["HX-Push-Url"] == reverse("item_detail", args=[project.slug, second.pk])
    answer = Answer.objects.get(item=first, reviewer=reviewer)
    assert (answer.kind, answer.target, answer.source) == ("target", "db", f"review:outages/{first.pk}/rita")
    assert Claim.objects.get(reviewer=reviewer).item == second


@pytest.mark.django_db
def test_double_submit_keeps_one_answer(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    url = reverse("item_submit", args=[project.slug, first.pk])

    client.post(url, {"choice": "db"}, **HX)
    client.post(url, {"choice": "db"}, **HX)

    assert Answer.objects.filter(item=first).count() == 1
    assert Answer.objects.get(item=first).revisions.count() == 1


@pytest.mark.django_db
def test_distribution_split_is_normalized(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    client.post(reverse("item_submit", args=[project.slug, first.pk]),
                {"split": "1", "share-0": "3", "share-1": "1"}, **HX)

    assert Answer.objects.get(item=first).target == [0.75, 0.25]


@pytest.mark.django_db
def test_missing_choice_is_answered_in_place_and_stores_nothing(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {}, **HX)

    assert response["HX-Retarget"] == "#editor-error"
    assert "Choose a candidate" in response.content.decode()
    assert not Answer.objects.exists()


@pytest.mark.django_db
def test_target_the_tool_rejects_shows_validator_message(client, project, reviewer, monkeypatch) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    def reject(*args, **kwargs):
        raise ValueError("targets[0]: hypothesis id 'db' is not offered")

    monkeypatch.setattr("annotate.tooling.validate_target", reject)
    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)

    assert "hypothesis id &#x27;db&#x27; is not offered" in response.content.decode()
    assert not Answer.objects.exists()


@pytest.mark.django_db
def test_submit_after_lease_expired_keeps_work_as_draft(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    Claim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(reviewer)

    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "dns"}, **HX)

    page = response.content.decode()
    assert "kept as a draft" in page
    assert 'value="dns" data-shortcut="2" checked' in page  # the reviewer's choice is still there
    answer = Answer.objects.get(item=first)
    assert (answer.kind, answer.target) == (AnswerKind.DRAFT, "dns")
    # The draft's page submits again with `reclaim`: the item is still free, so it goes through.
    assert '<input type="hidden" name="reclaim" value="1">' in page
    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "dns", "reclaim": "1"},
                           **HX)
    assert f"Item {first.pk}: Submitted." in response.content.decode()
    assert Answer.objects.get(item=first).kind == AnswerKind.TARGET


@pytest.mark.django_db
def test_k_takes_back_an_item_whose_lease_ended_under_a_draft(client, project, reviewer) -> None:
    """The README promised `k` on a draft's page, which offered no Keep: its lease line had only ended."""
    (first,) = ready_items(project, [0.1])
    Claim.objects.create(item=first, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    queue.submit(first, reviewer, "dns")
    client.force_login(reviewer)
    page = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    keep = reverse("item_keep", args=[project.slug, first.pk])
    assert f'hx-post="{keep}"' in page and '<input type="hidden" name="taken_back" value="1">' in page
    assert 'data-shortcut="k"' in page and "take the item back to finish your draft" in page

    response = client.post(keep, {"taken_back": "1"}, **HX)

    lease = response.content.decode()
    assert response.status_code == 200 and "lease until" in lease
    assert '<p id="item-notice" hx-swap-oob="delete"></p>' in lease  # "your claim on it has ended" is over
    assert queue.holds_claim(first, reviewer)
    assert Answer.objects.get(item=first).kind == AnswerKind.DRAFT  # still to be submitted


@pytest.mark.django_db
def test_the_shortcuts_listed_are_the_keys_the_page_answers(client, project, reviewer, second_reviewer) -> None:
    """An item with no editor listed the editor's keys; an answered one left out the next item's arrow."""
    first, second = ready_items(project, [0.1, 0.2])
    assert queue.claim_next(project, second_reviewer) == first
    client.force_login(reviewer)

    not_theirs = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    assert "This item is not assigned to you" in not_theirs
    for key in ("choose a candidate", "<dd>submit</dd>", "<dd>skip (type", "keep this item longer", "<dd>next item<"):
        assert key not in not_theirs, key
    queue.submit(queue.claim_next(project, reviewer), reviewer, "dns")
    answered = client.get(reverse("item_detail", args=[project.slug, second.pk])).content.decode()
    assert "choose a candidate" in answered and "<dt><kbd>→</kbd></dt><dd>next item</dd>" in answered
    assert "<dd>undo the last submission</dd>" in answered


@pytest.mark.django_db
def test_skipping_a_draft_left_by_an_ended_lease_takes_the_item_back_too(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    Claim.objects.create(item=first, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    queue.submit(first, reviewer, "dns")
    client.force_login(reviewer)
    page = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    assert page.count('<input type="hidden" name="reclaim" value="1">') == 2  # the answer's form and the skip's

    client.post(reverse("item_skip", args=[project.slug, first.pk]), {"reason": "unclear", "reclaim": "1"}, **HX)

    answer = Answer.objects.get(item=first)
    assert (answer.kind, answer.skip_reason) == (AnswerKind.SKIP, "unclear")


@pytest.mark.django_db
def test_submitting_a_draft_again_when_another_reviewer_took_the_item_keeps_it_a_draft(
        client, project, reviewer, second_reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    Claim.objects.create(item=first, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    queue.submit(first, reviewer, "dns")
    assert queue.claim_next(project, second_reviewer) == first
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    assert "Submit it, or press k, to take the item back, if a reviewer&#x27;s place on it is still free." in page
    taken = client.post(reverse("item_keep", args=[project.slug, first.pk]), {"taken_back": "1"}, **HX)
    lease = taken.content.decode()
    assert taken.status_code == 409 and "Another reviewer took this item after your lease ended" in lease
    assert 'hx-swap-oob="delete"' not in lease  # the notice stays: the item is not theirs
    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db", "reclaim": "1"},
                           **HX)

    assert "your answer was not submitted. It is kept as a draft" in response.content.decode()
    assert Answer.objects.get(item=first, reviewer=reviewer).kind == AnswerKind.DRAFT
    active = Claim.objects.filter(expires_at__gt=timezone.now())
    assert list(active.values_list("reviewer__username", flat=True)) == [second_reviewer.username]


@pytest.mark.django_db
def test_skip_needs_a_reason_and_then_stores_a_skip(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    url = reverse("item_skip", args=[project.slug, first.pk])

    refused = client.post(url, {"reason": "  "}, **HX)
    assert "Give a reason to skip." in refused.content.decode()
    assert not Answer.objects.exists()

    response = client.post(url, {"reason": "unreadable"}, **HX)
    assert f'data-item="{second.pk}"' in response.content.decode()
    answer = Answer.objects.get(item=first)
    assert (answer.kind, answer.skip_reason) == ("skip", "unreadable")


@pytest.mark.django_db
def test_undo_returns_last_item_with_its_answer_as_draft(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "dns"}, **HX)

    response = client.post(reverse("review_undo", args=[project.slug]), **HX)

    page = response.content.decode()
    assert f'data-item="{first.pk}"' in page and "Undone" in page
    assert 'value="dns" data-shortcut="2" checked' in page
    assert Answer.objects.get(item=first).kind == AnswerKind.DRAFT
    assert response["HX-Push-Url"] == reverse("item_detail", args=[project.slug, first.pk])


@pytest.mark.django_db
def test_back_link_points_to_previous_answer_which_can_be_edited(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    page = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX).content.decode()
    back = reverse("item_detail", args=[project.slug, first.pk])
    assert f'hx-get="{back}"' in page and 'data-shortcut="b ArrowLeft"' in page

    previous = client.get(back, **HX).content.decode()
    assert 'value="db" data-shortcut="1" checked' in previous and 'id="target-form"' in previous

    client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "dns"}, **HX)
    answer = Answer.objects.get(item=first)
    assert answer.target == "dns" and answer.revisions.count() == 2


@pytest.mark.django_db
def test_empty_queue_says_so(client, project, reviewer) -> None:
    client.force_login(reviewer)

    response = client.post(reverse("review_next", args=[project.slug]), **HX)

    assert "Nothing left to review" in response.content.decode()
    assert f'hx-get="{reverse("my_progress", args=[project.slug])}"' in response.content.decode()  # the day's count


@pytest.mark.django_db
def test_empty_queue_says_how_many_items_other_reviewers_hold(client, project, reviewer, second_reviewer) -> None:
    held, answered = ready_items(project, [0.1, 0.2])
    assert queue.claim_next(project, second_reviewer) == held
    Claim.objects.create(item=answered, reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    assert queue.submit(answered, reviewer, "db").status == "submitted"
    client.force_login(reviewer)

    page = client.post(reverse("review_next", args=[project.slug]), **HX).content.decode()

    assert "Nothing left to review" in page and "Thank you!" not in page
    assert "1 item you could label is with other reviewers right now." in page
    Claim.objects.filter(reviewer=second_reviewer).update(expires_at=timezone.now() - timedelta(seconds=1))
    page = client.post(reverse("review_next", args=[project.slug]), **HX).content.decode()
    assert f'data-item="{held.pk}"' in page  # its lease ended: it came back


@pytest.mark.django_db
def test_outsider_gets_404_for_project_item_and_actions(client, project, outsider) -> None:
    (first,) = ready_items(project, [0.1])
    client.force_login(outsider)

    assert client.get(reverse("project_detail", args=[project.slug])).status_code == 404
    assert client.get(reverse("item_detail", args=[project.slug, first.pk])).status_code == 404
    assert client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}).status_code == 404
    assert client.post(reverse("review_next", args=[project.slug])).status_code == 404
    assert not Answer.objects.exists() and not Claim.objects.exists()


@pytest.mark.django_db
def test_item_of_another_project_is_404_through_own_project(client, project, reviewer, outsider) -> None:
    other = Project.objects.create(slug="secret", name="Secret", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=outsider, role=Role.REVIEWER)
    (hidden,) = ready_items(other, [0.1])
    client.force_login(reviewer)

    assert client.get(reverse("item_detail", args=[project.slug, hidden.pk])).status_code == 404
    assert client.get(reverse("item_detail", args=[other.slug, hidden.pk])).status_code == 404
    assert client.post(reverse("item_skip", args=[project.slug, hidden.pk]), {"reason": "x"}).status_code == 404


@pytest.mark.django_db
def test_every_view_refuses_the_wrong_method(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    client.force_login(reviewer)

    assert client.get(reverse("item_submit", args=[project.slug, first.pk])).status_code == 405
    assert client.get(reverse("review_next", args=[project.slug])).status_code == 405
    assert client.post(reverse("item_detail", args=[project.slug, first.pk])).status_code == 405


@pytest.mark.django_db
def test_csrf_is_required_for_htmx_posts(project, reviewer) -> None:
    from django.test import Client

    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)

    response = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)

    assert response.status_code == 403
    assert not Answer.objects.exists()


@pytest.mark.django_db
def test_receipt_of_unknown_shape_is_shown_as_json(client, reviewer) -> None:
    project = _kind_project(reviewer, "investigator", "verification")
    item = _item_for(project, "investigator", "verification")
    item.prediction.receipt = {"candidates": ["entailment"], "calibration": "not fitted"}
    item.prediction.save()
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    response = client.get(reverse("item_detail", args=[project.slug, item.pk]))

    assert response.status_code == 200
    assert "&quot;calibration&quot;: &quot;not fitted&quot;" in response.content.decode()


@pytest.mark.django_db
def test_admin_sees_every_reviewers_answer_and_reviewer_only_their_own(client, project, reviewer,
                                                                      second_reviewer, project_admin) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(first, reviewer, "dns")
    url = reverse("item_detail", args=[project.slug, first.pk])

    client.force_login(project_admin)
    admin_page = client.get(url).content.decode()
    client.force_login(second_reviewer)
    reviewer_page = client.get(url).content.decode()

    assert "visible to project admins" in admin_page and "<td>rita</td>" in admin_page
    # The choice as the candidate reads, its id beside it: what the reviewers disagree about, without a lookup.
    assert '<strong>A DNS record expired.</strong> <span class="muted small">(dns)</span>' in admin_page
    assert "rita" not in reviewer_page and 'id="target-form"' not in reviewer_page


@pytest.mark.django_db
def test_admin_sees_who_holds_an_item_now(client, project, reviewer, second_reviewer, project_admin,
                                          ready_items) -> None:
    """At overlap 2 an item with one answer may be someone's now: the Answers panel says whose, until when."""
    project.overlap = 2
    project.save(update_fields=["overlap"])
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")
    queue.claim_next(project, second_reviewer)
    url = reverse("item_detail", args=[project.slug, item.pk])
    client.force_login(project_admin)

    page = client.get(url).content.decode()

    until = timezone.localtime(Claim.objects.get(item=item).expires_at).strftime("%H:%M")
    assert f'Working on it now: sam <span class="muted">(lease until {until})</span></p>' in page
    Claim.objects.update(expires_at=timezone.now())  # the lease ended: nobody is on it
    assert "Working on it now" not in client.get(url).content.decode()
    client.force_login(second_reviewer)
    assert "Working on it now" not in client.get(url).content.decode()  # admins only, as the Answers panel


@pytest.mark.django_db
def test_admin_sees_a_skip_by_its_reason(client, project, reviewer, project_admin, ready_items) -> None:
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.skip(item, reviewer, "The log is cut off")
    client.force_login(project_admin)

    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()

    assert '<td>Skipped</td><td class="answer-target">The log is cut off</td>' in page


@pytest.mark.django_db
def test_admin_sees_each_answers_earlier_states_and_why_they_changed(client, project, reviewer,
                                                                    project_admin) -> None:
    """Every submit, skip and kept draft is a revision; the Answers panel folds them under the answer."""
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "dns")
    queue.skip(item, reviewer, "not sure")
    queue.submit(item, reviewer, "db")
    client.force_login(project_admin)

    page = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()

    history = page.split('class="answer-history')[1].split("</details>")[0]
    assert "Changed 2 times</summary>" in history
    states = [history.index(s) for s in ("Target · A DNS record expired. (dns)", "Skipped · not sure",
                                         "Target · The database was unreachable. (db)")]
    assert states == sorted(states)
    assert "Skipped" in history and "edited" in history and "(now)" in history
    client.force_login(reviewer)  # rita sees her own answer's states under "Your answer"
    own = client.get(reverse("item_detail", args=[project.slug, item.pk])).content.decode()
    assert own.count('class="answer-history') == 1 and "Changed 2 times</summary>" in own
    assert own.index('id="editor-title"') < own.index('class="answer-history')


@pytest.mark.django_db
def test_an_answer_given_once_has_no_history_and_costs_no_query_for_it(client, project, reviewer,
                                                                       django_assert_max_num_queries) -> None:
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "dns")
    url = reverse("item_detail", args=[project.slug, item.pk])
    client.force_login(reviewer)
    client.get(url)
    with django_assert_max_num_queries(20) as once:
        page = client.get(url).content.decode()
    queue.submit(item, reviewer, "db")
    with django_assert_max_num_queries(20) as changed:
        client.get(url)

    assert "answer-history" not in page
    assert len(changed.captured_queries) == len(once.captured_queries) + 1  # the revisions, read only now


@pytest.mark.django_db
def test_item_page_and_submit_use_a_bounded_number_of_queries(client, project, reviewer,
                                                             django_assert_max_num_queries) -> None:
    """The workspace's cost does not grow with the project: a fixed handful of indexed queries."""
    first, *_ = ready_items(project, [0.1, 0.2, 0.3, 0.4])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    with django_assert_max_num_queries(9):
        client.get(reverse("item_detail", args=[project.slug, first.pk]))
    with django_assert_max_num_queries(40):
        client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)


@pytest.mark.django_db
def test_trace_loads_on_demand_as_fragment_and_as_page(client, reviewer) -> None:
    project = _kind_project(reviewer, "decision", "rank")
    item = _item_for(project, "decision", "rank")
    client.force_login(reviewer)
    url = reverse("item_trace", args=[project.slug, item.pk])

    fragment = client.get(url, **HX).content.decode()
    page = client.get(url).content.decode()

    assert "ranker.encoder" in fragment and "<html" not in fragment
    assert "{#" not in fragment and "{%" not in fragment  # no template comment or tag leaks into the page
    assert "ranker.encoder" in page and "<html" in page
    assert reverse("item_detail", args=[project.slug, item.pk]) in page  # the way back to the item


@pytest.mark.django_db
def test_trace_of_a_prediction_without_one_says_so(client, reviewer) -> None:
    project = _kind_project(reviewer, "decision", "rank")
    item = _item_for(project, "decision", "rank")
    Prediction.objects.filter(pk=item.prediction_id).update(trace={})
    client.force_login(reviewer)

    fragment = client.get(reverse("item_trace", args=[project.slug, item.pk]), **HX).content.decode()

    assert "No trace was stored with this prediction." in fragment


@pytest.mark.django_db
def test_trace_is_hidden_from_non_members(client, reviewer, django_user_model) -> None:
    project = _kind_project(reviewer, "decision", "rank")
    item = _item_for(project, "decision", "rank")
    client.force_login(django_user_model.objects.create_user("outsider", password="x"))

    assert client.get(reverse("item_trace", args=[project.slug, item.pk])).status_code == 404


@pytest.mark.django_db
def test_the_item_page_loads_the_reviewers_progress_line_after_it_is_shown(client, project, reviewer,
                                                                           outsider) -> None:
    from django.core.cache import cache

    cache.clear()
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    url = reverse("my_progress", args=[project.slug])
    page = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    assert f'hx-get="{url}" hx-trigger="load"' in page  # asked for once shown, not counted with the item

    before = client.get(url, **HX).content.decode()
    assert "<strong>0</strong> by you today · 0 of 2 items finished" in before
    swapped = client.post(reverse("item_submit", args=[project.slug, first.pk]), {"choice": "db"}, **HX)
    assert f'hx-get="{url}"' in swapped.content.decode()  # the next item asks again
    after = client.get(url, **HX).content.decode()
    assert "<strong>1</strong> by you today · 1 of 2 items finished" in after
    assert 'value="1" max="2"' in after

    assert "Today started at 00:00 UTC." in after
    client.cookies["tc_tz"] = "America/Caracas"  # the browser's time zone (static/timezone.js)
    assert "Today started at 00:00 America/Caracas." in client.get(url, **HX).content.decode()
    del client.cookies["tc_tz"]

    client.logout()
    assert client.get(url).status_code == 302  # to the sign-in page
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 405


@pytest.mark.django_db
def test_a_skipped_item_opened_again_shows_its_reason_in_the_skip_box(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    client.post(reverse("item_skip", args=[project.slug, first.pk]), {"reason": "unreadable"}, **HX)

    back = client.get(reverse("item_detail", args=[project.slug, first.pk]), **HX).content.decode()
    assert 'placeholder="e.g. inputs are unreadable" value="unreadable"' in back
    undone = client.post(reverse("review_undo", args=[project.slug]), **HX).content.decode()
    assert "Undone" in undone and 'value="unreadable"' in undone  # a skip undone keeps its reason to edit
    fresh = client.get(reverse("item_detail", args=[project.slug, second.pk]), **HX).content.decode()
    assert 'placeholder="e.g. inputs are unreadable">' in fresh


@pytest.mark.django_db
def test_the_workspace_offers_to_keep_the_item_only_while_it_holds_a_lease(client, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    held = client.get(reverse("item_detail", args=[project.slug, first.pk])).content.decode()
    other = client.get(reverse("item_detail", args=[project.slug, second.pk])).content.decode()

    keep = reverse("item_keep", args=[project.slug, first.pk])
    assert f'hx-post="{keep}"' in held and 'data-shortcut="k"' in held
    assert f'data-lease-total="{project.lease_seconds}"' in held
    assert "keep this item longer" in held  # the shortcut is listed
    assert 'id="lease"' not in other and 'data-shortcut="k"' not in other


@pytest.mark.django_db
def test_keep_renews_the_lease_and_answers_with_the_lease_line(client, project, reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer, now=timezone.now() - timedelta(seconds=project.lease_seconds - 20))
    client.force_login(reviewer)

    response = client.post(reverse("item_keep", args=[project.slug, first.pk]), **HX)

    assert response.status_code == 200
    expires = Claim.objects.get(item=first, reviewer=reviewer).expires_at
    assert expires > timezone.now() + timedelta(seconds=project.lease_seconds - 5)
    html = response.content.decode()
    assert html.lstrip().startswith('<span class="muted small lease" id="lease"')
    assert f'data-lease-seconds="{project.lease_seconds}"' in html
    assert f"<time datetime=\"{expires.isoformat()}\">" in html


@pytest.mark.django_db
def test_keep_that_cannot_says_why_in_place_and_changes_nothing(client, project, reviewer,
                                                                   second_reviewer) -> None:
    (first,) = ready_items(project, [0.1])
    Claim.objects.create(item=first, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    queue.claim_next(project, second_reviewer)
    client.force_login(reviewer)

    response = client.post(reverse("item_keep", args=[project.slug, first.pk]), **HX)

    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="lease" role="status"' in html and "Another reviewer took this item" in html
    assert not queue.holds_claim(first, reviewer) and queue.holds_claim(first, second_reviewer)


@pytest.mark.django_db
def test_keep_without_javascript_returns_to_the_item_page(client, project, reviewer, second_reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)
    page = reverse("item_detail", args=[project.slug, first.pk])

    kept = client.post(reverse("item_keep", args=[project.slug, first.pk]), follow=True)
    refused = client.post(reverse("item_keep", args=[project.slug, second.pk]), follow=True)

    assert kept.redirect_chain == [(page, 302)] and 'id="lease"' in kept.content.decode()
    assert refused.redirect_chain[-1][0] == reverse("item_detail", args=[project.slug, second.pk])
    assert "This item is not assigned to you" in refused.content.decode()
    assert not queue.holds_claim(second, reviewer)


@pytest.mark.django_db
def test_keep_is_a_post_behind_sign_in_membership_and_csrf(client, project, reviewer, outsider) -> None:
    from django.test import Client

    (first,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    url = reverse("item_keep", args=[project.slug, first.pk])
    expires = Claim.objects.get().expires_at

    assert client.post(url, **HX).status_code == 401  # signed out: htmx is told so
    client.force_login(outsider)
    assert client.post(url, **HX).status_code == 404
    client.force_login(reviewer)
    assert client.get(url).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(reviewer)
    assert strict.post(url, **HX).status_code == 403
    assert Claim.objects.get().expires_at == expires
