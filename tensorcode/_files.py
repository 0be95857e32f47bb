"""Opening files that may come from someone else: regular files only, of a bounded size, read exactly once.

A path can name a named pipe (a read waits for a writer forever), a device (``/dev/zero`` never ends), or a
symbolic link to either. ``open_regular`` looks before it opens (``stat`` follows links, so a link to a device is
refused without opening the device), opens without blocking and without acquiring a controlling terminal, and
checks again on the open descriptor, so a path swapped in between is caught too. Files picked by name inside a
directory being loaded are opened with ``follow=False``: a symbolic link there is refused, so a checkpoint
directory can never make the loader read a file outside it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)


def open_regular(path: str | os.PathLike, *, error: type[Exception], what: str, follow: bool = True) -> tuple:
    """Open ``path`` for reading if it is a regular file; returns ``(file object, size)``.

    Raises ``error`` naming ``path`` when it is missing, not a regular file, a symbolic link (``follow=False``),
    or unreadable.
    """
    path = Path(path)
    try:
        info = os.stat(path, follow_symlinks=follow)
        if not follow and stat.S_ISLNK(info.st_mode):
            raise error(_link(path, what))
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: cannot read {what}: it is {file_kind(info.st_mode)}, not a regular file")
        fd = os.open(path, _FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0)))
    except FileNotFoundError as exc:
        raise error(f"{path}: cannot read {what}: no such file") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(_link(path, what)) from exc
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    handle = os.fdopen(fd, "rb", buffering=0)
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):  # replaced between the look and the open
            raise error(f"{path}: cannot read {what}: it is {file_kind(info.st_mode)}, not a regular file")
    except BaseException:
        handle.close()
        raise
    return handle, info.st_size


def read_regular(path: str | os.PathLike, *, max_bytes: int, error: type[Exception], what: str,
                 follow: bool = True) -> bytes:
    """The whole content of the regular file ``path``, refused before reading if it exceeds ``max_bytes``."""
    handle, size = open_regular(path, error=error, what=what, follow=follow)
    with handle:
        if size > max_bytes:
            raise error(
                f"{path}: the {what} is {size:,} bytes, over the limit of {max_bytes:,} bytes; pass a larger "
                "max_bytes to load a file you trust"
            )
        return read_exactly(handle, size, path, error=error, what=what)


def read_exactly(handle, size: int, path, *, error: type[Exception], what: str) -> bytes:
    """``size`` bytes from ``handle``; a file that shrinks or grows meanwhile is refused."""
    try:
        # One read into a fresh bytes object: a preallocated buffer would be zeroed first, costing a third more.
        data = handle.read(size)
        while len(data) < size:  # a single read(2) stops short of 2 GiB
            more = handle.read(size - len(data))
            if not more:
                raise error(f"{path}: cannot read {what}: it shrank while it was read")
            data += more
        if handle.read(1):
            raise error(f"{path}: cannot read {what}: it grew while it was read")
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    return data


def _link(path: Path, what: str) -> str:
    return f"{path}: cannot read {what}: it is a symbolic link, and links inside a loaded directory are not followed"


def file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"
