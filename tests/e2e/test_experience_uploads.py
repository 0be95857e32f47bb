"""In a real browser: an admin uploads an experience file their own program traced, sees the worker accept it,
and removes it after confirming, once no waiting training job needs it."""

from __future__ import annotations

import pytest

from annotate import tooling
from annotate.models import ExperienceUpload, Role
from tests.e2e.conftest import sign_in
from tests.e2e.test_review_loop import make_project, users  # noqa: F401 - fixture
from trainingjobs import services

pytestmark = pytest.mark.django_db(transaction=True)


def _experience_file(project, path):
    """What an admin's own program saves: a few examples traced with the project's tool and their answers."""
    inputs = [tooling.to_json(make_input(n)) for n in range(4)]
    tooling.capture_experience(tooling.trainer_for_project(project), project.mode, inputs, ["db", "dns", "db", "dns"],
                               [f"mine:{n}" for n in range(4)], path)
    return path


def make_input(n: int) -> dict:
    return {"question": f"Why did service {n} stop?", "evidence": [{"source_id": "log", "text": "dns record expired"}],
            "hypotheses": [{"id": "db", "text": "database down"}, {"id": "dns", "text": "dns record expired"}]}


def test_admin_uploads_an_experience_file_and_removes_it(page, artifacts, users, eager_celery,  # noqa: F811
                                                         tmp_path) -> None:
    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")

    page.get_by_label("Experience file").set_input_files(str(_experience_file(project, tmp_path / "mine.json")))
    page.get_by_role("button", name="Upload experience file").click()
    row = page.locator(".upload-status").first
    row.get_by_text("Accepted").wait_for()
    assert "1 supervision record in" in row.inner_text()  # one captured minibatch of the four examples
    page.screenshot(path=str(artifacts / "upload-accepted.png"), full_page=True)

    page.once("dialog", lambda dialog: dialog.dismiss())  # "Cancel" keeps it
    row.get_by_role("button", name="Remove").click()
    assert ExperienceUpload.objects.count() == 1

    # A training job that froze the upload copies it when it starts: removing it waits for the job.
    job = services.launch(project, base_version=project.current_version, include_uploads=True, enqueue=False,
                          epochs=1, minibatch_size=4)
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Remove").click()
    row.get_by_text(f"part of training job {job.pk}, which has not finished").wait_for()
    page.screenshot(path=str(artifacts / "upload-in-use.png"), full_page=True)
    assert ExperienceUpload.objects.count() == 1

    services.cancel(job.pk)
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Remove").click()
    page.get_by_text("mine.json removed.").wait_for()
    assert not ExperienceUpload.objects.exists()
    page.screenshot(path=str(artifacts / "upload-removed.png"), full_page=True)
