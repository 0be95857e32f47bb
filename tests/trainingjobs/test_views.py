"""Job pages: who may see them, launching, the polling fragment, cancel / resume / continue, promote."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.urls import reverse

from annotate.celery import app as celery_app
from annotate.models import Item, ItemStatus
from trainingjobs import runner, services
from trainingjobs.models import JobState, TrainingJob

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def job(project, reviewed) -> TrainingJob:
    return services.launch(project, base_version=project.current_version, epochs=2, minibatch_size=4)


@pytest.fixture
def finished(job) -> TrainingJob:
    runner.train(job.pk, "worker-a")
    job.refresh_from_db()
    return job


def test_reviewer_gets_403_and_outsider_404(client, job, reviewer, django_user_model) -> None:
    client.force_login(reviewer)
    assert client.get(reverse("trainingjobs:job", args=[job.pk])).status_code == 403
    assert client.get(reverse("trainingjobs:project_jobs", args=["outages"])).status_code == 403
    client.force_login(django_user_model.objects.create_user("olga"))
    assert client.get(reverse("trainingjobs:job", args=[job.pk])).status_code == 404
    assert client.post(reverse("trainingjobs:cancel", args=[job.pk])).status_code == 404


def test_launch_form_shows_the_tool_kinds_defaults(client, admin, project) -> None:
    client.force_login(admin)

    response = client.get(reverse("trainingjobs:project_jobs", args=[project.slug]))

    form = response.context["form"]
    assert form["lr"].value() == 0.01 and form["optimizer"].value() == "adam"
    assert form["base_version"].value() == project.current_version_id
    project_link = f'<a href="{reverse("project_detail", args=[project.slug])}">{project.name}</a>'
    assert project_link in response.content.decode()  # the breadcrumbs lead back to the project
    assert f"<title>Training · {project.name} · tensorcode annotate</title>" in response.content.decode()


def test_launch_creates_a_queued_job_and_opens_its_page(client, admin, project, reviewed, monkeypatch,
                                                        django_capture_on_commit_callbacks) -> None:
    sent = []
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", sent.append)
    client.force_login(admin)
    data = {"base_version": project.current_version_id, "epochs": 3, "lr": 0.02, "optimizer": "sgd",
            "held_out_fraction": 0.25, "minibatch_size": 4, "seed": 7, "device": "cpu", "checkpoint_interval": 5}

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("trainingjobs:project_jobs", args=[project.slug]), data)

    job = TrainingJob.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("trainingjobs:job", args=[job.pk])
    assert sent == [job.pk]
    assert (job.state, job.epochs, job.lr, job.optimizer, job.seed, job.created_by) == (
        JobState.PENDING, 3, 0.02, "sgd", 7, admin)
    assert len(job.held_out_records) == 3 and len(job.train_records) == 9


def test_launch_without_reviewed_answers_says_so(client, admin, project) -> None:
    client.force_login(admin)
    data = {"base_version": project.current_version_id, "epochs": 3, "lr": 0.02, "optimizer": "sgd",
            "held_out_fraction": 0.25, "minibatch_size": 4, "seed": 7, "device": "cpu", "checkpoint_interval": 5}

    response = client.post(reverse("trainingjobs:project_jobs", args=[project.slug]), data)

    assert response.status_code == 400
    assert "no reviewed records match" in response.content.decode()
    assert not TrainingJob.objects.exists()


def test_status_fragment_polls_while_running_and_stops_with_286(client, admin, job) -> None:
    client.force_login(admin)
    url = reverse("trainingjobs:job", args=[job.pk])

    polling = client.get(url, **HTMX)
    assert polling.status_code == 200 and 'hx-trigger="every 1s"' in polling.content.decode()
    assert "<html" not in polling.content.decode()

    runner.train(job.pk, "worker-a")
    final = client.get(url, **HTMX)
    assert final.status_code == 286
    assert "hx-trigger" not in final.content.decode() and "Succeeded" in final.content.decode()


def test_job_page_shows_progress_curve_comparison_and_promote(client, admin, finished) -> None:
    client.force_login(admin)

    page = client.get(reverse("trainingjobs:job", args=[finished.pk])).content.decode()

    assert f'<progress id="job-progress" value="{finished.total_steps}" max="{finished.total_steps}"' in page
    assert '<svg id="loss-curve"' in page and "<polyline" in page
    assert 'id="comparison"' in page and "Promote" in page
    assert finished.worker_host in page
    # A held-out loss near zero keeps its digits (it read "0.0000" beside the base's "0.5617").
    metrics = {**finished.metrics, "new": {**finished.metrics["new"], "loss": 3.2e-05}}
    TrainingJob.objects.filter(pk=finished.pk).update(metrics=metrics)
    assert ">3.2e-05</td>" in client.get(reverse("trainingjobs:job", args=[finished.pk])).content.decode()
    project = finished.project
    crumbs = (f'<a href="{reverse("project_detail", args=[project.slug])}">{project.name}</a> · '
              f'<a href="{reverse("trainingjobs:project_jobs", args=[project.slug])}">Training</a>')
    assert crumbs in page


def test_cancel_through_htmx_returns_the_fragment(client, admin, job) -> None:
    client.force_login(admin)

    response = client.post(reverse("trainingjobs:cancel", args=[job.pk]), **HTMX)

    assert response.status_code == 200 and 'id="job-status"' in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.cancel_requested


def test_launch_message_shows_once_and_a_poll_in_a_new_state_replaces_it(
    client, admin, project, reviewed, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    """"Job N queued." sits outside the polled fragment: the poll that sees the job move on must clear it."""
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: None)
    client.force_login(admin)
    data = {"base_version": project.current_version_id, "epochs": 2, "lr": 0.01, "optimizer": "adam",
            "held_out_fraction": 0.25, "minibatch_size": 4, "seed": 0, "device": "cpu", "checkpoint_interval": 5}
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("trainingjobs:project_jobs", args=[project.slug]), data)
    job = TrainingJob.objects.get()
    url = reverse("trainingjobs:job", args=[job.pk])

    page = client.get(url).content.decode()
    assert f"Job {job.pk} queued." in _messages(page)
    poll = _poll_values(page)  # what htmx sends with each poll

    still_queued = client.get(url, poll, **HTMX).content.decode()
    assert 'id="messages"' not in still_queued  # nothing new to say: the message stays

    runner.train(job.pk, "worker-a")
    moved_on = client.get(url, poll, **HTMX)
    assert moved_on.status_code == 286
    assert _messages(moved_on.content.decode()) == ""  # swapped out of band, now empty
    assert _messages(client.get(url).content.decode()) == ""  # and not shown again on the next visit
    assert poll == {"shown": JobState.PENDING}


def test_cancel_through_htmx_shows_its_message_at_once_and_only_once(client, admin, job) -> None:
    client.force_login(admin)

    response = client.post(reverse("trainingjobs:cancel", args=[job.pk]), **HTMX).content.decode()

    assert 'hx-swap-oob="true"' in response and _messages(response) == "Cancel requested."
    assert _messages(client.get(reverse("trainingjobs:job", args=[job.pk])).content.decode()) == ""


def _messages(page: str) -> str:
    """The text of the page's (or fragment's) messages region; fails when there is none."""
    region = re.search(r'<div id="messages"[^>]*>(.*?)</div>', page, re.S)
    assert region, "no messages region"
    return " ".join(re.sub(r"<[^>]+>", " ", region.group(1)).split())


def test_a_setting_below_what_a_job_takes_is_named_with_its_real_bound_and_its_section_opens(
        client, admin, project, reviewed) -> None:
    """A positive-integer field offered 0 to the browser and said "greater than or equal to 0" for -1, though a
    job needs 1; the error sat in the closed "More settings" section, so the page looked unchanged."""
    client.force_login(admin)
    url = reverse("trainingjobs:project_jobs", args=[project.slug])
    page = client.get(url).content.decode()
    assert re.search(r'name="minibatch_size" value="\d+" min="1"', page)
    assert re.search(r'name="epochs" value="\d+" min="1" max="10000"', page)

    for field, value in (("minibatch_size", -1), ("checkpoint_interval", 0), ("held_out_fraction", 1.5)):
        response = client.post(url, {"base_version": project.current_version_id, **LAUNCH, field: value})

        assert response.status_code == 400 and not TrainingJob.objects.exists()
        more = re.search(r"<details( open)?>\s*<summary>More settings</summary>(.*?)</details>",
                         response.content.decode(), re.S)
        assert more.group(1) == " open", field
        bound = "0.9" if field == "held_out_fraction" else "1"
        assert f"greater than or equal to {bound}" in more.group(2) or f"less than or equal to {bound}" in more.group(
            2), field
    page = client.post(url, {"base_version": project.current_version_id, **LAUNCH, "epochs": 0}).content.decode()
    assert "<details>\n        <summary>More settings</summary>" in page  # an error above it leaves it closed


def _poll_values(page: str) -> dict:
    values = re.search(r"hx-vals='([^']*)'", page)
    return json.loads(html.unescape(values.group(1))) if values else {}


def test_resume_and_continue_requeue(client, admin, finished, monkeypatch) -> None:
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: None)
    client.force_login(admin)

    response = client.post(reverse("trainingjobs:resume", args=[finished.pk]))
    assert response.status_code == 302
    assert TrainingJob.objects.get(pk=finished.pk).state == JobState.SUCCEEDED  # refused: nothing to resume

    refused = client.post(reverse("trainingjobs:continue", args=[finished.pk]), {"extra_epochs": 10_001}, **HTMX)
    assert "Give a whole number of more epochs, from 1 to 10,000." in refused.content.decode()
    response = client.post(reverse("trainingjobs:continue", args=[finished.pk]), {"extra_epochs": 3}, **HTMX)
    finished.refresh_from_db()
    assert finished.state == JobState.PENDING and finished.epochs == 5
    page = response.content.decode()  # the heading above the status says how many epochs too
    assert '<span id="job-epochs" hx-swap-oob="true">5 epochs</span>' in page
    started = re.search(r'<span class="muted">Started</span> (\S+)</div>', page).group(1)
    assert started == "-"  # queued again: its first attempt's start read as earlier than this queueing


def test_resuming_a_job_cancelled_before_it_started_says_it_starts_over(client, admin, job, monkeypatch) -> None:
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: None)
    services.cancel(job.pk)
    client.force_login(admin)

    page = client.post(reverse("trainingjobs:resume", args=[job.pk]), follow=True).content.decode()

    assert "Job queued again; it starts from the beginning (no checkpoint yet)." in page

    services.cancel(job.pk)
    job.checkpoint_dir.mkdir(parents=True)
    (job.checkpoint_dir / "training.json").write_text("{}")  # as a worker leaves it, stopped after a checkpoint
    page = client.post(reverse("trainingjobs:resume", args=[job.pk]), follow=True).content.decode()
    assert "Job queued again; it resumes from its checkpoint." in page


def test_promote_makes_the_version_current_and_queues_repredicting(
    client, admin, project, finished, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    queued = []
    monkeypatch.setattr("trainingjobs.tasks.repredict_pending.delay", lambda *args: queued.append(args))
    client.force_login(admin)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("trainingjobs:promote", args=[finished.result_version_id]),
                               {"job": finished.pk})

    assert response.status_code == 302
    project.refresh_from_db()
    assert project.current_version_id == finished.result_version_id
    assert queued == [(project.pk, finished.result_version_id)]
    page = client.get(reverse("trainingjobs:job", args=[finished.pk])).content.decode()
    assert "is the current model" in page


def test_repredict_predicts_items_waiting_for_review_and_those_refused_with_the_promoted_version(
    project, finished, django_capture_on_commit_callbacks
) -> None:
    inputs = project.items.first().inputs
    waiting = Item.objects.create(project=project, inputs=inputs, status=ItemStatus.READY)
    refused = Item.objects.create(project=project, inputs=inputs, status=ItemStatus.REFUSED,
                                  refusal="version 1: inputs: too long for this model")

    celery_app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.promote(finished.result_version)
    finally:
        celery_app.conf.task_always_eager = False

    waiting.refresh_from_db()
    assert waiting.prediction.model_version_id == finished.result_version_id
    refused.refresh_from_db()
    assert (refused.status, refused.refusal) == (ItemStatus.READY, "")
    assert refused.prediction.model_version_id == finished.result_version_id


def test_a_long_jobs_curve_reads_a_sample_of_its_steps(client, admin, job) -> None:
    from trainingjobs.models import LossPoint
    from trainingjobs.plot import MAX_POINTS

    LossPoint.objects.bulk_create(LossPoint(job=job, step=n, epoch=1, loss=1 / n) for n in range(1, 5 * MAX_POINTS))
    TrainingJob.objects.filter(pk=job.pk).update(step=5 * MAX_POINTS - 1, total_steps=5 * MAX_POINTS)
    client.force_login(admin)

    response = client.get(reverse("trainingjobs:job", args=[job.pk]), **HTMX)

    assert response.context["curve"].count <= MAX_POINTS and response.context["curve"].last_step == 5 * MAX_POINTS
    # 1/n falls from 1 to 1/2000: drawn on a log scale, which the heading says, with a line per power of ten.
    page = response.content.decode()
    assert "Training loss <span" in page and "(log scale)</span>" in page
    assert page.count('stroke-dasharray="2 3"') == 3 and all(f">{p}</text>" in page for p in ("0.1", "0.01", "0.001"))


LAUNCH = {"epochs": 2, "lr": 0.05, "optimizer": "adam", "held_out_fraction": 0.25, "minibatch_size": 4, "seed": 0,
          "device": "cpu", "checkpoint_interval": 5}


def test_launch_form_offers_the_accepted_uploads_with_their_counts(client, admin, project, tmp_path) -> None:
    from tests.trainingjobs.conftest import upload

    client.force_login(admin)
    url = reverse("trainingjobs:project_jobs", args=[project.slug])
    before = client.get(url)
    assert "accepted experience uploads: 0 files (0 supervision records)" in before.content.decode()
    assert before.context["form"]["include_uploads"].field.disabled  # nothing to include yet

    upload(project, range(200, 204), tmp_path)
    upload(project, range(204, 208), tmp_path)
    upload(project, range(300, 304), tmp_path, spoil=True)
    upload(project, range(304, 308), tmp_path, check=False)
    after = client.get(url)

    page = " ".join(after.content.decode().split())
    assert ('id="id_include_uploads"> Also train on the accepted experience uploads: '
            "2 files (2 supervision records)") in page
    assert not after.context["form"]["include_uploads"].field.disabled


def test_launch_with_the_uploads_box_trains_on_them_and_the_job_page_says_so(
    client, admin, project, uploads, not_accepted, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: None)
    client.force_login(admin)
    url = reverse("trainingjobs:project_jobs", args=[project.slug])
    data = LAUNCH | {"base_version": project.current_version_id}
    assert client.post(url, data).status_code == 400  # no reviewed records, and the box unticked

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, data | {"include_uploads": "on"})

    job = TrainingJob.objects.get()
    assert response.status_code == 302
    assert job.train_uploads == [row.pk for row in uploads] and job.train_count == 0
    runner.train(job.pk, "worker-a")
    page = " ".join(client.get(reverse("trainingjobs:job", args=[job.pk])).content.decode().split())
    assert '<span id="job-uploads">plus 2 experience upload files with 2 supervision records for training only' in page
    assert "training 2 minibatches x 2 epochs on cpu, including 2 experience upload files" in page  # the log


def test_a_reviewer_cannot_launch_a_job_on_the_uploads(client, reviewer, project, reviewed, uploads) -> None:
    client.force_login(reviewer)

    response = client.post(reverse("trainingjobs:project_jobs", args=[project.slug]),
                           LAUNCH | {"base_version": project.current_version_id, "include_uploads": "on"})

    assert response.status_code == 403
    assert not TrainingJob.objects.exists()


def test_a_queued_job_says_where_it_stands_and_when_no_worker_seems_to_take_jobs(client, admin, job,
                                                                                project) -> None:
    from datetime import timedelta

    from django.utils import timezone

    client.force_login(admin)
    url = reverse("trainingjobs:job", args=[job.pk])
    assert "Waiting for a GPU worker." in client.get(url, **HTMX).content.decode()  # just queued, nothing ahead

    TrainingJob.objects.filter(pk=job.pk).update(queued_at=timezone.now() - timedelta(minutes=3))
    lonely = client.get(url, **HTMX).content.decode()
    assert "No job is running and this one has waited since" in lonely and "is a GPU worker running?" in lonely
    assert "celery -A annotate worker -Q gpu" in lonely

    earlier = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4)
    running = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4)
    TrainingJob.objects.filter(pk=earlier.pk).update(queued_at=timezone.now() - timedelta(minutes=5))
    TrainingJob.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    busy = client.get(url, **HTMX).content.decode()
    assert "Waiting for a GPU worker: 1 job running, 1 queued before this one." in busy
    assert "is a GPU worker running?" not in busy

    runner.train(job.pk, "worker-a")
    assert "Waiting for a GPU worker" not in client.get(url, **HTMX).content.decode()


def test_a_project_without_model_versions_says_how_to_get_one(client, admin, project) -> None:
    from annotate.models import ModelVersion

    project.current_version = None
    project.save(update_fields=["current_version"])
    ModelVersion.objects.filter(project=project).delete()
    client.force_login(admin)

    page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()

    assert 'id="no-versions"' in page and "manage.py register_model_version" in page
    assert 'id="launch-needs-version"' in page and 'id="versions"' not in page
    assert 'id="launch-form"' not in page  # no Launch button that cannot work


def test_the_django_admin_shows_jobs_but_launches_none(admin_client, job) -> None:
    """A job added there froze no records and was never queued, and waiting it blocked deleting items."""
    assert admin_client.get(reverse("admin:trainingjobs_trainingjob_change", args=[job.pk])).status_code == 200
    assert admin_client.get(reverse("admin:trainingjobs_trainingjob_add")).status_code == 403
    listing = admin_client.get(reverse("admin:trainingjobs_trainingjob_changelist")).content.decode()
    assert f"/admin/trainingjobs/trainingjob/{job.pk}/change/" in listing and "/trainingjob/add/" not in listing

    changelist = reverse("admin:trainingjobs_trainingjob_changelist")
    page = admin_client.post(changelist, {"action": "cancel_jobs", "_selected_action": [job.pk]}, follow=True)
    assert f"Cancel requested for job {job.pk}." in page.content.decode()  # it said nothing when it worked
    page = admin_client.post(changelist, {"action": "resume_jobs", "_selected_action": [job.pk]}, follow=True)
    assert f"Queued again: job {job.pk}." in page.content.decode()


def test_promoting_a_version_deleted_meanwhile_says_so_and_changes_nothing(client, admin, project,
                                                                          monkeypatch) -> None:
    """The race itself is played out in test_version_races; here the version's lock finds it gone."""
    from annotate.models import ModelVersion, ModelVersionQuerySet

    current = project.current_version_id
    spare = ModelVersion.objects.allocate(project, label="spare", trained=False)
    monkeypatch.setattr(ModelVersionQuerySet, "lock", lambda self, pk, no_key=False: False)
    client.force_login(admin)

    response = client.post(reverse("trainingjobs:promote", args=[spare.pk]), follow=True)

    assert "Nothing was promoted: spare has been deleted." in _messages(response.content.decode())
    project.refresh_from_db()
    assert project.current_version_id == current


