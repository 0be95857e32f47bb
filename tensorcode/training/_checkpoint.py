"""Resumable training checkpoints: a directory of ``training.json`` and immutable safetensors generations.

``training.json`` is small: format and version, the name, SHA-256 and size of the current tensors file, steps,
progress, operation descriptions, module modes per submodule path, the optimizer layout (type, param group
hyperparameters, owner names per parameter, slot shapes and step counters) and RNG metadata. Every tensor
lives in one ``tensors-<uuid4 hex>.safetensors`` file: ``model/<operation>/<name>`` (a shared tensor once,
under its first name), ``optimizer/<parameter index>/<slot>``, ``rng/python``, ``rng/torch`` and
``rng/cuda/<device>`` when CUDA is in use.

A save writes the tensors under a temporary name, fsyncs them and renames the file to its final, never
rewritten name; only then is ``training.json`` switched (temporary file, fsync, ``os.replace``). A crash at
any point therefore leaves the previous ``training.json`` naming its own intact generation. Older generations
stay on disk until the directory is removed.

A load reads the tensors file once, hashing the bytes it parses, and checks everything against the trainer
before changing anything; applying is then all or nothing. The loaded tensors become the model's memory
rather than being copied into it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import random
import re
import uuid
import warnings
from pathlib import Path

from .. import _safetensors
from .. import checkpoint as standalone
from .._atomic import exclusive, fsync_directory, reclaim_temporaries, write_atomic
from .._checkpoint_state import (
    MANIFEST_MAX_BYTES,
    VERSION,
    ModelState,
    Rollback,
    adopt_model,
    adoptable,
    apply_model,
    check_header,
    check_model,
    check_operations,
    check_optimizer,
    check_tensor,
    describe_operations,
    dtype_name,
    field,
    memory_snapshot,
    optimizer_state,
    read_json,
    state_bytes,
)
from .._files import open_regular, read_regular
from ..errors import CheckpointError

FORMAT = "tensorcode-training-checkpoint"
MANIFEST = "training.json"
_TENSORS = re.compile(r"tensors-[0-9a-f]{32}\.safetensors")
_SHA256 = re.compile(r"[0-9a-f]{64}")
LOCK = ".training.lock"
_PYTHON_WORDS = 625  # random.getstate(): 624 Mersenne Twister words and the position


def save_checkpoint(trainer, directory: str | os.PathLike, progress: dict | None = None) -> None:
    """Write a new generation of ``trainer``'s state into ``directory`` and switch ``training.json`` to it."""
    directory = Path(directory)
    progress = _progress(trainer.progress if progress is None else progress)
    steps = trainer.steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise CheckpointError(f"trainer.steps must be a nonnegative integer, got {steps!r}")
    model = ModelState(trainer.operations)
    layout, slots = optimizer_state(trainer.optimizer, model)
    rng, tensors = _rng_state()
    tensors = {
        **{f"model/{k}": t for k, t in model.tensors.items()},
        **{f"optimizer/{k}": t for k, t in slots.items()},
        **tensors,
    }
    tensors = _storable(tensors)
    name = f"tensors-{uuid.uuid4().hex}.safetensors"
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "tensors": {"file": name},
        "steps": steps,
        "progress": progress,
        "operations": describe_operations(trainer.operations),
        "modes": _modes(trainer.operations),
        "model": {
            "tensors": {
                k: {"shape": list(t.shape), "dtype": dtype_name(t.dtype)} for k, t in model.tensors.items()
            },
            "aliases": model.aliases,
        },
        "optimizer": layout,
        "rng": rng,
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _saving(directory, name):
            _check_replaceable(directory / MANIFEST)
            digest, size = _write_tensors(directory / name, tensors)
            try:
                manifest["tensors"].update(sha256=digest, bytes=size)
                text = json.dumps(manifest, separators=(",", ":"), allow_nan=False).encode("utf-8")
                fsync_directory(directory)
                write_atomic(directory / MANIFEST, text)
            except BaseException:
                (directory / name).unlink(missing_ok=True)  # never referenced: the previous manifest still rules
                raise
            fsync_directory(directory)
    except OSError as exc:
        raise CheckpointError(f"{directory}: cannot write checkpoint: {exc}") from exc


