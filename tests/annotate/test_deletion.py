"""Deleting a project (`annotate.deletion`): the database ends exactly as Django's own cascade would leave it,
another project keeps every row and file, files go only once the rows have, and unfinished work blocks it."""

from __future__ import annotations

import io
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate import deletion, storage
from annotate.models import (
    Adjudication,
    AdjudicationRevision,
    AdminTyping,
    Answer,
    AnswerRevision,
    ApiToken,
    Claim,
    ExperienceUpload,
    Export,
    ExportState,
    Item,
    ItemDeletion,
    ItemImport,
    ItemStatus,
    Membership,
    ModelUpload,
    ModelVersion,
    Prediction,
    Project,
    Role,
)
from tests.annotate.conftest import decision_input
from tests.conftest import start_in_thread, wait_for_a_lock_wait
from trainingjobs.models import JobState, LossPoint, TrainingJob

pytestmark = pytest.mark.django_db


def _full_project(slug: str, reviewer, admin) -> Project:
    """A project with at least one row of every model that goes with it, each pointer set."""
    project = Project.objects.create(slug=slug, name=slug.title(), tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64}, created_by=admin)
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    first = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    job = TrainingJob.objects.create(project=project, base_version=first, state=JobState.SUCCEEDED,
                                     created_by=admin)
    second = ModelVersion.objects.allocate(project, label="trained", parent=first, created_by_job=job)
    job.result_version = second
    job.save(update_fields=["result_version"])
    storage.artifact_dir("jobs", job.pk)
    LossPoint.objects.create(job=job, step=1, epoch=1, loss=0.5)
    project.current_version = second
    project.save(update_fields=["current_version"])
    for n in range(3):
        item = Item.objects.create(project=project, inputs=decision_input(n), status=ItemStatus.READY)
        prediction = Prediction.objects.create(item=item, model_version=second, receipt={"kind": "ranking"})
        item.prediction = prediction
        item.save(update_fields=["prediction"])
    item = project.items.order_by("pk").first()
    Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    AdminTyping.objects.create(item=item, user=admin, form="adjudication", fields=[])
    answers = [Answer.objects.create(item=item, reviewer=who, kind="target", target=choice, source="s")
               for who, choice in ((reviewer, "db"), (admin, "dns"))]
    for answer in answers:
        AnswerRevision.objects.create(answer=answer, kind="target", target=answer.target)
    adjudication = Adjudication.objects.create(item=item, kind="picked", target="db", chosen_answer=answers[0],
                                               adjudicator=admin, source="adjudication")
    AdjudicationRevision.objects.create(adjudication=adjudication, kind="picked", target="db",
                                        chosen_answer=answers[0], adjudicator=admin)
    ApiToken.objects.issue(reviewer, "labelling script", project=project)
    export = Export.objects.create(project=project, requested_by=admin, state=ExportState.SUCCEEDED)
    storage.artifact_dir("exports", export.pk)
    model_upload = ModelUpload.objects.create(project=project, uploaded_by=admin, version=second)
    storage.artifact_dir("model-uploads", model_upload.pk)
    experience = ExperienceUpload.objects.create(project=project, uploaded_by=admin)
    storage.artifact_dir("uploads", experience.pk)
    ItemDeletion.objects.create(project=project, requested_by=admin, item_ids=[0], total=1, state="SUCCEEDED")
    item_import = ItemImport.objects.create(project=project, uploaded_by=admin)
    storage.artifact_dir("imports", item_import.pk)
    return project


@pytest.fixture
def doomed(reviewer, project_admin) -> Project:
    return _full_project("doomed", reviewer, project_admin)


@pytest.fixture
def kept(second_reviewer, project_admin) -> Project:
    """Another project, with rows of every kind too: none of them may go."""
    return _full_project("kept", second_reviewer, project_admin)


def _rows() -> dict[str, dict]:
    """Every row of every table: {model: {pk: its column values}}."""
    return {model._meta.label: {row.pk: tuple(getattr(row, f.attname) for f in model._meta.concrete_fields)
                                for row in model._base_manager.all()}
            for model in apps.get_models(include_auto_created=True) if not model._meta.proxy}


