"""Opening an input's files: regular files only.

A log directory copied from anywhere may hold a ``quorum-state`` or a segment that is a symbolic link to
a file of the reader's (its bytes would be copied into the warehouse, ``rejected.raw`` and
``quorum_files.content`` included), or a FIFO named like a segment (reading it waits for a writer
forever). Inside a directory, only regular files are read: the open itself neither follows a link nor
waits (``O_NOFOLLOW | O_NONBLOCK``), and what was opened is checked with ``fstat``, so the file cannot be
swapped for another between a check and the open. A path the user names on the command line is
resolved first by the caller: following a link the user typed is the user's choice.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class NotRegularFile(OSError):
    """A file the reader refuses to open: not a regular file of its own."""


def kind(mode: int) -> str:
    """What a file of ``mode`` is, as a message says it."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def is_regular(path: str | os.PathLike) -> bool:
    """Whether ``path`` itself (not what a link points to) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading if it is a regular file itself; ``NotRegularFile`` saying what it is
    otherwise (a missing file raises ``FileNotFoundError`` as ``open`` does)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "a symbolic link, not followed inside a log directory",
                                 os.fspath(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"{kind(mode)}, not a regular file", os.fspath(path))
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of a regular file (``open_regular``); at most ``limit`` + 1 of them (more than ``limit``
    says the file is longer)."""
    with open_regular(Path(path)) as handle:
        return handle.read(-1 if limit is None else limit + 1)
