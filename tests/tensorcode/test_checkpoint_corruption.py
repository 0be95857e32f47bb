"""Bad checkpoints are refused with a message naming the problem, and nothing changes: model, optimizer,
random state, modes, steps and progress compare bit for bit with their state before the load."""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import tensorcode
from tensorcode import _safetensors, checkpoint, training
from tensorcode.checkpoint import CheckpointError
from tensorcode.tools._base import CapturePlan, Tool
from tensorcode.training import _checkpoint

torch.set_num_threads(1)
X = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
Y = torch.tensor([0, 1, 2, 0, 1, 2])


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8, classes)

    def forward(self, x):  # (batch, 4) -> (batch, classes)
        return self.head(self.drop(torch.relu(self.encoder(x))))


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):  # (batch,) -> (batch, 5)
        return self.out(self.embed(ids))


class Labeller(Tool):
    FIELDS = {"labels": ["yes", "no"], "seed": 0}
    NAME = "labeller"

    def build(self):
        self.head = nn.Linear(4, len(self._configuration["labels"]))

    def objective(self, batch):
        return self.head(batch)

    def losses(self):
        return {}

    def plan_capture(self, inputs, targets):
        return CapturePlan(self.NAME, torch.as_tensor(inputs), list(targets), "cross_entropy", len(targets))


def make(optimizer=None, classes=3):
    torch.manual_seed(0)
    net = Net(classes)
    return training.Trainer.from_ops(
        {"net": net}, optimizer=optimizer or (lambda ps: torch.optim.Adam(ps, lr=0.01))
    )


def train(trainer, steps=1):
    for _ in range(steps):
        with tensorcode.trace() as session:
            out = trainer.operations["net"](X)
        session.supervise(out, Y, source="test")
        trainer.step(session)


def state(trainer) -> dict:
    modules = [m for op in trainer.operations.values() for m in op.modules()]
    return {
        "tensors": {
            f"{n}/{k}": v.detach().clone()
            for n, op in trainer.operations.items()
            for k, v in op.state_dict().items()
        },
        "optimizer": _clone(trainer.optimizer.state_dict()),
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "modes": [m.training for m in modules],
        "steps": trainer.steps,
        "progress": json.dumps(trainer.progress),
    }


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


@pytest.fixture
def saved(tmp_path):
    """A trainer whose weights, optimizer, RNG, modes, steps and progress moved on since its checkpoint."""
    trainer = make()
    train(trainer, 2)
    trainer.save_checkpoint(tmp_path / "run", progress={"next": 1})
    train(trainer, 1)
    random.random()
    trainer.operations["net"].eval()
    trainer.progress = {"next": 5}
    return trainer, tmp_path / "run"


def refuses(trainer, path, match, error=CheckpointError):
    before = state(trainer)
    with pytest.raises(error, match=match):
        trainer.load_checkpoint(path)
    assert_same(state(trainer), before)


def files(directory: Path) -> tuple[dict, Path]:
    record = json.loads((directory / "training.json").read_text())
    return record, directory / record["tensors"]["file"]


def rewrite(directory: Path, manifest=None, tensors=None) -> None:
    """Edit training.json and/or the tensors, keeping the checksum consistent so deeper checks are reached."""
    record, path = files(directory)
    if tensors is not None:
        payload = load_file(path)
        tensors(payload)
        save_file(payload, path)
    if manifest is not None:
        manifest(record)
    data = path.read_bytes()
    record["tensors"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (directory / "training.json").write_text(json.dumps(record))


# -- the tensors file ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [0.02, 0.5, 0.99])
def test_a_flipped_byte_fails_the_checksum(saved, where):
    trainer, directory = saved
    _, path = files(directory)
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))
    refuses(trainer, directory, r"tensors-[0-9a-f]{32}\.safetensors fails its checksum")


