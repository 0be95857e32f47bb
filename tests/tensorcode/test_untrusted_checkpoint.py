"""Checkpoints under attack and under load: links out of the directory, pipes, sizes past the limits, hostile
``training.json``; saves killed with SIGKILL over and over; two processes saving into one directory. Every
refusal is a ``CheckpointError`` naming the problem, and a refused load changes nothing."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from tensorcode import checkpoint, training
from tensorcode.errors import CheckpointError
from tensorcode.training import _checkpoint
from tests.work import counted

torch.set_num_threads(1)


def make(width: int = 4) -> training.Trainer:
    torch.manual_seed(0)
    net = nn.Linear(width, width)
    trainer = training.Trainer.from_ops({"net": net}, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01))
    for p in trainer.parameters:
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()
    trainer.steps = 1
    return trainer


def weights(trainer) -> list:
    return [p.detach().clone() for p in trainer.parameters]


@pytest.fixture
def saved(tmp_path):
    trainer = make()
    trainer.save_checkpoint(tmp_path / "run", progress={"n": 1})
    with torch.no_grad():
        for p in trainer.parameters:
            p.add_(1.0)
    return trainer, tmp_path / "run"


def manifest(directory: Path) -> dict:
    return json.loads((directory / "training.json").read_text())


def tensors_file(directory: Path) -> Path:
    return directory / manifest(directory)["tensors"]["file"]


def refused(trainer, path, match: str, **limits) -> None:
    before = weights(trainer)
    with pytest.raises(CheckpointError, match=match), counted() as work:
        trainer.load_checkpoint(path, **limits)
    # Counted, not timed (`tests.work`): a few thousand calls; walking a hostile file in Python takes millions.
    assert work.calls < 20_000, f"refusing took {work.calls:,} calls"
    assert all(torch.equal(a, b) for a, b in zip(before, weights(trainer), strict=True))


def record(directory: Path, edit) -> None:
    """Rewrite training.json with ``edit`` applied and the tensors' checksum kept consistent."""
    data = manifest(directory)
    edit(data)
    (directory / "training.json").write_text(json.dumps(data))


# -- files that are not plain files inside the directory -----------------------------------------------------------
def test_a_tensors_file_linked_from_outside_the_directory_is_refused(saved, tmp_path):
    """A genuine, checksum-valid generation elsewhere must not be loaded through a link."""
    trainer, directory = saved
    path = tensors_file(directory)
    outside = tmp_path / "elsewhere.safetensors"
    path.rename(outside)
    path.symlink_to(outside)
    refused(trainer, directory, "symbolic link")


def test_a_training_json_that_is_a_link_is_refused(saved, tmp_path):
    trainer, directory = saved
    outside = tmp_path / "other.json"
    (directory / "training.json").rename(outside)
    (directory / "training.json").symlink_to(outside)
    refused(trainer, directory, "symbolic link")


@pytest.mark.parametrize("which", ["training.json", "tensors"])
def test_a_named_pipe_in_the_directory_is_refused_without_blocking(saved, which):
    trainer, directory = saved
    path = directory / "training.json" if which == "training.json" else tensors_file(directory)
    path.unlink()
    os.mkfifo(path)
    refused(trainer, directory, "named pipe, not a regular file")


def test_a_tensors_file_linked_to_a_device_is_refused(saved):
    trainer, directory = saved
    path = tensors_file(directory)
    path.unlink()
    path.symlink_to("/dev/zero")
    refused(trainer, directory, "symbolic link")


def test_a_standalone_file_that_is_a_pipe_is_refused(tmp_path):
    net = nn.Linear(2, 2)
    os.mkfifo(tmp_path / "m.json")
    with pytest.raises(CheckpointError, match="named pipe"):
        checkpoint.load_checkpoint(tmp_path / "m.json", {"net": net})


# -- sizes --------------------------------------------------------------------------------------------------------
def test_a_tensors_file_larger_than_the_trainer_can_need_is_refused_before_reading(saved):
    trainer, directory = saved
    path = tensors_file(directory)
    size = 4 * 2**30  # sparse: no disk used, and reading it would take seconds and 4 GiB
    with open(path, "r+b") as handle:
        handle.truncate(size)
    record(directory, lambda r: r["tensors"].update(bytes=size))
    refused(trainer, directory, "more than this trainer's state can need.*pass a larger max_bytes")


def test_max_bytes_can_be_lowered_and_raised(saved):
    trainer, directory = saved
    size = tensors_file(directory).stat().st_size
    refused(trainer, directory, f"{size:,} bytes", max_bytes=size - 1)
    assert trainer.load_checkpoint(directory, max_bytes=size) == {"n": 1}