def _directories() -> set[str]:
    return {f"{path.parent.name}/{path.name}" for path in Path(storage.root()).glob("*/*")}


def test_every_model_that_goes_with_a_project_has_rows_here(doomed) -> None:
    """So the comparison below covers them all: a model added later with no row in `_full_project` fails this."""
    counts = deletion.summary(doomed)
    assert counts and all(counts.values()), counts
    assert set(counts) >= {Item, Answer, AnswerRevision, Prediction, ModelVersion, Membership, TrainingJob, LossPoint}


def test_deleting_leaves_the_database_as_djangos_cascade_does(doomed, kept) -> None:
    ModelVersion.objects.filter(project=kept).update(parent=doomed.current_version)  # a pointer across projects
    with transaction.atomic():
        # Django's collector: right, but it loads every row and, at scale, sends one statement too many.
        Project.objects.get(pk=doomed.pk).delete()
        expected = _rows()
        transaction.set_rollback(True)
    assert _rows() != expected

    deleted = deletion.delete_project(doomed)

    assert _rows() == expected
    assert deleted.rows[Item] == 3 and deleted.rows[Answer] == 2 and deleted.rows[TrainingJob] == 1
    assert str(deleted).startswith("3 items, 3 predictions, ") and ", 2 answers, 2 answer revisions, " in str(deleted)
    assert ", 1 training job, " in str(deleted)
    assert set(ModelVersion.objects.filter(project=kept).values_list("parent", flat=True)) == {None}
    assert Item.objects.filter(project=kept).count() == 3


@pytest.mark.parametrize("which", ["first", "all"])
def test_deleting_some_items_leaves_the_database_as_djangos_cascade_does(doomed, kept, which) -> None:
    """`delete_rows` on items (what removing refused items uses): the first item holds a claim, answers with
    revisions and an adjudication, so every cascade and SET NULL below an item runs."""
    items = doomed.items.order_by("pk")
    pks = list(items.values_list("pk", flat=True))[:1 if which == "first" else None]
    with transaction.atomic():
        Item.objects.filter(pk__in=pks).delete()
        expected = _rows()
        transaction.set_rollback(True)

    deleted = deletion.delete_rows(deletion.by_pks(Item, pks))

    assert _rows() == expected
    assert deleted[Item] == len(pks) and deleted[Prediction] == len(pks)
    assert deleted[Answer] == 2 and deleted[AdjudicationRevision] == 1 and deleted[Claim] == 1
    assert Item.objects.filter(project=kept).count() == 3


def test_a_fixed_set_of_rows_takes_more_keys_than_a_statement_takes_parameters(doomed, kept) -> None:
    """SQLite takes at most 32,766 parameters a statement (Debian's build 250,000), PostgreSQL 65,535: the keys
    travel as one."""
    pks = [*doomed.items.values_list("pk", flat=True), *range(10**9, 10**9 + 260_000)]

    assert deletion.by_pks(Item, pks).count() == 3
    assert deletion.rows_summary(deletion.by_pks(Item, pks))[Item] == 3


def test_matching_items_go_a_batch_at_a_time_each_narrowed_again(doomed, kept) -> None:
    """Counted as the caller counted, then each batch narrowed again under its lock: an item that stopped matching
    after the count (here the last, once the first batch is done) stays."""
    pks = list(doomed.items.order_by("pk").values_list("pk", flat=True))
    calls = []

    def narrow(items):
        calls.append(1)
        return items.exclude(pk__in=pks[:1] if len(calls) < 3 else [pks[0], pks[2]])

    deleted = deletion.delete_matching(doomed, narrow, through=pks[-1], expected=2, batch=1)

    assert deleted[Item] == 1 and deleted[Prediction] == 1
    assert set(doomed.items.values_list("pk", flat=True)) == {pks[0], pks[2]} and kept.items.count() == 3


def test_items_imported_after_the_count_stay(doomed) -> None:
    pks = list(doomed.items.order_by("pk").values_list("pk", flat=True))

    deleted = deletion.delete_matching(doomed, lambda items: items, through=pks[1], expected=2)

    assert deleted[Item] == 2 and list(doomed.items.values_list("pk", flat=True)) == pks[2:]


