"""How long do the agreement, disagreement and adjudication pages take on a big overlap-2 project?

    python bench/agreement_pages.py [--items 20000] [--repeats 5]

Seeds a Decision project into the database of `TC_DATABASE` (a fresh project named `bench-agreement-<n>`, removed
afterwards) with `--items` items, each answered by two reviewers; one item in ten has them disagree. It then
requests each page with Django's test client as the project's admin and prints the median time of each, and its
ratio to a baseline measured in the same run: the project page (which every admin opens anyway). The agreement
page is measured twice: with its report computed (the cache cleared first: the first view after an answer
changed) and cached.
Run on the same database the site uses (PostgreSQL in production).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client
    from django.test.utils import setup_test_environment

    from annotate import deletion
    from annotate.models import Answer, Item, ItemStatus, Membership, Project, Role

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver", *settings.ALLOWED_HOSTS]
    users = get_user_model().objects
    stamp = f"{os.getpid()}"
    admin, rita, sam = (users.create_user(f"bench-{name}-{stamp}") for name in ("ada", "rita", "sam"))
    project = Project.objects.create(slug=f"bench-agreement-{stamp}", name="bench", tool="decision", mode="rank",
                                     overlap=2)
    try:
        for user, role in ((admin, Role.ADMIN), (rita, Role.REVIEWER), (sam, Role.REVIEWER)):
            Membership.objects.create(project=project, user=user, role=role)
        started = time.perf_counter()
        inputs = {"question": "Why did the service stop?",
                  "evidence": [{"source_id": "log", "text": "The database connection was refused at 09:14."}],
                  "hypotheses": [{"id": "db", "text": "The database."}, {"id": "dns", "text": "DNS."}]}
        items = Item.objects.bulk_create(
            [Item(project=project, inputs=inputs, status=ItemStatus.DONE, final_answers=2, disagreement=n % 10 == 0)
             for n in range(args.items)], batch_size=2000)
        answers = []
        for n, item in enumerate(items):
            answers.append(Answer(item=item, project=project, reviewer=rita, kind="target", target="db", source="s"))
            answers.append(Answer(item=item, project=project, reviewer=sam, kind="target",
                                  target="dns" if n % 10 == 0 else "db", source="s"))
        Answer.objects.bulk_create(answers, batch_size=5000)
        print(f"seeded {args.items} items, {len(answers)} answers in {time.perf_counter() - started:.1f} s")

        client = Client()
        client.force_login(admin)
        slug = project.slug
        pages = {
            "project page (baseline)": f"/projects/{slug}/",
            "agreement page, report computed": f"/projects/{slug}/agreement/",
            "agreement page, report cached": f"/projects/{slug}/agreement/",
            "disagreement list": f"/projects/{slug}/disagreements/",
            "disagreement list, page 20": f"/projects/{slug}/disagreements/?page=20",
            "adjudication page": f"/projects/{slug}/items/{items[0].pk}/adjudicate/",
        }
        medians = {}
        for name, url in pages.items():
            times = []
            for _ in range(args.repeats + 1):
                if name.endswith("computed"):
                    cache.clear()
                begin = time.perf_counter()
                response = client.get(url)
                times.append(time.perf_counter() - begin)
                assert response.status_code == 200, (url, response.status_code)
            medians[name] = statistics.median(times[1:])  # the first request warms caches
        baseline = medians["project page (baseline)"]
        print(f"{'page':32} {'median ms':>10} {'x baseline':>11}")
        for name, value in medians.items():
            print(f"{name:32} {1000 * value:10.1f} {value / baseline:11.2f}")
    finally:
        begin = time.perf_counter()
        deleted = deletion.delete_project(project)  # Django's own cascade fails at this size
        print(f"deleting the project ({deleted}): {time.perf_counter() - begin:.1f} s")
        users.filter(pk__in=[admin.pk, rita.pk, sam.pk]).delete()


if __name__ == "__main__":
    main()