def test_training_json_over_its_limit_is_refused(saved):
    trainer, directory = saved
    size = (directory / "training.json").stat().st_size
    refused(trainer, directory, "over the limit", max_manifest_bytes=size - 1)
    assert trainer.load_checkpoint(directory, max_manifest_bytes=size) == {"n": 1}


def test_a_standalone_file_past_the_models_size_is_refused(tmp_path):
    net = nn.Linear(2, 2)
    path = tmp_path / "m.json"
    with open(path, "wb") as handle:
        handle.truncate(512 * 2**20)
    with pytest.raises(CheckpointError, match="over the limit"):
        checkpoint.load_checkpoint(path, {"net": net})


# -- hostile training.json ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["progress", "operations", "optimizer"])
def test_deep_json_in_training_json_is_refused(saved, field):
    trainer, directory = saved
    text = (directory / "training.json").read_text()
    deep = "[" * 50_000 + "]" * 50_000
    (directory / "training.json").write_text(text.replace(f'"{field}":', f'"{field}":{deep},"x{field}":', 1))
    refused(trainer, directory, "nested|arrays and objects")


@pytest.mark.parametrize("depth", [150, 900])
def test_moderately_deep_progress_is_refused_without_recursion_error(saved, depth):
    trainer, directory = saved
    record(directory, lambda r: r.update(progress=json.loads('{"a":' + "[" * depth + "]" * depth + "}")))
    refused(trainer, directory, "nested")


def test_millions_of_empty_containers_are_refused_before_parsing(saved):
    trainer, directory = saved
    record(directory, lambda r: r.update(progress={"junk": [[]] * 2_000_000}))
    refused(trainer, directory, "2,000,0[0-9][0-9] arrays and objects")


@pytest.mark.parametrize("shape", [[0, 2**64], [0, 2**62, 2**62], [1] * 40])
def test_a_model_shape_whose_element_count_overflows_is_refused(saved, shape):
    trainer, directory = saved
    record(directory, lambda r: r["model"]["tensors"]["net/weight"].update(shape=shape))
    refused(trainer, directory, "shape")


