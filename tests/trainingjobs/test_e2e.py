"""In a real browser: an admin launches a job, watches it train, compares versions, promotes the new one, and sees
an item predicted again by it. A real Celery worker trains the job (PostgreSQL and Redis, as in test_workers).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from annotate.models import Item, ItemStatus
from tests.conftest import close_loop_connections
from tests.trainingjobs.conftest import decision_input, review
from tests.trainingjobs.test_workers import Workers, _database_url, redis_workers  # noqa: F401 - fixture
from trainingjobs.models import JobState, TrainingJob

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.postgres]

CHROMIUM = os.environ.get("TC_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("TC_TEST_ARTIFACTS", settings.BASE_DIR / "var" / "test-artifacts")) / "trainingjobs"


@pytest.fixture
def browser_page():
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # Playwright's sync API runs an event loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)
        try:
            yield page
        finally:
            browser.close()
            close_loop_connections()


def test_admin_launches_watches_and_promotes_a_job(live_server, browser_page, project, admin, reviewer,
                                                   redis_workers, wait_until) -> None:  # noqa: F811
    review(project, reviewer, 40)
    waiting = Item.objects.create(project=project, inputs=decision_input(99), status=ItemStatus.READY)
    redis_workers.start("w1", lease_seconds=30)
    page = browser_page
    SHOTS.mkdir(parents=True, exist_ok=True)

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", admin.username)
    page.fill("input[name=password]", "a-long-password")
    page.click("button[type=submit], input[type=submit]")
    page.goto(f"{live_server.url}/jobs/projects/{project.slug}/")
    page.fill("input[name=epochs]", "40")  # long enough (~10 s) for the page to poll it mid-run
    page.click("#launch-form summary")
    page.fill("input[name=minibatch_size]", "2")
    page.fill("input[name=held_out_fraction]", "0.1")
    page.click("#launch")

    page.wait_for_url("**/jobs/*/")
    job = TrainingJob.objects.get()
    # The page polls its status fragment: the bar and the loss curve appear while the job runs.
    page.wait_for_function(
        "() => { const p = document.querySelector('#job-progress');"
        " return p && Number(p.value) > 0 && Number(p.value) < Number(p.max); }"
    )
    page.wait_for_selector("#loss-curve polyline")
    page.screenshot(path=str(SHOTS / "job-running.png"))
    page.wait_for_selector(".state[data-state=SUCCEEDED]")
    # "Job N queued." is outside the polled fragment; the polls that saw the job move on swapped it away.
    page.wait_for_function("() => document.querySelector('#messages').textContent.trim() === ''")
    page.screenshot(path=str(SHOTS / "job-succeeded.png"), full_page=True)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert page.locator("#comparison").is_visible()

    page.click("#promote")
    page.wait_for_selector("#current-badge")
    project.refresh_from_db()
    assert project.current_version_id == job.result_version_id

    def repredicted() -> bool:
        waiting.refresh_from_db()
        return waiting.prediction is not None and waiting.prediction.model_version_id == job.result_version_id

    wait_until(repredicted, timeout=120, what="the promoted version to predict the waiting item")
    page.goto(f"{live_server.url}/projects/{project.slug}/items/{waiting.pk}/")
    assert f"Model version {job.result_version_id}" in page.content()
    page.screenshot(path=str(SHOTS / "item-repredicted.png"))