@pytest.mark.parametrize("where", [0.02, 0.5, 0.99])
def test_a_flipped_byte_fails_the_checksum_hashed_on_another_thread(saved, where, monkeypatch):
    """Large files are hashed on a second thread while reading goes on; every byte still counts."""
    monkeypatch.setattr(_safetensors, "_THREADED", 0)
    trainer, directory = saved
    reference = make()
    reference.load_checkpoint(directory)  # a clean file loads through the threaded path
    _, path = files(directory)
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))
    refuses(trainer, directory, r"tensors-[0-9a-f]{32}\.safetensors fails its checksum")


def test_a_missing_tensors_file_is_named(saved):
    trainer, directory = saved
    _, path = files(directory)
    path.unlink()
    refuses(trainer, directory, rf"refers to {path.name}, which is missing.*keep the tensors file")


def test_a_renamed_tensors_file_is_missing(saved):
    trainer, directory = saved
    _, path = files(directory)
    path.rename(directory / f"tensors-{uuid.uuid4().hex}.safetensors")
    refuses(trainer, directory, rf"refers to {path.name}, which is missing")


@pytest.mark.parametrize("name", ["../tensors.safetensors", "tensors-XYZ.safetensors", "model.safetensors"])
def test_a_tensors_file_name_outside_the_pattern_is_refused(saved, name):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["tensors"].update(file=name))
    refuses(trainer, directory, "expected tensors-<32 hex digits>.safetensors")


def test_a_tensors_file_that_is_not_safetensors_is_refused(saved):
    trainer, directory = saved
    _, path = files(directory)
    path.write_bytes(b"\xff" * 64)
    rewrite(directory)
    refuses(trainer, directory, "is not a readable safetensors file")


def test_training_json_referring_to_an_absent_tensor_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, tensors=lambda t: t.pop("model/net/head.bias"))
    refuses(trainer, directory, r"does not hold: \['model/net/head.bias'\]")


def test_a_tensor_left_unreferenced_by_training_json_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, tensors=lambda t: t.update({"model/net/stray": torch.zeros(2)}))
    refuses(trainer, directory, r"does not refer to: \['model/net/stray'\]")


# -- model state ---------------------------------------------------------------------------------------------
def test_state_keys_unknown_to_the_model_are_refused(saved):
    trainer, directory = saved

    def ghost(record):
        record["model"]["tensors"]["net/ghost"] = {"shape": [2], "dtype": "float32"}

    rewrite(directory, manifest=ghost, tensors=lambda t: t.update({"model/net/ghost": torch.zeros(2)}))
    refuses(trainer, directory, r"model state keys differ: missing \[\], unexpected \['net/ghost'\]")


def test_a_stored_shape_that_disagrees_with_training_json_is_refused(saved):
    trainer, directory = saved
    rewrite(
        directory,
        tensors=lambda t: t.update({"model/net/head.weight": t["model/net/head.weight"].T.contiguous()}),
    )
    refuses(trainer, directory, r"net/head.weight: the stored tensor is \[8, 3\].*record says \[3, 8\]")


def test_a_shape_that_disagrees_with_the_model_is_refused(saved):
    trainer, directory = saved

    def manifest(record):
        record["model"]["tensors"]["net/head.weight"]["shape"] = [8, 3]

    rewrite(
        directory,
        manifest=manifest,
        tensors=lambda t: t.update({"model/net/head.weight": t["model/net/head.weight"].T.contiguous()}),
    )
    refuses(
        trainer, directory, r"net/head.weight is \[8, 3\] float32 in the checkpoint but \[3, 8\] float32 now"
    )


def test_a_dtype_that_disagrees_with_the_model_is_refused(saved):
    trainer, directory = saved
    rewrite(
        directory,
        manifest=lambda r: r["model"]["tensors"]["net/head.bias"].update(dtype="float64"),
        tensors=lambda t: t.update({"model/net/head.bias": t["model/net/head.bias"].double()}),
    )
    refuses(trainer, directory, r"net/head.bias is \[3\] float64 in the checkpoint but \[3\] float32 now")


