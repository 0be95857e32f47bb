"""The README's examples run as written, and every file it points to is in the repository.

Python examples and library shell examples run with this environment's Python from a temporary folder outside the
checkout ("from any folder"). Site examples (`python manage.py ...`, the JSON API with curl) run against a demo
seeded into a temporary data folder, from a folder whose `manage.py` is the checkout's (as running them from the
checkout does), with the server on a free port instead of 8000. Every shell example is either run or listed in
NOT_RUN with the reason, so a new example cannot go unchecked by accident.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import copy_demo, wait_for

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
BIN = Path(sys.executable).parent  # the environment's `python`, `tensorcode`, `pip`
TIMEOUT = 600

# Shell examples not run here, by their first line, with why.
NOT_RUN = {
    "python3 -m venv .venv": "command one builds an environment and serves until Ctrl-C; measured by hand",
    "bash .ci/run": "command two is this test suite",
    'pip install ".[vec]"': "installs into the environment; tests/test_packaging.py builds the distribution",
    'pip install ".[tools]"': "installs into the environment; tests/test_packaging.py builds the distribution",
    ".venv/bin/python bench/team_scale.py": "a benchmark that seeds 100,000 items into PostgreSQL; run by hand",
}
# Shell examples that talk to the site, by their first line; the others run from any folder.
SITE = ("python manage.py", "KEY=$(python manage.py")


def _blocks() -> list[tuple[int, str, str]]:
    """(line, language, code) of every fenced block, including indented ones (inside list items)."""
    blocks = []
    for match in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", TEXT, re.S | re.M):
        indent = len(match.group(1))
        code = "".join(line[indent:] if line[:indent].isspace() else line
                       for line in match.group(3).splitlines(keepends=True))
        blocks.append((TEXT.count("\n", 0, match.start()) + 1, match.group(2), code))
    return blocks


BLOCKS = _blocks()
PYTHON = [b for b in BLOCKS if b[1] == "python"]
SHELL = [b for b in BLOCKS if b[1] == "sh"]
SHELL_RUN = [b for b in SHELL if not b[2].startswith(tuple(NOT_RUN))]
SHELL_HERE = [b for b in SHELL_RUN if not b[2].startswith(SITE)]
SHELL_SITE = [b for b in SHELL_RUN if b[2].startswith(SITE)]


def _id(block: tuple[int, str, str]) -> str:
    return f"line-{block[0]}"


def _env(**extra: str) -> dict[str, str]:
    """This environment, as a newcomer's shell with it activated: no test settings, its `bin` first on PATH.

    PYTHONPATH names this checkout, so the examples exercise the code under test even where the environment's
    editable install points at another checkout of the same repository.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TC_", "CELERY_", "DJANGO_", "PYTEST"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1", **extra)
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def test_readme_has_examples_and_every_shell_example_is_classified() -> None:
    assert PYTHON and SHELL_HERE and SHELL_SITE
    not_run = {prefix for prefix in NOT_RUN for b in SHELL if b[2].startswith(prefix)}
    assert not_run == set(NOT_RUN), "a NOT_RUN entry names an example the README no longer has"


# -- files the README points to ----------------------------------------------------------------------------------
def _tracked() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked archive): what is on disk counts
        return {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()}
    return set(listed.stdout.splitlines())


def test_every_link_points_to_a_file_inside_the_repository() -> None:
    tracked = _tracked()
    links = [target for target in re.findall(r"\]\(([^)\s]+)\)", TEXT) if not re.match(r"[a-z]+:|#", target)]
    assert links
    for target in links:
        path = (ROOT / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{target} points outside the repository"
        relative = str(path.relative_to(ROOT))
        assert relative in tracked or any(t.startswith(relative + "/") for t in tracked), (
            f"{target} is not in the repository"
        )


# The README and the notes it sends readers to for more (the benchmarks' history).
DOCS = {"README.md": TEXT, "bench/README.md": (ROOT / "bench" / "README.md").read_text()}


@pytest.mark.parametrize("doc", DOCS)
def test_every_repository_path_mentioned_exists(doc) -> None:
    tracked = _tracked()
    top = r"(?:tensorcode|annotate|trainingjobs|templates|static|tests|bench|\.ci)"
    paths = set(re.findall(rf"(?<![\w./<-])({top}/[\w./-]*)", DOCS[doc]))
    assert {"README.md": "tests/e2e/test_full_loop.py", "bench/README.md": "annotate/hotpath.py"}[doc] in paths
    for mentioned in sorted(paths):
        name = mentioned.rstrip("/.")
        present = name in tracked or any(t.startswith(name + "/") for t in tracked)
        assert present, f"{mentioned} is not in the repository"


@pytest.mark.parametrize("doc", DOCS)
def test_every_table_renders(doc) -> None:
    """A delimiter row with more cells than its header row is not a table to GitHub: it shows as plain text."""
    def cells(row: str) -> int:
        return len(re.sub(r"`[^`]*`", "", row).strip().strip("|").split("|"))

    lines = DOCS[doc].splitlines()
    tables = [n for n, line in enumerate(lines) if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip())]
    assert tables
    for n in tables:
        width = cells(lines[n - 1])
        assert cells(lines[n]) == width, f"{doc} line {n + 1}: {cells(lines[n])} columns under {width} headers"
        for row in lines[n + 1:]:
            if not row.startswith("|"):
                break
            assert cells(row) == width, f"{doc}: a row of {cells(row)} cells in a {width}-column table: {row[:60]}"


# -- examples ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", PYTHON, ids=_id)
def test_python_example_runs_from_any_folder(block, tmp_path) -> None:
    assert not tmp_path.is_relative_to(ROOT)
    (tmp_path / "example.py").write_text(block[2])
    _run([str(BIN / "python"), "example.py"], tmp_path, _env())


