"""Checkpoints: training directories (``Trainer.save_checkpoint``), standalone ``tensorcode.checkpoint``."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

import tensorcode
from tensorcode import checkpoint, training
from tensorcode.checkpoint import CheckpointError
from tensorcode.tools._base import CapturePlan, Tool
from tensorcode.training import _checkpoint

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


class Net(nn.Module):
    """Parameters, buffers (BatchNorm running stats, an int64 counter) and dropout: RNG and modes matter."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # (batch, 4) -> (batch, 3)
        return self.head(self.drop(torch.relu(self.norm(self.encoder(x)))))


class Tied(nn.Module):
    """An embedding and an output projection sharing one weight."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):  # (batch,) -> (batch, 5)
        return self.out(torch.tanh(self.embed(ids)))


class TinyTool(Tool):
    """A minimal owned tool: its encoder is frozen (kept in eval by the training-mode policy)."""

    FIELDS = {"labels": ["yes", "no"], "seed": 0}
    NAME = "tiny"

    def build(self):
        self.encoder = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.2))
        self.head = nn.Linear(6, len(self._configuration["labels"]))

    def frozen_modules(self):
        return [self.encoder]

    def objective(self, batch):
        return self.head(torch.relu(self.encoder(batch)))

    def losses(self):
        return {}

    def plan_capture(self, inputs, targets):
        return CapturePlan(
            operation=self.NAME,
            inputs=torch.as_tensor(inputs),
            target=list(targets),
            loss="cross_entropy",
            examples=len(targets),
        )


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}
X = torch.randn(6, 4, generator=torch.Generator().manual_seed(7))
Y = torch.tensor([0, 1, 2, 0, 1, 2])


def make(optimizer="adam", seed=0):
    torch.manual_seed(seed)
    net = Net()
    return training.Trainer.from_ops({"net": net}, optimizer=OPTIMIZERS[optimizer]), net


def train(trainer, steps=2):
    losses = []
    for _ in range(steps):
        with tensorcode.trace() as session:
            out = trainer.operations["net"](X)
        session.supervise(out, Y, source="test")
        losses.append(trainer.step(session))
    return losses


def state(trainer) -> dict:
    """Everything a load may touch, copied."""
    modules = [m for op in trainer.operations.values() if isinstance(op, nn.Module) for m in op.modules()]
    return {
        "tensors": {
            f"{name}/{k}": v.detach().clone()
            for name, op in trainer.operations.items()
            if isinstance(op, nn.Module)
            for k, v in op.state_dict().items()
        },
        "optimizer": _clone(trainer.optimizer.state_dict()),
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "modes": [m.training for m in modules],
        "steps": trainer.steps,
        "progress": json.dumps(trainer.progress),
    }


def assert_same(a, b) -> None:
    """Bit for bit: tensors compare as bytes, so NaN payloads and signed zeros count."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
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


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def manifest(directory) -> dict:
    return json.loads((Path(directory) / "training.json").read_text())


def disturb(trainer, step=train) -> None:
    """Move every piece of state away from the checkpoint."""
    step(trainer)
    random.random()
    torch.rand(3)
    for op in trainer.operations.values():
        op.eval()
    trainer.steps += 5
    trainer.progress = {"elsewhere": True}


