"""Items whose inputs the model refuses: recorded with the model's reason, shown where people look, never sent to
the same model again by the sweep, and tried by the next version promoted."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from annotate import imports, tasks
from annotate.models import ApiToken, Claim, Item, ItemStatus, ModelVersion, Prediction
from annotate.progress import project_progress
from tests.annotate.conftest import decision_input

pytestmark = pytest.mark.django_db

# Stored before a schema change, say: the tool now needs hypotheses to rank.
NO_HYPOTHESES = {"question": "Why did the cache stop?", "evidence": [{"source_id": "log", "text": "evicted"}]}
REASON = "inputs: missing 'hypotheses'"


@pytest.fixture
def refused(project) -> Item:
    """An item the project's model refused 11 minutes ago (older than the sweep's wait)."""
    made = timezone.now() - timedelta(minutes=11)
    item = Item.objects.create(project=project, inputs=NO_HYPOTHESES, created_at=made)
    tasks.predict_items(project.pk, [item.pk])
    item.refresh_from_db()
    return item


def test_a_refused_item_keeps_the_models_reason_and_the_others_in_its_batch_are_predicted(project) -> None:
    good = [Item.objects.create(project=project, inputs=decision_input(n)) for n in range(2)]
    bad = Item.objects.create(project=project, inputs=NO_HYPOTHESES)

    made = tasks.predict_items(project.pk, [good[0].pk, bad.pk, good[1].pk])

    assert made == 2
    bad.refresh_from_db()
    assert bad.status == ItemStatus.REFUSED and bad.prediction is None
    assert bad.refusal == f"version {project.current_version_id} (untrained): {REASON}"
    assert set(Item.objects.filter(pk__in=[g.pk for g in good]).values_list("status", flat=True)) == {"ready"}


def test_predicting_a_refused_item_again_changes_nothing(project, refused) -> None:
    assert tasks.predict_items(project.pk, [refused.pk]) == 0

    again = Item.objects.get(pk=refused.pk)
    assert (again.status, again.refusal) == (ItemStatus.REFUSED, refused.refusal)


def test_a_refused_item_that_a_model_accepts_becomes_ready_and_forgets_the_refusal(project, refused) -> None:
    Item.objects.filter(pk=refused.pk).update(inputs=decision_input(7))  # as a version that accepts it would see it

    assert tasks.predict_items(project.pk, [refused.pk]) == 1

    item = Item.objects.get(pk=refused.pk)
    assert (item.status, item.refusal) == (ItemStatus.READY, "") and item.prediction is not None


def test_a_refused_item_names_the_latest_version_to_refuse_it(project, refused) -> None:
    newer = ModelVersion.objects.allocate(project, label="", trained=False)

    assert tasks.predict_items(project.pk, [refused.pk], newer.pk) == 0

    assert Item.objects.get(pk=refused.pk).refusal == f"version {newer.pk}: {REASON}"


def test_an_item_an_earlier_version_predicted_stays_ready_when_refused(project) -> None:
    item = Item.objects.create(project=project, inputs=NO_HYPOTHESES, status=ItemStatus.READY)

    assert tasks.predict_items(project.pk, [item.pk]) == 0

    item.refresh_from_db()
    assert (item.status, item.refusal) == (ItemStatus.READY, "")


def test_a_very_long_reason_is_cut_to_the_field(project) -> None:
    item = Item.objects.create(project=project, inputs={**NO_HYPOTHESES, "hypotheses": "x" * 2000})

    tasks.predict_items(project.pk, [item.pk])

    item.refresh_from_db()
    assert item.status == ItemStatus.REFUSED and 0 < len(item.refusal) <= Item._meta.get_field("refusal").max_length


def test_the_sweep_does_not_send_refused_items_again(project, refused, monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay", lambda *args: sent.append(args))
    monkeypatch.setattr(tasks.broker, "waiting_messages", lambda task: 0)

    assert not tasks.waited_too_long(project)
    assert tasks.resend_lost_predictions(timezone.now()) == 0
    assert tasks.requeue_waiting(project) == 0 and sent == []


def test_admins_see_how_many_were_refused_why_and_where(client, project, project_admin, refused) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert (f"The model refused the inputs of 1 item (the latest: <q>version {project.current_version_id} "
            "(untrained): inputs: missing &#x27;hypotheses&#x27;</q>)") in page
    assert f'{reverse("item_list", args=[project.slug])}?status=refused' in page
    assert "None ready for review: the model refused the inputs of 1 item." in page
    assert "refused by the model" in page  # the count among the statuses


def test_reviewers_see_the_count_but_not_the_admins_notice(client, project, reviewer, refused) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))  # and one still waiting
    client.force_login(reviewer)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    home = client.get(reverse("home")).content.decode()

    assert "the latest:" not in page
    for shown in (page, home):
        assert "None ready for review: 1 waits for a prediction, and the model refused the inputs of 1 item." in shown


def test_a_project_without_refusals_does_not_list_the_status(client, project, reviewer) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))
    client.force_login(reviewer)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert "refused by the model" not in page
    assert [status for status, _, _ in project_progress(project).counts] == ["pending", "ready", "done", "skipped"]


def test_progress_counts_refused_items_with_their_own_colour(client, project, reviewer, refused) -> None:
    client.force_login(reviewer)

    assert ("refused", "Refused by the model", 1) in project_progress(project).counts
    page = client.get(reverse("project_progress", args=[project.slug])).content.decode()
    assert "status-refused" in page


def test_the_item_page_says_why_it_cannot_be_reviewed(client, project, reviewer, refused) -> None:
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, refused.pk])).content.decode()

    assert (f"The model refused this item&#x27;s inputs (version {project.current_version_id} (untrained): inputs: "
            "missing &#x27;hypotheses&#x27;). The next model version promoted tries them again.") in page
    assert "No prediction: the model refused this item's inputs." in page and "No prediction yet" not in page


def test_the_item_list_filters_refused_items_and_shows_the_reason(client, project, reviewer, refused) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))
    client.force_login(reviewer)

    page = client.get(reverse("item_list", args=[project.slug]), {"status": "refused"}).content.decode()

    assert "1 matching item (filtered)" in page
    assert (f'class="refusal">version {project.current_version_id} (untrained): inputs: missing '
            '&#x27;hypotheses&#x27;</span>') in page


def test_the_api_gives_the_status_and_reason_in_the_item_and_the_list(client, project, reviewer, refused) -> None:
    key = ApiToken.objects.issue(reviewer)[1]

    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    body = client.get(f"/api/projects/{project.slug}/items/{refused.pk}", **auth).json()
    listed = client.get(f"/api/projects/{project.slug}/items", {"status": "refused"}, **auth).json()

    assert body["status"] == "refused"
    assert body["refusal"] == f"version {project.current_version_id} (untrained): {REASON}"
    assert [(row["id"], row["refusal"]) for row in listed["items"]] == [(refused.pk, body["refusal"])]


def test_admins_download_the_refused_inputs_as_an_items_file_that_imports_again_once_fixed(
        client, project, project_admin, refused) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))  # waiting: not in the file
    client.force_login(project_admin)

    response = client.get(reverse("refused_inputs", args=[project.slug]))

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="outages-refused-items.jsonl"'
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert lines == [{"inputs": NO_HYPOTHESES}]
    with pytest.raises(imports.ImportRejected):  # as it is, the project's tool refuses it too
        imports.import_jsonl(project, [json.dumps(lines[0]).encode()], predict=False)
    fixed = {"inputs": {**lines[0]["inputs"], "hypotheses": decision_input()["hypotheses"]}}
    assert imports.import_jsonl(project, [json.dumps(fixed).encode()], predict=False).count == 1


def test_admins_remove_the_refused_items_and_nothing_else(client, project, project_admin, refused) -> None:
    waiting = Item.objects.create(project=project, inputs=decision_input(1))
    client.force_login(project_admin)

    response = client.post(reverse("refused_remove", args=[project.slug]), HTTP_HX_REQUEST="true")

    assert response.status_code == 200 and response["HX-Redirect"] == reverse("project_detail", args=[project.slug])
    assert list(project.items.values_list("pk", flat=True)) == [waiting.pk]
    page = client.get(response["HX-Redirect"]).content.decode()
    assert "Removed 1 refused item." in page and "refused-items" not in page


def test_removing_refused_items_in_batches_keeps_an_item_a_worker_made_ready(project, refused) -> None:
    more = [Item.objects.create(project=project, inputs=NO_HYPOTHESES, status=ItemStatus.REFUSED) for _ in range(4)]
    Item.objects.filter(pk=more[0].pk).update(status=ItemStatus.READY, refusal="")  # predicted meanwhile

    assert Item.objects.remove_refused(project, batch=2) == 4

    assert list(project.items.values_list("pk", flat=True)) == [more[0].pk]


def test_removing_refused_items_takes_what_hangs_off_them_and_keeps_the_rest(project, reviewer, refused) -> None:
    """The rows go set-based, not through Django's cascade: a prediction or claim left on one goes with it."""
    ready = Item.objects.create(project=project, inputs=decision_input(1))
    tasks.predict_items(project.pk, [ready.pk])
    ready.refresh_from_db()
    old = Prediction.objects.create(item=refused, model_version=ready.prediction.model_version, receipt={})
    Claim.objects.create(item=refused, reviewer=reviewer, expires_at=timezone.now())

    assert Item.objects.remove_refused(project) == 1

    assert list(project.items.values_list("pk", flat=True)) == [ready.pk]
    assert not Prediction.objects.filter(pk=old.pk).exists() and not Claim.objects.exists()
    assert Prediction.objects.get(item=ready) == ready.prediction


