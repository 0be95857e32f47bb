"""Exports: experience files per minibatch that load with the project's tool, a flat JSONL, a manifest."""

from __future__ import annotations

import contextlib
import json
import os
import zipfile
from datetime import UTC, datetime, timedelta

import pytest

from annotate import export as exports
from annotate import queue, storage, tasks, tooling
from annotate.forms import ExportForm
from annotate.models import Answer, ExportFormat, ExportState
from tensorcode import training

pytestmark = pytest.mark.django_db


@pytest.fixture
def answered(ready_items, project, reviewer, second_reviewer):
    """Five items answered: three by rita, two by sam."""
    items = ready_items(project, [0.1, 0.2, 0.3, 0.4, 0.5])
    for n, item in enumerate(items):
        user = reviewer if n < 3 else second_reviewer
        assert queue.claim_next(project, user) == item
        assert queue.submit(item, user, "db" if n % 2 else [0.25, 0.75]).ok
    return items


def test_export_with_nothing_selected_is_refused(project, project_admin, answered) -> None:
    with pytest.raises(exports.NothingSelected, match="nothing to export"):
        exports.create_export(project, project_admin, filters={"reviewers": ["nobody"]})


def test_export_of_project_without_answers_is_refused(project, project_admin) -> None:
    with pytest.raises(exports.NothingSelected):
        exports.create_export(project, project_admin)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"confidence_min": 0.8, "confidence_max": 0.2}, "confidence_min is greater than confidence_max"),
        ({"confidence_min": 3}, "outside 0..1"),
        ({"after": "yesterday"}, "ISO 8601"),
        ({"after": "2026-12-02T00:00:00Z", "before": "2026-12-01T00:00:00Z"}, "not earlier than"),
        ({"item_status": "lost"}, "item_status"),
    ],
)
def test_export_refuses_impossible_filters(project, project_admin, answered, filters, message) -> None:
    with pytest.raises(ValueError, match=message):
        exports.create_export(project, project_admin, filters=filters)


def test_export_compares_a_time_range_as_times_whatever_offsets_it_was_given_in() -> None:
    # 10:00 at +05:00 is 05:00 UTC, an hour before 06:00 UTC, though its text sorts after it.
    assert exports.validate_filters({"after": "2026-12-01T10:00:00+05:00", "before": "2026-12-01T06:00:00Z"}) == {
        "after": "2026-12-01T10:00:00+05:00", "before": "2026-12-01T06:00:00+00:00"}
    with pytest.raises(ValueError, match="not earlier than"):
        exports.validate_filters({"after": "2026-12-01T06:00:00Z", "before": "2026-12-01T10:00:00+05:00"})


def test_a_time_range_takes_answers_from_after_up_to_before_so_consecutive_ranges_neither_miss_nor_repeat(
        project, answered) -> None:
    """`after` is inclusive and `before` exclusive: an answer changed exactly at a boundary falls in the range that
    starts there, and the export form's days are whole days."""
    midnight = datetime(2026, 3, 10, tzinfo=UTC)
    changed = [midnight - timedelta(microseconds=1), midnight, midnight + timedelta(hours=12),
               midnight + timedelta(days=1) - timedelta(microseconds=1), midnight + timedelta(days=1)]
    answers = list(Answer.objects.filter(item__in=answered).order_by("id"))
    for answer, when in zip(answers, changed, strict=True):
        Answer.objects.filter(pk=answer.pk).update(updated_at=when)

    def selected(after, before) -> list[int]:
        filters = exports.validate_filters({"after": after.isoformat(), "before": before.isoformat()})
        return [answer.pk for answer in exports.selected_answers(project, filters)]

    day_before = selected(midnight - timedelta(days=1), midnight)
    the_day = selected(midnight, midnight + timedelta(days=1))
    assert day_before == [answers[0].pk]
    assert the_day == [answers[1].pk, answers[2].pk, answers[3].pk]
    # The form's "from 10 March to 10 March" is the same day, from its midnight up to the next.
    form = ExportForm({"format": "jsonl", "minibatch_size": 32, "since": "2026-03-10", "until": "2026-03-10"},
                      project=project)
    assert form.is_valid(), form.errors
    assert [answer.pk for answer in exports.selected_answers(project, form.filters())] == the_day