# -- training directories ------------------------------------------------------------------------------------
def test_save_writes_training_json_and_one_checksummed_tensors_generation(tmp_path):
    trainer, _ = make()
    train(trainer)
    trainer.save_checkpoint(tmp_path / "run", progress={"next_example": 43})
    files = sorted(os.listdir(tmp_path / "run"))
    assert files.pop(0) == ".training.lock"  # empty between saves; see test_untrusted_checkpoint.py
    assert len(files) == 2 and files[1] == "training.json"
    assert re.fullmatch(r"tensors-[0-9a-f]{32}\.safetensors", files[0])
    record = manifest(tmp_path / "run")
    data = (tmp_path / "run" / files[0]).read_bytes()
    assert record["tensors"] == {
        "file": files[0],
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    assert record["steps"] == 2 and record["progress"] == {"next_example": 43}


def test_tensors_live_in_safetensors_and_never_in_the_json(tmp_path):
    """Model, optimizer and RNG tensors are native safetensors; training.json stays small for big models."""
    torch.manual_seed(0)
    big = nn.Linear(512, 512)
    trainer = training.Trainer.from_ops({"big": big}, optimizer=OPTIMIZERS["adam"])
    big.weight.grad = torch.ones_like(big.weight)
    big.bias.grad = torch.ones_like(big.bias)
    trainer.optimizer.step()
    trainer.save_checkpoint(tmp_path)
    record = manifest(tmp_path)
    tensors = load_file(tmp_path / record["tensors"]["file"])
    assert set(tensors) == {
        "model/big/weight",
        "model/big/bias",
        "rng/python",
        "rng/torch",
        *(f"optimizer/{i}/{s}" for i in (0, 1) for s in ("step", "exp_avg", "exp_avg_sq")),
    }
    assert torch.equal(tensors["model/big/weight"], big.weight.detach())
    assert torch.equal(tensors["optimizer/0/exp_avg"], trainer.optimizer.state[big.weight]["exp_avg"])
    assert (tmp_path / "training.json").stat().st_size < 8192


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_load_restores_model_optimizer_steps_progress_and_random_state(tmp_path, kind):
    trainer, _ = make(kind)
    train(trainer, 3)
    trainer.save_checkpoint(tmp_path, progress={"cursor": {"shard": 2, "offset": 17}})
    saved = state(trainer)
    disturb(trainer)
    assert trainer.load_checkpoint(tmp_path) == {"cursor": {"shard": 2, "offset": 17}}
    assert_same(state(trainer), saved)
    assert type(trainer.optimizer.param_groups[0]["betas" if kind != "sgd" else "lr"]) is (
        tuple if kind != "sgd" else float
    )


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_restored_optimizer_continues_exactly(tmp_path, kind):
    trainer, _ = make(kind)
    train(trainer, 2)
    trainer.save_checkpoint(tmp_path)
    expected = train(trainer, 2)
    after = state(trainer)
    trainer.load_checkpoint(tmp_path)
    assert train(trainer, 2) == expected
    assert_same(state(trainer), after)


def test_load_returns_the_progress_mapping_as_a_copy(tmp_path):
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path, progress={"next_example": 43})
    progress = trainer.load_checkpoint(tmp_path)
    progress["next_example"] = 0
    assert trainer.progress == {"next_example": 43}


def test_save_without_progress_keeps_the_trainers_progress(tmp_path):
    trainer, _ = make()
    trainer.progress = {"epoch": 3}
    trainer.save_checkpoint(tmp_path)
    assert manifest(tmp_path)["progress"] == {"epoch": 3}


def test_module_modes_are_restored_per_submodule(tmp_path):
    trainer, net = make()
    net.train()
    net.drop.eval()
    trainer.save_checkpoint(tmp_path)
    assert manifest(tmp_path)["modes"] == {
        "net": {"": True, "encoder": True, "norm": True, "drop": False, "head": True}
    }
    net.eval()
    net.drop.train()
    trainer.load_checkpoint(tmp_path)
    assert [m.training for m in (net, net.encoder, net.norm, net.drop, net.head)] == [True] * 3 + [
        False,
        True,
    ]


def test_python_and_torch_random_state_are_restored(tmp_path):
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path)
    expected = (random.random(), torch.rand(4))
    random.random()
    torch.rand(9)
    trainer.load_checkpoint(tmp_path)
    got = (random.random(), torch.rand(4))
    assert got[0] == expected[0] and torch.equal(got[1], expected[1])


