"""An exclusive lock on a server's data directory, held for the life of the process.

Two processes on one data directory would each write its files as if alone: a second
logstore replica started on a live one's directory rewrote its Raft term and vote, a second
tablet server would interleave WAL writes. Every server takes this lock before it reads or
writes its directory, and tools that change a stopped server's files take it too.

The lock is a `flock` on `<dir>/lock`, which records `<pid> <holder>` so that a refusal
can name who holds it. The kernel drops it when its holder dies, kill -9 included, so a
crash never leaves a stale lock behind. Shared by every server kind (rpc is the one
package they all import).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from rpc.errors import IllegalState

LOCK_FILE = "lock"


class DirLockError(Exception):
    """The lock could not be taken for a reason other than another holder (a bad dir)."""


class DirLocked(DirLockError):
    """Another process holds the directory's lock; `owner` is what it recorded."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class DirLock:
    """A held lock; `release()` (or the process's death) drops it."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd  # None: this process already held the lock through another handle

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_dir(directory: Path | str, holder: str) -> DirLock:
    """Take `directory`'s exclusive lock without waiting (the directory must exist).

    DirLocked names the holder. Taking the lock again in the process that holds it
    succeeds, as a handle whose release keeps the first (tests run several servers, and
    restart them, within one process; the danger this guards against is two processes)."""
    path = Path(directory) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise DirLockError(f"cannot open {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DirLockError(f"cannot lock {path}: {e.strerror}") from None
        owner = lock_owner(path)
        if owner.split(" ", 1)[0] == str(os.getpid()):
            return DirLock(path, None)
        raise DirLocked(
            f"{Path(directory)} is in use by another process ({owner or 'pid unknown'})", owner
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {holder}\n".encode(), 0)
    return DirLock(path, fd)


def lock_server_dir(directory: Path | str, holder: str, stop_first: str) -> DirLock:
    """`lock_dir` for a server starting on its data dir: a refusal is IllegalState, which
    its command prints as one line, saying to stop `stop_first` first."""
    try:
        return lock_dir(directory, holder)
    except DirLocked as e:
        raise IllegalState(f"{e}: stop {stop_first} first") from None
    except DirLockError as e:
        raise IllegalState(str(e)) from None


def lock_owner(path: Path) -> str:
    """What the lock file at `path` records of its holder ("" if nothing readable)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""
