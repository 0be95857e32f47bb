"""The review loop's fixed-SQL reads give exactly what the ORM querysets they replace give (annotate.hotpath).

Each test reads the same rows both ways and compares every field, so a model change the fixed SQL missed (a
column, a converter) fails here, on PostgreSQL and on SQLite alike.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import OuterRef, Q, Subquery
from django.forms.models import model_to_dict
from django.utils import timezone

from annotate import hotpath, queue
from annotate.models import FINAL_KINDS, Answer, AnswerKind, Claim, Item, ItemStatus, Membership, Project, Role
from tests.annotate.conftest import make_ready_items

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def test_item_for_page_matches_the_orm(project, reviewer) -> None:
    item = make_ready_items(project, [0.3])[0]
    item.prediction.trace = {"operations": [{"name": "ranker"}]}
    item.prediction.save(update_fields=["trace"])
    queue.claim_next(project, reviewer)
    now = timezone.now()

    fast = hotpath.item_for_page(reviewer, project.slug, item.pk, now)
    role = Membership.objects.filter(project=OuterRef("project_id"), user=reviewer).values("role")[:1]
    claim = Claim.objects.filter(item=OuterRef("pk"), reviewer=reviewer, expires_at__gt=now).values("expires_at")[:1]
    slow = (
        Item.objects.select_related("project", "project__current_version", "prediction", "prediction__model_version")
        .annotate(viewer_role=Subquery(role), viewer_claim_expires=Subquery(claim))
        .get(pk=item.pk)
    )

    assert _fields(fast) == _fields(slow)
    assert _fields(fast.project) == _fields(slow.project)
    assert _fields(fast.project.current_version) == _fields(slow.project.current_version)
    assert _fields(fast.prediction.model_version) == _fields(slow.prediction.model_version)
    assert fast.viewer_role == slow.viewer_role == Role.REVIEWER
    assert fast.viewer_claim_expires == slow.viewer_claim_expires is not None
    assert "trace" in fast.prediction.get_deferred_fields()  # not read with the page...
    assert _fields(fast.prediction) == _fields(slow.prediction)  # ...and still there when asked for


def test_item_for_page_brings_the_viewers_answer_and_latest_answered_item(project, reviewer, second_reviewer
                                                                        ) -> None:
    """What `answer_and_latest` would read for the workspace, read with the item instead: the viewer's own
    answer (a draft too) and the item of their latest final answer, never another reviewer's."""
    items = make_ready_items(project, [0.1, 0.2, 0.3, 0.4])
    for item in items[:2]:
        queue.claim_next(project, reviewer)
        queue.submit(item, reviewer, "db")
    queue.claim_next(project, second_reviewer)
    queue.submit(items[2], second_reviewer, "db")
    queue.save_draft(items[3], reviewer, "dns")

    for item in items:
        page = hotpath.item_for_page(reviewer, project.slug, item.pk, timezone.now())
        mine = Answer.objects.filter(item=item, reviewer=reviewer).first()
        assert (model_to_dict(page.viewer_answer) if page.viewer_answer else None) == (
            model_to_dict(mine) if mine else None)
        assert page.viewer_latest_item_id == items[1].pk
        assert queue.answer_and_previous(project, reviewer, item, read=(page.viewer_answer, page.viewer_latest_item_id)
                                         ) == queue.answer_and_previous(project, reviewer, item)
    fresh = hotpath.item_for_page(second_reviewer, project.slug, items[0].pk, timezone.now())
    assert fresh.viewer_answer is None and fresh.viewer_latest_item_id == items[2].pk


def test_item_for_page_without_claim_membership_or_prediction(project, outsider) -> None:
    item = Item.objects.create(project=project, inputs={"question": "q"}, status=ItemStatus.PENDING)

    found = hotpath.item_for_page(outsider, project.slug, item.pk, timezone.now())

    assert found.prediction is None and found.viewer_role is None and found.viewer_claim_expires is None
    assert found.viewer_answer is None and found.viewer_latest_item_id is None
    assert hotpath.item_for_page(outsider, "another-project", item.pk, timezone.now()) is None
    assert hotpath.item_for_page(outsider, project.slug, item.pk + 1000, timezone.now()) is None


def test_an_expired_claim_is_not_the_viewers(project, reviewer) -> None:
    item = make_ready_items(project, [0.3])[0]
    Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))

    assert hotpath.item_for_page(reviewer, project.slug, item.pk, timezone.now()).viewer_claim_expires is None


def test_project_for_member_matches_the_orm(project, reviewer, outsider) -> None:
    for user, role in ((reviewer, Role.REVIEWER), (outsider, None)):
        fast = hotpath.project_for_member(user, project.slug)
        slow = Project.objects.select_related("current_version").get(pk=project.pk)
        assert _fields(fast) == _fields(slow) and _fields(fast.current_version) == _fields(slow.current_version)
        assert fast.viewer_role == role
    assert hotpath.project_for_member(reviewer, "no-such-project") is None


