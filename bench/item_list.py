"""How fast are the item list and the progress page at 100,000 items? Server-side times per filter shape.

    TC_DATABASE=postgres://postgres@127.0.0.1:5432/<db> python bench/item_list.py [--items 100000] [--rounds 40]

Needs PostgreSQL (the full-text index exists only there). Seeds, in the database named by TC_DATABASE, a project
`bench-list` of `--items` items (dropping an earlier one): 20 reviewers, about a third of the items answered
(overlap 2, with disagreements flagged), predictions from two model versions, questions drawn from a small
vocabulary so searches match 0.1%-20% of items (and one word none). Then it requests each page through Django's
test client (middleware, view, query and template, no network) `--rounds` times and prints p50 and p95 in
milliseconds, and the ratio of each p95 to the p95 of the sign-in page measured in the same run. Goal: every
item list p95 <= 150 ms at 100,000 items.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
os.environ["ALLOWED_HOSTS"] = "testserver"  # Django's test client

SLUG = "bench-list"
WORDS = ["printer", "database", "disk", "certificate", "network", "timeout", "memory", "kernel", "queue",
         "cache"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    if not os.environ.get("TC_DATABASE", "").startswith("postgres"):
        raise SystemExit("set TC_DATABASE to a PostgreSQL URL (the full-text index exists only there)")

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    project, admin, versions = seed(args.items)
    print(f"{args.items} items ready in {time.perf_counter() - started:.0f} s")

    from django.test import Client

    client = Client()
    client.force_login(admin)
    deep = project.items.order_by("id").values_list("id", flat=True)[int(args.items * 0.9)]
    shapes = {
        "first page": {},
        "status=ready": {"status": "ready"},
        "status=ready, confidence<=0.5 (team_scale.py's)": {"status": "ready", "confidence_max": "0.5"},
        "least confident first": {"sort": "confidence"},
        "confidence 0.2-0.4, most confident first": {"confidence_min": "0.2", "confidence_max": "0.4",
                                                     "sort": "-confidence"},
        "reviewer": {"reviewer": "r07"},
        "reviewer, least confident first": {"reviewer": "r07", "sort": "confidence"},
        "disagreement=yes": {"disagreement": "yes"},
        "old model version (10% of items)": {"version": str(versions[0].pk)},
        "search a common word (~20%)": {"q": "printer"},
        "search a rare word (~0.1%)": {"q": "zebra"},
        "search a word no item holds": {"q": "xylophone"},
        "search + status + least confident first": {"q": "printer", "status": "ready", "sort": "confidence"},
        "page at 90% (after=)": {"after": str(deep)},
        "every filter at once": {"q": "disk", "status": "done", "reviewer": "r03", "confidence_min": "0.1",
                                 "confidence_max": "0.9", "disagreement": "no", "version": str(versions[1].pk),
                                 "sort": "-confidence"},
    }
    baseline = measure(client, "/accounts/login/", args.rounds, htmx=False)
    print(f"\nbaseline (sign-in page): p50 {baseline[0]:.1f} ms, p95 {baseline[1]:.1f} ms; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print(f"{'item list, first page with its count (htmx fragment)':58} {'p50 ms':>8} {'p95 ms':>8} {'p95/base':>9}")
    worst = 0.0
    for name, params in shapes.items():
        p50, p95 = measure(client, f"/projects/{SLUG}/items/?{urlencode(params)}", args.rounds, htmx=True)
        worst = max(worst, p95)
        print(f"{name:58} {p50:8.1f} {p95:8.1f} {p95 / baseline[1]:9.1f}")
    p50, p95 = measure(client, f"/projects/{SLUG}/items/", args.rounds, htmx=False)
    print(f"{'full item list page':58} {p50:8.1f} {p95:8.1f} {p95 / baseline[1]:9.1f}")
    from django.core.cache import cache

    p50, p95 = measure(client, f"/projects/{SLUG}/progress/", max(5, args.rounds // 4), htmx=False,
                       before=cache.clear)
    print(f"{'progress page, figures read afresh':58} {p50:8.1f} {p95:8.1f} {p95 / baseline[1]:9.1f}")
    p50, p95 = measure(client, f"/projects/{SLUG}/progress/", args.rounds, htmx=False)
    print(f"{'progress page, figures shared (30 s)':58} {p50:8.1f} {p95:8.1f} {p95 / baseline[1]:9.1f}")

    cache.clear()
    started = time.perf_counter()
    client.get(f"/projects/{SLUG}/progress/agreement/", HTTP_HX_REQUEST="true")
    print(f"{'agreement fragment, cold (then cached until an answer changes)':58} "
          f"{1000 * (time.perf_counter() - started):8.1f}")
    print(f"\nworst item list p95: {worst:.1f} ms (goal <= 150 ms): {'met' if worst <= 150 else 'NOT met'}")


def measure(client, url: str, rounds: int, *, htmx: bool, before=None) -> tuple[float, float]:
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    assert client.get(url, **headers).status_code == 200, url  # warm-up, and the filter must be valid
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        started = time.perf_counter()
        client.get(url, **headers)
        times.append(1000 * (time.perf_counter() - started))
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))]


def seed(count: int):
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from annotate import deletion
    from annotate.models import Answer, Item, ItemStatus, Membership, ModelVersion, Prediction, Project, Role

    rng = random.Random(11)
    User = get_user_model()
    admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True})
    existing = Project.objects.filter(slug=SLUG).first()
    if existing is not None and existing.items.count() == count:  # seeded by an earlier run: reuse it
        return existing, admin, list(existing.versions.order_by("id"))
    if existing is not None:
        deletion.delete_project(existing)
    reviewers = [User.objects.get_or_create(username=f"r{n:02d}")[0] for n in range(20)]
    now = timezone.now()
    with transaction.atomic():
        project = Project.objects.create(slug=SLUG, name="Item list bench", tool="decision", mode="rank",
                                         configuration={"dim": 8, "buckets": 64}, overlap=2)
        Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
        Membership.objects.bulk_create(Membership(project=project, user=u) for u in reviewers)
        versions = [ModelVersion.objects.allocate(project, label=f"v{n}", trained=True) for n in (1, 2)]
        project.current_version = versions[1]
        project.save(update_fields=["current_version"])
        items = []
        for n in range(count):
            words = [rng.choice(WORDS) if rng.random() < 0.2 else f"w{rng.randrange(5000)}" for _ in range(5)]
            if n % 1000 == 7:
                words.append("zebra")
            confidence = None if n % 50 == 0 else rng.random()
            items.append(Item(
                project=project, confidence=confidence, created_at=now - timedelta(seconds=count - n),
                status=ItemStatus.PENDING if confidence is None else ItemStatus.READY,
                inputs={"question": f"Why did service {n} stop? {' '.join(words)}",
                        "evidence": [{"source_id": "log", "text": f"event {n} in the log"}],
                        "hypotheses": [{"id": "a", "text": "cause a"}, {"id": "b", "text": "cause b"}]}))
        items = Item.objects.bulk_create(items, batch_size=5000)
        scored = [i for i in items if i.confidence is not None]
        predictions = Prediction.objects.bulk_create(
            (Prediction(item=i, model_version=versions[0] if k % 10 == 0 else versions[1], confidence=i.confidence,
                        receipt={"kind": "ranking", "confidence": i.confidence}) for k, i in enumerate(scored)),
            batch_size=5000)
        with connection.cursor() as cursor:
            cursor.execute("UPDATE annotate_item SET prediction_id = p.id FROM annotate_prediction p "
                           "WHERE p.item_id = annotate_item.id AND annotate_item.project_id = %s", [project.pk])
        answers, finished = [], []
        for item in scored[: len(scored) // 3]:
            pair = rng.sample(reviewers, 2)
            targets = ["a", "a"] if rng.random() < 0.8 else ["a", "b"]
            for user, target in zip(pair, targets, strict=True):
                when = now - timedelta(minutes=rng.randrange(14 * 24 * 60))
                answers.append(Answer(item=item, project=project, reviewer=user, kind="target", target=target,
                                      created_at=when, updated_at=when, source=project.source_for(item.pk, user)))
            finished.append((item.pk, targets[0] != targets[1]))
        Answer.objects.bulk_create(answers, batch_size=5000)
        done = [pk for pk, _ in finished]
        for start in range(0, len(done), 5000):
            Item.objects.filter(pk__in=done[start:start + 5000]).update(status=ItemStatus.DONE, final_answers=2)
        Item.objects.filter(pk__in=[pk for pk, disputed in finished if disputed]).update(disagreement=True)
        del predictions
    with connection.cursor() as cursor:
        # What autovacuum does to a table that has settled: statistics, and the visibility map index-only scans use.
        for table in ("annotate_item", "annotate_answer", "annotate_prediction"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return project, admin, versions


if __name__ == "__main__":
    main()
