"""What does running training as a job cost? A job through a real Celery worker vs `Trainer.fit` in one process.

    python bench/job_overhead.py [--items 800] [--epochs 40] [--dim 64]

Builds a Decision project with `--items` reviewed items in a fresh data directory (SQLite and the filesystem
broker unless `TC_DATABASE` / `CELERY_BROKER_URL` say otherwise), starts a worker (`-Q gpu,celery`), warms it
with a one-epoch job, then times:

- queued-to-first-step latency of the measured job with the warm worker (goal <= 3 s): from the row's
  `queued_at` to its `first_step_at`, both written by the site's clock;
- the job's wall time from `queued_at` to `finished_at` (snapshot capture, training with checkpoints, heartbeats
  and loss points, evaluation of both versions, saving the new one), against `Trainer.fit` over the same
  experience files with the same optimizer, in this process (goal: job <= 1.2x for a job of >= 30 s).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=800)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--interval", type=int, default=50, help="checkpoint interval (steps)")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="job-overhead-"))
    os.environ.setdefault("TC_DATA_DIR", str(data_dir))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["DJANGO_SETTINGS_MODULE"] = "annotate.settings"
    import django

    django.setup()
    import torch
    from django.core.management import call_command

    torch.set_num_threads(1)
    call_command("migrate", verbosity=0)
    project = _project(args.items, args.dim)
    worker = _start_worker(data_dir)
    try:
        _run_job(project, epochs=1, interval=args.interval, item_limit=64)  # warm: torch loaded, tool cached
        job = _run_job(project, epochs=args.epochs, interval=args.interval)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    latency = (job.first_step_at - job.queued_at).total_seconds()
    wall = (job.finished_at - job.queued_at).total_seconds()
    fit = _direct_fit(job)
    print(f"items {args.items} ({job.train_count} trained, {job.held_out_count} held out), "
          f"{job.total_steps} steps, dim {args.dim}, broker {os.environ.get('CELERY_BROKER_URL', 'filesystem')}")
    print(f"queued -> first step (warm worker): {latency:.2f} s  (goal <= 3 s)")
    print(f"job wall (queued -> finished):      {wall:.1f} s")
    print(f"Trainer.fit, same experiences:      {fit:.1f} s")
    print(f"ratio job / fit:                    {wall / fit:.2f}x  (goal <= 1.2x for a job of >= 30 s)")


def _project(items: int, dim: int):
    import tools_decision
    from django.contrib.auth import get_user_model

    from annotate.models import Answer, AnswerKind, AnswerRevision, Item, ItemStatus, ModelVersion, Project

    user = get_user_model().objects.create_user("bench")
    project = Project.objects.create(slug="bench", name="Bench", tool="decision", mode="rank",
                                     configuration={"dim": dim})
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save()
    rng = random.Random(0)
    for _ in range(items):
        inputs, target = tools_decision._incident(rng)
        item = Item.objects.create(project=project, inputs=inputs, status=ItemStatus.DONE)
        answer = Answer.objects.create(item=item, reviewer=user, kind=AnswerKind.TARGET, target=target,
                                       source=project.source_for(item.pk, user))
        AnswerRevision.objects.create(answer=answer, kind=answer.kind, target=target)
    return project


def _start_worker(data_dir: Path) -> subprocess.Popen:
    from annotate.management.commands.demo import worker_command

    log = (data_dir / "worker.log").open("wb")
    return subprocess.Popen([*worker_command(), "-Q", "gpu,celery", "-n", "bench@%h"], cwd=ROOT,
                            env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT)


def _run_job(project, *, epochs: int, interval: int, item_limit: int | None = None):
    from django.db import transaction

    from trainingjobs import services
    from trainingjobs.models import JobState

    filters = {}
    if item_limit:
        filters["item_ids"] = list(project.items.order_by("id").values_list("id", flat=True)[:item_limit])
    with transaction.atomic():
        job = services.launch(project, base_version=project.current_version, filters=filters, epochs=epochs,
                              checkpoint_interval=interval, device="cpu")
    deadline = time.monotonic() + 3600
    while True:
        job.refresh_from_db()
        if job.is_final:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job.pk} did not finish within an hour")
        time.sleep(0.1)
    if job.state != JobState.SUCCEEDED:
        raise SystemExit(f"job {job.pk} ended {job.state}: {job.error}")
    return job


def _direct_fit(job) -> float:
    import copy

    import torch

    from annotate import tooling
    from tensorcode import training
    from trainingjobs import snapshot

    files = snapshot.ensure(job, job.base_version, "train")
    tool = copy.deepcopy(tooling.load_version(job.base_version))
    trainer = training.Trainer.from_tool(tool, optimizer=lambda ps: torch.optim.Adam(ps, lr=job.lr), lr=job.lr)
    sessions = [training.load_experience(str(path), operations=trainer.operations) for path in files]
    started = time.perf_counter()
    trainer.fit(sessions, epochs=job.epochs)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
