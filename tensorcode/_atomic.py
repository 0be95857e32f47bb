"""Atomic file publication shared by experiences, checkpoints and tool artifacts.

Data goes to a temporary file in the destination's directory (same filesystem, so the rename is atomic), is
fsynced, and is published with ``os.replace``: a reader sees the old file or the new one, never half of one,
and any failure leaves the old file untouched and no temporary file behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes | str | Iterable[bytes]) -> None:
    """Publish ``data`` (bytes, text written as UTF-8, or an iterable of byte chunks) at ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    # O_EXCL with mode 0o666 lets the process umask decide permissions, as for any ordinary file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, str):
                data = data.encode("utf-8")
            for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