def test_matching_items_that_are_not_as_many_as_counted_stay(doomed) -> None:
    pks = list(doomed.items.order_by("pk").values_list("pk", flat=True))
    before = _rows()

    with pytest.raises(deletion.CountChanged, match="match 3 of the items counted before, not 2") as raised:
        deletion.delete_matching(doomed, lambda items: items, through=pks[-1], expected=2)

    assert (raised.value.found, raised.value.expected) == (3, 2) and _rows() == before


def test_a_job_launched_midway_stops_the_deletion_at_its_next_batch(doomed, reviewer) -> None:
    """A training job freezes the ids of the answers it trains on: once one waits, no further batch goes."""
    pks = list(doomed.items.order_by("pk").values_list("pk", flat=True))
    calls = []

    def narrow(items):
        calls.append(1)
        if len(calls) == 3:  # the second batch
            TrainingJob.objects.create(project=doomed, state=JobState.PENDING)
        return items

    with pytest.raises(deletion.ProjectBusy, match=r"Items of Doomed cannot be deleted yet: training job \d+ is "
                                                   "waiting"):
        deletion.delete_matching(doomed, narrow, through=pks[-1], expected=3, batch=1)

    assert list(doomed.items.order_by("pk").values_list("pk", flat=True)) == pks[1:]


def test_files_go_after_the_rows_and_another_projects_stay(doomed, kept, django_capture_on_commit_callbacks) -> None:
    before = _directories()
    ours = {storage.relative_name(kind, pk) for kind, model in deletion._artifact_models().items()
            for pk in model.objects.filter(project=doomed).values_list("pk", flat=True)}
    assert ours < before and {name.split("/")[0] for name in ours} == set(storage.KINDS)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        deleted = deletion.delete_project(doomed)
    assert _directories() == before, "the files wait for the commit"
    for callback in callbacks:
        callback()

    assert _directories() == before - ours
    assert deleted.directories == len(ours)


def test_a_waiting_training_job_blocks_and_nothing_goes(doomed) -> None:
    job = TrainingJob.objects.create(project=doomed, state=JobState.PENDING)
    before = _rows()

    with pytest.raises(deletion.ProjectBusy, match=f"training job {job.pk} is waiting"):
        deletion.delete_project(doomed)

    assert _rows() == before
    job.state = JobState.CANCELLED
    job.save(update_fields=["state"])
    deletion.delete_project(doomed)
    assert not Project.objects.filter(pk=doomed.pk).exists()


def test_an_export_being_written_blocks_until_its_heartbeat_stops(doomed) -> None:
    export = Export.objects.create(project=doomed, state=ExportState.RUNNING, started_at=timezone.now(),
                                   heartbeat_at=timezone.now())
    assert deletion.blockers(doomed) == [f"export {export.pk} is being written"]

    export.heartbeat_at = timezone.now() - Export.LEASE - timedelta(minutes=1)  # its worker was killed
    export.save(update_fields=["heartbeat_at"])
    assert deletion.blockers(doomed) == []


def test_deleting_twice_deletes_nothing_the_second_time(doomed) -> None:
    deletion.delete_project(doomed)
    again = deletion.delete_project(doomed)
    assert again.rows == {} and again.directories == 0 and str(again) == "nothing else"


# The site's Delete project (settings page) and the Django admin's Delete, both through `annotate.deletion`.


def test_the_settings_page_leads_to_the_delete_page(client, doomed, project_admin) -> None:
    client.force_login(project_admin)
    page = client.get(reverse("project_settings", args=[doomed.slug])).content.decode()
    assert reverse("project_delete", args=[doomed.slug]) in page and "Delete project" in page


