"""Fixtures for every test. Area-specific fixtures live in the conftest.py of their own directory."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

POLL_SECONDS = 0.05


@pytest.fixture(autouse=True)
def _artifact_dir(settings, tmp_path):
    """Keep each test's checkpoints and experience files in its own temporary directory."""
    settings.TC_ARTIFACT_DIR = tmp_path / "artifacts"
    settings.TC_ARTIFACT_DIR.mkdir()


@pytest.fixture
def wait_until() -> Callable[..., object]:
    """Poll `condition()` until it returns something truthy and return that; fail after `timeout` seconds.

    Tests wait on a condition with a deadline, never for a fixed time.
    """

    def wait(condition: Callable[[], object], *, timeout: float, what: str) -> object:
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(POLL_SECONDS)

    return wait
