"""A job's frozen data and adjudications: an adjudicated item trains on its adjudicated target, frozen at launch."""

from __future__ import annotations

import json
import os

import pytest
from django.urls import reverse

from annotate import adjudication, storage, tooling
from annotate.models import (
    AdjudicationRevision,
    Answer,
    AnswerKind,
    AnswerRevision,
    Item,
    ItemStatus,
    Membership,
    Role,
)
from tensorcode import training
from tests.trainingjobs.conftest import decision_input
from tests.trainingjobs.test_runner import SMALL, assert_same_weights, cancel_at, launch
from trainingjobs import runner, services, snapshot
from trainingjobs.models import TrainingJob


@pytest.fixture
def second_reviewer(django_user_model, project):
    user = django_user_model.objects.create_user("sam", password="a-long-password")
    Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
    return user


@pytest.fixture
def disputed(project, reviewer, second_reviewer) -> list[Item]:
    """Four items (after the twelve of `reviewed`) where rita gives the right hypothesis and sam the other."""
    items = []
    for n in range(100, 104):
        item = Item.objects.create(project=project, inputs=decision_input(n), status=ItemStatus.DONE,
                                   disagreement=True)
        right = "db" if n % 2 == 0 else "dns"
        for user, target in ((reviewer, right), (second_reviewer, "dns" if right == "db" else "db")):
            answer = Answer.objects.create(item=item, reviewer=user, kind=AnswerKind.TARGET, target=target,
                                           source=project.source_for(item.pk, user))
            AnswerRevision.objects.create(answer=answer, kind=answer.kind, target=answer.target)
        items.append(item)
    return items


def right(item: Item) -> str:
    """The hypothesis the item's evidence supports (rita's answer)."""
    return "db" if "database" in item.inputs["evidence"][0]["text"] else "dns"


def sources_of(job: TrainingJob, part: str) -> list[str]:
    """The sources recorded in the job's captured experience files of `part`, in order."""
    trainer = tooling.trainer_for(job.project.current_version)
    root = job.directory / "data" / part
    sources = []
    for name in json.loads((root / snapshot.MANIFEST).read_text())["files"]:
        experience = training.load_experience(str(root / name), operations=trainer.operations)
        sources += [s for record in experience.supervisions
                    for s in (record.source if isinstance(record.source, tuple) else [record.source])]
    return sources


def test_a_job_launched_after_an_adjudication_trains_on_the_adjudicated_target(
    project, admin, reviewed, disputed
) -> None:
    for item in disputed:
        adjudication.adjudicate(item, admin, target=right(item))

    job = launch(project, held_out_fraction=0.0)

    assert job.train_adjudications == sorted(
        AdjudicationRevision.objects.filter(adjudication__item__in=disputed).values_list("pk", flat=True)
    )
    disputed_answers = AnswerRevision.objects.filter(answer__item__in=disputed).values_list("pk", flat=True)
    assert not set(job.train_records) & set(disputed_answers)
    assert (job.train_count, job.held_out_count) == (16, 0)
    assert runner.train(job.pk, "worker-a") == "succeeded"
    job.refresh_from_db()
    assert job.step == 3 * 4  # sixteen records, one per item, in minibatches of 4
    expected = [(item.pk, "db" if n % 2 == 0 else "dns", f"review:outages/{item.pk}/rita")
                for n, item in enumerate(reviewed)]
    expected += [(item.pk, right(item), f"adjudication:outages/{item.pk}/ada") for item in disputed]
    assert [(r.item_id, r.target, r.source) for r in snapshot._records(job, "train")] == expected
    assert sources_of(job, "train") == [source for _, _, source in expected]


