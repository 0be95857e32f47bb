"""``session.supervise`` and its records, failed calls, and the traced-program lifecycle of the spec ("Compose and
trace individual operations"): trace, supervise, save, load, ``Trainer.from_ops``, fit, checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, OutputRef, TraceError, operation, trace, training

torch.set_num_threads(1)


class TextEncoder(nn.Module):
    """Encodes a string as the mean embedding of its characters."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 8)

    def forward(self, text: str):  # str -> (8,)
        ids = torch.tensor([ord(c) % 32 for c in text])
        return self.embed(ids).mean(0)


class Head(nn.Module):
    """A classifier with a label order, so targets can be label strings."""

    def __init__(self, labels=("other label", "target label", "third label")):
        super().__init__()
        self.labels = list(labels)
        self.out = nn.Linear(8, len(self.labels))

    def forward(self, h):  # (8,) -> (classes,)
        return self.out(h)


@operation
def fail(x):
    raise ValueError("service said no")


@pytest.fixture
def program():
    torch.manual_seed(0)
    encoder, head = TextEncoder(), Head()
    with trace() as session:
        prediction = head(encoder("a reviewed sentence"))
    return session, encoder, head, prediction


def test_supervise_stores_a_record_of_output_target_loss_and_source(program):
    session, _, _, prediction = program
    record = session.supervise(prediction, torch.tensor(1), loss="mse", source="human:review-42")
    assert session.supervisions == [record]
    assert record.output == OutputRef(1)
    assert torch.equal(record.target, torch.tensor(1))
    assert (record.loss, record.source) == ("mse", "human:review-42")


def test_supervise_defaults_to_cross_entropy_from_a_human(program):
    session, _, _, prediction = program
    record = session.supervise(prediction, "target label")
    assert (record.loss, record.source) == ("cross_entropy", "human")


def test_supervise_accepts_an_output_ref(program):
    session, _, _, _ = program
    record = session.supervise(session.calls[1].output, 2, source="human:review-7")
    assert record.output == OutputRef(1)


def test_supervision_records_are_exposed_but_their_type_is_internal(program):
    session, _, _, prediction = program
    first = session.supervise(prediction, 0, source="human:a")
    second = session.supervise(session.calls[0].output, torch.zeros(8), loss="mse", source="human:b")
    assert session.supervisions == [first, second]
    assert type(first).__module__.startswith("tensorcode._")
    assert type(first).__name__ not in dir(tensorcode)


def test_tracing_alone_creates_no_supervision(program):
    """Feedback is never inferred from the output itself."""
    session, _, _, _ = program
    assert session.supervisions == []


def test_target_tensor_is_snapshotted(program):
    session, _, _, prediction = program
    target = torch.tensor([0.0, 1.0, 0.0])
    record = session.supervise(prediction, target, source="human:review-42")
    target.fill_(7.0)
    assert torch.equal(record.target, torch.tensor([0.0, 1.0, 0.0]))


def test_target_container_is_snapshotted(program):
    session, _, _, prediction = program
    target = {"label": "target label", "weights": [torch.ones(2)]}
    record = session.supervise(prediction, target, loss="custom", source="human:review-42")
    target["label"] = "changed"
    target["weights"].append(torch.zeros(2))
    target["weights"][0].zero_()
    assert record.target["label"] == "target label"
    assert len(record.target["weights"]) == 1 and torch.equal(record.target["weights"][0], torch.ones(2))


@pytest.mark.parametrize("source", ["", "   ", None, 42, [], ["ok", ""]])
def test_source_must_be_a_nonempty_provenance_string(program, source):
    session, _, _, prediction = program
    with pytest.raises(ValueError, match="source must be a nonempty provenance string"):
        session.supervise(prediction, "target label", source=source)
    assert session.supervisions == []


@pytest.mark.parametrize("loss", ["", None, 3])
def test_loss_must_be_a_nonempty_name(program, loss):
    session, _, _, prediction = program
    with pytest.raises(ValueError, match="loss must be a nonempty"):
        session.supervise(prediction, "target label", loss=loss)
    assert session.supervisions == []