@contextlib.contextmanager
def _saving(directory: Path, name: str):
    """Hold the directory's save lock, reclaim what killed saves left, and record ``name`` as pending.

    The lock file names the generation a save is writing until ``training.json`` refers to it. A save killed
    after publishing its tensors file but before switching ``training.json`` leaves a generation that nothing
    ever referred to; the next save finds it named there and removes it. Generations that ``training.json``
    once referred to stay, as documented.
    """
    try:
        lock = exclusive(directory / LOCK)
    except BlockingIOError as exc:
        raise CheckpointError(
            f"{directory}: another checkpoint save into this directory is in progress (it holds {LOCK}); "
            "save each run into its own directory, or wait for the other save to finish"
        ) from exc
    with lock as handle:
        pending = handle.read(128).decode("ascii", "replace")
        if _TENSORS.fullmatch(pending) and pending != _current_generation(directory):
            (directory / pending).unlink(missing_ok=True)
        # Holding the lock, no other checkpoint writer is between creating and locking a file: no grace.
        reclaim_temporaries(directory, r"\.tensors-[0-9a-f]{32}\.safetensors\.", grace=0)
        reclaim_temporaries(directory, re.escape(f".{MANIFEST}."), grace=0)
        _record(handle, name)
        yield
        _record(handle, "")


def pending_generation(directory: Path) -> str:
    """The tensors file the lock file names: a save is writing it, or was killed before ``training.json`` named
    it (the next save removes it); ``""`` when none is named or the lock file cannot be read."""
    try:
        name = read_regular(directory / LOCK, max_bytes=128, error=OSError, what="lock", follow=False)
    except OSError:
        return ""
    name = name.decode("ascii", "replace")
    return name if _TENSORS.fullmatch(name) else ""