def test_numpy_random_state_and_schedulers_are_not_captured(tmp_path):
    """NumPy RNG and scheduler state are the application's business: a load leaves them as they are."""
    trainer, _ = make("sgd")
    scheduler = torch.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=1)
    trainer.save_checkpoint(tmp_path)
    np.random.seed(5)
    train(trainer, 1)
    scheduler.step()
    numpy_state = np.random.get_state()[1].copy()
    trainer.load_checkpoint(tmp_path)
    assert scheduler.last_epoch == 1
    assert np.array_equal(np.random.get_state()[1], numpy_state)


def test_cuda_random_state_is_saved_only_when_cuda_is_in_use(tmp_path):
    """On a CPU host no CUDA entry is written; with CUDA in use each device's state is saved and restored."""
    trainer, _ = make()
    if torch.cuda.is_available():
        torch.cuda.init()
    trainer.save_checkpoint(tmp_path)
    record = manifest(tmp_path)
    names = set(load_file(tmp_path / record["tensors"]["file"]))
    if not torch.cuda.is_available():
        assert record["rng"]["cuda"] == [] and not any(n.startswith("rng/cuda") for n in names)
        return
    devices = list(range(torch.cuda.device_count()))
    assert record["rng"]["cuda"] == devices and {f"rng/cuda/{i}" for i in devices} <= names
    expected = torch.rand(4, device="cuda")
    torch.rand(7, device="cuda")
    trainer.load_checkpoint(tmp_path)
    assert torch.equal(torch.rand(4, device="cuda"), expected)


def test_the_tensors_file_is_standard_safetensors_for_every_dtype(tmp_path):
    """The streamed writer produces what safetensors reads: every dtype, scalars and empty tensors."""
    generator = torch.Generator().manual_seed(0)
    tensors = {
        f"t/{dtype}": (torch.randn(3, 5, generator=generator) * 50).to(dtype)
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                      torch.int16, torch.int8, torch.uint8, torch.bool)
    }
    tensors.update(scalar=torch.tensor(2.5), empty=torch.zeros(0, 4), odd=torch.arange(3, dtype=torch.int8))
    digest, size = _checkpoint._write_tensors(tmp_path / "t.safetensors", tensors)
    data = (tmp_path / "t.safetensors").read_bytes()
    assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert_same(load_file(tmp_path / "t.safetensors"), tensors)
    with safe_open(tmp_path / "t.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": _checkpoint.FORMAT}


def test_a_model_on_the_accelerator_round_trips(tmp_path):
    """Tensors are saved from the model's device and restored onto it (on a CPU host, the CPU)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    net = Net().to(device)
    trainer = training.Trainer.from_ops({"net": net}, optimizer=OPTIMIZERS["adam"])
    with tensorcode.trace() as session:
        out = net(X.to(device))
    session.supervise(out, Y.to(device), source="test")
    trainer.step(session)
    trainer.save_checkpoint(tmp_path)
    saved = state(trainer)
    disturb(trainer, lambda t: t.optimizer.step())
    trainer.load_checkpoint(tmp_path)
    assert_same(state(trainer), saved)
    assert net.head.weight.device.type == device
    assert trainer.optimizer.state[net.head.weight]["exp_avg"].device.type == device


def test_each_save_adds_an_immutable_generation_and_previous_ones_remain(tmp_path):
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path, progress={"n": 1})
    first = manifest(tmp_path)["tensors"]
    first_bytes = (tmp_path / first["file"]).read_bytes()
    train(trainer)
    trainer.save_checkpoint(tmp_path, progress={"n": 2})
    second = manifest(tmp_path)["tensors"]
    assert second["file"] != first["file"]
    assert (tmp_path / first["file"]).read_bytes() == first_bytes
    assert len(list(tmp_path.glob("tensors-*.safetensors"))) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".training.lock"]


@pytest.mark.parametrize("failing_call", [0, 1, 2])
def test_a_failed_save_leaves_the_previous_generation_loadable(tmp_path, monkeypatch, failing_call):
    """A failure writing the tensors, making them durable or switching training.json keeps the old one."""
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path, progress={"n": 1})
    saved = state(trainer)
    before = sorted(os.listdir(tmp_path))
    train(trainer)
    calls = []
    real = {"write_atomic": _checkpoint.write_atomic, "fsync_directory": _checkpoint.fsync_directory}

    def crash(name):
        def step(*args):
            calls.append(name)
            if len(calls) - 1 == failing_call:
                raise OSError("disk full")
            return real[name](*args)

        return step

    monkeypatch.setattr(_checkpoint, "write_atomic", crash("write_atomic"))
    monkeypatch.setattr(_checkpoint, "fsync_directory", crash("fsync_directory"))
    with pytest.raises(CheckpointError, match="disk full"):
        trainer.save_checkpoint(tmp_path, progress={"n": 2})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == before
    assert trainer.load_checkpoint(tmp_path) == {"n": 1}
    assert_same(state(trainer), saved)


def test_a_process_killed_before_the_switch_leaves_the_previous_generation(tmp_path):
    """A real crash (the process dies just before training.json is replaced) loses only the new generation."""
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path, progress={"n": 1})
    saved = state(trainer)
    script = f"""
