"""`manage.py demo --no-serve`: demo users, one project per tool kind and mode and an overlap-2 project already
answered by two reviewers, safe to run twice."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotate import agreement, demo, demo_data
from annotate.models import Answer, AnswerKind, AnswerRevision, Item, ItemStatus, Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def quick_demo(monkeypatch, settings):
    """The seeding path with a fraction of the training, so the test checks wiring rather than learning."""
    settings.DEBUG = True
    monkeypatch.setattr(demo, "TRAIN_EXAMPLES", 4)
    monkeypatch.setattr(demo, "REVIEW_ITEMS", 3)
    monkeypatch.setattr(demo, "EPOCHS", {})
    monkeypatch.setattr(demo, "DEFAULT_EPOCHS", 1)


def test_demo_creates_a_project_per_tool_mode_with_a_trained_version(quick_demo) -> None:
    call_command("demo", "--no-serve")

    projects = Project.objects.exclude(slug=demo.AGREEMENT_SLUG).order_by("slug")
    assert sorted((p.tool, p.mode) for p in projects) == demo_data.pairs()
    for project in projects:
        version = project.current_version
        assert version is not None and version.trained
        assert json.loads((version.path / "tool.json").read_text())["configuration"] is not None
        assert project.items.count() == 3
        assert project.role_of(project.created_by) == "admin"
        assert {m.user.username for m in project.memberships.all()} == {"admin", "reviewer"}


def test_demo_twice_adds_nothing(quick_demo) -> None:
    call_command("demo", "--no-serve")
    counts = [model.objects.count() for model in (Project, Item, Membership, Answer, AnswerRevision)]

    call_command("demo", "--no-serve")

    assert [model.objects.count() for model in (Project, Item, Membership, Answer, AnswerRevision)] == counts


def test_demo_agreement_project_has_two_reviewers_answers_through_the_queue(quick_demo) -> None:
    """Overlap 2; alice answered every item and bob most of them, the queue keeping status, disagreement and
    provenance; a few items wait for a second reviewer."""
    call_command("demo", "--no-serve")

    project = Project.objects.get(slug=demo.AGREEMENT_SLUG)
    assert project.overlap == 2 and (project.tool, project.mode) == demo.AGREEMENT_KIND
    assert project.current_version.trained and project.role_of(project.created_by) == "admin"
    assert {m.user.username: m.role for m in project.memberships.all()} == {
        "admin": "admin", "reviewer": "reviewer", "alice": "reviewer", "bob": "reviewer"}
    items = list(project.items.order_by("id"))
    assert len(items) == demo.AGREEMENT_ITEMS
    compared = [i for i in items if i.final_answers == 2]
    waiting = [i for i in items if i.final_answers == 1]
    assert len(compared) == demo.AGREEMENT_COMPARED and {i.status for i in compared} == {ItemStatus.DONE}
    assert len(waiting) == demo.AGREEMENT_ITEMS - demo.AGREEMENT_COMPARED
    assert {i.status for i in waiting} == {ItemStatus.READY}  # offered to the demo reviewer as second reviewer
    assert all(i.prediction_id for i in items) and not any(i.claimed_by_id for i in items)
    for answer in Answer.objects.filter(item__project=project).select_related("reviewer"):
        assert answer.kind == AnswerKind.TARGET
        assert answer.source == f"review:{project.slug}/{answer.item_id}/{answer.reviewer.username}"
        assert answer.revisions.count() == 1
    assert {i.pk for i in items if i.disagreement} == {i.pk for i in items if agreement.item_disagreement(i)}


def test_demo_agreement_project_has_disagreements_and_agreement_figures(quick_demo) -> None:
    call_command("demo", "--no-serve")

    project = Project.objects.get(slug=demo.AGREEMENT_SLUG)
    report = agreement.project_report(project)
    differ = len(demo.AGREEMENT_BOB_DIFFERS)
    assert (report.items, report.agreed) == (demo.AGREEMENT_COMPARED, demo.AGREEMENT_COMPARED - differ)
    assert sorted(project.items.filter(disagreement=True).values_list("pk", flat=True)) == report.disagreements
    assert len(report.disagreements) == differ
    assert report.agreed and report.disagreements  # both kinds of item to look at
    assert report.kappa is not None and 0 < report.kappa < 1
    assert [p.reviewers for p in report.pairs] == [("alice", "bob")]


def test_demo_admin_opens_the_agreement_disagreements_and_adjudication_pages(quick_demo, client) -> None:
    call_command("demo", "--no-serve")
    project = Project.objects.get(slug=demo.AGREEMENT_SLUG)
    assert client.login(username=demo.ADMIN[0], password=demo.ADMIN[1])
    compared, differ = demo.AGREEMENT_COMPARED, len(demo.AGREEMENT_BOB_DIFFERS)
    assert 0 < differ < compared

    page = client.get(reverse("agreement_page", args=[project.slug]))
    assert page.status_code == 200
    text = page.content.decode()
    assert f'id="percent-agreement">{100 * (compared - differ) / compared:.0f}%<' in text
    assert re.search(r'id="fleiss-kappa">0\.\d\d<', text) and "alice · bob" in text

    listing = client.get(reverse("disagreement_list", args=[project.slug]))
    assert listing.status_code == 200
    text = listing.content.decode()
    assert f"Open ({differ})" in text
    disagreeing = list(project.items.filter(disagreement=True).order_by("id"))
    for item in disagreeing:
        assert reverse("adjudication_page", args=[project.slug, item.pk]) in text
    assert text.count("<dt>alice</dt>") == text.count("<dt>bob</dt>") == differ

    workspace = client.get(reverse("adjudication_page", args=[project.slug, disagreeing[0].pk]))
    assert workspace.status_code == 200
    assert workspace.content.decode().count("Pick this") == 2


def test_demo_agreement_project_trains_its_own_model_when_demo_decision_rank_has_none(
    quick_demo, monkeypatch
) -> None:
    """It borrows demo-decision-rank's seeded model (training is most of its seeding time), but needs none."""
    monkeypatch.setattr(demo_data, "pairs", lambda: [])

    demo.seed(log=lambda line: None)

    project = Project.objects.get()
    assert project.slug == demo.AGREEMENT_SLUG and project.current_version.trained
    assert project.current_version.label.startswith("demo: trained briefly")
    assert project.items.filter(disagreement=True).count() == len(demo.AGREEMENT_BOB_DIFFERS)