def test_a_captured_output_is_refused_as_a_target(program):
    session, _, _, prediction = program
    hidden = session.calls[0].value
    for target in (prediction, hidden, [torch.ones(3), hidden], {"t": prediction}, session.calls[0].output):
        with pytest.raises(ValueError, match="target must be explicit feedback"):
            session.supervise(prediction, target, source="human:review-42")
    assert session.supervisions == []


def test_supervising_a_non_output_is_refused(program):
    session, _, _, _ = program
    with pytest.raises(TraceError, match="not a captured output"):
        session.supervise(torch.zeros(3), 1)


def test_supervision_output_survives_release_and_replays(program):
    session, _, _, prediction = program
    record = session.supervise(prediction, "target label", source="human:review-42")
    session.release()
    assert session.supervisions == [record]
    assert torch.allclose(session.replay(record.output), prediction)


# -- failed calls -------------------------------------------------------------------------------------------------
def test_failed_call_stays_a_failure_and_cannot_be_saved(tmp_path):
    lin = nn.Linear(4, 4)
    with trace() as session:
        y = lin(torch.randn(1, 4))
        with pytest.raises(ValueError, match="service said no"):
            fail(y)
    call = session.calls[1]
    assert (call.status, call.dependencies) == ("failed", (0,))
    assert "ValueError: service said no" in call.error
    with pytest.raises(TraceError, match="failed"):
        _ = call.value
    with pytest.raises(TraceError, match="call 1 .* failed"):
        session.ref(call.output)
    with pytest.raises(TraceError, match="call 1 .* failed"):
        session.supervise(call.output, 1)
    with pytest.raises(TraceError, match="call 1 .* failed"):
        session.replay(call.output)
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="call 1 .* failed and cannot be persisted"):
        session.save(path, operations={"lin": lin, "fail": fail})
    assert not path.exists()
    session.release()
    with pytest.raises(ExperienceError, match="cannot be persisted"):
        session.save(path, operations={"lin": lin, "fail": fail}, release=True)
    assert not path.exists()
    assert session.calls[1].status == "failed"


def test_failed_module_call_is_recorded_and_its_error_propagates_unchanged():
    lin = nn.Linear(4, 4)
    with trace() as session:
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as raised:
            lin(torch.randn(1, 5))
        assert type(raised.value) is RuntimeError
        lin(torch.randn(1, 4))
    assert [call.status for call in session.calls] == ["failed", "ok"]
    session.validate()
    with pytest.raises(TraceError, match="cannot be persisted"):
        session.validate(persist=True)


# -- the traced-program lifecycle ---------------------------------------------------------------------------------
def test_traced_program_saves_loads_and_trains_with_from_ops(program, tmp_path):
    session, encoder, head, prediction = program
    session.supervise(prediction, "target label", source="human:review-42")
    operations = {"encoder": encoder, "head": head}
    path = tmp_path / "experience.json"
    session.save(path, operations=operations, release=True)
    assert session.released and json.loads(path.read_text())["format"] == "tensorcode-experience"

    experience = training.load_experience(path, operations=operations)
    assert experience.supervisions[0].source == "human:review-42"
    trainer = training.Trainer.from_ops(operations, lr=0.01)
    assert trainer.optimizer.param_groups[0]["lr"] == 0.01
    losses = trainer.fit([experience], epochs=10)
    assert len(losses) == 10 and all(isinstance(loss, float) for loss in losses)
    assert losses[-1] < losses[0]
    trainer.save_checkpoint(tmp_path / "program-training", progress={"epochs": 10})
    assert (tmp_path / "program-training" / "training.json").exists()
    assert trainer.load_checkpoint(tmp_path / "program-training") == {"epochs": 10}


def test_from_ops_leaves_module_modes_alone(program):
    _, encoder, head, _ = program
    encoder.eval()
    head.train()
    training.Trainer.from_ops({"encoder": encoder, "head": head})
    assert not encoder.training and head.training


def test_operations_trainer_capture_points_to_trace_and_supervise(program):
    _, encoder, head, _ = program
    trainer = training.Trainer.from_ops({"encoder": encoder, "head": head})
    with pytest.raises(TypeError, match=r"trace\(\).*supervise\("):
        trainer.capture("a reviewed sentence", "target label", source="human:review-42")