def test_a_model_of_another_shape_is_refused_by_its_configuration(saved):
    _, directory = saved
    refuses(
        make(classes=4), directory, r"operation 'net' has another configuration.*head\.fields\.out_features"
    )


def test_other_operation_bindings_are_refused(saved):
    _, directory = saved
    torch.manual_seed(0)
    other = training.Trainer.from_ops({"model": Net()}, optimizer=lambda ps: torch.optim.Adam(ps))
    refuses(other, directory, r"missing bindings \['net'\], unexpected bindings \['model'\]")


def test_a_checkpoint_of_another_tool_configuration_is_refused(tmp_path):
    trainer = training.Trainer.from_tool(Labeller(labels=["yes", "no"]))
    trainer.step(trainer.capture(X[:2].tolist(), [0, 1], source="review:1"))
    trainer.save_checkpoint(tmp_path)
    other = training.Trainer.from_tool(Labeller(labels=["no", "yes"]))
    refuses(
        other, tmp_path, r"'labeller' has another configuration.*configuration\.configuration\.labels\[0\]"
    )


def test_tied_parameters_in_the_checkpoint_must_be_tied_now(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    training.Trainer.from_ops({"lm": model}).save_checkpoint(tmp_path)
    model.out.weight = nn.Parameter(model.out.weight.detach().clone())  # same configuration, no longer shared
    untied = training.Trainer.from_ops({"lm": model})
    refuses(
        untied,
        tmp_path,
        "shared parameter aliases differ: the checkpoint ties lm/out.weight to lm/embed.weight",
    )


def test_names_tied_now_but_stored_apart_must_hold_identical_values(tmp_path):
    torch.manual_seed(0)
    untied = Tied()
    untied.out.weight = nn.Parameter(untied.out.weight.detach() + 1)
    checkpoint.save_checkpoint(tmp_path / "m.json", {"lm": untied})
    torch.manual_seed(1)
    tied = Tied()
    before = {k: v.clone() for k, v in tied.state_dict().items()}
    with pytest.raises(
        CheckpointError, match="aliases hold different values.*lm/out.weight and lm/embed.weight"
    ):
        checkpoint.load_checkpoint(tmp_path / "m.json", {"lm": tied})
    assert all(torch.equal(v, before[k]) for k, v in tied.state_dict().items())
    with torch.no_grad():
        untied.out.weight.copy_(untied.embed.weight)
    checkpoint.save_checkpoint(tmp_path / "m.json", {"lm": untied})
    checkpoint.load_checkpoint(tmp_path / "m.json", {"lm": tied})
    assert torch.equal(tied.embed.weight, untied.embed.weight)


def test_module_modes_of_another_structure_are_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["modes"]["net"].update({"drop": "eval"}))
    refuses(trainer, directory, r"module mode of net:drop is invalid \('eval'\)")


# -- optimizer state -----------------------------------------------------------------------------------------
def test_an_optimizer_of_another_type_is_refused(saved):
    _, directory = saved
    other = make(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    train(other)
    refuses(
        other, directory, r"holds torch\.optim\.adam\.Adam state but the optimizer is torch\.optim\.sgd\.SGD"
    )


def test_adam_state_does_not_load_into_adamw(saved):
    _, directory = saved
    refuses(make(lambda ps: torch.optim.AdamW(ps)), directory, r"optimizer is torch\.optim\.adamw\.AdamW")


def test_another_param_group_layout_is_refused(saved):
    _, directory = saved
    other = make(lambda ps: torch.optim.Adam([{"params": ps[:2]}, {"params": ps[2:]}]))
    refuses(other, directory, "the checkpoint has 1 optimizer param groups, the optimizer 2")


def test_another_parameter_ownership_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["optimizer"]["parameters"].reverse())
    refuses(
        trainer,
        directory,
        r"optimizer parameter 0 belongs to \['net/head.bias'\] in the checkpoint but "
        r"to \['net/encoder.weight'\] now",
    )


