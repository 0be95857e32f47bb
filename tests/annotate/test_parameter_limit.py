"""More rows than one PostgreSQL statement has parameters for (65,535 with values bound on the server).

A training job on a project of 70,000 answers must select and read its records; Django splits `in_bulk` and
deletions into batches once the backend declares the limit (`annotate/db/base.py`). Deleting such a project
is a handful of statements whatever its size (`annotate.deletion`). The rows are written
with SQL (`generate_series`) so each test stays at a few seconds.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection

from annotate import deletion
from annotate.models import Answer, AnswerRevision, Item, Prediction, Project
from trainingjobs import snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
MANY = 66_000  # > 65,535


def _answered(project: Project, reviewer, count: int) -> None:
    """`count` done items of `project`, each with one target answer by `reviewer` and its revision."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO annotate_item (project_id, inputs, status, final_answers, disagreement, created_at) "
            "SELECT %s, %s::jsonb, 'done', 1, false, now() FROM generate_series(1, %s)",
            [project.pk, '{"hypotheses": [{"id": "db", "text": "a"}, {"id": "dns", "text": "b"}]}', count])
        cursor.execute(
            "INSERT INTO annotate_answer (item_id, project_id, reviewer_id, kind, target, skip_reason, source, "
            "created_at, updated_at) SELECT id, project_id, %s, 'target', '\"db\"'::jsonb, '', 's', now(), now() "
            "FROM annotate_item WHERE project_id = %s", [reviewer.pk, project.pk])
        cursor.execute(
            "INSERT INTO annotate_answerrevision (answer_id, kind, target, skip_reason, note, created_at) "
            "SELECT id, kind, target, '', 'made', now() FROM annotate_answer WHERE project_id = %s", [project.pk])


def test_the_backend_declares_the_limit() -> None:
    assert connection.features.max_query_params == 65_535
    assert Item.objects.in_bulk(range(1, 70_001)) == {}  # one statement of 70,000 ids fails


def test_a_training_snapshot_of_more_answers_than_one_statement_takes(project, reviewer) -> None:
    _answered(project, reviewer, MANY)

    selected = snapshot.select_records(project)
    assert len(selected) == MANY
    assert snapshot.count(project) == (MANY, 0)

    frozen = SimpleNamespace(project=project, train_records=[s.revision_id for s in selected],
                             train_adjudications=[])
    records = snapshot._records(frozen, "train")
    assert len(records) == MANY and {r.target for r in records} == {"db"}
    assert AnswerRevision.objects.filter(answer__project=project).count() == MANY



def test_a_project_of_more_items_than_one_statement_takes_is_deleted(project, reviewer) -> None:
    """Django's own cascade sent the items' SET NULL of their predictions as one statement of 66,000 ids."""
    _answered(project, reviewer, MANY)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO annotate_prediction (item_id, model_version_id, receipt, trace, created_at) "
            "SELECT id, %s, '{}'::jsonb, '{}'::jsonb, now() FROM annotate_item WHERE project_id = %s",
            [project.current_version_id, project.pk])
        cursor.execute("UPDATE annotate_item SET prediction_id = p.id FROM annotate_prediction p "
                       "WHERE p.item_id = annotate_item.id AND annotate_item.project_id = %s", [project.pk])

    deleted = deletion.delete_project(project)

    kinds = (Item, Prediction, Answer, AnswerRevision)
    assert {kind: deleted.rows[kind] for kind in kinds} == dict.fromkeys(kinds, MANY)
    assert not (Project.objects.exists() or Item.objects.exists() or Prediction.objects.exists()
                or Answer.objects.exists())
