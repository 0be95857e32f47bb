"""In a real browser: a project admin goes from the home page to the overview of training jobs, which follows a job
from queued to finished by itself, and switches its tabs; then downloads the version the job made."""

from __future__ import annotations

import zipfile

import torch

from annotate.models import Membership, ModelVersion, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in
from tests.trainingjobs.conftest import CONFIGURATION, review
from trainingjobs import runner, services
from trainingjobs.models import JobState, TrainingJob


def test_the_overview_follows_a_job_from_queued_to_finished(page, artifacts, django_user_model) -> None:
    torch.set_num_threads(1)
    admin = django_user_model.objects.create_user("ada", password=PASSWORD)
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration=CONFIGURATION)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    Membership.objects.create(project=project, user=rita, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    review(project, rita, 8)
    job = services.launch(project, base_version=project.current_version, epochs=2, minibatch_size=4,
                          created_by=admin, enqueue=False)  # queued; this test is its worker

    sign_in(page, "ada")
    page.click("#training-jobs-link")
    page.wait_for_selector(f"#job-row-{job.pk}[data-state=PENDING]")
    assert " ".join(page.text_content("#job-activity").split()) == "0 running, 1 queued."
    page.screenshot(path=str(artifacts / "training-overview-queued.png"), full_page=True)

    runner.train(job.pk, "worker-e2e")
    assert TrainingJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    # The list polls itself while a job is queued or running: the row turns finished without a reload.
    page.wait_for_selector(f"#job-row-{job.pk}[data-state=SUCCEEDED]", timeout=20_000)
    assert page.text_content("#job-activity").strip() == "No job is queued or running."
    page.screenshot(path=str(artifacts / "training-overview-finished.png"), full_page=True)

    page.get_by_role("link", name="Failed (0)").click()
    page.wait_for_selector("#no-jobs")
    assert page.url.endswith("/jobs/?show=failed") and page.text_content("#no-jobs").strip() == "No job failed."
    assert page.get_by_role("link", name=f"Job {job.pk}", exact=True).count() == 0
    page.get_by_role("link", name="All (1)").click()
    page.get_by_role("link", name=f"Job {job.pk}", exact=True).click()
    page.wait_for_url(f"**/jobs/{job.pk}/")
    assert page.locator(".state[data-state=SUCCEEDED]").is_visible()

    # The version the job made downloads from the project's training page as one zip of its two files.
    page.goto(f"{page.base_url}/jobs/projects/{project.slug}/")
    version = TrainingJob.objects.get(pk=job.pk).result_version
    with page.expect_download() as info:
        page.click(f"#download-version-{version.pk}")
    download = info.value
    assert download.suggested_filename == f"outages-version-{version.pk}.zip"
    with zipfile.ZipFile(download.path()) as archive:
        assert archive.namelist() == ["tool.json", "model.safetensors"]
        assert archive.read("model.safetensors") == (version.path / "model.safetensors").read_bytes()