import os, sys, torch
sys.path.insert(0, {str(ROOT)!r})
sys.path.insert(0, {str(Path(__file__).parent)!r})
import importlib
tests = importlib.import_module({__name__!r})
make, train = tests.make, tests.train
trainer, _ = make()
train(trainer, 2)
real = os.replace
def replace(src, dst):
    if str(dst).endswith("training.json"):
        os._exit(9)
    return real(src, dst)
os.replace = replace
trainer.save_checkpoint({str(tmp_path)!r}, progress={{"n": 2}})
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 9, result.stderr
    assert len(list(tmp_path.glob("tensors-*.safetensors"))) == 2
    assert trainer.load_checkpoint(tmp_path) == {"n": 1}
    assert_same(state(trainer), saved)


def test_checkpoint_moves_with_its_tensors_file(tmp_path):
    trainer, _ = make()
    train(trainer)
    trainer.save_checkpoint(tmp_path / "a", progress={"n": 1})
    saved = state(trainer)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    disturb(trainer)
    assert trainer.load_checkpoint(tmp_path / "b") == {"n": 1}
    assert_same(state(trainer), saved)


def test_load_accepts_the_path_of_training_json(tmp_path):
    trainer, _ = make()
    trainer.save_checkpoint(tmp_path, progress={"n": 1})
    assert trainer.load_checkpoint(tmp_path / "training.json") == {"n": 1}