def _record(handle, name: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(name.encode("ascii"))
    handle.flush()


def _current_generation(directory: Path) -> str | None:
    """The tensors file ``training.json`` refers to; ``""`` if there is no manifest, None if it is unreadable."""
    if not (directory / MANIFEST).exists():
        return ""
    try:
        entry = read_json(directory / MANIFEST, follow=False).get("tensors")
    except CheckpointError:
        return None
    return entry.get("file") if isinstance(entry, dict) else None


def load_checkpoint(
    trainer, path: str | os.PathLike, *, max_bytes: int | None = None, max_manifest_bytes: int = MANIFEST_MAX_BYTES
) -> dict:
    """Restore a checkpoint directory (or a standalone JSON file) into ``trainer``; returns the progress.

    A standalone ``tensorcode.checkpoint`` file restores model and optimizer state only; the trainer's random
    state, modes, steps and progress stay as they are, and its current progress is returned.

    Every file read must be a regular file inside the directory (symbolic links are refused). ``training.json``
    may hold at most ``max_manifest_bytes`` (64 MiB); the tensors file (or a standalone file) at most
    ``max_bytes``, by default what this trainer's state can need: four times its model state plus 1 MiB (six
    times plus 16 MiB for base64 standalone files).
    """
    path = Path(path)
    model_bytes = state_bytes(trainer.operations)
    if path.is_dir():
        directory, manifest = path, path / MANIFEST
        if not os.path.lexists(manifest):
            raise CheckpointError(f"{path} holds no {MANIFEST}; it is not a training checkpoint directory")
        record = read_json(manifest, max_bytes=max_manifest_bytes, follow=False)
    else:
        limit = max(max_manifest_bytes, 6 * model_bytes + 16 * 2**20) if max_bytes is None else max_bytes
        record = read_json(path, max_bytes=limit)
        if record.get("format") == standalone.FORMAT:
            standalone.restore(record, path, trainer.operations, trainer.optimizer)
            return copy.deepcopy(trainer.progress)
        directory, manifest = path.parent, path
    check_header(record, FORMAT, manifest)
    limit = 4 * model_bytes + 2**20 if max_bytes is None else max_bytes
    plan = _validate(record, directory, trainer, limit)
    model, copies, prepared, modes, rng, steps, progress = plan
    # Everything new is built and checked by now. The loaded tensors become the parameters' and buffers' memory
    # (no copy, and no snapshot: undoing it hands the old memory back); only a tensor that shares its storage
    # is written into, and snapshotted first.
    adopt, copy_in = adoptable(copies)
    with Rollback([tensor for tensor, _ in copy_in], trainer.optimizer) as rollback:
        rollback.add(_rng_snapshot(rng))
        rollback.add(_modes_snapshot(modes))
        rollback.add(_trainer_snapshot(trainer))
        rollback.add(memory_snapshot(adopt))
        adopt_model(adopt)
        apply_model(copy_in)
        _apply_optimizer(trainer.optimizer, prepared)
        _apply_modes(modes)
        _apply_rng(rng)
        trainer.steps = steps
        trainer.progress = progress
    return copy.deepcopy(progress)


def _validate(record: dict, directory: Path, trainer, max_bytes: int) -> tuple:
    """Check the manifest, the tensors file and every tensor against the trainer; change nothing."""
    entry = field(record, "tensors", dict, MANIFEST)
    name = field(entry, "file", str, f"{MANIFEST} tensors")
    if not _TENSORS.fullmatch(name):
        raise CheckpointError(
            f"{MANIFEST} names tensors file {name!r}; expected tensors-<32 hex digits>.safetensors in the "
            "checkpoint directory"
        )
    digest = field(entry, "sha256", str, f"{MANIFEST} tensors")
    size = field(entry, "bytes", int, f"{MANIFEST} tensors")
    if not _SHA256.fullmatch(digest) or size < 0:
        raise CheckpointError(f"{MANIFEST}: malformed checksum {digest!r} or size {size!r} for {name}")
    steps = field(record, "steps", int, MANIFEST)
    if steps < 0:
        raise CheckpointError(f"{MANIFEST}: steps must be nonnegative, got {steps}")
    progress = _progress(field(record, "progress", dict, MANIFEST))
    check_operations(field(record, "operations", dict, MANIFEST), trainer.operations)
    modes = _check_modes(field(record, "modes", dict, MANIFEST), trainer.operations)
    saved_model = field(record, "model", dict, MANIFEST)
    model_meta = field(saved_model, "tensors", dict, f"{MANIFEST} model")
    aliases = field(saved_model, "aliases", dict, f"{MANIFEST} model")
    optimizer = field(record, "optimizer", dict, MANIFEST)
    slot_keys = [
        f"{i}/{slot}"
        for i, slots in field(optimizer, "state", dict, f"{MANIFEST} optimizer").items()
        if isinstance(slots, dict)
        for slot in slots
    ]
    rng_meta = field(record, "rng", dict, MANIFEST)
    cuda = field(rng_meta, "cuda", list, f"{MANIFEST} rng")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in cuda) or len(
        set(cuda)
    ) != len(cuda):
        raise CheckpointError(f"{MANIFEST}: rng cuda must list distinct device indices, got {cuda!r}")

    expected = (
        {f"model/{k}" for k in model_meta}
        | {f"optimizer/{k}" for k in slot_keys}
        | {"rng/python", "rng/torch"}
        | {f"rng/cuda/{i}" for i in cuda}
    )
    payload = _read_tensors(directory / name, digest, size, expected, max_bytes)
    model = ModelState(trainer.operations)
    copies = check_model(model_meta, aliases, _section(payload, "model/"), model)
    prepared = check_optimizer(optimizer, _section(payload, "optimizer/"), trainer.optimizer, model)
    rng = _check_rng(rng_meta, payload)
    return model, copies, prepared, modes, rng, steps, progress