def test_export_refuses_bad_minibatch_size(project, project_admin, answered) -> None:
    with pytest.raises(ValueError, match="minibatch_size"):
        exports.create_export(project, project_admin, minibatch_size=0)


def test_export_queues_its_task_on_commit(project, project_admin, answered, django_capture_on_commit_callbacks,
                                          monkeypatch) -> None:
    sent = []
    monkeypatch.setattr("annotate.tasks.run_export.delay", lambda *args: sent.append(args))

    with django_capture_on_commit_callbacks(execute=True):
        export = exports.create_export(project, project_admin, minibatch_size=2)

    assert sent == [(export.pk,)]
    assert (export.state, export.total, export.done) == (ExportState.PENDING, 5, 0)


def test_experience_export_loads_with_the_projects_tool_and_keeps_every_source(
    project, project_admin, answered
) -> None:
    export = exports.create_export(project, project_admin, minibatch_size=2, enqueue=False)

    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED

    export.refresh_from_db()
    assert (export.done, export.total, export.percent) == (5, 5, 100)
    manifest = json.loads((export.directory / "manifest.json").read_text())
    assert [f["examples"] for f in manifest["files"]] == [2, 2, 1]
    assert (manifest["tool"], manifest["mode"], manifest["examples"]) == ("decision", "rank", 5)
    trainer = tooling.trainer_for(project.current_version)
    sources = []
    for entry in manifest["files"]:
        experience = training.load_experience(export.directory / entry["name"], operations=trainer.operations)
        for record in experience.supervisions:
            sources.extend(record.source if isinstance(record.source, tuple) else [record.source])
    expected = [f"review:outages/{item.pk}/{'rita' if n < 3 else 'sam'}" for n, item in enumerate(answered)]
    assert sources == expected
    losses = trainer.fit(
        [training.load_experience(export.directory / f["name"], operations=trainer.operations)
         for f in manifest["files"]]
    )
    assert len(losses) == 3


def test_the_manifest_names_the_configuration_its_files_bind_to(project, project_admin, answered) -> None:
    """The project's configuration changed after its model was made: the README's loading recipe, building the
    tool from the manifest, failed on a fingerprint mismatch."""
    from tensorcode import tools

    made_with = tooling.trainer_for(project.current_version).tool.configuration()
    project.configuration = {**project.configuration, "dim": made_with["dim"] * 2}
    project.save(update_fields=["configuration"])
    export = exports.create_export(project, project_admin, enqueue=False)
    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED

    manifest = json.loads((export.directory / "manifest.json").read_text())
    assert manifest["configuration"] == made_with
    tool = tools.create(manifest["tool"], mode=manifest["mode"], **manifest["configuration"])
    trainer = training.Trainer.from_tool(tool)
    for entry in manifest["files"]:
        training.load_experience(export.directory / entry["name"], operations=trainer.operations)


def test_export_writes_flat_jsonl_and_an_archive(project, project_admin, answered) -> None:
    export = exports.create_export(project, project_admin, format=ExportFormat.JSONL, enqueue=False)

    exports.run(export)

    lines = [json.loads(line) for line in (export.directory / "answers.jsonl").read_text().splitlines()]
    assert [line["item"] for line in lines] == [item.pk for item in answered]
    assert set(lines[0]) == {"item", "inputs", "target", "source", "reviewer", "created_at", "updated_at"}
    assert lines[0]["target"] == [0.25, 0.75] and lines[1]["target"] == "db"
    assert lines[3]["reviewer"] == "sam"
    with zipfile.ZipFile(exports.archive_path(export)) as archive:
        assert sorted(archive.namelist()) == [f"export-{export.pk}/answers.jsonl", f"export-{export.pk}/manifest.json"]
    assert not (export.directory / ".partial").exists()


