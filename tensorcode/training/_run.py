"""A resumable training run: epochs over experiences, checkpoints every N steps, exact resume, clean stops.

``run`` is the loop every training job and offline user would otherwise write around ``Trainer.step``. Its
resumable state is the trainer's checkpoint (parameters, optimizer, modes, random state) plus a data cursor
kept in the checkpoint's ``progress`` under ``"run"``: the epoch, the position in that epoch's order, the order
seed and the loss history. The order of an epoch is a function of ``(seed, epoch)`` alone, so the cursor is
all a resumed run needs to visit the same experiences in the same order; re-running with the same
``checkpoint_dir`` after any interruption, ``kill -9`` included, ends with the same parameters, bit for bit on
CPU, as a run that was never interrupted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .._checkpoint_state import check_operations, read_json
from .._trace import Trace
from ..errors import CheckpointError
from ..experience import load_digested
from ._checkpoint import MANIFEST, pending_generation
from ._trainer import Trainer

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_LR = 0.001  # Trainer.from_tool's default
PROGRESS_KEY = "run"
_RUN_VERSION = 1


class RunError(ValueError):
    """A training run or evaluation was refused; the one-line message names the problem. Nothing was written."""


@dataclass(frozen=True)
class Report:
    """What ``callback`` receives after every update. Read it as attributes or as ``report["step"]``.

    ``step`` counts updates of the whole run (1 for the first, ``total`` for the last), also across resumes;
    ``epoch`` (1-based) and ``position`` (1-based, out of ``experiences``) place that update in its epoch.
    ``checkpointed`` says whether a checkpoint holding this step was written; ``eta_seconds`` extrapolates
    from the updates done in this process (``None`` until there is one).
    """

    step: int
    total: int
    epoch: int
    epochs: int
    position: int
    experiences: int
    loss: float
    checkpointed: bool
    resumed_from: int
    elapsed_seconds: float
    eta_seconds: float | None

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunResult:
    """The outcome of ``run``.

    ``losses`` holds one loss per update of the whole run, including updates made before a resume; ``steps``
    is their number; ``completed`` is False when a callback stopped the run early; ``progress`` is the
    cursor last written (or that would have been written, without a checkpoint directory); ``resumed_from`` is
    the step the run started from in this call (0 for a fresh run).
    """

    losses: list[float]
    steps: int
    total: int
    completed: bool
    progress: dict
    resumed_from: int


def run(
    tool: Any = None,
    experiences: Iterable = (),
    *,
    epochs: int = 1,
    checkpoint_dir: str | os.PathLike | None = None,
    interval: int = 100,
    seed: int = 0,
    shuffle: bool = True,
    optimizer: str = "sgd",
    lr: float | None = None,
    device: str = "auto",
    callback: Callable[[Report], Any] | None = None,
    trainer: Trainer | None = None,
) -> RunResult:
    """Train ``tool`` (an owned tool) or ``trainer`` (a ``Trainer``, e.g. from ``Trainer.from_ops``) on
    ``experiences`` (paths of experience files, or loaded experiences) for ``epochs`` passes, one update per
    experience.

    - ``checkpoint_dir``: written every ``interval`` updates, at the end and when a callback stops the run;
      if it already holds a checkpoint of this run, the run resumes from it. ``None``: no checkpoints.
    - ``seed`` orders the experiences of each epoch (when ``shuffle``) and seeds the run's own random stream
      (dropout); the caller's global random state is left as it was.
    - ``optimizer`` (``"sgd"``, ``"adam"`` or ``"adamw"``) and ``lr`` (default: the trainer's default) build the
      tool's optimizer; a given ``trainer`` brings its own optimizer instead.
    - ``device``: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``; the tool is moved there.
    - ``callback(report)`` runs after every update (see ``Report``); returning True stops the run at that
      step, after writing a checkpoint.

    Module modes are switched as training needs and restored when the run ends, however it ends.
    Raises ``RunError`` (a ``ValueError``) before writing anything for bad settings, an experience of another
    tool, or a checkpoint directory written by another tool, configuration or run.
    """
    settings = _check_settings(epochs, interval, seed, shuffle, optimizer, lr, device, callback)
    if trainer is not None:
        if tool is not None and tool is not getattr(trainer, "tool", None):
            raise RunError("pass either a tool or trainer=..., not both")
        if not isinstance(trainer, Trainer):
            raise RunError(f"trainer: expected a tensorcode.training.Trainer, got {type(trainer).__name__}")
    elif isinstance(tool, Trainer):
        trainer, tool = tool, None
    elif not callable(getattr(tool, "training_operations", None)):
        raise RunError(
            f"tool: expected an owned tool (tensorcode.tools) or trainer=Trainer, got {type(tool).__name__}"
        )
    if trainer is not None and (optimizer != "sgd" or lr is not None):
        raise RunError("optimizer and lr build a tool's optimizer; a given trainer brings its own")
    directory = None if checkpoint_dir is None else Path(checkpoint_dir)
    if directory is not None and directory.exists() and not directory.is_dir():
        raise RunError(f"checkpoint_dir: {directory} exists and is not a directory")
    target = _resolve_device(device, trainer)

    modules = modules_of(tool if trainer is None else trainer.operations)
    modes = [m.training for m in modules]
    with PrivateRandom(target):
        try:
            if trainer is None:
                tool.to(target)
                factory, rate = OPTIMIZERS[optimizer], DEFAULT_LR if lr is None else lr
                trainer = Trainer.from_tool(tool, optimizer=lambda ps: factory(ps, lr=rate), lr=rate)
            sessions, digest = load_sessions(experiences, trainer.operations)
            settings.update(
                optimizer=type(trainer.optimizer).__name__.lower(),
                lr=trainer.optimizer.param_groups[0].get("lr"),
                experiences=len(sessions),
                digest=digest,
            )
            cursor = _resume(directory, trainer, settings)
            if cursor is None:
                _seed(seed, target)
                cursor = {"step": 0, "losses": []}
            return _loop(trainer, sessions, settings, cursor, directory, callback)
        finally:
            for module, mode in zip(modules, modes, strict=True):
                module.training = mode


# -- the loop ----------------------------------------------------------------------------------------------------
def _loop(trainer, sessions, settings, cursor, directory, callback) -> RunResult:
    count, epochs, interval = len(sessions), settings["epochs"], settings["interval"]
    total = epochs * count
    losses = list(cursor["losses"])
    step = resumed_from = cursor["step"]
    order, order_epoch = None, -1
    saver = _Saver(trainer, directory)
    started = time.monotonic()
    progress = _progress(trainer, settings, step, losses)
    while step < total:
        epoch, position = divmod(step, count)
        if epoch != order_epoch:
            order, order_epoch = _order(settings["seed"], epoch, count, settings["shuffle"]), epoch
        losses.append(trainer.step(sessions[order[position]]))
        step += 1
        progress = _progress(trainer, settings, step, losses)
        checkpointed = directory is not None and (step % interval == 0 or step == total)
        if checkpointed:
            saver.save(progress)
        if callback is not None:
            elapsed = time.monotonic() - started
            done = step - resumed_from
            report = Report(
                step=step,
                total=total,
                epoch=epoch + 1,
                epochs=epochs,
                position=position + 1,
                experiences=count,
                loss=losses[-1],
                checkpointed=checkpointed,
                resumed_from=resumed_from,
                elapsed_seconds=elapsed,
                eta_seconds=elapsed / done * (total - step),
            )
            if callback(report) is True:
                if directory is not None and not checkpointed:
                    saver.save(progress)
                return RunResult(losses, step, total, step >= total, progress, resumed_from)
    return RunResult(losses, step, total, True, progress, resumed_from)


class _Saver:
    """Writes checkpoints and keeps two generations of tensors: the current one and the one before it.

    A checkpoint directory keeps every generation it ever wrote; a run writing one every 100 steps would fill
    the disk with copies of the model. Once ``training.json`` names a new generation, older ones are unused.
    """

    def __init__(self, trainer, directory: Path | None):
        self.trainer, self.directory = trainer, directory
        self.previous = None if directory is None else _generation(directory)

    def save(self, progress: dict) -> None:
        self.trainer.save_checkpoint(self.directory, progress=progress)
        current = _generation(self.directory)
        for path in self.directory.glob("tensors-*.safetensors"):
            if path.name not in (current, self.previous):
                path.unlink(missing_ok=True)
        self.previous = current


def _refuse_orphans(directory: Path) -> None:
    """A directory of checkpoint tensors without the ``training.json`` that says which to resume from is not
    started afresh: the fresh run's saves would delete those tensors, the only copy of the earlier run's work.
    A generation a killed save published before writing its first ``training.json`` is named in the lock file
    and is the save's to remove."""
    pending = pending_generation(directory)
    found = sorted(p.name for p in directory.glob("tensors-*.safetensors") if p.name != pending)
    if found:
        raise RunError(
            f"checkpoint_dir: {directory} holds checkpoint tensors ({found[0]}"
            f"{f' and {len(found) - 1} more' if len(found) > 1 else ''}) but no {MANIFEST}, which says which to "
            f"resume from; restore {MANIFEST}, or use a new directory"
        )


def _generation(directory: Path) -> str | None:
    """The tensors file ``training.json`` names, if any."""
    try:
        return read_json(directory / MANIFEST, follow=False)["tensors"]["file"]
    except (ValueError, KeyError, TypeError):  # CheckpointError is a ValueError
        return None


def _order(seed: int, epoch: int, count: int, shuffle: bool) -> list[int]:
    """The visiting order of one epoch: a function of (seed, epoch) only, so a cursor can resume it."""
    order = list(range(count))
    if shuffle:
        random.Random(f"tensorcode.run/{seed}/{epoch}").shuffle(order)
    return order


def _progress(trainer, settings: dict, step: int, losses: list[float]) -> dict:
    count = settings["experiences"]
    epoch, position = divmod(step, count)
    state = {
        "version": _RUN_VERSION,
        "step": step,
        "epoch": epoch,
        "position": position,
        **{k: settings[k] for k in ("seed", "shuffle", "epochs", "interval", "optimizer", "lr", "experiences")},
        "digest": settings["digest"],
        "losses": losses,
    }
    return {**trainer.progress, PROGRESS_KEY: state}


# -- resuming ----------------------------------------------------------------------------------------------------
# Settings a resumed run must share with the run that wrote the checkpoint; epochs may grow, interval may change.
_SAME = ("seed", "shuffle", "optimizer", "lr", "experiences", "digest")


def _resume(directory: Path | None, trainer, settings: dict) -> dict | None:
    """The saved cursor after restoring the checkpoint in ``directory``; None when there is none to resume."""
    if directory is None:
        return None
    if not (directory / MANIFEST).is_file():
        _refuse_orphans(directory)
        return None
    try:  # untrusted like any checkpoint: size, nesting and symbolic links are checked before anything is parsed
        manifest = read_json(directory / MANIFEST, follow=False)
    except CheckpointError as exc:
        raise RunError(f"checkpoint_dir: {_line(exc)}") from exc
    operations, progress = manifest.get("operations"), manifest.get("progress")
    if not isinstance(operations, dict) or not isinstance(progress, dict):
        raise RunError(f"checkpoint_dir: {directory / MANIFEST} is not a training checkpoint (its operations and "
                       "progress must be JSON objects)")
    saved = progress.get(PROGRESS_KEY)
    try:
        check_operations(operations, trainer.operations)
    except (CheckpointError, AttributeError, KeyError, TypeError) as exc:
        raise RunError(
            f"checkpoint_dir: {directory} holds a checkpoint of another tool or configuration: {_line(exc)}"
        ) from exc
    if not isinstance(saved, dict) or saved.get("version") != _RUN_VERSION:
        raise RunError(
            f"checkpoint_dir: {directory} holds a checkpoint that training.run did not write; use a new directory"
        )
    for key in _SAME:
        if saved.get(key) != settings[key]:
            what = "other experiences" if key == "digest" else f"{key}={saved.get(key)!r}, not {settings[key]!r}"
            raise RunError(
                f"checkpoint_dir: {directory} holds a run with {what}; re-run with the same settings to resume, "
                "or use a new directory"
            )
    losses, step = saved.get("losses"), saved.get("step")
    if not isinstance(losses, list) or not isinstance(step, int) or step != len(losses):
        raise RunError(f"checkpoint_dir: {directory / MANIFEST} holds a malformed run cursor")
    try:
        trainer.load_checkpoint(directory)
    except CheckpointError as exc:
        raise RunError(f"checkpoint_dir: {_line(exc)}") from exc
    return {"step": step, "losses": [float(v) for v in losses]}


# -- experiences ---------------------------------------------------------------------------------------------------
def load_sessions(experiences, operations: Mapping) -> tuple[list[Trace], str]:
    """Loaded sessions bound to ``operations`` and a digest that identifies them (file bytes or their record)."""
    if isinstance(experiences, (str, os.PathLike, Trace)):
        experiences = [experiences]
    try:
        items = list(experiences)
    except TypeError as exc:
        raise RunError(f"experiences: expected a list of paths or loaded experiences, got {experiences!r}") from exc
    if not items:
        raise RunError("experiences: nothing to train on; give at least one experience")
    bound = {id(op) for op in operations.values()}
    digest = hashlib.sha256()
    sessions = []
    for i, item in enumerate(items):
        if isinstance(item, Trace):
            if any(id(call.op) not in bound for call in item.calls):
                raise RunError(
                    f"experiences[{i}] was loaded with other operations than this tool's; load it with "
                    "operations=trainer.operations, or pass its path"
                )
            digest.update(_trace_digest(item))
            sessions.append(item)
        elif isinstance(item, (str, os.PathLike)):
            path = Path(item)
            try:
                session, file_digest = load_digested(path, operations=operations)
            except OSError as exc:
                raise RunError(f"{path}: cannot read experience file: {exc.strerror or exc}") from exc
            except ValueError as exc:
                raise RunError(_named(path, exc)) from exc
            digest.update(file_digest)
            sessions.append(session)
        else:
            raise RunError(f"experiences[{i}]: expected a path or a loaded experience, got {type(item).__name__}")
        if not sessions[-1].supervisions:
            raise RunError(f"experiences[{i}] has no supervision records; there is nothing to learn from it")
    return sessions, digest.hexdigest()


def _trace_digest(session: Trace) -> bytes:
    """What identifies an in-memory experience: its calls, losses and provenance (not its tensor values)."""
    record = [
        [call.name for call in session.calls],
        [[s.loss, s.source if isinstance(s.source, str) else list(s.source)] for s in session.supervisions],
    ]
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).digest()


