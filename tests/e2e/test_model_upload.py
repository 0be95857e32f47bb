"""In a real browser: an admin uploads a model trained elsewhere (the two files `save_pretrained` writes), sees
the worker accept it as a version and promotes it; files the library would not load are refused with the reason."""

from __future__ import annotations

import pytest

from annotate import tooling
from annotate.models import ModelUpload, Project, Role
from tests.e2e.conftest import sign_in
from tests.e2e.test_review_loop import make_project, users  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _upload(page, directory, weights=None, label: str = "") -> None:
    if page.locator("#model-upload").get_attribute("open") is None:  # open once the project has uploads
        page.get_by_text("Upload a model trained elsewhere").click()
    page.get_by_label("tool.json").set_input_files(str(directory / "tool.json"))
    page.get_by_label("model.safetensors").set_input_files(str(weights or directory / "model.safetensors"))
    if label:
        page.get_by_label("Name").fill(label)
    page.get_by_role("button", name="Upload model").click()


def test_admin_uploads_a_model_promotes_it_and_sees_bad_files_refused(page, artifacts, users,  # noqa: F811
                                                                      eager_celery, tmp_path) -> None:
    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    saved = tmp_path / "mine"
    tooling.create_tool("decision", "rank", project.configuration).save_pretrained(saved)
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/jobs/projects/{project.slug}/")

    _upload(page, saved, label="trained offline")
    row = page.locator(".upload-status").first
    row.get_by_text("Accepted").wait_for()
    assert "became trained offline" in row.inner_text()
    page.screenshot(path=str(artifacts / "model-upload-accepted.png"), full_page=True)

    row.get_by_role("button", name="Promote").click()
    page.get_by_text("trained offline is now the current model").wait_for()
    assert Project.objects.get(pk=project.pk).current_version.label == "trained offline"

    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x00" * 64)
    _upload(page, saved, weights=broken, label="broken")
    row = page.locator(".upload-status").first
    row.get_by_text("Refused").wait_for()
    assert "model.safetensors: not a safetensors file (its header: not valid JSON" in row.inner_text()

    other = tmp_path / "bot"
    tooling.create_tool("chatbot", "reply", {}).save_pretrained(other)
    _upload(page, other)
    page.get_by_text("The model was not kept: tool.json: a 'chatbot' tool, but this project uses 'decision'").wait_for()
    page.screenshot(path=str(artifacts / "model-upload-refused.png"), full_page=True)
    assert ModelUpload.objects.count() == 2

    # The refused upload's record is removed from the list after a confirmation; the accepted one stays listed.
    refused = ModelUpload.objects.get(label="broken")
    page.once("dialog", lambda dialog: dialog.accept() if "Remove model upload" in dialog.message else dialog.dismiss())
    page.locator(f"#model-upload-{refused.pk}").get_by_role("button", name="Remove").click()
    page.get_by_text(f"Model upload {refused.pk} removed.").wait_for()
    assert list(ModelUpload.objects.values_list("label", flat=True)) == ["trained offline"]
    assert page.locator(".upload-status").count() == 1
    page.screenshot(path=str(artifacts / "model-upload-removed.png"), full_page=True)
