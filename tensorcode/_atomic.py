"""Atomic file publication shared by experiences, checkpoints and tool artifacts.

Data goes to a temporary file in the destination's directory (same filesystem, so the rename is atomic), is
fsynced, and is published with ``os.replace``: a reader sees the old file or the new one, never half of one,
and any failure leaves the old file untouched and no temporary file behind.

A process killed mid-save (an OOM kill, a worker restart) cannot clean up, so every save first reclaims the
temporary files earlier saves to the same destination left. A writer holds an ``flock`` on its temporary file
from before its first byte until after the rename; the kernel drops the lock when the writer dies, so a
temporary file that is unlocked and not empty is abandoned for certain. An empty unlocked one may belong to a
writer between creating and locking it, so it is reclaimed only once it is a minute old (it holds no space).
A caller that excludes other writers itself (a checkpoint directory's lock) passes ``grace=0``.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, so nothing is reclaimed
    fcntl = None

_EMPTY_GRACE_SECONDS = 60


def write_atomic(path: str | os.PathLike, data: bytes | str | Iterable[bytes], *, durable: bool = True) -> None:
    """Publish ``data`` (bytes, text written as UTF-8, or an iterable of byte chunks) at ``path``.

    ``durable=False`` skips the fsync: the file is still published whole or not at all for every reader, but a
    machine crash may lose it. For a caller that writes many files and makes them durable together afterwards:
    an fsync waits for the disk (0.4-2.3 ms a small file, measured on one machine), once per file.
    """
    path = Path(path)
    reclaim_temporaries(path.parent, re.escape(f".{path.name}."))
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    # O_EXCL with mode 0o666 lets the process umask decide permissions, as for any ordinary file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # ours alone: the file was just created
            if isinstance(data, str):
                data = data.encode("utf-8")
            for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                handle.write(chunk)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
            os.replace(tmp, path)  # still locked: a reclaimer must never see this file complete and unlocked
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def reclaim_temporaries(directory: str | os.PathLike, prefix: str, *, grace: float = _EMPTY_GRACE_SECONDS) -> int:
    """Remove abandoned ``<prefix><32 hex>.tmp`` files (``prefix`` a regex) in ``directory``; returns how many.

    An unlocked empty file younger than ``grace`` seconds is left: its writer may not have locked it yet.
    """
    if fcntl is None:
        return 0
    pattern = re.compile(f"{prefix}[0-9a-f]{{32}}\\.tmp")
    removed = 0
    try:
        entries = [entry.name for entry in os.scandir(directory) if pattern.fullmatch(entry.name)]
    except OSError:
        return 0
    for name in entries:
        removed += _reclaim(Path(directory) / name, grace)
    return removed


def _reclaim(path: Path, grace: float) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return 0  # gone already, or not ours to open
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # a live writer holds it
        info = os.fstat(fd)
        if info.st_size == 0 and time.time() - info.st_mtime < grace:
            return 0
        try:
            if os.stat(path, follow_symlinks=False).st_ino != info.st_ino:
                return 0
            os.unlink(path)
        except OSError:
            return 0
        return 1
    finally:
        os.close(fd)


def exclusive(path: Path):
    """``path`` opened read-write (created if needed, never through a link) under a non-blocking exclusive
    ``flock``; raises ``BlockingIOError`` if another open file holds it. Closing the file releases it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o666)
    handle = os.fdopen(fd, "r+b", buffering=0)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        handle.close()
        raise
    return handle


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename durable; a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
