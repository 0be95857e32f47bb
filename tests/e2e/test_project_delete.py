"""Deleting a project in a real browser: from the settings page, the counts, a wrong slug refused, a running
training job named as the reason, then the project gone from the home page with its files. Screenshots of each
state go to the `artifacts` folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotate import storage
from annotate.models import Project
from tests.annotate.test_deletion import _full_project
from tests.e2e.conftest import PASSWORD, sign_in
from trainingjobs.models import JobState, TrainingJob

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_deletes_a_project_after_typing_its_slug(page, artifacts, django_user_model) -> None:
    ada = django_user_model.objects.create_user("ada", password=PASSWORD)
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    doomed = _full_project("outages", rita, ada)
    _full_project("incidents", rita, ada)
    job = TrainingJob.objects.create(project=doomed, state=JobState.RUNNING)
    ours = {storage.relative_name("models", pk) for pk in doomed.versions.values_list("pk", flat=True)}
    assert all((Path(storage.root()) / name).is_dir() for name in ours)

    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/settings/")
    page.locator("#delete-section").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "0-settings.png")
    page.get_by_role("button", name="Delete project…").click()
    page.wait_for_url("**/projects/outages/delete/")
    blockers = page.locator("#delete-blockers")
    assert f"training job {job.pk} is running" in blockers.inner_text()
    assert page.locator("#delete-project").count() == 0
    page.screenshot(path=artifacts / "1-blocked-by-a-running-job.png", full_page=True)

    job.state = JobState.CANCELLED
    job.save(update_fields=["state"])
    page.reload()
    assert page.locator("#delete-in-progress").inner_text().startswith("1 reviewer is labelling 1 item right now")
    summary = page.locator("#delete-summary").inner_text()
    assert "Items\t3" in summary and "Answers\t2" in summary and "Training jobs\t2" in summary
    confirm = page.get_by_label("Type outages to confirm")
    confirm.fill("Outages")
    page.locator("#delete-project").click()
    page.wait_for_selector("#id_confirm + .errorlist, .errorlist")
    assert "That is not 'outages'; nothing was deleted." in page.locator(".errorlist").inner_text()
    page.screenshot(path=artifacts / "2-wrong-slug.png", full_page=True)
    assert Project.objects.filter(slug="outages").exists()

    page.get_by_label("Type outages to confirm").fill("outages")
    page.get_by_label("Type outages to confirm").press("Enter")
    page.wait_for_url(f"{page.base_url}/")
    message = page.get_by_role("status").first.inner_text()
    assert message.startswith("Project Outages was deleted with 3 items, 3 predictions, ")
    assert page.get_by_role("link", name="Incidents").count() == 1
    assert page.get_by_role("link", name="Outages").count() == 0
    page.screenshot(path=artifacts / "3-deleted.png", full_page=True)
    assert not Project.objects.filter(slug="outages").exists()
    assert not any((Path(storage.root()) / name).exists() for name in ours)


def test_a_reviewer_whose_project_is_deleted_is_told_so_and_keeps_the_page(page, artifacts, django_user_model):
    """A failed htmx request shows the server's own reason in the message area; the workspace stays as it was."""
    from annotate import deletion
    from tests.e2e.test_review_loop import predicted_project, start_reviewing

    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    sign_in(page, "rita")
    start_reviewing(page, project)
    page.keyboard.press("1")
    deletion.delete_project(project)  # by an admin, elsewhere, while rita is answering

    page.keyboard.press("Enter")
    alert = page.locator("#messages [role=alert]")
    alert.wait_for()
    assert alert.inner_text() == "No such project. (HTTP 404)"
    assert page.locator("#workspace[data-item]").count() == 1  # nothing on the page was swapped away
    page.screenshot(path=artifacts / "4-reviewing-a-deleted-project.png", full_page=True)

    page.reload()
    assert page.locator("[data-error-reason]").inner_text() == "No such project."
    page.screenshot(path=artifacts / "5-deleted-project-page.png", full_page=True)