def test_answer_and_latest_matches_the_orm(project, reviewer, second_reviewer) -> None:
    items = make_ready_items(project, [0.1, 0.2, 0.3])
    for item in items[:2]:
        queue.claim_next(project, reviewer)
        queue.submit(item, reviewer, "db")
    queue.claim_next(project, second_reviewer)
    queue.save_draft(items[2], reviewer, "dns")

    for item in items:
        latest = (Answer.objects.filter(reviewer=reviewer, kind__in=FINAL_KINDS, item__project=project)
                  .order_by("-updated_at", "-id").values("pk")[:1])
        slow = Answer.objects.filter(reviewer=reviewer).filter(Q(item=item) | Q(pk=Subquery(latest)))
        fast = hotpath.answer_and_latest(reviewer, project.pk, item.pk)
        assert sorted(map(model_to_dict, fast), key=str) == sorted(map(model_to_dict, slow), key=str)
    assert {a.kind for a in hotpath.answer_and_latest(reviewer, project.pk, items[2].pk)} == {
        AnswerKind.DRAFT, AnswerKind.TARGET}


def _second_project(reviewer) -> Project:
    other = Project.objects.create(slug="elsewhere", name="Elsewhere", tool="decision", mode="rank",
                                   configuration={"dim": 8, "buckets": 64})
    Membership.objects.create(project=other, user=reviewer, role=Role.REVIEWER)
    return other


def test_an_answer_carries_its_items_project(project, reviewer) -> None:
    """Filled on save, whoever writes the answer: the queue, or code (and tests) that create one directly."""
    item = make_ready_items(project, [0.2])[0]
    made = Answer.objects.create(item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target="db", source="s")
    assert made.project_id == project.pk
    queue.claim_next(project, reviewer)
    queue.save_draft(make_ready_items(project, [0.1])[0], reviewer, "dns")
    assert set(Answer.objects.values_list("project_id", flat=True)) == {project.pk}


def test_the_latest_answer_is_the_projects_own(project, reviewer) -> None:
    """Answers in another project, however recent, are not the workspace's previous item nor what Undo takes."""
    mine = make_ready_items(project, [0.1])[0]
    queue.claim_next(project, reviewer)
    queue.submit(mine, reviewer, "db")
    other = _second_project(reviewer)
    elsewhere = make_ready_items(other, [0.1])[0]
    queue.claim_next(other, reviewer)
    queue.submit(elsewhere, reviewer, "db")

    fresh = make_ready_items(project, [0.5])[0]
    assert hotpath.item_for_page(reviewer, project.slug, fresh.pk, timezone.now()).viewer_latest_item_id == mine.pk
    assert queue.previous(project, reviewer) == mine
    assert queue.undo_last(project, reviewer).item_id == mine.pk


@pytest.mark.postgres
def test_the_latest_answer_is_one_probe_of_its_index(project, reviewer, second_reviewer) -> None:
    """The page's "latest final answer in this project" must be answerable from `answer_latest_final`, in the
    generic plan a prepared statement settles on (values unknown): joined through the items, or through an index
    the plan cannot use, it walks every answer the reviewer ever gave, in any project, on every page."""
    from django.db import connection, transaction
    from psycopg.sql import Literal

    item = make_ready_items(project, [0.3])[0]
    # The case that matters, with statistics to match: a reviewer with many answers in another project, and a
    # project with many answers from other reviewers.
    other = _second_project(reviewer)
    for where, who in ((other, reviewer), (project, second_reviewer)):
        items = Item.objects.bulk_create(Item(project=where, inputs={}, status=ItemStatus.DONE) for _ in range(400))
        Answer.objects.bulk_create(Answer(item=i, project=where, reviewer=who, kind=AnswerKind.TARGET, target="db",
                                          source="s") for i in items)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotate_answer")
    hotpath.item_for_page(reviewer, project.slug, item.pk, timezone.now())  # makes the statement's text
    (sql, _, _), = (v for k, v in hotpath._PAGE.cache.items() if k[0] == "postgresql")
    parts = sql.split("%s")
    numbered = "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], start=1)) + parts[-1]
    values = [reviewer.pk, reviewer.pk, *map(str, FINAL_KINDS), reviewer.pk, timezone.now(), reviewer.pk, item.pk,
              project.slug]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE latest_probe AS {numbered}")
        literals = ", ".join(Literal(v).as_string(connection.connection) for v in values)
        cursor.execute(f"EXPLAIN EXECUTE latest_probe({literals})")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE latest_probe")
    assert "answer_latest_final" in plan, plan


def test_user_with_settings_matches_the_orm(reviewer, second_reviewer, django_assert_num_queries) -> None:
    from django.contrib.auth import get_user_model

    from annotate.models import AccountSettings

    reviewer.last_login = timezone.now()
    reviewer.save(update_fields=["last_login"])
    AccountSettings.objects.create(user=reviewer, time_zone="Asia/Kolkata")
    for user in (reviewer, second_reviewer):  # with settings, and without
        slow = get_user_model().objects.select_related("account_settings").get(pk=user.pk)
        with django_assert_num_queries(1):
            fast = hotpath.user_with_settings(user.pk)
            settings = getattr(fast, "account_settings", None)  # None: read as absent, without a second query
        assert _fields(fast) == _fields(slow)
        assert (settings and _fields(settings)) == (getattr(slow, "account_settings", None) and
                                                    _fields(slow.account_settings))
    assert hotpath.user_with_settings(10**9) is None
