"""Tasks called directly: predictions traced and stored, experience uploads checked by the safe loader."""

from __future__ import annotations

import io
import json

import pytest

from annotate import imports, tasks
from annotate.models import ExperienceUpload, Item, ItemStatus, Prediction, UploadState

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending_items(project) -> list[Item]:
    inputs = [
        {"question": f"Why did service {n} stop?", "evidence": [{"source_id": "log", "text": "connection refused"}],
         "hypotheses": [{"id": "db", "text": "database down"}, {"id": "dns", "text": "dns expired"}]}
        for n in range(3)
    ]
    return [Item.objects.create(project=project, inputs=x) for x in inputs]


def test_predict_items_stores_receipt_trace_and_confidence(project, pending_items) -> None:
    made = tasks.predict_items(project.pk, [i.pk for i in pending_items])

    assert made == 3
    item = Item.objects.get(pk=pending_items[0].pk)
    assert item.status == ItemStatus.READY
    prediction = item.prediction
    assert prediction.model_version == project.current_version
    assert prediction.untrained
    assert prediction.receipt["selected_id"] in ("db", "dns")
    assert 0.0 <= prediction.confidence <= 1.0 and item.confidence == prediction.confidence
    trace = prediction.trace
    assert trace["batch"] == {"size": 3, "index": 0}
    top = trace["operations"][0]
    assert top["type"] == "Decision" and top["inputs"][0]["type"] == "object"
    steps = [op for op in trace["operations"] if op["kind"] == "module"]
    assert steps and all("shape" in value for value in steps[0]["outputs"] if value["type"] == "tensor")
    json.dumps(trace, allow_nan=False)
    assert project.current_version.is_materialized


def test_predict_items_is_safe_to_run_twice(project, pending_items) -> None:
    ids = [i.pk for i in pending_items]
    tasks.predict_items(project.pk, ids)

    assert tasks.predict_items(project.pk, ids) == 0
    assert Prediction.objects.count() == 3


def test_predict_items_does_not_reopen_done_items(project, pending_items) -> None:
    Item.objects.filter(pk=pending_items[0].pk).update(status=ItemStatus.DONE)

    tasks.predict_items(project.pk, [pending_items[0].pk])

    assert Item.objects.get(pk=pending_items[0].pk).status == ItemStatus.DONE


def test_predict_items_without_a_model_version_does_nothing(project, pending_items) -> None:
    project.current_version = None
    project.save()

    assert tasks.predict_items(project.pk, [pending_items[0].pk]) == 0


def _upload(project, data: bytes) -> ExperienceUpload:
    upload = imports.upload_experience(project, None, io.BytesIO(data), name="mine.json")
    assert tasks.check_experience_upload(upload.pk) in (UploadState.ACCEPTED, UploadState.REFUSED)
    upload.refresh_from_db()
    return upload


def _own_experience(project, path) -> bytes:
    """An experience traced by "the user's own program": the tool's trainer on one reviewed example."""
    from annotate import tooling

    trainer = tooling.trainer_for_project(project)
    inputs = {"question": "q", "evidence": [{"source_id": "s", "text": "t"}],
              "hypotheses": [{"id": "a", "text": "one"}, {"id": "b", "text": "two"}]}
    tooling.capture_experience(trainer, "rank", [inputs], ["b"], ["my-program:1"], path)
    return path.read_bytes()


def test_experience_upload_bound_to_the_tool_is_accepted(project, tmp_path) -> None:
    upload = _upload(project, _own_experience(project, tmp_path / "e.json"))

    assert upload.state == UploadState.ACCEPTED, upload.reason
    assert upload.summary["sources"] == ["my-program:1"]
    assert upload.path.is_file()


def test_experience_upload_of_another_configuration_is_refused_with_reason(project, tmp_path) -> None:
    data = _own_experience(project, tmp_path / "e.json")
    project.configuration = {"dim": 16, "buckets": 64}
    project.save()
    from annotate.models import ModelVersion

    project.current_version = ModelVersion.objects.allocate(project, label="wider")
    project.save()

    upload = _upload(project, data)

    assert upload.state == UploadState.REFUSED
    assert upload.reason.startswith("refused: ")
    assert "decision" in upload.reason.lower() or "fingerprint" in upload.reason.lower()
    assert not upload.path.exists()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda doc: doc["bindings"].clear(),  # calls bind to nothing
        lambda doc: doc.update(bindings={"os.system": doc["bindings"].popitem()[1]}),  # a hostile binding name
        lambda doc: doc["calls"][0].update(op="__import__"),  # a call naming another operation
        lambda doc: doc.update(supervisions=[]),  # nothing to train on
        lambda doc: doc["roots"].append({"$dataclass": "subprocess.Popen", "fields": {"args": ["rm", "-rf", "/"]}}),
    ],
)
def test_hostile_experience_upload_is_refused(project, tmp_path, mutate) -> None:
    document = json.loads(_own_experience(project, tmp_path / "e.json"))
    mutate(document)

    upload = _upload(project, json.dumps(document).encode())

    assert upload.state == UploadState.REFUSED
    assert upload.reason.startswith("refused: "), upload.reason
    assert not upload.path.exists()