# -- settings, devices, modes and random state ----------------------------------------------------------------
def _check_settings(epochs, interval, seed, shuffle, optimizer, lr, device, callback) -> dict:
    for name, value, least in (("epochs", epochs, 1), ("interval", interval, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise RunError(f"{name}: expected a positive integer number of {_UNITS[name]}, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**64:
        raise RunError(f"seed: expected an integer from -2**63 to 2**64 - 1 (torch's range), got {seed!r}")
    if not isinstance(shuffle, bool):
        raise RunError(f"shuffle: expected true or false, got {shuffle!r}")
    if optimizer not in OPTIMIZERS:
        raise RunError(f"optimizer: unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if lr is not None and (
        not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0
    ):
        raise RunError(f"lr: expected a positive finite learning rate, got {lr!r}")
    if device not in DEVICES:
        raise RunError(f"device: unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if callback is not None and not callable(callback):
        raise RunError(f"callback: expected a callable taking a progress report, got {type(callback).__name__}")
    return {"epochs": epochs, "interval": interval, "seed": seed, "shuffle": shuffle}


_UNITS = {"epochs": "passes over the experiences", "interval": "updates between checkpoints"}


def _resolve_device(device: str, trainer) -> torch.device:
    if trainer is not None:
        current = trainer.device
        if device != "auto" and current.type != device:
            raise RunError(f"device: the trainer's parameters are on {current}; build the trainer on {device}")
        return current
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RunError("device: 'cuda' was asked for but CUDA is not available here; use --device cpu or auto")
    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")


def modules_of(owner) -> list[torch.nn.Module]:
    if isinstance(owner, torch.nn.Module):
        return list(owner.modules())
    found, seen = [], set()
    for op in owner.values():
        if isinstance(op, torch.nn.Module):
            for module in op.modules():
                if id(module) not in seen:
                    seen.add(id(module))
                    found.append(module)
    return found


class PrivateRandom:
    """The run draws from its own random stream; the caller's Python and torch random state come back after."""

    def __init__(self, device: torch.device):
        self._devices = [device.index] if device.type == "cuda" else []

    def __enter__(self):
        self._python = random.getstate()
        self._fork = torch.random.fork_rng(devices=self._devices)
        self._fork.__enter__()

    def __exit__(self, *exc):
        try:
            return self._fork.__exit__(*exc)
        finally:
            random.setstate(self._python)


def _seed(seed: int, device: torch.device) -> None:
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _named(path: Path, exc: BaseException) -> str:
    """The error, naming the file it is about once: most of the loader's messages start with its path already."""
    line = _line(exc)
    return line if line.startswith(f"{path}: ") else f"{path}: {line}"
