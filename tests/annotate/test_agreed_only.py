"""The `agreed_only` filter of exports and training jobs: leave out the answers of items whose reviewers disagree
and that no admin has adjudicated (training on both targets teaches the model neither)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotate import adjudication, export, queue
from annotate.forms import ExportForm
from annotate.models import Answer
from trainingjobs import services
from trainingjobs.forms import LaunchForm
from trainingjobs.models import TrainingJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def overlap_items(ready_items, project, reviewer, second_reviewer, project_admin):
    """Overlap 2: `agreed` (both chose db), `open` (db against dns) and `settled` (db against dns, adjudicated)."""
    project.overlap = 2
    project.save()
    agreed, open_, settled = ready_items(project, [0.1, 0.2, 0.3])
    for item, targets in ((agreed, ("db", "db")), (open_, ("db", "dns")), (settled, ("db", "dns"))):
        for user, target in zip((reviewer, second_reviewer), targets, strict=True):
            queue.claim_next(project, user)
            queue.submit(item, user, target)
    adjudication.adjudicate(settled, project_admin, answer=Answer.objects.get(item=settled, reviewer=reviewer))
    return agreed, open_, settled


def records(project, filters) -> list[tuple[int, str]]:
    return sorted((r.item_id, r.target) for r in export.selected_records(project, export.validate_filters(filters)))


def test_agreed_only_leaves_out_open_disagreements_and_keeps_adjudicated_items(project, overlap_items) -> None:
    agreed, open_, settled = overlap_items

    assert records(project, {}) == sorted([(agreed.pk, "db"), (agreed.pk, "db"), (open_.pk, "db"),
                                           (open_.pk, "dns"), (settled.pk, "db")])
    assert records(project, {"agreed_only": True}) == sorted([(agreed.pk, "db"), (agreed.pk, "db"),
                                                              (settled.pk, "db")])
    assert export.selected_count(project, {"agreed_only": True}) == 3
    assert export.open_disagreements(project) == (1, 2)


@pytest.mark.parametrize("value", ["yes", 1, None, "true"])
def test_agreed_only_takes_true_or_false(value) -> None:
    if value is None:
        assert export.validate_filters({"agreed_only": value}) == {}  # absent, as every other key
        return
    with pytest.raises(ValueError, match="filters.agreed_only: expected true or false"):
        export.validate_filters({"agreed_only": value})


def test_false_is_no_filter() -> None:
    assert export.validate_filters({"agreed_only": False}) == {}
    assert export.validate_filters({"agreed_only": True}) == {"agreed_only": True}


def test_export_form_offers_it_with_what_it_leaves_out(project, overlap_items) -> None:
    form = ExportForm({"format": "jsonl", "minibatch_size": 32, "agreed_only": "on"}, project=project)
    assert form.is_valid(), form.errors
    assert form.filters() == {"agreed_only": True}
    field = form.fields["agreed_only"]
    assert field.label == "Leave out the 1 item whose reviewers disagree and that no admin has adjudicated (2 answers)"
    assert not field.disabled


def test_the_box_is_disabled_when_nothing_disagrees(project) -> None:
    form = ExportForm(project=project)
    assert form.fields["agreed_only"].disabled
    assert "Leave out the 0 items" in form.fields["agreed_only"].label


def test_a_training_job_launched_with_it_freezes_the_agreed_and_adjudicated_records(
    client, project, overlap_items, project_admin
) -> None:
    form = LaunchForm(project, {"base_version": project.current_version_id, "epochs": 1, "lr": 0.01,
                                "optimizer": "adam", "held_out_fraction": 0, "minibatch_size": 4, "seed": 0,
                                "device": "auto", "checkpoint_interval": 10, "agreed_only": "on"})
    assert form.is_valid(), form.errors
    job = services.launch(project, base_version=project.current_version, filters=form.filters(), enqueue=False,
                          **form.settings())

    assert job.filters == {"agreed_only": True}
    assert (job.train_count, job.held_out_count) == (3, 0)
    client.force_login(project_admin)
    page = client.get(reverse("trainingjobs:job", args=[job.pk])).content.decode()
    assert "open disagreements left out" in page


def test_launch_training_command_takes_it(project, overlap_items, capsys) -> None:
    call_command("launch_training", project.slug, "--agreed-only", "--held-out-fraction", "0")

    job = TrainingJob.objects.get()
    assert job.filters == {"agreed_only": True} and job.train_count == 3


def test_the_project_and_training_pages_offer_it_once_something_disagrees(client, project, project_admin,
                                                                          overlap_items, monkeypatch) -> None:
    from annotate import tasks
    from annotate.models import Export

    monkeypatch.setattr(tasks.run_export, "delay_on_commit", lambda *args: None)  # no worker here
    client.force_login(project_admin)
    label = "Leave out the 1 item whose reviewers disagree and that no admin has adjudicated (2 answers)"

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert 'id="export-agreed-only"' in page and label in page
    assert label in client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()

    client.post(reverse("export_create", args=[project.slug]),
                {"format": "jsonl", "minibatch_size": 32, "agreed_only": "on"})
    made = Export.objects.get()
    assert made.filters == {"agreed_only": True} and made.total == 3


def test_a_project_where_nothing_disagrees_shows_no_box(client, project, project_admin) -> None:
    client.force_login(project_admin)
    assert 'id="export-agreed-only"' not in client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert 'id="launch-agreed-only"' not in client.get(
        reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()