def test_an_exports_files_are_made_durable_together_before_it_says_it_is_done(
    project, project_admin, answered, monkeypatch, settings
) -> None:
    """One fsync per part was a tenth of an export's time: the parts are saved without one, and the parts, the
    JSONL and the archive reach the disk at once before the row says SUCCEEDED."""
    settings.TC_EXPORT_PROCESSES = 1  # captured in this process, where the spies below see it
    export = exports.create_export(project, project_admin, minibatch_size=1, enqueue=False)
    fsyncs, made_durable = [], []
    real_fsync, real_durable = os.fsync, storage.make_durable
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))

    def spy(directory, names):
        names = list(names)
        made_durable.append((names, [(directory / name).is_file() for name in names],
                             type(export).objects.get(pk=export.pk).state))
        real_durable(directory, names)

    monkeypatch.setattr(storage, "make_durable", spy)

    assert exports.run(export).state == ExportState.SUCCEEDED

    parts = [f"part-0000{n}.json" for n in range(1, 6)]
    [(names, present, state)] = made_durable
    assert sorted(names) == sorted([*parts, "answers.jsonl", exports.archive_name(export.pk)])
    assert all(present) and state == ExportState.RUNNING
    # Of the export's own files, the manifest (written once) and the directory the files were renamed into.
    mine = [path for path in fsyncs if path.startswith(str(export.directory))]
    assert len(mine) == 2 and ".manifest.json." in mine[0] and mine[1] == str(export.directory), fsyncs


def test_making_files_durable_without_syncfs_fsyncs_each_and_their_directory(tmp_path, monkeypatch) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text("{}")
    synced = []
    real = os.fsync
    monkeypatch.setattr(storage, "_syncfs", lambda: None)  # not Linux
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))

    storage.make_durable(tmp_path, ["a.json", "b.json"])

    assert synced == [str(tmp_path / "a.json"), str(tmp_path / "b.json"), str(tmp_path)]


def test_export_filters_by_reviewer(project, project_admin, answered) -> None:
    export = exports.create_export(project, project_admin, filters={"reviewers": "sam"}, enqueue=False)

    exports.run(export)

    export.refresh_from_db()
    assert export.total == 2
    assert export.filters == {"reviewers": ["sam"]}


def test_finished_export_is_left_alone_when_run_again(project, project_admin, answered) -> None:
    export = exports.create_export(project, project_admin, enqueue=False)
    exports.run(export)
    first = (export.directory / "manifest.json").read_bytes()

    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED
    assert (export.directory / "manifest.json").read_bytes() == first


def test_failed_export_records_the_reason(project, project_admin, answered, monkeypatch) -> None:
    export = exports.create_export(project, project_admin, enqueue=False)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tooling, "capture_experience", broken)

    with pytest.raises(OSError):
        exports.run(export)

    export.refresh_from_db()
    assert export.state == ExportState.FAILED
    assert export.error == "OSError: disk full"
    assert not (export.directory / "manifest.json").exists()


# -- one run at a time: a live run's heartbeat, a stalled one taken over ---------------------------------------------
def _held(export, *, token: str, minutes_ago: float) -> None:
    from datetime import timedelta

    from django.utils import timezone

    beat = timezone.now() - timedelta(minutes=minutes_ago)
    type(export).objects.filter(pk=export.pk).update(state=ExportState.RUNNING, run_token=token, heartbeat_at=beat,
                                                     started_at=beat)


def test_an_export_a_live_run_holds_is_left_to_it(project, project_admin, answered) -> None:
    export = exports.create_export(project, project_admin, enqueue=False)
    _held(export, token="alive", minutes_ago=1)

    assert tasks.run_export(export.pk) == ExportState.RUNNING  # a second message, sent again or redelivered

    export.refresh_from_db()
    assert export.run_token == "alive" and not export.stalled and export.done == 0
    assert not export.directory.exists() or not any(export.directory.iterdir())


def test_a_stalled_export_is_taken_over_and_written_whole(project, project_admin, answered) -> None:
    from annotate.models import Export

    export = exports.create_export(project, project_admin, enqueue=False)
    _held(export, token="killed", minutes_ago=Export.LEASE.total_seconds() / 60 + 1)
    export.refresh_from_db()
    assert export.stalled
    left = export.directory  # what the killed run left: its scratch, and a manifest it wrote before it died
    (left / ".partial-killed").mkdir(parents=True)
    (left / ".partial-killed" / "part-00001.json").write_text("{}")
    (left / "manifest.json").write_text("{}")

    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED

    export.refresh_from_db()
    assert export.run_token not in ("", "killed") and export.done == 5 and export.heartbeat_at is not None
    assert sorted(p.name for p in export.directory.iterdir()) == sorted(export.files)
    assert json.loads((export.directory / "manifest.json").read_text())["examples"] == 5


