"""Calibrated queue order: a model with a fitted calibration orders the queue by its calibrated confidence."""

from __future__ import annotations

import pytest

from annotate import queue, tasks, tooling
from annotate.models import Item, ItemStatus, Membership, ModelVersion, Project, Role

pytestmark = pytest.mark.django_db

PAIRS = [
    {"premise": "The connection was refused.", "hypothesis": "The connection succeeded."},
    {"premise": "Disk alpha is full.", "hypothesis": "Alpha has no free space."},
    {"premise": "The job finished at noon.", "hypothesis": "The job is still running."},
]


@pytest.fixture
def verification(reviewer, second_reviewer) -> Project:
    project = Project.objects.create(slug="claims", name="Claims", tool="investigator", mode="verification",
                                     configuration={"dim": 8})
    for user in (reviewer, second_reviewer):
        Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="calibrated", trained=True)
    project.save(update_fields=["current_version"])
    return project


def test_confidences_of_splits_raw_and_calibrated() -> None:
    fitted = {"kind": "classification", "selected_id": "neutral", "confidence": 0.61,
              "candidates": [{"id": "entailment", "probability": 0.2, "calibrated_probability": 0.14},
                             {"id": "neutral", "probability": 0.45, "calibrated_probability": 0.61}],
              "calibration": {"fitted": True, "temperature": 0.5}}
    unfitted = {**fitted, "confidence": 0.45, "calibration": {"fitted": False, "temperature": None}}

    assert tooling.confidences_of(fitted) == (0.45, 0.61)
    assert tooling.confidences_of(unfitted) == (0.45, None)
    assert tooling.confidences_of({"kind": "ranking", "confidence": 0.3}) == (0.3, None)


def test_a_fitted_verifier_stores_both_confidences_and_the_item_takes_the_calibrated_one(verification) -> None:
    import torch

    tool = tooling.create_tool("investigator", "verification", {"dim": 8})
    logits = tool.verification_logits(PAIRS)
    with torch.no_grad():
        tool.verifier.calibration.fit(logits * 3, [2, 0, 2])  # a sharp sample: the temperature moves off 1
    tool.save_pretrained(verification.current_version.path)
    items = [Item.objects.create(project=verification, inputs=pair) for pair in PAIRS]

    assert tasks.predict_items(verification.pk, [i.pk for i in items]) == 3

    moved = 0
    for item in Item.objects.filter(project=verification).select_related("prediction"):
        prediction, receipt = item.prediction, item.prediction.receipt
        chosen = next(c for c in receipt["candidates"] if c["id"] == receipt["selected_id"])
        assert receipt["calibration"]["fitted"]
        assert prediction.confidence == pytest.approx(chosen["probability"])
        assert prediction.calibrated_confidence == pytest.approx(chosen["calibrated_probability"])
        assert item.confidence == prediction.calibrated_confidence
        moved += prediction.calibrated_confidence != pytest.approx(prediction.confidence)
    assert moved  # the two really differ, so the test tells them apart


def test_queue_orders_by_calibrated_confidence_when_there_is_one(verification, reviewer, second_reviewer,
                                                                 django_user_model, monkeypatch) -> None:
    # raw order: a < c < b; calibrated order (c has no calibration): b < c < a.
    confidences = {"a": (0.2, 0.9), "b": (0.8, 0.3), "c": (0.5, None)}

    def predict_batch(version, inputs_list):
        return [{"receipt": {"kind": "classification"}, "confidence": confidences[x["premise"]][0],
                 "calibrated_confidence": confidences[x["premise"]][1], "trace": {}} for x in inputs_list]

    monkeypatch.setattr(tooling, "predict_batch", predict_batch)
    monkeypatch.setattr(tooling, "load_version", lambda version: None)  # this version has no files to load
    items = {name: Item.objects.create(project=verification, inputs={"premise": name, "hypothesis": "h"})
             for name in "abc"}
    tasks.predict_items(verification.pk, [i.pk for i in items.values()])
    third = django_user_model.objects.create_user("tia", password="a-long-password")
    Membership.objects.create(project=verification, user=third, role=Role.REVIEWER)

    claimed = [queue.claim_next(verification, user) for user in (reviewer, second_reviewer, third)]

    assert [item.pk for item in claimed] == [items["b"].pk, items["c"].pk, items["a"].pk]
    assert Item.objects.get(pk=items["a"].pk).prediction.confidence == 0.2  # the raw value is kept beside it
    assert all(i.status == ItemStatus.READY for i in Item.objects.all())
