"""Fixtures for training jobs: a tiny Decision project with reviewed items, an admin, job helpers."""

from __future__ import annotations

import pytest
import torch

from annotate.models import (
    Answer,
    AnswerKind,
    AnswerRevision,
    Item,
    ItemStatus,
    Membership,
    ModelVersion,
    Project,
    Role,
)

# Tiny on purpose: a job of a few dozen steps trains in well under a second on one CPU thread.
CONFIGURATION = {"dim": 8, "buckets": 64, "max_words": 16}


def decision_input(n: int) -> dict:
    """Item `n`: the right hypothesis is "db" for even n, "dns" for odd n, and the evidence says so."""
    cause = "database connection refused" if n % 2 == 0 else "dns record expired"
    return {
        "question": f"Why did service {n} stop?",
        "evidence": [{"source_id": "log", "text": f"The log says: {cause}."}],
        "hypotheses": [
            {"id": "db", "text": "database connection refused"},
            {"id": "dns", "text": "dns record expired"},
        ],
    }


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_user("ada", password="a-long-password")


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_user("rita", password="a-long-password")


@pytest.fixture
def project(db, admin, reviewer) -> Project:
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration=CONFIGURATION)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.current_version = version
    project.save(update_fields=["current_version"])
    return project


def review(project: Project, reviewer, count: int, *, start: int = 0) -> list[Item]:
    """`count` items answered by `reviewer` with the right hypothesis (one revision each)."""
    items = []
    for n in range(start, start + count):
        item = Item.objects.create(project=project, inputs=decision_input(n), status=ItemStatus.DONE)
        answer = Answer.objects.create(
            item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target="db" if n % 2 == 0 else "dns",
            source=project.source_for(item.pk, reviewer),
        )
        AnswerRevision.objects.create(answer=answer, kind=answer.kind, target=answer.target)
        items.append(item)
    return items


@pytest.fixture
def reviewed(project, reviewer) -> list[Item]:
    """Twelve reviewed items."""
    return review(project, reviewer, 12)