@pytest.mark.parametrize("when", ["while writing", "before moving its files into place"])
def test_a_run_taken_over_stops_and_writes_nothing_over_its_successor(project, project_admin, answered, monkeypatch,
                                                                     when) -> None:
    from annotate.models import Export

    export = exports.create_export(project, project_admin, minibatch_size=1, enqueue=False)
    monkeypatch.setattr(exports, "PROGRESS_SECONDS", 0)  # a heartbeat after every minibatch

    def taken_over() -> None:  # this run was taken for dead: another one holds the export now
        Export.objects.filter(pk=export.pk).update(run_token="successor")

    if when == "while writing":
        real = tooling.capture_experience
        monkeypatch.setattr(tooling, "capture_experience", lambda *args, **kw: (taken_over(), real(*args, **kw))[1])
    else:
        real_archive = exports._write_archive
        monkeypatch.setattr(exports, "_write_archive", lambda *args: (real_archive(*args), taken_over())[0])

    assert exports.run(export).state == ExportState.RUNNING  # no error: the successor owns the outcome

    export.refresh_from_db()
    assert export.run_token == "successor" and export.error == "" and export.files == []
    assert list(export.directory.iterdir()) == []  # its own scratch removed, nothing moved into place


def test_a_run_taken_over_that_then_fails_leaves_the_export_to_its_successor(project, project_admin, answered,
                                                                            monkeypatch) -> None:
    from annotate.models import Export

    export = exports.create_export(project, project_admin, enqueue=False)

    def broken(*args, **kwargs):
        Export.objects.filter(pk=export.pk).update(run_token="successor")
        raise OSError("its directory was removed by the run that took over")

    monkeypatch.setattr(tooling, "capture_experience", broken)

    assert exports.run(export).state == ExportState.RUNNING

    export.refresh_from_db()
    assert export.run_token == "successor" and export.error == ""


@pytest.fixture
def disputed(ready_items, project, reviewer, second_reviewer):
    """Overlap 2: on the first item rita says "db" and sam "dns"; on the second both say "db"."""
    from annotate.models import Project

    Project.objects.filter(pk=project.pk).update(overlap=2)
    project.refresh_from_db()
    items = ready_items(project, [0.1, 0.2])
    for item, targets in zip(items, (("db", "dns"), ("db", "db")), strict=True):
        for user, target in zip((reviewer, second_reviewer), targets, strict=True):
            assert queue.claim_next(project, user) == item
            assert queue.submit(item, user, target).ok
    return items


def test_an_adjudicated_item_exports_its_adjudicated_target_instead_of_its_answers(
    project, project_admin, disputed
) -> None:
    from annotate import adjudication

    split, agreed = disputed
    adjudication.adjudicate(split, project_admin, target="dns")
    export = exports.create_export(project, project_admin, minibatch_size=8, enqueue=False)
    assert export.total == 3  # two answers on the agreed item, one adjudicated target

    exports.run(export)

    lines = [json.loads(line) for line in (export.directory / "answers.jsonl").read_text().splitlines()]
    assert [(line["item"], line["target"], line["source"]) for line in lines] == [
        (agreed.pk, "db", f"review:outages/{agreed.pk}/rita"),
        (agreed.pk, "db", f"review:outages/{agreed.pk}/sam"),
        (split.pk, "dns", f"adjudication:outages/{split.pk}/ada"),
    ]
    assert (lines[2]["reviewer"], lines[2]["adjudication"]) == ("ada", "written")
    trainer = tooling.trainer_for(project.current_version)
    experience = training.load_experience(export.directory / "part-00001.json", operations=trainer.operations)
    sources = [s for record in experience.supervisions
               for s in (record.source if isinstance(record.source, tuple) else [record.source])]
    assert sources == [line["source"] for line in lines]