def test_an_overflowing_shape_in_a_standalone_file_is_refused(tmp_path):
    net = nn.Linear(2, 2)
    checkpoint.save_checkpoint(tmp_path / "m.json", {"net": net})
    data = json.loads((tmp_path / "m.json").read_text())
    data["model"]["tensors"]["net/weight"].update(shape=[0, 2**64], data="")
    (tmp_path / "m.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="shape"):
        checkpoint.load_checkpoint(tmp_path / "m.json", {"net": net})


def test_a_header_with_far_more_tensors_than_expected_is_refused_before_parsing(saved):
    trainer, directory = saved
    path = tensors_file(directory)
    header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(10_000)}
    text = json.dumps(header).encode()
    data = len(text).to_bytes(8, "little") + text
    path.write_bytes(data)
    record(directory, lambda r: r["tensors"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    refused(trainer, directory, "far more than")


def test_a_truncated_tensors_file_is_a_refused_load_not_a_crash(saved):
    trainer, directory = saved
    path = tensors_file(directory)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    record(directory, lambda r: r["tensors"].update(bytes=len(data) - 7))
    refused(trainer, directory, "checksum|not a readable safetensors")


# -- killed saves, concurrent saves ---------------------------------------------------------------------------------
_SAVE_CALLS = ("open", "fsync", "replace", "unlink", "rename")


def _saving_child(trainer, directory: Path, write_fd: int, stop_at: int) -> None:
    """In a forked child: save forever, reporting each generation that training.json now names, and freeze just
    before the ``stop_at``-th file-system call of the saves (an open, fsync, replace, unlink or rename), so that
    the parent's SIGKILL lands at a chosen point of a save instead of wherever a timer happens to fall."""
    try:
        calls = 0

        def counted(real):
            def call(*args, **kwargs):
                nonlocal calls
                calls += 1
                if calls == stop_at:
                    os.write(write_fd, b"frozen\n")
                    os.read(os.pipe()[0], 1)  # blocks until killed
                return real(*args, **kwargs)

            return call

        for name in _SAVE_CALLS:
            setattr(os, name, counted(getattr(os, name)))
        os.write(write_fd, b"ready\n")
        while True:
            trainer.save_checkpoint(directory, progress={"pid": os.getpid()})
            os.write(write_fd, (manifest(directory)["tensors"]["file"] + "\n").encode())
    finally:
        os._exit(0)


@pytest.mark.scale
def test_saves_killed_many_times_leave_no_garbage(tmp_path):
    """A real process SIGKILLed at thirty chosen points of its saves: the next save reclaims every temporary
    file and every generation that never became current, so only generations training.json once named remain
    (the spec keeps those)."""
    directory = tmp_path / "run"
    referenced: set[str] = set()
    rng = random.Random(0)
    trainer = make(width=512)  # ~3 MiB of tensors with Adam state
    gc.freeze()  # a child's garbage collection would otherwise copy the whole test process's heap
    left_temporaries = 0
    try:
        for _ in range(30):
            _kill_a_saving_child(trainer, directory, rng.randrange(1, 25), referenced)
            left_temporaries += any(n.endswith(".tmp") for n in os.listdir(directory))
    finally:
        gc.unfreeze()
    assert left_temporaries >= 5, f"only {left_temporaries} kills left a temporary file: the test proves little"
    trainer.save_checkpoint(directory, progress={"final": True})
    names = set(os.listdir(directory))
    current = manifest(directory)["tensors"]["file"]
    assert not [n for n in names if n.endswith(".tmp")], names
    generations = {n for n in names if n.startswith("tensors-")}
    assert generations <= referenced | {current}, generations - referenced - {current}
    size = sum((directory / n).stat().st_size for n in generations)
    assert size == len(generations) * (directory / current).stat().st_size
    assert trainer.load_checkpoint(directory) == {"final": True}


def _kill_a_saving_child(trainer, directory: Path, stop_at: int, referenced: set) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        _saving_child(trainer, directory, write_fd, stop_at)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        assert pipe.readline() == "ready\n"
        while (line := pipe.readline()) != "frozen\n":
            assert line, "the saving child exited before it froze"
            referenced.add(line.strip())  # each generation the child saw current, but the last...
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if (directory / "training.json").exists():
        referenced.add(manifest(directory)["tensors"]["file"])  # ...which is current right after the kill


def test_a_second_process_saving_into_the_same_directory_gets_a_clear_error(tmp_path, monkeypatch):
    directory = tmp_path / "run"
    make().save_checkpoint(directory, progress={"first": True})
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child: a save that pauses while it holds the directory
        try:
            real = _checkpoint._write_tensors

            def slow(path, tensors):
                os.write(ready_w, b"1")
                os.read(go_r, 1)
                return real(path, tensors)

            _checkpoint._write_tensors = slow
            make().save_checkpoint(directory, progress={"writer": "child"})
        finally:
            os._exit(0)
    assert os.read(ready_r, 1) == b"1"
    trainer = make()
    with pytest.raises(CheckpointError, match="another checkpoint save into this directory is in progress"):
        trainer.save_checkpoint(directory, progress={"writer": "parent"})
    os.write(go_w, b"1")
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert trainer.load_checkpoint(directory) == {"writer": "child"}
    trainer.save_checkpoint(directory, progress={"writer": "parent"})  # the lock is free again
    assert trainer.load_checkpoint(directory) == {"writer": "parent"}


def test_a_save_reclaims_an_unreferenced_generation_named_as_pending(tmp_path):
    """The window between publishing the tensors file and switching training.json, hit by a kill."""
    directory = tmp_path / "run"
    trainer = make()
    trainer.save_checkpoint(directory, progress={"n": 1})
    orphan = directory / "tensors-0123456789abcdef0123456789abcdef.safetensors"
    orphan.write_bytes(tensors_file(directory).read_bytes())
    (directory / ".training.lock").write_text(orphan.name)
    trainer.save_checkpoint(directory, progress={"n": 2})
    assert not orphan.exists()
    assert (directory / ".training.lock").read_text() == ""


def test_the_current_generation_named_as_pending_is_kept(tmp_path):
    """Killed after the switch but before clearing the record: the generation is live and stays."""
    directory = tmp_path / "run"
    trainer = make()
    trainer.save_checkpoint(directory, progress={"n": 1})
    current = tensors_file(directory)
    (directory / ".training.lock").write_text(current.name)
    trainer.save_checkpoint(directory, progress={"n": 2})
    assert current.exists()


def test_a_temporary_file_of_a_live_writer_is_never_reclaimed(tmp_path):
    """A temporary file someone holds locked is in progress: reclaiming skips it."""
    import fcntl

    from tensorcode._atomic import reclaim_temporaries, write_atomic

    live = tmp_path / f".e.json.{'a' * 32}.tmp"
    dead = tmp_path / f".e.json.{'b' * 32}.tmp"
    dead.write_bytes(b"abandoned")
    with open(live, "wb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(b"in progress")
        handle.flush()
        write_atomic(tmp_path / "e.json", b"{}")
        assert live.exists() and not dead.exists()
    assert reclaim_temporaries(tmp_path, r"\.e\.json\.") == 1
    assert not live.exists()
