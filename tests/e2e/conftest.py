"""Browser tests: Playwright driving Debian's chromium against pytest-django's live server.

Predictions and exports run in-process: Celery is switched to eager mode for these tests, so a task queued with
`delay_on_commit` runs in the server thread as its transaction commits (no worker to wait on). Screenshots go
to `$TC_TEST_ARTIFACTS/e2e/` (or pytest's temporary directory).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import close_loop_connections

CHROMIUM = os.environ.get("TC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PASSWORD = "a-long-password"

# The live server runs in a thread beside Playwright's event loop; Django's async guard would refuse the ORM.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    missing = None
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        missing = f"chromium not found at {CHROMIUM} (install Debian's chromium, or set TC_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright package is not installed"
    # Under CI a missing browser is a failure (the tests run and say why), not a skip.
    skip = missing and os.environ.get("CI", "").lower() != "true"
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
            if skip:
                item.add_marker(pytest.mark.skip(reason=missing))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            close_loop_connections()


@pytest.fixture
def artifacts(request, tmp_path_factory) -> Path:
    """Where this test's screenshots go (kept after the run as test artifacts)."""
    root = os.environ.get("TC_TEST_ARTIFACTS")
    base = Path(root) / "e2e" if root else tmp_path_factory.getbasetemp() / "e2e"
    path = base / re.sub(r"[^\w.-]+", "_", request.node.name)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def eager_celery(settings):
    """Run Celery tasks in-process, when their transaction commits."""
    from annotate.celery import app

    previous = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = previous


@pytest.fixture
def page(browser, live_server, artifacts):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.base_url = live_server.url
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def sign_in(page, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{page.base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{page.base_url}/")


class HeldRequests:
    """Holds the browser's requests to addresses matching `pattern` at the network until the test lets each go
    (`routes.pop().continue_()`): keys pressed meanwhile are typed while the answer is on its way, as on a slow
    connection."""

    def __init__(self, page, pattern: str) -> None:
        self.page, self.routes = page, []
        page.route(re.compile(pattern), lambda route: self.routes.append(route))

    def press_and_hold(self, *keys: str) -> None:
        """Press `keys`, then wait until a request is held."""
        for key in keys:
            self.page.keyboard.press(key)
        deadline = time.monotonic() + 15
        while not self.routes:  # the route's handler runs while Playwright talks to the browser
            assert time.monotonic() < deadline, "no request reached the route"
            self.page.evaluate("0")