def _read_tensors(path: Path, digest: str, size: int, expected: set, max_bytes: int) -> dict:
    """The tensors of ``path``, which must hold exactly the ``expected`` names and match its checksum.

    The header is read and checked first, so a hostile file costs at most its header before it is refused; the
    data is then read once, straight into the tensors, and hashed on the way. Any refusal before the checksum
    was verified is reported as a checksum failure if the file fails it: corruption is the likelier story.
    """
    try:
        handle, actual = open_regular(path, error=CheckpointError, what="tensors file", follow=False)
    except CheckpointError as exc:
        if not os.path.lexists(path):
            raise CheckpointError(
                f"{MANIFEST} refers to {path.name}, which is missing from {path.parent}; keep the tensors file "
                f"with {MANIFEST} when moving a checkpoint"
            ) from exc
        raise
    with handle:
        if actual != size:
            raise CheckpointError(
                f"{path.name} fails its checksum ({actual} bytes, {size} recorded): the file is corrupted or "
                "was modified"
            )
        if size > max_bytes:
            raise CheckpointError(
                f"{path.name} is {size:,} bytes, more than this trainer's state can need ({max_bytes:,}); pass a "
                "larger max_bytes to load a checkpoint you trust"
            )
        hasher = hashlib.sha256()
        try:
            entries, _, header = _safetensors.read_header(
                handle, size, max_tensors=len(expected), error=CheckpointError, where=path.name
            )
            missing, unexpected = sorted(expected - set(entries)), sorted(set(entries) - expected)
            if missing:
                raise CheckpointError(f"{MANIFEST} refers to tensors that {path.name} does not hold: {missing}")
            if unexpected:
                raise CheckpointError(f"{path.name} holds tensors that {MANIFEST} does not refer to: {unexpected}")
            hasher.update(header)
            payload = _safetensors.read_data(handle, entries, hasher, error=CheckpointError, where=path.name)
        except CheckpointError as exc:
            if _checksum_fails(handle, digest):
                raise CheckpointError(
                    f"{path.name} fails its checksum: the file is corrupted or was modified"
                ) from exc
            raise
        if hasher.hexdigest() != digest:
            raise CheckpointError(f"{path.name} fails its checksum: the file is corrupted or was modified")
    return payload


def _checksum_fails(handle, digest: str) -> bool:
    hasher = hashlib.sha256()
    try:
        handle.seek(0)
        while chunk := handle.read(4 * 2**20):
            hasher.update(chunk)
    except OSError:
        return True
    return hasher.hexdigest() != digest


def _write_tensors(path: Path, tensors: dict) -> tuple[str, int]:
    """Publish ``tensors`` as the safetensors file ``path``; returns its SHA-256 and size.

    The file is streamed straight from tensor memory and hashed on the way, rather than built in memory by
    ``safetensors.torch.save`` and hashed afterwards: one pass over the bytes instead of three.
    """
    digest, size = hashlib.sha256(), 0

    def hashed():
        nonlocal size
        for chunk in _safetensors_chunks(tensors):
            digest.update(chunk)
            size += memoryview(chunk).nbytes
            yield chunk

    write_atomic(path, hashed())
    return digest.hexdigest(), size


def _safetensors_chunks(tensors: dict):
    try:
        yield from _safetensors.chunks(tensors, {"format": FORMAT})
    except ValueError as exc:
        raise CheckpointError(str(exc)) from exc


def _section(payload: dict, prefix: str) -> dict:
    return {k.removeprefix(prefix): v for k, v in payload.items() if k.startswith(prefix)}


def _storable(tensors: dict) -> dict:
    """Detached contiguous CPU tensors; distinct tensors over one storage are copied (safetensors refuses)."""
    stored, storages = {}, set()
    for key, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if tensor.numel() and storage in storages:
            tensor = tensor.clone()
        storages.add(storage)
        stored[key] = tensor
    return stored


def _check_replaceable(manifest: Path) -> None:
    if not manifest.exists():
        return
    try:
        existing = read_json(manifest)
    except CheckpointError:
        existing = {}
    if existing.get("format") != FORMAT:
        raise CheckpointError(f"{manifest} exists and is not a training checkpoint; choose another directory")


def _progress(value) -> dict:
    if not isinstance(value, dict):
        raise CheckpointError(f"progress must be a JSON mapping, got {type(value).__name__}")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"progress must be JSON-safe: {exc}") from exc


# -- module modes --------------------------------------------------------------------------------------------
def _modes(operations: dict) -> dict:
    import torch

    return {
        name: {path: module.training for path, module in op.named_modules(remove_duplicate=False)}
        for name, op in operations.items()
        if isinstance(op, torch.nn.Module)
    }