def test_adjudicating_again_after_launch_changes_no_frozen_data(
    project, admin, reviewed, disputed, django_user_model, monkeypatch
) -> None:
    """A job trained straight and one re-adjudicated under it, cancelled and resumed, end bit-identical."""
    other = django_user_model.objects.create_user("bea", password="a-long-password")
    Membership.objects.create(project=project, user=other, role=Role.ADMIN)
    for item in disputed:
        adjudication.adjudicate(item, admin, target=right(item))
    straight, interrupted = launch(project), launch(project)
    frozen = (interrupted.train_adjudications, interrupted.held_out_adjudications)
    assert frozen[0] and frozen[1]  # adjudicated items on both sides, so both captures are tested
    runner.train(straight.pk, "worker-a")

    for item in disputed:  # before the interrupted job captures anything
        adjudication.adjudicate(item, other, target="db" if right(item) == "dns" else "dns")
    with monkeypatch.context() as patch:
        cancel_at(patch, 3)
        assert runner.train(interrupted.pk, "worker-a") == "cancelled"
    for item in disputed:  # and again before it resumes and captures its held-out part
        adjudication.adjudicate(item, other, target=right(item), note="back again")
    services.resume(interrupted.pk)
    assert runner.train(interrupted.pk, "worker-b") == "succeeded"

    straight.refresh_from_db()
    interrupted.refresh_from_db()
    assert (interrupted.train_adjudications, interrupted.held_out_adjudications) == frozen
    assert_same_weights(straight.result_version, interrupted.result_version)
    assert list(interrupted.loss_points.values_list("step", "loss")) == list(
        straight.loss_points.values_list("step", "loss")
    )
    assert interrupted.metrics["new"] == straight.metrics["new"]
    for part in ("train", "held_out"):
        assert sources_of(interrupted, part) == sources_of(straight, part)
    adjudicated = {item.pk: right(item) for item in disputed}
    records = snapshot._records(interrupted, "train") + snapshot._records(interrupted, "held_out")
    assert {(r.item_id, r.target, r.source) for r in records if r.item_id in adjudicated} == {
        (pk, target, f"adjudication:outages/{pk}/ada") for pk, target in adjudicated.items()
    }


@pytest.mark.parametrize("held_out_fraction", [0.0, 0.9])
def test_an_item_adjudicated_with_a_distribution_trains(project, admin, reviewed, disputed,
                                                        held_out_fraction) -> None:
    """Ranking tools: the reviewers' distribution is a soft target, trained on and (held out) evaluated."""
    assert adjudication.adjudicate_open_with_distribution(project, admin) == 4

    job = launch(project, held_out_fraction=held_out_fraction)

    adjudications = job.train_adjudications + job.held_out_adjudications
    assert len(adjudications) == 4 and (job.held_out_adjudications or held_out_fraction == 0.0)
    assert runner.train(job.pk, "worker-a") == "succeeded"
    job.refresh_from_db()
    records = snapshot._records(job, "train") + snapshot._records(job, "held_out")
    assert sorted(r.target for r in records if r.item_id in {item.pk for item in disputed}) == [[0.5, 0.5]] * 4
    assert job.result_version is not None and job.metrics["held_out"] == job.held_out_count


def test_launch_page_counts_an_adjudicated_item_once(client, project, admin, reviewed, disputed) -> None:
    client.force_login(admin)
    url = reverse("trainingjobs:project_jobs", args=[project.slug])
    assert "20 reviewed records</strong> now." in client.get(url).content.decode()

    adjudication.adjudicate(disputed[0], admin, target=right(disputed[0]))

    page = " ".join(client.get(url).content.decode().split())
    assert "19 reviewed records</strong> now, 1 of them adjudicated target (each replaces" in page


def test_launch_log_names_the_adjudicated_targets(project, admin, reviewed, disputed) -> None:
    adjudication.adjudicate(disputed[0], admin, target=right(disputed[0]))

    job = services.launch(project, base_version=project.current_version, **(SMALL | {"held_out_fraction": 0.0}))

    assert "launched: 19 training and 0 held-out records from" in job.log
    assert "(adjudicated targets: 1)" in job.log


def test_a_snapshot_is_on_disk_before_it_is_published_without_an_fsync_per_part(
    project, admin, reviewed, monkeypatch
) -> None:
    """Its parts are saved without an fsync each and made durable together, manifest included, before the
    snapshot's directory takes its name (`ensure` trusts a snapshot whose manifest is there)."""
    job = launch(project, held_out_fraction=0.0)
    version = project.current_version
    fsyncs, made_durable = [], []
    real_fsync, real_durable = os.fsync, storage.make_durable
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))

    def spy(directory, names):
        names = list(names)
        made_durable.append((directory, names, [(directory / name).is_file() for name in names]))
        real_durable(directory, names)

    monkeypatch.setattr(storage, "make_durable", spy)

    files = snapshot.ensure(job, version, "train")

    [(staging, names, present)] = made_durable
    assert names == [*(path.name for path in files), snapshot.MANIFEST] and all(present)
    assert staging != files[0].parent and not staging.exists()  # renamed into place afterwards
    assert len(files) == 3 and not [path for path in fsyncs if "/data/" in path and path.endswith(".tmp")]
    assert str(files[0].parent.parent) in fsyncs  # the rename itself