def test_shared_parameters_are_stored_once_with_alias_records(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    trainer = training.Trainer.from_ops({"lm": model}, optimizer=OPTIMIZERS["adam"])
    with tensorcode.trace() as session:
        out = model(torch.tensor([0, 3]))
    session.supervise(out, torch.tensor([1, 2]), source="test")
    trainer.step(session)
    trainer.save_checkpoint(tmp_path)
    record = manifest(tmp_path)
    assert record["model"]["aliases"] == {"lm/out.weight": "lm/embed.weight"}
    assert record["optimizer"]["parameters"] == [["lm/embed.weight", "lm/out.weight"]]
    assert "model/lm/out.weight" not in load_file(tmp_path / record["tensors"]["file"])
    saved = state(trainer)
    with torch.no_grad():
        model.embed.weight.add_(1)
    trainer.load_checkpoint(tmp_path)
    assert_same(state(trainer), saved)
    assert model.out.weight is model.embed.weight


def test_a_module_bound_under_two_operations_is_one_tensor(tmp_path):
    torch.manual_seed(0)
    shared = nn.Linear(3, 3)
    trainer = training.Trainer.from_ops({"first": shared, "second": shared}, optimizer=OPTIMIZERS["sgd"])
    trainer.save_checkpoint(tmp_path)
    assert manifest(tmp_path)["model"]["aliases"] == {
        "second/weight": "first/weight",
        "second/bias": "first/bias",
    }
    with torch.no_grad():
        shared.weight.zero_()
    trainer.load_checkpoint(tmp_path)
    assert shared.weight.abs().sum() > 0


def test_saved_hyperparameters_are_restored_over_the_same_group_layout(tmp_path):
    torch.manual_seed(0)
    net = Net()
    groups = lambda ps: torch.optim.Adam([{"params": ps[:2], "lr": 0.1}, {"params": ps[2:]}], lr=0.01)  # noqa: E731
    trainer = training.Trainer.from_ops({"net": net}, optimizer=groups)
    trainer.save_checkpoint(tmp_path)
    trainer.optimizer.param_groups[0]["lr"] = 0.5
    trainer.load_checkpoint(tmp_path)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [0.1, 0.01]


def test_tool_trainer_saves_and_restores_with_its_mode_policy(tmp_path):
    """Trainer.from_tool has the same checkpoints; its frozen encoder stays in eval through a round trip."""
    tool = TinyTool()
    trainer = training.Trainer.from_tool(tool, optimizer=OPTIMIZERS["adamw"])
    trainer.fit([trainer.capture(X[:2].tolist(), [0, 1], source="review:1")], epochs=2)
    trainer.save_checkpoint(tmp_path, progress={"next_review": 2})
    saved = state(trainer)
    tool.train()
    disturb(trainer, lambda t: t.step(t.capture(X[2:4].tolist(), [1, 1], source="review:2")))
    assert trainer.load_checkpoint(tmp_path) == {"next_review": 2}
    assert_same(state(trainer), saved)
    assert tool.training and not tool.encoder.training


def test_unsupported_optimizers_are_refused_at_save(tmp_path):
    trainer = training.Trainer.from_ops({"net": Net()}, optimizer=lambda ps: torch.optim.RMSprop(ps))
    with pytest.raises(CheckpointError, match="RMSprop is not supported.*SGD, Adam or AdamW"):
        trainer.save_checkpoint(tmp_path)
    assert not tmp_path.joinpath("training.json").exists()


def test_save_refuses_a_directory_holding_a_foreign_training_json(tmp_path):
    (tmp_path / "training.json").write_text('{"something": "else"}')
    trainer, _ = make()
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        trainer.save_checkpoint(tmp_path)
    assert (tmp_path / "training.json").read_text() == '{"something": "else"}'


def test_save_refuses_progress_that_is_not_json(tmp_path):
    trainer, _ = make()
    with pytest.raises(CheckpointError, match="JSON-safe"):
        _checkpoint.save_checkpoint(trainer, tmp_path, {"bad": float("nan")})


def test_importing_checkpoint_modules_does_not_load_torch():
    code = "import sys, tensorcode.checkpoint, tensorcode.training; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


# -- the standalone JSON format ------------------------------------------------------------------------------
def test_standalone_file_holds_model_and_optimizer_state_as_base64_bytes(tmp_path):
    trainer, net = make()
    train(trainer)
    checkpoint.save_checkpoint(tmp_path / "state.json", trainer.operations, trainer.optimizer)
    record = json.loads((tmp_path / "state.json").read_text())
    assert set(record) == {"format", "version", "operations", "model", "optimizer"}
    weight = record["model"]["tensors"]["net/encoder.weight"]
    assert weight["dtype"] == "float32" and weight["shape"] == [8, 4]
    assert base64.b64decode(weight["data"]) == net.encoder.weight.detach().numpy().astype("<f4").tobytes()
    counter = record["model"]["tensors"]["net/norm.num_batches_tracked"]
    assert counter["dtype"] == "int64" and counter["shape"] == []
    assert record["optimizer"]["type"] == "torch.optim.adam.Adam"


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_standalone_round_trip_restores_model_and_optimizer(tmp_path, kind):
    trainer, _ = make(kind)
    train(trainer)
    checkpoint.save_checkpoint(tmp_path / "state.json", trainer.operations, trainer.optimizer)
    saved = state(trainer)
    expected = train(trainer, 2)
    checkpoint.load_checkpoint(tmp_path / "state.json", trainer.operations, trainer.optimizer)
    assert_same(state(trainer)["tensors"], saved["tensors"])
    assert_same(state(trainer)["optimizer"], saved["optimizer"])
    random.setstate(saved["python"])
    torch.set_rng_state(saved["torch"])
    assert train(trainer, 2) == expected


def test_standalone_load_leaves_random_state_modes_steps_and_progress(tmp_path):
    """The file cannot restore what it lacks; Trainer.load_checkpoint(file) returns the current progress."""
    trainer, net = make()
    checkpoint.save_checkpoint(tmp_path / "state.json", trainer.operations, trainer.optimizer)
    disturb(trainer)
    net.drop.train()
    before = state(trainer)
    with torch.no_grad():
        net.head.weight.zero_()
    assert trainer.load_checkpoint(tmp_path / "state.json") == {"elsewhere": True}
    after = state(trainer)
    assert (after["python"], after["modes"], after["steps"], after["progress"]) == (
        before["python"],
        before["modes"],
        before["steps"],
        before["progress"],
    )
    assert torch.equal(after["torch"], before["torch"])
    assert net.head.weight.abs().sum() > 0


def test_standalone_model_only_round_trip_keeps_dtypes(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to(torch.bfloat16)
    model.register_buffer("flags", torch.tensor([True, False]))
    checkpoint.save_checkpoint(tmp_path / "m.json", {"m": model})
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.zero_()
        model.flags.fill_(False)
    checkpoint.load_checkpoint(tmp_path / "m.json", {"m": model})
    assert_same(model.state_dict(), saved)


def test_standalone_load_with_an_optimizer_needs_saved_optimizer_state(tmp_path):
    trainer, net = make()
    checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations)
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        checkpoint.load_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)