def test_only_admins_remove_or_download_refused_items_and_only_by_post_with_csrf(
        client, project, reviewer, outsider, project_admin, refused) -> None:
    from django.test import Client

    client.force_login(reviewer)
    assert client.get(reverse("refused_inputs", args=[project.slug])).status_code == 403
    assert client.post(reverse("refused_remove", args=[project.slug])).status_code == 403
    client.force_login(outsider)
    assert client.post(reverse("refused_remove", args=[project.slug])).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(project_admin)
    assert strict.get(reverse("refused_remove", args=[project.slug])).status_code == 405
    assert strict.post(reverse("refused_remove", args=[project.slug])).status_code == 403
    assert Item.objects.filter(pk=refused.pk).exists()


def test_choosing_another_version_tries_the_refused_items_with_it(client, project, project_admin, refused,
                                                                  monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay_on_commit", lambda *args: sent.append(args))
    other = ModelVersion.objects.allocate(project, label="wider", trained=False)
    client.force_login(project_admin)

    response = client.post(reverse("version_select", args=[project.slug]), {"version": other.pk}, follow=True)

    assert "New predictions now come from wider. It will try the 1 item an earlier version refused." in (
        response.content.decode())
    assert sent == [(project.pk, [refused.pk], None)]
    sent.clear()
    again = client.post(reverse("version_select", args=[project.slug]), {"version": other.pk}, follow=True)
    assert "New predictions now come from wider." in again.content.decode() and "It will try" not in (
        again.content.decode())
    assert sent == []  # the same version would refuse them again


def _fix(client, project, item, text: str, **headers):
    return client.post(reverse("item_fix_inputs", args=[project.slug, item.pk]), {"inputs": text}, **headers)


def test_an_admin_fixes_a_refused_items_inputs_and_the_model_predicts_it(client, project, project_admin, refused,
                                                                         monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay_on_commit", lambda *args: sent.append(args))
    client.force_login(project_admin)
    page = client.get(reverse("item_detail", args=[project.slug, refused.pk])).content.decode()
    assert 'id="fix-inputs"' in page and "&quot;question&quot;: &quot;Why did the cache stop?&quot;" in page
    fixed = {**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]}

    response = _fix(client, project, refused, json.dumps(fixed), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert response["HX-Push-Url"] == reverse("item_detail", args=[project.slug, refused.pk])
    page = response.content.decode()
    assert "Inputs saved: the model predicts this item again." in page
    assert "This item waits for the model&#x27;s prediction." in page and 'id="fix-inputs"' not in page
    refused_before = refused.created_at
    refused.refresh_from_db()
    assert refused.status == ItemStatus.PENDING and refused.refusal == "" and refused.inputs["hypotheses"]
    assert refused.created_at > refused_before  # counts as imported now: not a prediction lost long ago
    assert sent == [(project.pk, [refused.pk], None)]
    tasks.predict_items(*sent[0])
    refused.refresh_from_db()
    assert refused.status == ItemStatus.READY and refused.prediction is not None


@pytest.mark.parametrize(("text", "error"), [
    ("{not json", "Not saved: not valid JSON (Expecting property name enclosed in double quotes"),
    (json.dumps(NO_HYPOTHESES), "Not saved: inputs: missing &#x27;hypotheses&#x27;"),
    ('{"question": NaN}', "Not saved: not valid JSON ("),
])
def test_inputs_that_are_not_json_or_that_the_tool_refuses_change_nothing(client, project, project_admin, refused,
                                                                          text, error) -> None:
    client.force_login(project_admin)

    with_htmx = _fix(client, project, refused, text, HTTP_HX_REQUEST="true")
    without = _fix(client, project, refused, text)

    assert with_htmx["HX-Retarget"] == "#editor-error" and error in with_htmx.content.decode()
    assert without.status_code == 400 and error in without.content.decode()
    assert f">{escape(text)}</textarea>" in without.content.decode()  # what they typed stays in the box
    stored = Item.objects.get(pk=refused.pk)
    assert (stored.status, stored.inputs, stored.refusal) == (ItemStatus.REFUSED, NO_HYPOTHESES, refused.refusal)


def test_an_item_a_version_predicted_meanwhile_is_not_changed(client, project, project_admin, refused) -> None:
    Item.objects.filter(pk=refused.pk).update(status=ItemStatus.READY, refusal="")
    client.force_login(project_admin)
    fixed = {**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]}

    page = _fix(client, project, refused, json.dumps(fixed), HTTP_HX_REQUEST="true").content.decode()

    assert (f"Not saved: item {refused.pk} is ready for review, not refused: only a refused item&#x27;s inputs can "
            "change.") in page
    assert Item.objects.get(pk=refused.pk).inputs == NO_HYPOTHESES
    with pytest.raises(imports.NotRefused):
        imports.fix_refused(project, refused.pk, fixed)


def test_only_admins_fix_inputs_by_post_with_csrf_in_their_project(client, project, reviewer, outsider,
                                                                   project_admin, refused) -> None:
    from django.test import Client

    from annotate.models import Membership, Project, Role

    fixed = json.dumps({**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]})
    client.force_login(reviewer)
    assert 'id="fix-inputs"' not in client.get(reverse("item_detail", args=[project.slug, refused.pk])).content.decode()
    assert _fix(client, project, refused, fixed).status_code == 403
    client.force_login(outsider)
    assert _fix(client, project, refused, fixed).status_code == 404
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=project_admin, role=Role.ADMIN)  # but not its item
    client.force_login(project_admin)
    assert client.post(reverse("item_fix_inputs", args=[other.slug, refused.pk]), {"inputs": fixed}).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(project_admin)
    url = reverse("item_fix_inputs", args=[project.slug, refused.pk])
    assert strict.get(url).status_code == 405
    assert strict.post(url, {"inputs": fixed}).status_code == 403
    assert Item.objects.get(pk=refused.pk).status == ItemStatus.REFUSED