def test_a_slot_of_the_wrong_shape_is_refused(saved):
    trainer, directory = saved
    rewrite(
        directory,
        manifest=lambda r: r["optimizer"]["state"]["0"]["exp_avg"].update(shape=[4, 8]),
        tensors=lambda t: t.update({"optimizer/0/exp_avg": t["optimizer/0/exp_avg"].T.contiguous()}),
    )
    refuses(trainer, directory, r"slot exp_avg is \[4, 8\] float32, but the parameter is \[8, 4\] float32")


def test_a_missing_slot_is_refused(saved):
    trainer, directory = saved
    rewrite(
        directory,
        manifest=lambda r: r["optimizer"]["state"]["1"].pop("exp_avg_sq"),
        tensors=lambda t: t.pop("optimizer/1/exp_avg_sq"),
    )
    refuses(trainer, directory, r"parameter 1 \(net/encoder.bias\) has slots \['exp_avg', 'step'\], expected")


def test_a_step_counter_that_disagrees_with_its_record_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["optimizer"]["steps"].update({"2": 7}))
    refuses(trainer, directory, r"step counter 2.0 does not match the recorded step 7")


@pytest.mark.parametrize("value", [-1.0, 2.5, float("inf")])
def test_an_impossible_step_counter_is_refused(saved, value):
    trainer, directory = saved
    rewrite(directory, tensors=lambda t: t.update({"optimizer/0/step": torch.tensor(value)}))
    refuses(trainer, directory, "is not a nonnegative whole number")


# -- random state --------------------------------------------------------------------------------------------
def test_a_truncated_torch_rng_payload_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, tensors=lambda t: t.update({"rng/torch": t["rng/torch"][:-8].clone()}))
    refuses(trainer, directory, r"PyTorch CPU RNG payload: the stored tensor is \[\d+\] uint8")


def test_an_out_of_range_python_rng_payload_is_refused(saved):
    trainer, directory = saved

    def corrupt(tensors):
        tensors["rng/python"][5] = 2**40

    rewrite(directory, tensors=corrupt)
    refuses(trainer, directory, "Python RNG payload is corrupted")


def test_a_malformed_python_gauss_state_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["rng"]["python"].update(gauss_next="0.5"))
    refuses(trainer, directory, "Python RNG payload is corrupted")


def test_cuda_rng_recorded_for_a_device_is_checked(saved):
    """Without CUDA a saved CUDA state is not restored (a warning says so); with CUDA wrong sizes fail."""
    trainer, directory = saved

    def manifest(record):
        record["rng"]["cuda"] = [0]

    rewrite(
        directory,
        manifest=manifest,
        tensors=lambda t: t.update({"rng/cuda/0": torch.zeros(3, dtype=torch.uint8)}),
    )
    if torch.cuda.is_available():
        refuses(trainer, directory, "CUDA RNG payload of device 0")
        return
    with pytest.warns(RuntimeWarning, match=r"CUDA random state for devices \[0\]"):
        assert trainer.load_checkpoint(directory) == {"next": 1}


def test_a_cuda_rng_record_without_its_tensor_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r["rng"].update(cuda=[0]))
    refuses(trainer, directory, r"does not hold: \['rng/cuda/0'\]")


# -- training.json itself ------------------------------------------------------------------------------------
def test_malformed_training_json_is_refused(saved):
    trainer, directory = saved
    (directory / "training.json").write_text('{"format": ')
    refuses(trainer, directory, "cannot read checkpoint JSON")


def test_another_format_version_is_refused(saved):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r.update(version=2))
    refuses(trainer, directory, "not a tensorcode-training-checkpoint version 1 file")


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("progress", [1], "field 'progress' must be dict"),
        ("steps", -3, "steps must be nonnegative"),
        ("steps", True, "field 'steps' must be int"),
    ],
)
def test_malformed_fields_are_refused(saved, key, value, match):
    trainer, directory = saved
    rewrite(directory, manifest=lambda r: r.update({key: value}))
    refuses(trainer, directory, match)


