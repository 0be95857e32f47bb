"""Resume equivalence: N steps, a checkpoint, then M more steps in this process must equal a fresh Python
process that rebuilds the program, loads the checkpoint and runs the same M steps: identical losses and
parameters, bit for bit, on CPU. Dropout makes the random state matter; a BatchNorm kept in eval makes the
modes matter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import tensorcode
from tensorcode import training

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
BEFORE, AFTER = 3, 4
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 16)
        self.norm = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.4)

    def forward(self, x):  # (batch, 6) -> (batch, 16)
        return self.drop(torch.relu(self.norm(self.proj(x))))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(16, 4)

    def forward(self, h):  # (batch, 16) -> (batch, 4)
        return self.out(self.drop(h))


def build(kind: str, seed: int):
    """The program, as an application would rebuild it in any process; weights depend on ``seed``."""
    torch.manual_seed(seed)
    encoder, head = Encoder(), Head()
    return training.Trainer.from_ops({"encoder": encoder, "head": head}, optimizer=OPTIMIZERS[kind])


def batch(index: int):
    generator = torch.Generator().manual_seed(1000 + index)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 4, (8,), generator=generator)


def run(trainer, start: int, count: int) -> list[float]:
    encoder, head = trainer.operations["encoder"], trainer.operations["head"]
    losses = []
    for index in range(start, start + count):
        x, y = batch(index)
        with tensorcode.trace() as session:
            logits = head(encoder(x))
        session.supervise(logits, y, source=f"batch:{index}")
        losses.append(trainer.step(session))
    return losses


def parameters(trainer) -> dict:
    return {
        f"{name}/{key}": value.detach().clone()
        for name, op in trainer.operations.items()
        for key, value in op.state_dict().items()
    }


def resume_in_fresh_process(kind: str, directory: str, out: str) -> None:
    torch.set_num_threads(1)
    trainer = build(kind, seed=999)
    progress = trainer.load_checkpoint(directory)
    losses = run(trainer, progress["next_batch"], AFTER)
    save_file(parameters(trainer), os.path.join(out, "parameters.safetensors"))
    Path(out, "losses.json").write_text(
        json.dumps({"losses": [x.hex() for x in losses], "steps": trainer.steps})
    )


def first_run(kind: str, directory: Path) -> tuple[list[float], dict, object]:
    trainer = build(kind, seed=0)
    trainer.operations["encoder"].norm.eval()  # frozen statistics: a fresh process must restore this mode
    run(trainer, 0, BEFORE)
    trainer.save_checkpoint(directory, progress={"next_batch": BEFORE})
    return run(trainer, BEFORE, AFTER), parameters(trainer), trainer


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_fresh_process_resume_matches_uninterrupted_training_bit_for_bit(tmp_path, kind):
    losses, expected, trainer = first_run(kind, tmp_path / "checkpoint")
    # The child imports this module under the same name, so the rebuilt classes have the same qualified names.
    child = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(Path(__file__).parent)!r}]; import importlib; "
        f"importlib.import_module({__name__!r}).resume_in_fresh_process(*sys.argv[1:])"
    )
    subprocess.run(
        [sys.executable, "-c", child, kind, str(tmp_path / "checkpoint"), str(tmp_path)],
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    resumed = json.loads((tmp_path / "losses.json").read_text())
    assert [float.fromhex(x) for x in resumed["losses"]] == losses
    assert resumed["steps"] == trainer.steps == BEFORE + AFTER
    got = load_file(tmp_path / "parameters.safetensors")
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key].reshape(-1).view(torch.uint8), value.reshape(-1).view(torch.uint8)), key


def test_continuation_depends_on_the_restored_random_state(tmp_path):
    """Guards the equivalence test: with other dropout masks the same resumed steps give other losses."""
    losses, _, trainer = first_run("adam", tmp_path)
    trainer.load_checkpoint(tmp_path)
    torch.manual_seed(12345)
    assert run(trainer, BEFORE, AFTER) != losses
    trainer.load_checkpoint(tmp_path)
    assert run(trainer, BEFORE, AFTER) == losses
