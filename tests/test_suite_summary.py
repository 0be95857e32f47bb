"""The suite's own promises (README, "Two commands"): without a service, the tests that need it are skipped and
the run ends with one line naming them and how to enable them, also when pytest-xdist runs them in worker
processes; and a module-scoped fixture is made once a run, in the one process that runs its module."""

from __future__ import annotations

import os
import re
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


def test_every_module_with_a_module_fixture_runs_in_one_process() -> None:
    """The scheduler (tests/conftest.py) hands out tests one by one, except whole `SHARED_SETUP` modules: a module
    missing there would make its module-scoped fixture (a browser, a served demo, a trained tool) in every process.
    A fixture of a folder's conftest.py is shared by the folder's modules."""
    from tests.conftest import SHARED_SETUP

    wide = re.compile(r"""@pytest\.fixture\(.*scope=["'](package|module|class)["']""")
    shared = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if wide.search(path.read_text()):
            where = path.relative_to(ROOT).as_posix()
            shared.append(where.removesuffix("conftest.py") if path.name == "conftest.py" else where)
    assert "tests/e2e/" in shared  # the browser: the pattern still finds what it is for
    assert [where for where in shared if not where.startswith(SHARED_SETUP)] == []