def test_a_distribution_target_exports_with_its_candidates_and_trains(project, project_admin, disputed) -> None:
    from annotate import adjudication

    split, _ = disputed
    adjudication.adjudicate(split, project_admin, distribution=True)

    export = exports.create_export(project, project_admin, filters={"item_ids": [split.pk]}, enqueue=False)
    exports.run(export)

    (line,) = [json.loads(x) for x in (export.directory / "answers.jsonl").read_text().splitlines()]
    assert (line["target"], line["candidates"], line["adjudication"]) == ([0.5, 0.5], ["db", "dns"], "distribution")
    trainer = tooling.trainer_for(project.current_version)
    experience = training.load_experience(export.directory / "part-00001.json", operations=trainer.operations)
    assert len(trainer.fit([experience])) == 1


# -- capturing in parallel processes ------------------------------------------------------------------------------
def _export_files(project, admin, processes: int, settings) -> tuple[exports.Export, dict[str, bytes]]:
    settings.TC_EXPORT_PROCESSES = processes
    export = exports.create_export(project, admin, minibatch_size=1, enqueue=False)
    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED
    export.refresh_from_db()
    names = [n for n in export.files if n.startswith("part-")] + ["answers.jsonl"]
    return export, {name: (export.directory / name).read_bytes() for name in names}


def _recording_capture(monkeypatch, log, fail_on: str | None = None, kill_a_worker: bool = False):
    """Wrap `tooling.capture_experience` (forked workers inherit the wrap) to log the capturing process's pid,
    to raise on the minibatch whose first source contains `fail_on`, and to kill the first worker process
    that captures (never this one)."""
    import os
    import signal

    real = tooling.capture_experience
    exporting = os.getpid()

    def capture(trainer, mode, inputs, targets, sources, path, **options):
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        if fail_on and fail_on in sources[0]:
            raise OSError(f"disk full at {path.name}")
        if kill_a_worker and os.getpid() != exporting:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(trainer, mode, inputs, targets, sources, path, **options)

    monkeypatch.setattr(tooling, "capture_experience", capture)


