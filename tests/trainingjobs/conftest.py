"""Fixtures for training jobs: a tiny Decision project with reviewed items, an admin, job helpers."""

from __future__ import annotations

import io
import json

import pytest
import torch

from annotate import imports, tasks, tooling
from annotate.models import (
    Answer,
    AnswerKind,
    AnswerRevision,
    ExperienceUpload,
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


def upload(project: Project, numbers: range, tmp_path, *, check: bool = True, spoil: bool = False
           ) -> ExperienceUpload:
    """An experience file of examples `numbers` (right answers, sources `mine:<n>`) traced by "the admin's own
    program", uploaded and, when `check`, checked by the worker's task. `spoil` drops its supervision, so the
    check refuses it."""
    path = tmp_path / f"mine-{numbers.start}.json"
    tooling.capture_experience(tooling.trainer_for_project(project), project.mode,
                               [decision_input(n) for n in numbers], ["db" if n % 2 == 0 else "dns" for n in numbers],
                               [f"mine:{n}" for n in numbers], path)
    data = path.read_bytes()
    if spoil:
        document = json.loads(data)
        document["supervisions"] = []
        data = json.dumps(document).encode()
    row = imports.upload_experience(project, None, io.BytesIO(data), name=path.name)
    if check:
        tasks.check_experience_upload(row.pk)
    row.refresh_from_db()
    return row


@pytest.fixture
def uploads(project, tmp_path) -> list[ExperienceUpload]:
    """Two accepted uploads of four examples each; a captured minibatch is one supervision record."""
    return [upload(project, range(200, 204), tmp_path), upload(project, range(204, 208), tmp_path)]


@pytest.fixture
def not_accepted(project, tmp_path) -> list[ExperienceUpload]:
    """A refused upload and one still being checked."""
    refused = upload(project, range(300, 304), tmp_path, spoil=True)
    pending = upload(project, range(304, 308), tmp_path, check=False)
    assert (refused.state, pending.state) == ("REFUSED", "PENDING"), refused.reason
    return [refused, pending]
