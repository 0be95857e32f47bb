"""Does the reviewer site hold up with a team and 100,000 items? Server times, submit latency, export, import.

    python bench/team_scale.py [--items 100000] [--reviewers 16] [--seconds 30] [--pages-only]
        [--database postgres://postgres@127.0.0.1:5432/tc_scale_bench] [--cache redis://127.0.0.1:6379/0]

Needs PostgreSQL. The database named by `--database` (its name must end in "bench") is dropped and created
afresh, migrated and seeded in bulk with three projects of `--items` items each: one to review (ready items
with predictions), one to export (every item answered) and an empty one to import into. The site then runs
under gunicorn with 2 workers on loopback (settings `bench/scale_site`: the site's own, plus a
`Server-Timing` header and a baseline view doing one indexed SELECT, which exist only here) and, unless
`--cache none`, the shared Redis cache a deployment would configure (`TC_CACHE_URL`: sessions are read from
it), and it measures:

- server time (the `Server-Timing` header: Django and its middleware) of the baseline, the signed-in baseline
  (the same SELECT behind sign-in: session and user read first), claim-next (`review/next`, htmx) and the item
  page, one request at a time, each round by a signed-in reviewer who holds no claim yet (so claim-next takes
  its full path); goal: claim-next and item page p50 <= 2x the baseline's (ratios to both are printed); and
  the item page for the reviewer who gave every answer of the export project (it should cost no more);
- label submit p99 with `--reviewers` reviewers (16) claiming and submitting with their own sessions, from a
  second process for `--seconds`, each waiting `--think` seconds between submits (default 0: back to back);
  goal: p99 <= 100 ms (server time and, for reference, what the client saw);
- the filtered item list (`projects/<slug>/items/` with filters) p95, when the site has it, and the list searching
  for a word no item holds (`q`); goal <= 150 ms;
- `manage.py export_experience` of every answer of the export project (`--items` supervision records), run
  as a child process: wall time, and peak memory of it and the capture workers it forks (its RSS plus their
  own pages, sampled every 0.1 s; also its own peak RSS); goals <= 60 s and < 300 MB;
- `manage.py import_items --no-predict` of a JSONL file of `--items` items: wall time; goal <= 60 s;
- deleting the export project's answered items: the delete page's count, half in one call (the baseline) and
  half as the site does (confirm, then the worker's batches with their progress writes), per-item ratio.

`--items 2000` runs in about a minute; the README's figures are from the full 100,000-item run. The data
directory (exports, gunicorn's log) is removed after a successful run; the database is kept for a look.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path[:0] = [str(ROOT), str(BENCH)]
PASSWORD = "bench-password"
REVIEW, EXPORT, IMPORT = "bench-review", "bench-export", "bench-import"
LIST_FILTERS = {"status": "ready", "confidence_max": "0.5"}  # what the filtered item list is asked for
# A search no item matches: PostgreSQL guesses any word prefix matches about 1% of items, so it may walk the
# whole project looking for a page of them (the seeded inputs use a few dozen words, every one of them common).
LIST_SEARCH = {"q": "xylophone"}
KIB_TO_MB = 1024 / 1e6  # /proc counts KiB; the goals are in MB (until 2026-12-03 this divided by 1024: MiB)
GOALS = {"ratio": 2.0, "submit_p99_ms": 100.0, "list_p95_ms": 150.0, "export_s": 60.0, "export_mb": 300.0,
         "import_s": 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="items per project (default 100,000)")
    parser.add_argument("--reviewers", type=int, default=16, help="concurrent reviewers for the submit load")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the submit load")
    parser.add_argument("--think", type=float, default=0.0, help="seconds each reviewer waits between submits "
                        "(default 0: every reviewer submits again at once, which saturates the 2 workers)")
    parser.add_argument("--rounds", type=int, default=300, help="requests of each kind for the server-time p50")
    parser.add_argument("--database", default=os.environ.get(
        "TC_BENCH_DATABASE", "postgres://postgres@127.0.0.1:5432/tc_scale_bench"))
    parser.add_argument("--cache", default=os.environ.get("TC_BENCH_CACHE_URL", "redis://127.0.0.1:6379/0"),
                        help="the site's TC_CACHE_URL (default redis://127.0.0.1:6379/0; 'none': no shared cache, "
                        "sessions from the database)")
    parser.add_argument("--pages-only", action="store_true",
                        help="measure only the page server times (baseline, claim-next, item page) and stop")
    parser.add_argument("--load", help=argparse.SUPPRESS)  # internal: run as the load-generating process
    args = parser.parse_args()
    if args.load:
        _load_process(args)
        return

    if not urlsplit(args.database).path.rstrip("/").endswith("bench"):
        raise SystemExit(f"--database {args.database}: its name must end in 'bench' (it is dropped and recreated)")
    data_dir = Path(tempfile.mkdtemp(prefix="team-scale-"))
    env = _environment(args.database, data_dir, args.cache)
    os.environ.update(env)
    _recreate_database(args.database)

    import django

    django.setup()
    import torch
    from django.core.management import call_command

    torch.set_num_threads(1)
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    seeded = _seed(args.items, args.reviewers, visitors=args.rounds + 10)
    print(f"seeded {args.items:,} items x 3 projects, {args.reviewers} reviewers in "
          f"{time.perf_counter() - started:.0f} s ({args.database})", flush=True)

    results: dict = {}
    port = _free_port()
    server = _start_gunicorn(port, env, data_dir)
    try:
        base = f"http://127.0.0.1:{port}"
        results.update(_server_times(base, seeded, args.rounds))
        if not args.pages_only:
            results.update(_item_list(base, seeded, args.rounds))
            results.update(_submit_load(base, seeded, args, env))
    finally:
        _stop(server)
        _forget_sessions(args.cache, env["TC_CACHE_KEY_PREFIX"])
    if not args.pages_only:
        results.update(_export(env, data_dir))
        results.update(_import(env, data_dir, args.items))
        results.update(_delete())
    _report(args, results)
    shutil.rmtree(data_dir, ignore_errors=True)


# -- set-up ------------------------------------------------------------------------------------------------------
def _environment(database: str, data_dir: Path, cache: str) -> dict[str, str]:
    path = os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {
        "TC_CACHE_URL": "" if cache == "none" else cache, "TC_CACHE_KEY_PREFIX": f"tc-bench-{os.getpid()}",
        "TC_DATABASE": database, "TC_DATA_DIR": str(data_dir), "DEBUG": "0", "OMP_NUM_THREADS": "1",
        "DJANGO_SETTINGS_MODULE": "scale_site.settings", "PYTHONPATH": path, "ALLOWED_HOSTS": "127.0.0.1",
        "CELERY_BROKER_URL": "memory://",
    }


def _recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _seed(count: int, reviewers: int, visitors: int) -> dict:
    """Three projects of `count` items each (review, export, import), the reviewers and a baseline item.

    `visitors` more reviewers each claim one item for the server-time measurement."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connection

    from annotate import tooling
    from annotate.models import (
        Answer,
        AnswerKind,
        Item,
        ItemStatus,
        Membership,
        ModelVersion,
        Prediction,
        Project,
        Role,
    )

    rng = random.Random(0)
    password = make_password(PASSWORD)  # hashed once: every bench user has the same password
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"reviewer{k}", password=password) for k in range(reviewers + 1)
    )
    users += get_user_model().objects.bulk_create(
        get_user_model()(username=f"visitor{k}", password=password) for k in range(visitors)
    )
    projects = {}
    for slug in (REVIEW, EXPORT, IMPORT):
        project = Project.objects.create(slug=slug, name=slug, tool="decision", mode="rank", overlap=1)
        project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
        project.save(update_fields=["current_version"])
        Membership.objects.bulk_create(Membership(project=project, user=u, role=Role.REVIEWER) for u in users)
        projects[slug] = project

    samples = [_incident(rng) for _ in range(64)]
    version = projects[REVIEW].current_version
    predicted = tooling.predict_batch(version, [inputs for inputs, _ in samples])
    # One real prediction (receipt and traced call) per distinct input, shared by the items with that input:
    # the item page reads and renders it as for any item, and seeding stays quick.
    shown = Item.objects.bulk_create(
        Item(project=projects[REVIEW], inputs=inputs, status=ItemStatus.READY, confidence=rng.random())
        for inputs, _ in samples
    )
    predictions = Prediction.objects.bulk_create(
        Prediction(item=item, model_version=version, receipt=result["receipt"], trace=result["trace"],
                   confidence=item.confidence)
        for item, result in zip(shown, predicted, strict=True)
    )
    for item, prediction in zip(shown, predictions, strict=True):
        item.prediction = prediction
    Item.objects.bulk_update(shown, ["prediction"])
    author = users[0]
    batch = 5000
    for start in range(0, count, batch):
        picks = [rng.randrange(len(samples)) for _ in range(min(batch, count - start))]
        Item.objects.bulk_create(
            Item(project=projects[REVIEW], inputs=samples[k][0], status=ItemStatus.READY, confidence=rng.random(),
                 prediction=predictions[k]) for k in (picks[len(shown):] if start == 0 else picks)
        )
        done = Item.objects.bulk_create(
            Item(project=projects[EXPORT], inputs=samples[k][0], status=ItemStatus.DONE, final_answers=1)
            for k in picks
        )
        Answer.objects.bulk_create(
            Answer(item=item, project=projects[EXPORT], reviewer=author, kind=AnswerKind.TARGET, target=samples[k][1],
                   source=projects[EXPORT].source_for(item.pk, author))
            for item, k in zip(done, picks, strict=True)
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    first = Item.objects.filter(project=projects[REVIEW]).order_by("id").values_list("id", flat=True).first()
    names = [u.username for u in users]
    return {"users": names[:reviewers + 1], "visitors": names[reviewers + 1:], "baseline_item": first}


def _incident(rng: random.Random) -> tuple[dict, str]:
    import tools_decision

    return tools_decision._incident(rng)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_gunicorn(port: int, env: dict, data_dir: Path) -> subprocess.Popen:
    log = (data_dir / "gunicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "annotate.wsgi", "--workers", "2", "--bind", f"127.0.0.1:{port}",
         "--worker-class", "sync", "--timeout", "120", "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/accounts/login/")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            raise SystemExit(f"gunicorn exited with {server.returncode}; see {data_dir / 'gunicorn.log'}")
        time.sleep(0.2)
    _stop(server)
    raise SystemExit(f"gunicorn did not answer within 60 s; see {data_dir / 'gunicorn.log'}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _forget_sessions(cache: str, prefix: str) -> None:
    """Delete the sessions this run left in the shared cache (its keys all start with this run's prefix)."""
    if cache == "none":
        return
    import redis

    client = redis.Redis.from_url(cache)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)


# -- an HTTP session ---------------------------------------------------------------------------------------------
class Session:
    """One signed-in reviewer over one keep-alive connection: cookies, CSRF, and the server time of each call."""

    def __init__(self, base: str, username: str):
        parts = urlsplit(base)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.cookies: dict[str, str] = {}
        page = self.request("GET", "/accounts/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1).decode()
        reply = self.request("POST", "/accounts/login/", {"username": username, "password": PASSWORD,
                                                          "csrfmiddlewaretoken": token})
        if reply.status != 302:
            raise SystemExit(f"sign-in of {username} failed: HTTP {reply.status}")

    def request(self, method: str, path: str, form: dict | None = None, *, htmx: bool = False,
                anonymous: bool = False) -> Reply:
        """`anonymous`: without this reviewer's cookies, as a visitor who never signed in."""
        headers = {} if anonymous else {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if method == "POST":
            headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            body = urlencode(form or {})
        if htmx:
            headers["HX-Request"] = "true"
        started = time.perf_counter()
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        client_ms = (time.perf_counter() - started) * 1000
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name] = rest.split(";", 1)[0]
        timing = re.search(r"dur=([\d.]+)", response.getheader("Server-Timing") or "")
        return Reply(response.status, data, dict(response.getheaders()), float(timing.group(1)) if timing else
                     float("nan"), client_ms)


class Reply:
    def __init__(self, status: int, body: bytes, headers: dict, server_ms: float, client_ms: float):
        self.status, self.body, self.headers = status, body, headers
        self.server_ms, self.client_ms = server_ms, client_ms


def _check(reply: Reply, what: str, *expected: int) -> Reply:
    if reply.status not in (expected or (200,)):
        raise SystemExit(f"{what}: HTTP {reply.status}: {reply.body[:300]!r}")
    return reply


# -- measurements ----------------------------------------------------------------------------------------------
def _server_times(base: str, seeded: dict, rounds: int) -> dict:
    """The baseline, claim-next and the item page in turn, one request at a time.

    Each round is a reviewer of their own who holds no claim yet (signed in first, untimed), so claim-next
    takes the full path: find the least confident free item, lock it and claim it.
    """
    baseline = f"/bench/baseline/{seeded['baseline_item']}/"
    signed_in = f"/bench/baseline-signed-in/{seeded['baseline_item']}/"
    times: dict[str, list[float]] = {"baseline": [], "signed_in": [], "claim_next": [], "item_page": [],
                                     "progress_line": []}
    for k, visitor in enumerate(seeded["visitors"]):
        session = Session(base, visitor)
        # The baseline is asked for without the session cookie: the site reads a session it is sent (the time
        # zone a user chose comes with the user), which is the signed-in baseline's cost, not a bare SELECT's.
        base_reply = _check(session.request("GET", baseline, anonymous=True), "baseline")
        signed_in_reply = _check(session.request("GET", signed_in), "signed-in baseline")
        claim = _check(session.request("POST", f"/projects/{REVIEW}/review/next/", htmx=True), "claim-next")
        item_url = claim.headers.get("HX-Push-Url")
        if not item_url:
            raise SystemExit("claim-next returned no item: the review queue is empty; raise --items")
        page = _check(session.request("GET", item_url), "item page")
        # The progress line the item page asks for once shown: the project's counts, shared for 30 s at this size.
        line = _check(session.request("GET", f"/projects/{REVIEW}/progress/mine/", htmx=True), "progress line")
        session.conn.close()
        if k >= 10:  # the first requests warm both workers
            times["baseline"].append(base_reply.server_ms)
            times["signed_in"].append(signed_in_reply.server_ms)
            times["claim_next"].append(claim.server_ms)
            times["item_page"].append(page.server_ms)
            times["progress_line"].append(line.server_ms)
    # The same page for the reviewer who gave every answer of the export project: what they gave elsewhere
    # must not slow their pages here (the workspace looks up their latest answer in this project).
    veteran = Session(base, seeded["users"][0])
    times["veteran_page"] = [_check(veteran.request("GET", f"/projects/{REVIEW}/items/{seeded['baseline_item']}/"),
                                    "item page, veteran").server_ms for _ in range(max(20, rounds // 4))][10:]
    veteran.conn.close()
    return {**{f"{name}_p50_ms": statistics.median(values) for name, values in times.items()},
            "progress_line_max_ms": max(times["progress_line"])}


def _item_list(base: str, seeded: dict, rounds: int) -> dict:
    """The filtered item list's p95, and a search's for a word no item holds, when the site has a list."""
    session = Session(base, seeded["users"][-1])
    path = f"/projects/{REVIEW}/items/?{urlencode(LIST_FILTERS)}"
    if session.request("GET", path).status == 404:
        return {"list_p95_ms": None}
    times = {
        name: [_check(session.request("GET", f"/projects/{REVIEW}/items/?{urlencode(filters)}"), "item list").server_ms
               for _ in range(max(20, rounds // 3))]
        for name, filters in (("list_p95_ms", LIST_FILTERS), ("list_search_p95_ms", LIST_SEARCH))
    }
    return {name: _percentile(values, 95) for name, values in times.items()}


def _submit_load(base: str, seeded: dict, args, env: dict) -> dict:
    """`--reviewers` reviewers claim and submit for `--seconds`, from a second process."""
    spec = json.dumps({"base": base, "users": seeded["users"][:args.reviewers], "seconds": args.seconds,
                       "think": args.think})
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--load", spec],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=args.seconds + 300)
    if done.returncode != 0:
        raise SystemExit(f"load process failed ({done.returncode}): {done.stderr[-2000:]}")
    load = json.loads(done.stdout.strip().splitlines()[-1])
    server, client = load["submit_server_ms"], load["submit_client_ms"]
    return {
        "submits": len(server), "submit_errors": load["errors"], "submit_5xx": load["status_5xx"],
        "submit_p50_ms": statistics.median(server), "submit_p99_ms": _percentile(server, 99),
        "submit_client_p50_ms": statistics.median(client), "submit_client_p99_ms": _percentile(client, 99),
        "claim_load_p99_ms": _percentile(load["claim_server_ms"], 99),
    }


def _load_process(args) -> None:
    """(the second process) Reviewers in threads, each with its own session; prints one JSON line."""
    spec = json.loads(args.load)
    deadline = time.monotonic() + spec["seconds"]
    lock = threading.Lock()
    out = {"submit_server_ms": [], "submit_client_ms": [], "claim_server_ms": [], "errors": [], "status_5xx": 0}

    def reviewer(username: str) -> None:
        try:
            session = Session(spec["base"], username)
            while time.monotonic() < deadline:
                claim = session.request("POST", f"/projects/{REVIEW}/review/next/", htmx=True)
                item_url = claim.headers.get("HX-Push-Url")
                if claim.status != 200:
                    raise RuntimeError(f"claim-next: HTTP {claim.status}")
                if not item_url:
                    return  # the queue is empty
                submit = session.request("POST", item_url + "submit/", {"choice": "h0"}, htmx=True)
                with lock:
                    out["status_5xx"] += (claim.status >= 500) + (submit.status >= 500)
                    out["claim_server_ms"].append(claim.server_ms)
                    if submit.status == 200:
                        out["submit_server_ms"].append(submit.server_ms)
                        out["submit_client_ms"].append(submit.client_ms)
                    else:
                        out["errors"].append(f"submit: HTTP {submit.status}")
                if spec["think"]:
                    time.sleep(spec["think"])  # a reviewer reading the next item
        except Exception as exc:  # noqa: BLE001 - reported in the table
            with lock:
                out["errors"].append(f"{username}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reviewer, args=(name,)) for name in spec["users"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(out))


def _export(env: dict, data_dir: Path) -> dict:
    """`manage.py export_experience` of the export project in a child process: wall time, the peak memory of it
    and its capture workers together, and its own peak RSS."""
    command = [sys.executable, "manage.py", "export_experience", EXPORT]
    seconds, rss_mb, output, tree_mb = _timed_child(command, env)
    return {"export_s": seconds, "export_mb": tree_mb, "export_own_mb": rss_mb, "export_output": output}


def _import(env: dict, data_dir: Path, count: int) -> dict:
    """`manage.py import_items --no-predict` of `count` items from a JSONL file, in a child process."""
    rng = random.Random(1)
    path = data_dir / "items.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(count):
            handle.write(json.dumps({"inputs": _incident(rng)[0]}) + "\n")
    command = [sys.executable, "manage.py", "import_items", IMPORT, str(path), "--no-predict"]
    seconds, rss_mb, output, _ = _timed_child(command, env)
    return {"import_s": seconds, "import_mb": rss_mb, "import_output": output}


def _delete() -> dict:
    """Delete the export project's answered items, after the export: the delete page's count of all of them, then
    half inside one call (`deletion.delete_items`, the Django admin's path: the baseline) and the other half as
    the site does (`queue_matching` counts and stores the ids; `run_deletion`, the worker's task, deletes them,
    writing its progress with each batch). Both halves' rows were read by the count first."""
    from django.contrib.auth import get_user_model

    from annotate import deletion, itemlist
    from annotate.models import Item, Project

    project = Project.objects.get(slug=EXPORT)
    started = time.perf_counter()
    rows = deletion.rows_summary(project.items.all())
    page_s = time.perf_counter() - started
    ids = list(project.items.order_by("pk").values_list("pk", flat=True))
    half = ids[len(ids) // 2 - 1]
    started = time.perf_counter()
    direct = deletion.delete_items(project.items.filter(pk__lte=half))
    direct_s = time.perf_counter() - started
    rest = project.items.count()
    started = time.perf_counter()
    row = deletion.queue_matching(project, itemlist.ItemFilters.parse(project, {}), through=ids[-1], expected=rest,
                                  user=get_user_model().objects.get(username="reviewer0"))
    confirm_s = time.perf_counter() - started
    started = time.perf_counter()
    state = deletion.run_deletion(row.pk)
    worker_s = time.perf_counter() - started
    if state != "SUCCEEDED" or project.items.exists():
        raise SystemExit(f"the deletion ended {state} with {project.items.count()} items left")
    return {"delete_total": rows[Item], "delete_answers": sum(n for model, n in rows.items() if model is not Item),
            "delete_page_s": page_s, "delete_direct": direct[Item], "delete_direct_s": direct_s,
            "delete_queued": rest, "delete_confirm_s": confirm_s, "delete_worker_s": worker_s}


# Runs a command's script and then reports its peak RSS. Read from inside: a child's `ru_maxrss` (wait4,
# RUSAGE_CHILDREN) starts from the parent's RSS at fork on Linux, while VmHWM belongs to the child's own memory.
_PEAK = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("peak-rss-kib", peak.split()[1], file=sys.stderr)
"""


def _timed_child(command: list[str], env: dict) -> tuple[float, float, str, float]:
    """Run `python SCRIPT ARGS...`; its wall time, its own peak RSS in MB, its output, and the peak memory in MB
    of it and its child processes together (an export captures in forked workers)."""
    started = time.perf_counter()
    child = subprocess.Popen([command[0], "-c", _PEAK, *command[1:]], cwd=ROOT, env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree_peak = [0]
    sampler = threading.Thread(target=_sample_tree_memory, args=(child, tree_peak), daemon=True)
    sampler.start()
    stdout, stderr = child.communicate()
    seconds = time.perf_counter() - started
    sampler.join()
    output = (stdout + stderr).strip()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[1:])} failed ({child.returncode}): {output[-2000:]}")
    peak = re.search(r"peak-rss-kib (\d+)", stderr)
    own = int(peak.group(1)) * KIB_TO_MB if peak else float("nan")
    return seconds, own, output, max(own, tree_peak[0] * KIB_TO_MB)


def _sample_tree_memory(child: subprocess.Popen, peak: list[int]) -> None:
    """Every 0.1 s until `child` ends: the resident memory (KiB) of `child` and all its descendants, keeping the
    largest. `child` counts all its resident pages (RSS); a descendant only the pages it alone holds (USS):
    its other pages are `child`'s, shared since the fork. So nothing is counted twice, and nothing shared with
    an unrelated process (this one imported torch too) is left out."""
    while child.poll() is None:
        total, pending = 0, [child.pid]
        while pending:
            pid = pending.pop()
            try:
                with open(f"/proc/{pid}/smaps_rollup") as handle:
                    sizes = dict(line.split()[:2] for line in list(handle)[1:])
                with open(f"/proc/{pid}/task/{pid}/children") as handle:
                    pending += [int(token) for token in handle.read().split()]
            except (OSError, ValueError):
                continue  # the process ended between the listing and the read
            if pid == child.pid:
                total += int(sizes["Rss:"])
            else:
                total += int(sizes["Private_Clean:"]) + int(sizes["Private_Dirty:"])
        peak[0] = max(peak[0], total)
        time.sleep(0.1)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


# -- the table ---------------------------------------------------------------------------------------------------
def _report(args, r: dict) -> None:
    base, signed_in = r["baseline_p50_ms"], r["signed_in_p50_ms"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    rows = [
        ("baseline (1 indexed SELECT) p50, server", f"{base:.1f} ms", "", ""),
        ("signed-in baseline (session, user, SELECT) p50", f"{signed_in:.1f} ms", f"{signed_in / base:.1f}x baseline;"
         f" sessions from {'the cache (' + args.cache + ')' if args.cache != 'none' else 'the database'}", ""),
        ("claim-next p50, server", f"{r['claim_next_p50_ms']:.1f} ms",
         f"{r['claim_next_p50_ms'] / base:.1f}x baseline (goal <= {GOALS['ratio']:.0f}x); "
         f"{r['claim_next_p50_ms'] / signed_in:.1f}x signed-in baseline",
         verdict(r["claim_next_p50_ms"] <= GOALS["ratio"] * base)),
        ("item page p50, server", f"{r['item_page_p50_ms']:.1f} ms",
         f"{r['item_page_p50_ms'] / base:.1f}x baseline (goal <= {GOALS['ratio']:.0f}x); "
         f"{r['item_page_p50_ms'] / signed_in:.1f}x signed-in baseline",
         verdict(r["item_page_p50_ms"] <= GOALS["ratio"] * base)),
        (f"item page p50, reviewer with {args.items:,} answers elsewhere", f"{r['veteran_page_p50_ms']:.1f} ms",
         f"{r['veteran_page_p50_ms'] / r['item_page_p50_ms']:.1f}x a new reviewer's item page", ""),
        ("item page's progress line p50, server (asked for after the page)", f"{r['progress_line_p50_ms']:.1f} ms",
         f"slowest {r['progress_line_max_ms']:.1f} ms (counting the items afresh, at most every 30 s)", ""),
    ]
    if "submit_p99_ms" not in r:  # --pages-only
        _print(args, rows)
        return
    rows += [
        (f"submit p99, server, {args.reviewers} reviewers, think {args.think:g} s", f"{r['submit_p99_ms']:.1f} ms",
         f"goal <= {GOALS['submit_p99_ms']:.0f} ms; p50 {r['submit_p50_ms']:.1f} ms, {r['submits']} submits "
         f"({r['submits'] / args.seconds:.1f}/s), "
         f"{r['submit_5xx']} 5xx, {len(r['submit_errors'])} errors", verdict(r["submit_p99_ms"] <= 100
                                                                               and not r["submit_errors"])),
        (f"submit p99, client, {args.reviewers} reviewers", f"{r['submit_client_p99_ms']:.1f} ms",
         f"p50 {r['submit_client_p50_ms']:.1f} ms (includes waiting for one of 2 workers)", ""),
    ]
    if r["list_p95_ms"] is None:
        rows.append(("filtered item list p95, server", "not available", "the site has no item list yet", ""))
    else:
        rows.append(("filtered item list p95, server", f"{r['list_p95_ms']:.1f} ms",
                     f"goal <= {GOALS['list_p95_ms']:.0f} ms; {r['list_p95_ms'] / base:.1f}x baseline",
                     verdict(r["list_p95_ms"] <= GOALS["list_p95_ms"])))
        rows.append(("item list searching a word no item holds p95", f"{r['list_search_p95_ms']:.1f} ms",
                     f"goal <= {GOALS['list_p95_ms']:.0f} ms; {r['list_search_p95_ms'] / base:.1f}x baseline",
                     verdict(r["list_search_p95_ms"] <= GOALS["list_p95_ms"])))
    rows += [
        (f"export of {args.items:,} records, wall", f"{r['export_s']:.1f} s", f"goal <= {GOALS['export_s']:.0f} s",
         verdict(r["export_s"] <= GOALS["export_s"])),
        ("export peak memory, all processes", f"{r['export_mb']:.0f} MB",
         f"goal < {GOALS['export_mb']:.0f} MB; the exporting process's RSS and its capture workers' own pages "
         f"(USS), summed; the exporting process alone: peak RSS {r['export_own_mb']:.0f} MB",
         verdict(r["export_mb"] < GOALS["export_mb"])),
        (f"import of {args.items:,} items, wall", f"{r['import_s']:.1f} s", f"goal <= {GOALS['import_s']:.0f} s; "
         f"peak RSS {r['import_mb']:.0f} MB", verdict(r["import_s"] <= GOALS["import_s"])),
    ]
    direct_rate = r["delete_direct_s"] / r["delete_direct"]
    rows += [
        (f"delete page count of {r['delete_total']:,} answered items", f"{r['delete_page_s']:.2f} s",
         f"{r['delete_answers']:,} rows go with them", ""),
        (f"deleting {r['delete_direct']:,} of them in one call (baseline)", f"{r['delete_direct_s']:.1f} s",
         "deletion.delete_items, the Django admin's path", ""),
        (f"deleting {r['delete_queued']:,} of them as the site does", f"{r['delete_worker_s']:.1f} s",
         f"{r['delete_worker_s'] / r['delete_queued'] / direct_rate:.2f}x the baseline per item, on the worker "
         f"with its progress writes; confirming (count, store the ids) {r['delete_confirm_s']:.2f} s", ""),
    ]
    _print(args, rows)
    if r["submit_errors"]:
        print("  submit errors:", "; ".join(r["submit_errors"][:5]))


def _print(args, rows: list[tuple[str, str, str, str]]) -> None:
    print()
    print(f"team_scale: {args.items:,} items per project, PostgreSQL, gunicorn 2 sync workers, "
          f"{os.cpu_count()} CPUs")
    width = max(len(row[0]) for row in rows)
    for name, value, note, result in rows:
        print(f"  {name:<{width}}  {value:>12}  {result:<8} {note}")


if __name__ == "__main__":
    main()