def test_a_project_with_many_jobs_and_versions_pages_both_tables(client, admin, project) -> None:
    """Past 50, the older jobs and versions were missing from the page with no word of them: one could not be
    downloaded or promoted there. Each table now pages on its own, newest first, the other's page kept."""
    from datetime import timedelta

    from django.utils import timezone

    from annotate.models import ModelVersion

    ModelVersion.objects.bulk_create(ModelVersion(project=project, tool="decision", mode="rank", label=f"v{n}",
                                                  trained=True) for n in range(54))
    start = timezone.now() - timedelta(days=30)
    TrainingJob.objects.bulk_create(TrainingJob(project=project, base_version=project.current_version,
                                                state=JobState.SUCCEEDED, created_at=start + timedelta(hours=n))
                                    for n in range(51))
    oldest_job = TrainingJob.objects.order_by("created_at").first()
    url = reverse("trainingjobs:project_jobs", args=[project.slug])
    client.force_login(admin)

    first = client.get(url).content.decode()
    assert '<span>Jobs <small class="muted">51</small></span>' in first
    assert '<span>Model versions <small class="muted">55</small></span>' in first
    assert "1–50 of 51 jobs" in first and "1–50 of 55 versions" in first
    assert f'href="{reverse("trainingjobs:job", args=[oldest_job.pk])}"' not in first
    assert 'href="?jobs=2#jobs-title">Older →</a>' in first
    assert f'id="download-version-{project.current_version_id}"' not in first  # the oldest version

    older = client.get(url, {"jobs": 2, "versions": 2}).content.decode()
    assert f'href="{reverse("trainingjobs:job", args=[oldest_job.pk])}"' in older
    assert f'id="download-version-{project.current_version_id}"' in older
    assert "51–51 of 51 jobs" in older and "51–55 of 55 versions" in older
    assert 'href="?jobs=1&amp;versions=2#jobs-title">← Newer</a>' in older  # the versions' page stays
    for junk in ("0", "-1", "nan", "99999999999999999999", "2x"):
        assert client.get(url, {"jobs": junk, "versions": junk}).status_code == 200