def _check_modes(saved: dict, operations: dict) -> list:
    """``(module, training)`` pairs for every submodule, checked against the current module structure."""
    import torch

    modules = {name: op for name, op in operations.items() if isinstance(op, torch.nn.Module)}
    if set(saved) != set(modules):
        raise CheckpointError(
            f"{MANIFEST}: module modes recorded for {sorted(saved)}, expected {sorted(modules)}"
        )
    pairs, chosen = [], {}
    for name, op in modules.items():
        paths, current = saved[name], dict(op.named_modules(remove_duplicate=False))
        if not isinstance(paths, dict) or set(paths) != set(current):
            found = sorted(paths) if isinstance(paths, dict) else paths
            raise CheckpointError(
                f"{MANIFEST}: module modes of {name!r} cover {found}, expected {sorted(current)}"
            )
        for path, training in paths.items():
            module = current[path]
            if not isinstance(training, bool) or chosen.setdefault(id(module), training) != training:
                raise CheckpointError(
                    f"{MANIFEST}: module mode of {name}:{path or '<root>'} is invalid ({training!r})"
                )
            pairs.append((module, training))
    return pairs


def _apply_modes(pairs: list) -> None:
    for module, training in pairs:
        module.training = training


def _modes_snapshot(pairs: list):
    before = [(module, module.training) for module, _ in pairs]

    def restore() -> None:
        for module, training in before:
            module.training = training

    return restore


# -- random state --------------------------------------------------------------------------------------------
def _rng_state() -> tuple[dict, dict]:
    import torch

    version, words, gauss_next = random.getstate()
    tensors = {"rng/python": torch.tensor(words, dtype=torch.int64), "rng/torch": torch.get_rng_state()}
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda/{device}"] = state
            cuda.append(device)
    return {"python": {"version": version, "gauss_next": gauss_next}, "cuda": cuda}, tensors


def _check_rng(meta: dict, payload: dict) -> dict:
    """The random states to set, each checked by setting it on a scratch generator first."""
    import torch

    python = field(meta, "python", dict, f"{MANIFEST} rng")
    version, gauss_next = python.get("version"), python.get("gauss_next")
    words = payload["rng/python"]
    check_tensor(words, [_PYTHON_WORDS], "int64", "Python RNG payload")
    state = (version, tuple(int(w) for w in words.tolist()), gauss_next)
    if (
        not all(0 <= w < 2**32 for w in state[1])
        or state[1][-1] > 624
        or not (gauss_next is None or isinstance(gauss_next, float))
    ):
        raise CheckpointError("Python RNG payload is corrupted (values out of range)")
    try:
        random.Random().setstate(state)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"Python RNG payload is corrupted: {exc}") from exc
    torch_state = payload["rng/torch"]
    check_tensor(torch_state, [torch.get_rng_state().numel()], "uint8", "PyTorch CPU RNG payload")
    try:
        torch.Generator().set_state(torch_state.clone())
    except RuntimeError as exc:
        raise CheckpointError(f"PyTorch CPU RNG payload is corrupted: {exc}") from exc
    cuda = {}
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skipped = []
    for device in meta["cuda"]:
        value = payload[f"rng/cuda/{device}"]
        if value.dtype != torch.uint8 or value.dim() != 1:
            raise CheckpointError(f"CUDA RNG payload of device {device} must be a 1-D uint8 tensor")
        if device >= devices:
            skipped.append(device)
            continue
        size = torch.cuda.get_rng_state(device).numel()
        check_tensor(value, [size], "uint8", f"CUDA RNG payload of device {device}")
        cuda[device] = value
    if skipped:
        warnings.warn(
            f"the checkpoint holds CUDA random state for devices {skipped}, which this host lacks; "
            "it is not restored, so stochastic continuation will differ",
            RuntimeWarning,
            stacklevel=4,
        )
    return {"python": state, "torch": torch_state, "cuda": cuda}


def _apply_rng(rng: dict) -> None:
    _set_rng(rng)


def _set_rng(rng: dict) -> None:
    import torch

    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    for device, state in rng["cuda"].items():
        torch.cuda.set_rng_state(state, device)


def _rng_snapshot(rng: dict):
    import torch

    before = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": {device: torch.cuda.get_rng_state(device) for device in rng["cuda"]},
    }
    return lambda: _set_rng(before)


# -- optimizer and trainer -----------------------------------------------------------------------------------
def _apply_optimizer(optimizer, prepared: dict) -> None:
    optimizer.load_state_dict(prepared)


def _trainer_snapshot(trainer):
    steps, progress = trainer.steps, copy.deepcopy(trainer.progress)

    def restore() -> None:
        trainer.steps = steps
        trainer.progress = progress

    return restore