def test_parallel_capture_writes_the_same_files_as_one_process(
    project, project_admin, answered, settings, monkeypatch, tmp_path
) -> None:
    import os

    log = tmp_path / "pids"
    _recording_capture(monkeypatch, log)
    alone, alone_files = _export_files(project, project_admin, 1, settings)
    assert set(log.read_text().split()) == {str(os.getpid())}
    log.unlink()

    together, together_files = _export_files(project, project_admin, 3, settings)

    pids = set(log.read_text().split())
    assert pids - {str(os.getpid())}  # parts captured in worker processes (and maybe here too)
    assert len(together_files) == 6 and together_files == alone_files
    assert (together.done, together.total) == (5, 5)
    manifest = json.loads((together.directory / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == [f"part-{n:05d}.json" for n in range(1, 6)]
    with zipfile.ZipFile(exports.archive_path(together)) as archive:
        assert len(archive.namelist()) == 7


def test_a_capture_failing_in_a_worker_fails_the_export_with_its_reason(
    project, project_admin, answered, settings, monkeypatch, tmp_path
) -> None:
    settings.TC_EXPORT_PROCESSES = 2
    _recording_capture(monkeypatch, tmp_path / "pids", fail_on=f"/{answered[3].pk}/")
    export = exports.create_export(project, project_admin, minibatch_size=1, enqueue=False)

    with pytest.raises(OSError, match="disk full at part-00004.json"):
        exports.run(export)

    export.refresh_from_db()
    assert (export.state, export.error) == (ExportState.FAILED, "OSError: disk full at part-00004.json")
    assert not (export.directory / "manifest.json").exists()
    assert not list(export.directory.glob("part-*"))


def test_a_capture_process_killed_fails_the_export_and_it_runs_again(
    project, project_admin, answered, settings, monkeypatch, tmp_path
) -> None:
    settings.TC_EXPORT_PROCESSES = 2
    _recording_capture(monkeypatch, tmp_path / "pids", kill_a_worker=True)
    export = exports.create_export(project, project_admin, minibatch_size=1, enqueue=False)

    with pytest.raises(RuntimeError, match="capture process died"):
        exports.run(export)

    export.refresh_from_db()
    assert export.state == ExportState.FAILED
    assert export.error.startswith("RuntimeError: a capture process died")
    monkeypatch.undo()
    assert tasks.run_export(export.pk) == ExportState.SUCCEEDED
    export.refresh_from_db()
    assert export.done == 5


def test_a_daemonic_process_forks_its_capture_workers_too(
    project, project_admin, answered, settings, monkeypatch, tmp_path
) -> None:
    """A Celery prefork child is daemonic, and `multiprocessing` refuses children to such a process: the export
    lifts the refusal while it forks its workers (they die with it), and puts it back."""
    import multiprocessing
    import os

    monkeypatch.setitem(multiprocessing.current_process()._config, "daemon", True)
    log = tmp_path / "pids"
    _recording_capture(monkeypatch, log)

    export, files = _export_files(project, project_admin, 2, settings)

    assert set(log.read_text().split()) - {str(os.getpid())}
    assert export.done == 5 and len(files) == 6
    assert multiprocessing.current_process().daemon is True


def _exporting_process(ready) -> None:
    """Forks a capture worker as `_Captures` does (`_exit_with_parent` first), then waits to be killed."""
    import os
    import signal

    parent = os.getpid()
    worker = os.fork()
    if worker == 0:
        exports._exit_with_parent(parent)
        ready.put(os.getpid())
        signal.pause()
        os._exit(0)
    signal.pause()


def test_a_capture_worker_dies_with_the_exporting_process(wait_until) -> None:
    """A worker left behind would wait on its queue forever: killing the exporting process ends it too."""
    import multiprocessing
    import os
    import signal
    from pathlib import Path

    context = multiprocessing.get_context("fork")
    ready = context.Queue()
    exporting = context.Process(target=_exporting_process, args=(ready,))
    exporting.start()
    worker = ready.get(timeout=60)

    os.kill(exporting.pid, signal.SIGKILL)
    exporting.join()

    def gone() -> bool:
        status = Path(f"/proc/{worker}/status")
        try:
            return "State:\tZ" in status.read_text()  # dead, waiting for init to reap it
        except FileNotFoundError:
            return True

    try:
        wait_until(gone, timeout=30, what="the orphaned capture worker to die")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)  # when this fails, leave no process behind holding the test's pipes


def test_an_export_names_too_many_item_ids() -> None:
    """Each id is a parameter of the selecting statement; PostgreSQL takes 65,535 at most."""
    with pytest.raises(ValueError, match=r"filters.item_ids: at most 50,000 ids, got 50,001"):
        exports.validate_filters({"item_ids": list(range(1, 50_002))})
    assert len(exports.validate_filters({"item_ids": list(range(1, 50_001))})["item_ids"]) == 50_000


@pytest.mark.parametrize("wrong", [0, -3, 2**63, 10**23])
def test_an_export_names_an_id_no_item_can_have(wrong: int) -> None:
    """Beyond a 64-bit key the database raised OverflowError while counting the selection: a 500."""
    with pytest.raises(ValueError, match=rf"^filters.item_ids: {wrong} is not an item id$"):
        exports.validate_filters({"item_ids": [1, wrong]})


def test_the_export_form_offers_each_reviewer_who_answered_once(project, answered, project_admin) -> None:
    from annotate.forms import ExportForm

    offered = ExportForm(project=project).fields["reviewer"].queryset
    assert [u.get_username() for u in offered] == ["rita", "sam"]  # not the admin, who answered nothing


def test_a_run_whose_export_was_deleted_meanwhile_stops_quietly(project, project_admin, answered,
                                                                monkeypatch) -> None:
    """Its project was deleted once the run was taken for dead (a stalled export does not block a deletion)."""
    from annotate.models import Export

    export = exports.create_export(project, project_admin, minibatch_size=1, enqueue=False)
    monkeypatch.setattr(exports, "PROGRESS_SECONDS", 0)
    real = tooling.capture_experience
    monkeypatch.setattr(tooling, "capture_experience",
                        lambda *args, **kw: (Export.objects.filter(pk=export.pk).delete(), real(*args, **kw))[1])

    exports.run(export)  # no error

    assert not Export.objects.filter(pk=export.pk).exists()
    assert not any(export.directory.glob(".partial-*"))
