"""A model version deleted (the Django admin's Delete) while a job is launched from it or it is promoted: whichever
comes second waits for the first and then says why it cannot go on, instead of failing on a foreign key.

Played out on PostgreSQL with two connections: the first transaction held open, the second seen waiting for its
lock, then the first committed.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from annotate import deletion
from annotate.models import ModelVersion
from tests.annotate.races import Other, second_waits
from trainingjobs import services
from trainingjobs.models import TrainingJob

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL's locks")]


@pytest.fixture
def spare(project) -> ModelVersion:
    """A version nothing uses yet: deleting it is allowed."""
    return ModelVersion.objects.allocate(project, label="spare", trained=False)


def refused(action, *errors):
    """`action` run; its error's message when it raises one of `errors`."""
    def work():
        try:
            return action()
        except errors as exc:
            return str(exc)
    return work


def test_a_launch_waits_for_the_deletion_of_its_base_version_and_says_it_is_gone(project, reviewed, spare) -> None:
    commit = threading.Event()
    deleting = Other(lambda: deletion.delete_record(spare), hold=commit)
    deleting.start()
    deleting.ready.wait(timeout=30)
    launching = Other(refused(lambda: services.launch(project, base_version=spare, epochs=1, minibatch_size=4),
                              services.JobActionError))

    second_waits(deleting, commit, launching, what="the launch to wait for the deletion in flight")

    assert launching.result == "spare has been deleted; choose another version to start from"
    assert not TrainingJob.objects.exists() and not ModelVersion.objects.filter(pk=spare.pk).exists()


def test_a_deletion_waits_for_a_launch_from_the_version_and_is_refused(project, reviewed, spare) -> None:
    commit = threading.Event()
    launching = Other(lambda: services.launch(project, base_version=spare, epochs=1, minibatch_size=4).pk,
                      hold=commit)
    launching.start()
    launching.ready.wait(timeout=30)
    deleting = Other(refused(lambda: deletion.delete_record(spare), deletion.InUse))

    second_waits(launching, commit, deleting, what="the deletion to wait for the launch in flight")

    assert deleting.result == (f"Spare cannot be deleted yet: training job {launching.result} is not over "
                               f"(cancel it on the training page).")
    assert TrainingJob.objects.get().base_version_id == spare.pk


def test_a_promotion_waits_for_the_deletion_of_its_version_and_changes_nothing(project, spare) -> None:
    current = project.current_version_id
    commit = threading.Event()
    deleting = Other(lambda: deletion.delete_record(spare), hold=commit)
    deleting.start()
    deleting.ready.wait(timeout=30)
    promoting = Other(refused(lambda: services.promote(spare), services.JobActionError))

    second_waits(deleting, commit, promoting, what="the promotion to wait for the deletion in flight")

    assert promoting.result == "spare has been deleted"
    project.refresh_from_db()
    assert project.current_version_id == current