@pytest.mark.parametrize("block", SHELL_HERE, ids=_id)
def test_shell_example_runs_from_any_folder(block, tmp_path) -> None:
    out = _run(["bash", "-euo", "pipefail", "-c", block[2]], tmp_path, _env())
    if "tensorcode evaluate" in block[2]:  # "Training offline": it trains, and says how well
        assert re.search(r"trained \w+: \d+ steps", out) and "top1 " in out, out


# -- the site's examples, against a seeded demo --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


LABEL = """
from annotate.models import Answer, AnswerKind, AnswerRevision, ItemStatus, Project
from django.contrib.auth import get_user_model
project = Project.objects.get(slug="demo-decision-rank")
reviewer = get_user_model().objects.get(username="reviewer")
for item in project.items.order_by("id")[:12]:
    target = item.inputs["hypotheses"][0]["id"]
    answer = Answer.objects.create(item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target=target,
                                   source=project.source_for(item.pk, reviewer))
    AnswerRevision.objects.create(answer=answer, kind=answer.kind, target=target)
    item.status = ItemStatus.DONE
    item.save(update_fields=["status"])
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory, seeded_demo):
    """A folder to run site examples in, the environment they need, and the demo seeded and served.

    The demo's data starts as a copy of the session's seeded one (`seeded_demo`: the same command on an empty
    folder); the README's command then runs here as a newcomer would run it again.
    """
    folder = tmp_path_factory.mktemp("site")
    (folder / "manage.py").symlink_to(ROOT / "manage.py")  # Python resolves the link: the checkout's code runs
    env = _env(TC_DATA_DIR=str(copy_demo(seeded_demo, folder / "var")))
    _run([str(BIN / "python"), "manage.py", "demo", "--no-serve"], folder, env)
    # The tour's labelling, done here: a few answers for the Decision project's export and training examples.
    _run([str(BIN / "python"), "manage.py", "shell", "-c", LABEL], folder, env)
    port = _free_port()
    with (folder / "server.log").open("wb") as log:
        server = subprocess.Popen([str(BIN / "python"), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                                  cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def listening() -> bool:
            assert server.poll() is None, (folder / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(listening, timeout=120, what="the development server to listen")
        yield folder, env, port
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize("block", SHELL_SITE, ids=_id)
def test_site_example_runs_from_the_checkout(block, site) -> None:
    folder, env, port = site
    code = block[2].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    out = _run(["bash", "-euo", "pipefail", "-c", code], folder, env)
    assert not re.search(r'"error": "[^"]', out), out  # API errors are JSON {"error": "..."}


@pytest.mark.integration
def test_demo_serves_and_ctrl_c_stops_server_and_worker(site) -> None:
    """Command one's promise: the printed address answers, and Ctrl-C stops the web server and the worker."""
    folder, env, _ = site  # seeded already: this run only starts the worker and the server
    port = _free_port()
    # As a terminal starts it: with Ctrl-C's default action, even where this run inherited SIGINT ignored (a
    # shell ignores it in the commands it starts in the background, and Python then leaves it ignored).
    demo = subprocess.Popen([str(BIN / "python"), "manage.py", "demo", f"127.0.0.1:{port}"], cwd=folder,
                            env={**env, "PYTHONFAULTHANDLER": "1"}, preexec_fn=_default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    worker = None
    try:
        for line in demo.stdout:
            lines.append(line)
            if "Celery worker started" in line:
                break
        output = "".join(lines)
        assert f"Sign in at http://127.0.0.1:{port}/ as admin / admin" in output, output
        worker = int(re.search(r"Celery worker started \(pid (\d+)\)", output).group(1))
        def answering() -> bool:
            assert demo.poll() is None, "".join(lines)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as answer:
                    return answer.status == 200
            except OSError:
                return False

        wait_for(answering, timeout=120, what="the demo's address to answer")

        os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends: the whole foreground group
        try:
            rest, _ = demo.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # fail with every thread's stack (faulthandler dumps them on SIGABRT)
            pytest.fail(f"the demo did not stop within 120 s of Ctrl-C:\n{_stacks(demo, worker, lines)}")
        assert demo.returncode == 0, "".join(lines) + rest
        assert "Celery worker stopped" in rest
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)
        left = subprocess.run(["ps", "-o", "pid=,args=", "-s", str(demo.pid)], capture_output=True, text=True).stdout
        assert not left.strip(), f"still running after Ctrl-C: {left}"  # the worker's beat child included
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        if worker is not None:  # in its own session: a demo killed above would leave it running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker, signal.SIGKILL)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stacks(demo: subprocess.Popen, worker: int, lines: list[str]) -> str:
    """What a hung demo and its worker were doing: faulthandler (on in both) prints every thread's stack on
    SIGABRT. The worker shares the demo's output, so the output ends only once both are gone."""
    alive = demo.poll() is None
    with contextlib.suppress(ProcessLookupError):
        os.kill(demo.pid, signal.SIGABRT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker, signal.SIGABRT)  # the worker and its beat process: each writes its stacks and ends
    try:
        rest, _ = demo.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # something of the worker's still holds the output open
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker, signal.SIGKILL)
        rest, _ = demo.communicate(timeout=30)
    return f"(the demo was {'still running' if alive else 'gone'})\n{''.join(lines)}{rest}"


def test_pip_install_examples_name_extras_the_package_has() -> None:
    """The `pip install ".[extra]"` lines are not run here; the extras they name must exist."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = re.findall(r'pip install "\.\[(\w+)\]"', TEXT)
    assert named and set(named) <= set(extras)
