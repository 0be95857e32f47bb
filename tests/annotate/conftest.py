"""Fixtures of the reviewer app: users with roles, a small Decision project, items ready for review."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from annotate import queue
from annotate.models import (
    Answer,
    AnswerRevision,
    Claim,
    Item,
    ItemStatus,
    Membership,
    ModelVersion,
    Prediction,
    Project,
    Role,
)

# One valid input of the Decision tool (rank mode): the smallest project fixture.
DECISION_INPUT = {
    "question": "Why did the service stop?",
    "evidence": [
        {"source_id": "log", "text": "The database connection was refused at 09:14."},
        {"source_id": "ticket", "text": "Users report timeouts since the morning."},
    ],
    "hypotheses": [
        {"id": "db", "text": "The database was unreachable."},
        {"id": "dns", "text": "A DNS record expired."},
    ],
}



def decision_input(n: int = 0) -> dict:
    """A Decision input made distinct by `n` (so items are not all identical)."""
    data = {**DECISION_INPUT, "question": f"Why did service {n} stop?"}
    return data


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_user("rita", password="a-long-password")


@pytest.fixture
def second_reviewer(django_user_model):
    return django_user_model.objects.create_user("sam", password="a-long-password")


@pytest.fixture
def project_admin(django_user_model):
    return django_user_model.objects.create_user("ada", password="a-long-password")


@pytest.fixture
def outsider(django_user_model):
    return django_user_model.objects.create_user("olga", password="a-long-password")


@pytest.fixture
def project(db, reviewer, second_reviewer, project_admin) -> Project:
    """A Decision (rank) project with two reviewers, an admin and a fresh untrained model version."""
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64}, guidelines="Pick the cause.")
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    Membership.objects.create(project=project, user=second_reviewer, role=Role.REVIEWER)
    Membership.objects.create(project=project, user=project_admin, role=Role.ADMIN)
    version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.current_version = version
    project.save(update_fields=["current_version"])
    return project


@pytest.fixture
def ready_items():
    """`ready_items(project, confidences)`: items with a stored prediction, one per confidence, 1 s apart."""
    return make_ready_items


@pytest.fixture
def split_item(ready_items, project, reviewer, second_reviewer):
    """An item of an overlap-2 Decision project where rita chose "db" and sam chose "dns"."""
    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    for user, target in ((reviewer, "db"), (second_reviewer, "dns")):
        queue.claim_next(project, user)
        queue.submit(item, user, target)
    item.refresh_from_db()
    assert item.disagreement
    return item


@pytest.fixture
def deletable_items(project, reviewer, ready_items) -> list[Item]:
    """Four ready items (confidence .1 to .4), the first answered with a revision, the second claimed: one row of
    each kind that goes with an item."""
    made = ready_items(project, [0.1, 0.2, 0.3, 0.4])
    answer = Answer.objects.create(item=made[0], reviewer=reviewer, kind="target", target="db", source="s")
    AnswerRevision.objects.create(answer=answer, kind="target", target="db")
    Claim.objects.create(item=made[1], reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    return made


@pytest.fixture
def deletion_worker(monkeypatch) -> None:
    """A worker that takes each deletion of items as it is queued (`test_item_deletions.py` queues them only)."""
    from annotate import tasks

    monkeypatch.setattr(tasks.delete_matching_items, "delay_on_commit", lambda pk: tasks.delete_matching_items(pk))


def make_ready_items(project: Project, confidences: list[float | None]) -> list[Item]:
    start = timezone.now() - timedelta(hours=1)
    items = []
    for n, confidence in enumerate(confidences):
        item = Item.objects.create(project=project, inputs=decision_input(n), status=ItemStatus.READY,
                                   confidence=confidence, created_at=start + timedelta(seconds=n))
        prediction = Prediction.objects.create(
            item=item, model_version=project.current_version, confidence=confidence,
            receipt={"kind": "ranking", "selected_id": "db", "confidence": confidence}, trace={},
        )
        item.prediction = prediction
        item.save(update_fields=["prediction"])
        items.append(item)
    return items


def project_admin_form(request, project: Project, **changes):
    """Django admin's change form of `project`, bound to its current values with `changes`."""
    from django.contrib.admin.sites import site

    form_class = site._registry[Project].get_form(request, project, change=True)
    unbound = form_class(instance=project)
    data = {name: unbound[name].value() for name in unbound.fields}  # as the page shows them
    return form_class({**{k: v for k, v in data.items() if v is not None}, **changes}, instance=project)


# -- accounts (test_accounts.py, test_account_email.py) -------------------------------------------------------------
NEW_PASSWORD = "a-long-new-passphrase"


@pytest.fixture
def site_admin(project_admin):
    """The project's admin, who may also create and change users on the site (Django's auth permissions)."""
    from django.contrib.auth.models import Permission

    project_admin.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="auth", codename__in=["add_user", "change_user"]))
    return type(project_admin).objects.get(pk=project_admin.pk)  # permissions are cached per instance


@pytest.fixture
def fresh_cache():
    """An empty cache, emptied again after: sign-in failures and mailed resets counted in one test must not hold
    back a later test's "rita"."""
    from django.core.cache import cache

    cache.clear()
    yield cache
    cache.clear()


def links_in(page: str) -> list[str]:
    """The set-password links on an admin's links page."""
    import re

    return re.findall(r'value="(http://testserver/accounts/reset/[^"]+)"', page)


def set_password(client, link: str, password: str = NEW_PASSWORD):
    """Follow a set-password link like a browser: Django moves the token into the session, then the form."""
    form = client.get(link.removeprefix("http://testserver"), follow=True)
    assert form.status_code == 200
    assert "Set your password" in form.content.decode()
    return client.post(form.redirect_chain[-1][0], {"new_password1": password, "new_password2": password},
                       follow=True)