def test_demo_agreement_project_borrows_demo_decision_rank_model(quick_demo) -> None:
    call_command("demo", "--no-serve")

    version = Project.objects.get(slug=demo.AGREEMENT_SLUG).current_version
    seeded = Project.objects.get(slug="demo-decision-rank").current_version
    assert version.label.startswith("demo: demo-decision-rank's model")
    assert (version.path / "tool.json").read_text() == (seeded.path / "tool.json").read_text()


@pytest.mark.parametrize(("tool", "mode"), demo_data.pairs())
def test_demo_data_is_valid_input_and_target_for_its_tool(tool: str, mode: str) -> None:
    from annotate import tooling

    for inputs, target in demo_data.examples(tool, mode, 12):
        tooling.validate_target(tool, mode, tooling.validate_inputs(tool, mode, inputs), target)


def test_stopping_the_demo_worker_also_stops_what_it_left_running(wait_until) -> None:
    """The demo's worker runs in its own process group: when it does not stop in time (a task under way), the
    whole group is killed, its children too, so nothing outlives the demo or holds its terminal."""
    import os
    import signal
    import subprocess
    import sys

    from annotate.management.commands.demo import _stop

    stubborn = ("import signal, subprocess, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "child = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()']); "
                "print(child.pid, flush=True); signal.pause()")  # a worker deaf to SIGTERM, with a child
    worker = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = int(worker.stdout.readline())

    _stop(worker, grace=0.5)

    assert worker.returncode == -signal.SIGKILL

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=30, what="the worker's child to be gone")


def test_a_demo_project_an_admin_deleted_stays_deleted_unless_recreated(quick_demo, monkeypatch) -> None:
    monkeypatch.setattr(demo_data, "pairs", lambda: [("decision", "rank")])
    call_command("demo", "--no-serve")
    Project.objects.get(slug="demo-decision-rank").delete()
    said = []

    demo.seed(log=said.append)

    assert not Project.objects.filter(slug="demo-decision-rank").exists()
    assert Project.objects.filter(slug=demo.AGREEMENT_SLUG).exists()
    assert said == ["Not creating demo-decision-rank again: deleted since the demo created it (python manage.py "
                    "demo --recreate brings it back)."]

    call_command("demo", "--no-serve", "--recreate")

    assert Project.objects.get(slug="demo-decision-rank").items.count() == 3
