"""The suite's own promise (README, "Two commands"): without a service, the tests that need it are skipped and
the run ends with one line naming them and how to enable them, also when pytest-xdist runs them in worker
processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_missing_service_is_named_in_one_line_when_tests_run_in_several_processes(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(TC_TEST_REDIS_URL="redis://127.0.0.1:1/0", TC_DATA_DIR=str(tmp_path))  # nothing listens on port 1
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1",
         "tests/annotate/test_celery.py::test_worker_runs_ping_through_redis",
         "tests/annotate/test_celery.py::test_demo_help_lists_address_argument"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("Skipped for missing services: 1 redis tests (start Redis or point TC_TEST_REDIS_URL at one "
            "(tried redis://127.0.0.1:1/0)).") in done.stdout, done.stdout
    assert "1 passed, 1 skipped" in done.stdout, done.stdout