def test_a_directory_without_training_json_is_refused(tmp_path):
    refuses(make(), tmp_path, "holds no training.json")


# -- failures while applying ---------------------------------------------------------------------------------
def test_an_interrupt_half_way_through_applying_rolls_everything_back(saved, monkeypatch):
    """Model and optimizer were written when the interrupt arrives; both are restored, then it propagates."""
    trainer, directory = saved
    applied = []

    def interrupted(pairs):
        applied.append(state(trainer))
        raise KeyboardInterrupt

    monkeypatch.setattr(_checkpoint, "_apply_modes", interrupted)
    refuses(trainer, directory, None, error=KeyboardInterrupt)
    assert applied and not torch.equal(
        applied[0]["tensors"]["net/head.weight"], state(trainer)["tensors"]["net/head.weight"]
    )


def _memory(trainer) -> dict:
    return {k: v.untyped_storage().data_ptr() for k, v in trainer.operations["net"].state_dict().items()}


def test_a_rolled_back_load_hands_the_model_its_own_memory_back(saved, monkeypatch):
    """The loaded tensors become the parameters' memory; undoing that restores the very same memory."""
    trainer, directory = saved
    before = _memory(trainer)
    monkeypatch.setattr(_checkpoint, "_apply_modes", lambda pairs: (_ for _ in ()).throw(RuntimeError("late")))
    refuses(trainer, directory, "late")
    assert _memory(trainer) == before


def test_a_load_keeps_the_parameter_objects_the_optimizer_owns(saved):
    trainer, directory = saved
    parameters = list(trainer.operations["net"].parameters())
    trainer.load_checkpoint(directory)
    assert all(a is b for a, b in zip(trainer.operations["net"].parameters(), parameters, strict=True))
    assert [p for g in trainer.optimizer.param_groups for p in g["params"]] == parameters
    adopted = _memory(trainer)
    train(trainer, 2)  # the optimizer updates the adopted memory in place
    assert _memory(trainer) == adopted


class Viewed(nn.Module):
    """A buffer that is a view of a parameter: the load must write into it, not replace either."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))
        self.register_buffer("row", self.weight.detach()[0])

    def forward(self, x):  # (batch, 4) -> (batch, 3)
        return x @ self.weight.t()


def test_tensors_sharing_storage_keep_sharing_it_after_a_load(tmp_path):
    torch.manual_seed(0)
    module = Viewed()
    trainer = training.Trainer.from_ops({"viewed": module}, optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    trainer.save_checkpoint(tmp_path / "run")
    saved = module.weight.detach().clone()
    with torch.no_grad():
        module.weight.add_(1.0)
    trainer.load_checkpoint(tmp_path / "run")
    assert torch.equal(module.weight.detach(), saved)
    assert module.row.untyped_storage().data_ptr() == module.weight.untyped_storage().data_ptr()
    assert torch.equal(module.row, saved[0])


def test_an_error_while_restoring_random_state_rolls_everything_back(saved, monkeypatch):
    trainer, directory = saved

    def broken(rng):
        random.setstate(rng["python"])
        raise RuntimeError("device lost")

    monkeypatch.setattr(_checkpoint, "_apply_rng", broken)
    refuses(
        trainer, directory, r"failed half-way \(RuntimeError: device lost\); every change was rolled back"
    )


def test_an_error_after_the_random_state_rolls_it_back(saved, monkeypatch):
    trainer, directory = saved
    real = _checkpoint._apply_rng

    def then_fail(rng):
        real(rng)
        raise OSError("late failure")

    monkeypatch.setattr(_checkpoint, "_apply_rng", then_fail)
    refuses(trainer, directory, "late failure")