def test_the_api_fixes_a_refused_items_inputs_for_admins_only(client, project, reviewer, project_admin, refused,
                                                              monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay_on_commit", lambda *args: sent.append(args))
    url = f"/api/projects/{project.slug}/items/{refused.pk}"
    fixed = {**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]}

    def patch(user, body, raw=None):
        key = ApiToken.objects.issue(user)[1]
        return client.patch(url, raw if raw is not None else json.dumps(body), content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {key}")

    assert patch(reviewer, {"inputs": fixed}).status_code == 403
    assert patch(project_admin, None, raw="{oops").status_code == 400
    wrong = patch(project_admin, {"inputs": fixed, "status": "ready"})
    assert wrong.status_code == 400 and "only a refused item's inputs can change" in wrong.json()["error"]
    refused_again = patch(project_admin, {"inputs": NO_HYPOTHESES})
    assert refused_again.status_code == 400
    assert refused_again.json()["error"] == "nothing was changed: inputs: missing 'hypotheses'"
    assert Item.objects.get(pk=refused.pk).status == ItemStatus.REFUSED and sent == []

    done = patch(project_admin, {"inputs": fixed})

    assert done.status_code == 200
    assert (done.json()["status"], done.json()["refusal"], done.json()["inputs"]["hypotheses"]) == (
        "pending", "", fixed["hypotheses"])
    assert sent == [(project.pk, [refused.pk], None)]
    again = patch(project_admin, {"inputs": fixed})
    assert again.status_code == 409
    assert again.json()["error"] == (f"item {refused.pk} is waiting for a prediction, not refused: only a refused "
                                     "item's inputs can change")


def test_an_item_the_model_fails_on_is_refused_with_the_error_and_the_others_are_predicted(project,
                                                                                          monkeypatch) -> None:
    """Left waiting, it would fail its task each time the sweep sent it again, and nobody would learn why."""
    from annotate import tooling

    real = tooling.predict_batch

    def crash_on_a_marked_input(version, inputs_list):
        if any(inputs["question"] == "crash" for inputs in inputs_list):
            raise TypeError("unsupported operand")
        return real(version, inputs_list)

    monkeypatch.setattr(tooling, "predict_batch", crash_on_a_marked_input)
    items = [Item.objects.create(project=project, inputs={**decision_input(n), **({"question": "crash"} if n == 1
                                                                                 else {})}) for n in range(3)]

    assert tasks.predict_items(project.pk, [item.pk for item in items]) == 2

    statuses = {item.pk: (item.status, item.refusal) for item in Item.objects.all()}
    assert statuses[items[1].pk] == (ItemStatus.REFUSED, f"version {project.current_version_id} (untrained): the "
                                     "model failed on these inputs (TypeError: unsupported operand)")
    assert statuses[items[0].pk][0] == statuses[items[2].pk][0] == ItemStatus.READY


@pytest.mark.parametrize("where", ["load_version", "predict_batch"])
def test_a_model_out_of_reach_or_out_of_time_fails_the_task_and_the_items_wait(project, monkeypatch, where) -> None:
    """Not a refusal: the task is sent again (a lost file share comes back; a time limit is the worker's)."""
    from celery.exceptions import SoftTimeLimitExceeded

    from annotate import tooling

    error = OSError("artifact share unreachable") if where == "load_version" else SoftTimeLimitExceeded()

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(tooling, where, fail)
    item = Item.objects.create(project=project, inputs=decision_input())

    with pytest.raises(type(error)):
        tasks.predict_items(project.pk, [item.pk])

    item.refresh_from_db()
    assert (item.status, item.refusal) == (ItemStatus.PENDING, "")


def test_inputs_too_large_to_post_change_nothing(client, project, project_admin, refused, settings) -> None:
    client.force_login(project_admin)
    huge = json.dumps({**NO_HYPOTHESES, "question": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})

    response = _fix(client, project, refused, huge)

    assert response.status_code == 400
    assert Item.objects.get(pk=refused.pk).status == ItemStatus.REFUSED


def test_a_prediction_of_the_old_inputs_in_flight_is_not_stored_over_a_fix(project, refused, monkeypatch) -> None:
    """A version promoted just before the fix tries the old inputs; the fix's own task predicts the new ones."""
    from annotate import tooling

    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay_on_commit", lambda *args: sent.append(args))
    wider = ModelVersion.objects.allocate(project, label="wider", trained=False)
    fixed = {**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]}
    real = tooling.predict_batch

    def fixed_meanwhile(version, inputs_list):
        results = [real(version, [{**inputs, "hypotheses": fixed["hypotheses"]}])[0] for inputs in inputs_list]
        imports.fix_refused(project, refused.pk, fixed)  # the admin saves while the model runs
        return results

    monkeypatch.setattr(tooling, "predict_batch", fixed_meanwhile)
    assert tasks.predict_items(project.pk, [refused.pk], wider.pk) == 0

    refused.refresh_from_db()
    assert (refused.status, refused.prediction, refused.inputs["hypotheses"]) == (
        ItemStatus.PENDING, None, fixed["hypotheses"])
    assert not Prediction.objects.exists() and sent == [(project.pk, [refused.pk], None)]
    monkeypatch.setattr(tooling, "predict_batch", real)
    assert tasks.predict_items(*sent[0]) == 1
    assert Item.objects.get(pk=refused.pk).status == ItemStatus.READY