def test_standalone_load_validates_before_changing_anything(tmp_path):
    trainer, net = make()
    checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)
    record = json.loads((tmp_path / "m.json").read_text())
    record["model"]["tensors"]["net/head.bias"]["data"] = base64.b64encode(b"\0" * 8).decode()
    (tmp_path / "m.json").write_text(json.dumps(record))
    train(trainer)
    before = state(trainer)
    with pytest.raises(CheckpointError, match=r"net/head.bias.*expected 12 bytes"):
        checkpoint.load_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)
    assert_same(state(trainer), before)


def test_standalone_load_rolls_back_an_interrupted_apply(tmp_path, monkeypatch):
    trainer, _ = make()
    train(trainer)
    checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)
    train(trainer)
    before = state(trainer)

    real = trainer.optimizer.load_state_dict
    calls = []

    def interrupted_once(prepared):
        calls.append(prepared)
        if len(calls) == 1:  # after the model was written, before the optimizer is
            raise KeyboardInterrupt
        return real(prepared)

    monkeypatch.setattr(trainer.optimizer, "load_state_dict", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.load_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)
    assert len(calls) == 2
    assert_same(state(trainer), before)


def test_standalone_save_is_atomic(tmp_path, monkeypatch):
    tmp_path = tmp_path / "standalone"
    tmp_path.mkdir()
    trainer, _ = make()
    checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations)
    original = (tmp_path / "m.json").read_bytes()
    monkeypatch.setattr(checkpoint.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("io error")))
    with pytest.raises(CheckpointError, match="io error"):
        checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations)
    assert (tmp_path / "m.json").read_bytes() == original
    assert os.listdir(tmp_path) == ["m.json"]


def test_standalone_refuses_an_optimizer_over_parameters_the_operations_do_not_own(tmp_path):
    trainer, net = make()
    stray = nn.Parameter(torch.zeros(2))
    foreign = torch.optim.Adam([*net.parameters(), stray])
    with pytest.raises(CheckpointError, match=r"optimizer parameter \d+ \[2\] is not owned"):
        checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations, foreign)
    checkpoint.save_checkpoint(tmp_path / "m.json", trainer.operations, trainer.optimizer)
    with pytest.raises(CheckpointError, match=r"optimizer parameter \d+ is not owned by the operations"):
        checkpoint.load_checkpoint(tmp_path / "m.json", trainer.operations, foreign)