def test_the_delete_page_counts_what_goes_and_asks_for_the_slug(client, doomed, project_admin) -> None:
    client.force_login(project_admin)
    response = client.get(reverse("project_delete", args=[doomed.slug]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "<td>Items</td><td class=\"num\">3</td>" in page and "<td>Answer revisions</td>" in page
    assert "<td>API token</td>" in page
    assert "Type <code>doomed</code> to confirm" in page and 'id="delete-project"' in page
    assert "1 reviewer is labelling 1 item right now: what they have not submitted yet is lost." in page


def test_the_delete_page_says_who_is_labelling_only_while_claims_last(doomed, second_reviewer) -> None:
    item = doomed.items.order_by("-pk").first()
    Claim.objects.create(item=item, reviewer=second_reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    assert deletion.in_progress(doomed) == ("2 reviewers are labelling 2 items right now: what they have not "
                                            "submitted yet is lost.")
    Claim.objects.filter(item__project=doomed).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert deletion.in_progress(doomed) == ""


def test_a_wrong_slug_deletes_nothing(client, doomed, project_admin) -> None:
    client.force_login(project_admin)
    response = client.post(reverse("project_delete", args=[doomed.slug]), {"confirm": "Doomed"})
    assert response.status_code == 400
    assert "That is not &#x27;doomed&#x27;; nothing was deleted." in response.content.decode()
    assert Project.objects.filter(pk=doomed.pk).exists() and Item.objects.filter(project=doomed).count() == 3


def test_the_typed_slug_deletes_the_project_its_rows_and_files(client, doomed, kept, project_admin,
                                                               django_capture_on_commit_callbacks) -> None:
    client.force_login(project_admin)
    before = _directories()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("project_delete", args=[doomed.slug]), {"confirm": " doomed "}, follow=True)
    assert response.redirect_chain == [(reverse("home"), 302)]
    page = response.content.decode()
    assert "Project Doomed was deleted with" in page and "3 items" in page and "2 answers" in page
    assert not Project.objects.filter(pk=doomed.pk).exists() and not Item.objects.filter(project_id=doomed.pk)
    assert Item.objects.filter(project=kept).count() == 3
    assert len(before - _directories()) == 7 and _directories() < before
    assert client.get(reverse("project_detail", args=[doomed.slug])).status_code == 404


def test_only_the_projects_admins_may_delete_it(client, doomed, reviewer, outsider) -> None:
    url = reverse("project_delete", args=[doomed.slug])
    assert client.get(url).status_code == 302  # signed out: to the sign-in page
    client.force_login(reviewer)
    assert client.get(url).status_code == 403
    assert client.post(url, {"confirm": doomed.slug}).status_code == 403
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    assert client.post(url, {"confirm": doomed.slug}).status_code == 404
    assert Project.objects.filter(pk=doomed.pk).exists()


def test_deleting_needs_the_csrf_token(doomed, project_admin) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(project_admin)
    response = client.post(reverse("project_delete", args=[doomed.slug]), {"confirm": doomed.slug})
    assert response.status_code == 403
    assert Project.objects.filter(pk=doomed.pk).exists()


def test_unfinished_work_is_named_and_the_form_is_not_offered(client, doomed, project_admin) -> None:
    job = TrainingJob.objects.create(project=doomed, state=JobState.RUNNING)
    client.force_login(project_admin)
    page = client.get(reverse("project_delete", args=[doomed.slug])).content.decode()
    assert f"training job {job.pk} is running (cancel it on the training page)" in page
    assert 'id="delete-project"' not in page

    response = client.post(reverse("project_delete", args=[doomed.slug]), {"confirm": doomed.slug})
    assert response.status_code == 409 and f"training job {job.pk} is running" in response.content.decode()
    assert Project.objects.filter(pk=doomed.pk).exists()


def test_the_django_admin_counts_rows_and_deletes_through_the_service(client, doomed, kept,
                                                                      django_user_model) -> None:
    staff = django_user_model.objects.create_superuser("root", password="a-long-password")
    client.force_login(staff)
    url = reverse("admin:annotate_project_delete", args=[doomed.pk])
    page = client.get(url).content.decode()
    assert "Doomed: 3 items, 3 predictions, " in page and "2 answers, 2 answer revisions" in page
    assert "1 training job," in page
    assert "decision_input" not in page and "Item object" not in page  # no line per row

    job = TrainingJob.objects.create(project=doomed, state=JobState.PENDING)
    page = client.get(url).content.decode()
    assert f"Doomed: training job {job.pk} is waiting" in page  # shown as what protects it
    refused = client.post(url, {"post": "yes"})  # Django shows the page again, deleting nothing
    assert f"Doomed: training job {job.pk} is waiting" in refused.content.decode()
    assert Project.objects.filter(pk=doomed.pk).exists()
    job.delete()

    response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Project.objects.filter(pk=doomed.pk).exists() and Project.objects.filter(pk=kept.pk).exists()


def _command(*args) -> str:
    out = io.StringIO()
    call_command("delete_project", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_command_shows_what_goes_and_deletes_only_with_yes(doomed, kept) -> None:
    assert _command("doomed").startswith("Deleting Doomed would remove 3 items, 3 predictions, ")
    assert Project.objects.filter(pk=doomed.pk).exists()

    out = _command("doomed", "--yes")

    assert out.startswith("Deleted Doomed with 3 items, ") and "(7 artifact directories)" in out
    assert not Project.objects.filter(pk=doomed.pk).exists() and Project.objects.filter(pk=kept.pk).exists()


def test_the_command_refuses_an_unknown_or_busy_project(doomed) -> None:
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        _command("nope", "--yes")
    job = TrainingJob.objects.create(project=doomed, state=JobState.RUNNING)
    with pytest.raises(CommandError, match=f"training job {job.pk} is running"):
        _command("doomed", "--yes")
    assert Project.objects.filter(pk=doomed.pk).exists()


def test_the_django_admins_delete_selected_action_deletes_each_through_the_service(client, doomed, kept,
                                                                                   django_user_model) -> None:
    staff = django_user_model.objects.create_superuser("root", password="a-long-password")
    client.force_login(staff)
    url = reverse("admin:annotate_project_changelist")
    chosen = {"action": "delete_selected", "_selected_action": [doomed.pk, kept.pk]}
    page = client.post(url, chosen).content.decode()
    assert "Doomed: 3 items, " in page and "Kept: 3 items, " in page

    client.post(url, {**chosen, "post": "yes"})

    assert not Project.objects.exists() and not Item.objects.exists()


def test_work_started_after_the_page_was_read_is_named_too(client, doomed, project_admin, monkeypatch) -> None:
    def busy(project):
        raise deletion.ProjectBusy(project, ["training job 9 is waiting (cancel it on the training page)"])

    monkeypatch.setattr(deletion, "delete_project", busy)  # the job was launched between the check and the lock
    client.force_login(project_admin)
    response = client.post(reverse("project_delete", args=[doomed.slug]), {"confirm": doomed.slug})
    assert response.status_code == 409
    assert "<li>training job 9 is waiting (cancel it on the training page)</li>" in response.content.decode()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_submit_in_flight_is_waited_for_and_its_answer_goes_too(reviewer, project_admin) -> None:
    """Without locking the items, the deletion deleted the item under the submit's new answer and then failed on
    commit (IntegrityError); locking the project before the items, the two deadlocked."""
    doomed = _full_project("doomed", reviewer, project_admin)
    item = doomed.items.order_by("pk").last()  # one nobody has answered yet
    holding, go_on = threading.Event(), threading.Event()
    outcome: dict = {}

    def submit():
        with transaction.atomic():  # as queue._finish: lock the item, write the answer, commit
            locked = Item.objects.select_for_update().get(pk=item.pk)
            Answer.objects.create(item=locked, reviewer=reviewer, kind="target", target="db", source="s")
            holding.set()
            go_on.wait(timeout=60)

    submitter = start_in_thread(outcome, "submit", submit)
    assert holding.wait(timeout=60)
    deleter = start_in_thread(outcome, "deletion", lambda: deletion.delete_project(doomed))
    wait_for_a_lock_wait(deleter)
    assert deleter.is_alive()
    go_on.set()
    submitter.join(timeout=60)
    deleter.join(timeout=60)

    assert outcome["submit"] is None
    assert isinstance(outcome["deletion"], deletion.Deleted), outcome["deletion"]
    assert outcome["deletion"].rows[Answer] == 3
    assert not Project.objects.filter(pk=doomed.pk).exists() and not Answer.objects.exists()


@pytest.mark.parametrize("action", ["item_submit", "item_skip"])
def test_an_answer_that_waited_for_a_deletion_gets_404(client, doomed, reviewer, monkeypatch, action) -> None:
    """The deletion locks the items first: a submit or skip waiting on its item's lock then finds it gone."""
    from annotate import queue

    finish = queue._finish

    def deleted_first(item, *args, **kwargs):
        deletion.delete_project(Project.objects.get(pk=item.project_id))
        return finish(item, *args, **kwargs)

    monkeypatch.setattr(queue, "_finish", deleted_first)
    item = doomed.items.order_by("pk").first()
    client.force_login(reviewer)
    form = {"choice": "db", "reason": "unclear"} if action == "item_skip" else {"choice": "db"}
    response = client.post(reverse(action, args=[doomed.slug, item.pk]), form)
    assert response.status_code == 404
    assert not Project.objects.filter(pk=doomed.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_training_job_launched_during_a_deletion_waits_for_it_and_fails(reviewer, project_admin,
                                                                           monkeypatch) -> None:
    """The project row is locked FOR UPDATE, so a new row pointing at it cannot commit under the deletion."""
    from django.db import IntegrityError

    doomed = _full_project("doomed", reviewer, project_admin)
    locked, go_on = threading.Event(), threading.Event()
    plan = deletion._plan

    def plan_and_hold(project):
        locked.set()  # the items and the project are locked by now
        go_on.wait(timeout=60)
        return plan(project)

    def launch():
        with transaction.atomic():
            return TrainingJob.objects.create(project_id=doomed.pk, state=JobState.PENDING)

    monkeypatch.setattr(deletion, "_plan", plan_and_hold)
    outcome: dict = {}
    deleter = start_in_thread(outcome, "deletion", lambda: deletion.delete_project(doomed))
    assert locked.wait(timeout=60)
    launcher = start_in_thread(outcome, "launch", launch)
    wait_for_a_lock_wait(launcher)  # its commit waits on the project's lock
    assert launcher.is_alive()
    go_on.set()
    deleter.join(timeout=60)
    launcher.join(timeout=60)

    assert isinstance(outcome["deletion"], deletion.Deleted), outcome["deletion"]
    assert isinstance(outcome["launch"], IntegrityError), outcome["launch"]
    assert not Project.objects.exists() and not TrainingJob.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_training_job_launched_during_a_batch_reads_its_records_after_it(reviewer, project_admin,
                                                                             monkeypatch) -> None:
    """The launch locks the project before it selects records, so it waits for the batch in flight and never
    freezes the id of a revision that batch deletes; the next batch then sees the job and stops."""
    from trainingjobs import services

    doomed = _full_project("doomed", reviewer, project_admin)
    adjudicated, answered, untouched = doomed.items.order_by("pk")
    answer = Answer.objects.create(item=answered, reviewer=reviewer, kind="target", target="dns", source="s")
    kept_revision = AnswerRevision.objects.create(answer=answer, kind="target", target="dns")
    Item.objects.filter(pk=answered.pk).update(status=ItemStatus.DONE)
    locked, go_on = threading.Event(), threading.Event()
    delete_rows = deletion.delete_rows

    def delete_and_hold(rows):
        counts = delete_rows(rows)
        locked.set()  # the first batch (the adjudicated item) is deleted, not yet committed
        go_on.wait(timeout=60)
        return counts

    monkeypatch.setattr(deletion, "delete_rows", delete_and_hold)
    outcome: dict = {}
    deleter = start_in_thread(outcome, "deletion", lambda: deletion.delete_matching(
        doomed, lambda items: items.filter(pk__in=[adjudicated.pk, answered.pk]), through=answered.pk,
        expected=2, batch=1))
    assert locked.wait(timeout=60)
    launcher = start_in_thread(outcome, "launch", lambda: services.launch(
        doomed, base_version=doomed.current_version, held_out_fraction=0.0, enqueue=False))
    wait_for_a_lock_wait(launcher)  # on the project's lock, before it reads any record
    go_on.set()
    deleter.join(timeout=60)
    launcher.join(timeout=60)

    job = outcome["launch"]
    assert isinstance(job, TrainingJob), job
    assert (job.train_records, job.train_adjudications) == ([kept_revision.pk], [])
    assert isinstance(outcome["deletion"], deletion.ProjectBusy), outcome["deletion"]
    assert f"training job {job.pk} is waiting" in str(outcome["deletion"])
    assert list(doomed.items.order_by("pk").values_list("pk", flat=True)) == [answered.pk, untouched.pk]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_claim_next_that_waited_for_a_deletion_finds_nothing(reviewer, project_admin, monkeypatch) -> None:
    """A reviewer's held claim comes back first, locked: that lock waited for the deletion, and the claim the
    database function then wrote pointed at the deleted item, so claim-next failed when it committed."""
    from annotate import queue

    doomed = _full_project("doomed", reviewer, project_admin)
    held = queue.claim_next_id(doomed, reviewer)
    assert held is not None
    locked, go_on = threading.Event(), threading.Event()
    lock_items = deletion._lock_items

    def lock_and_hold(project):
        lock_items(project)
        locked.set()
        go_on.wait(timeout=60)

    monkeypatch.setattr(deletion, "_lock_items", lock_and_hold)
    outcome: dict = {}
    deleter = start_in_thread(outcome, "deletion", lambda: deletion.delete_project(doomed))
    assert locked.wait(timeout=60)
    claimer = start_in_thread(outcome, "claim", lambda: queue.claim_next_id(doomed, reviewer))
    wait_for_a_lock_wait(claimer)  # on its held item's lock
    go_on.set()
    deleter.join(timeout=60)
    claimer.join(timeout=60)

    assert isinstance(outcome["deletion"], deletion.Deleted), outcome["deletion"]
    assert outcome["claim"] is None
    assert not Project.objects.exists() and not Claim.objects.exists()


def test_claim_next_in_a_project_deleted_meanwhile_gets_404(client, doomed, reviewer, monkeypatch) -> None:
    from annotate import queue

    claim_next_id = queue.claim_next_id

    def deleted_first(project, user, **kwargs):
        deletion.delete_project(project)
        return claim_next_id(project, user, **kwargs)

    monkeypatch.setattr(queue, "claim_next_id", deleted_first)
    client.force_login(reviewer)
    response = client.post(reverse("review_next", args=[doomed.slug]), HTTP_HX_REQUEST="true")
    assert response.status_code == 404
    assert "This project was deleted while you were reviewing it." in response.content.decode()


def test_the_django_admin_deletes_selected_items_through_the_service(client, doomed, kept, django_user_model) -> None:
    """Counts instead of a line per row, then each project's selected items set-based; a project whose training job
    waits keeps its items, with a message, and the other's go."""
    staff = django_user_model.objects.create_superuser("root", password="a-long-password")
    client.force_login(staff)
    first = doomed.items.order_by("pk").first()
    others = list(kept.items.values_list("pk", flat=True))
    url = reverse("admin:annotate_item_changelist")
    chosen = {"action": "delete_selected", "_selected_action": [first.pk, *others]}

    page = client.post(url, chosen).content.decode()
    assert ("4 items, 4 predictions, 4 answers, 4 answer revisions, 2 claims, 2 unsent admin forms, "
            "2 adjudications, 2 adjudication revisions") in page
    assert "decision_input" not in page and "Answer object" not in page  # no line per row

    job = TrainingJob.objects.create(project=kept, state=JobState.PENDING)
    assert f"Kept: training job {job.pk} is waiting" in client.post(url, chosen).content.decode()
    page = client.post(reverse("admin:annotate_item_delete", args=[first.pk]), {"post": "yes"}, follow=True)
    assert "was deleted successfully" in page.content.decode()
    assert not Item.objects.filter(pk=first.pk).exists() and doomed.items.count() == 2
    assert set(kept.items.values_list("pk", flat=True)) == set(others)

    job.delete()
    client.post(url, {**chosen, "_selected_action": others, "post": "yes"})
    assert not kept.items.exists() and doomed.items.count() == 2
