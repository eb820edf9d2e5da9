"""Issue 28, third round (design/logstore.md "compaction off the tick thread"): the
background writer hands the snapshot file to the disk a chunk at a time and never has more
than two chunks in flight, so a journal fdatasync running meanwhile waits behind at most
those (written whole and then fsynced, 80 MB held it for up to 146 ms).

Real files, the real sync_file_range under a recorder."""

from __future__ import annotations

import ctypes
import errno
import os
import threading

from logstore import snapshot
from logstore.snapshot import SnapshotHooks, decode_snapshot
from logstore.state import LogState

CHUNK = 4096
DATA = ((b"l", 9, 1), (b"p", 8, 1), {"h:1"})


def _state(entries: int) -> LogState:
    state = LogState()
    for i in range(entries):
        state.apply_append("big" if i % 3 else f"s{i % 7}", b"%06d" % i * 10, None, ())
    return state


class _Recorder:
    """sync_file_range calls as (offset, length, flags), passed on to the real call (when
    there is one) or answered as `fail_errno` says."""

    def __init__(self, fail_errno: int = 0) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.fail_errno = fail_errno
        self.real = snapshot._libc_sync_file_range()

    def __call__(self, fd: int, off: int, n: int, flags: int) -> int:
        self.calls.append((off, n, flags))
        if self.fail_errno:
            ctypes.set_errno(self.fail_errno)
            return -1
        return 0 if self.real is None else self.real(fd, off, n, flags)


def _background_write(tmp_path, state: LogState) -> tuple[str, SnapshotHooks]:
    hooks = SnapshotHooks(state, threading.Lock(), name="t", chunk_bytes=CHUNK)
    path = str(tmp_path / "snapshot")
    assert hooks.start_write(path, 9, DATA)
    assert hooks.close()
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.SUCCESS, 9)
    return path, hooks


def test_the_writer_hands_each_chunk_to_the_disk_and_keeps_two_in_flight(tmp_path, monkeypatch):
    recorder = _Recorder()
    monkeypatch.setattr(snapshot, "_SYNC_FILE_RANGE", recorder)
    state = _state(3000)
    path, _ = _background_write(tmp_path, state)
    size = os.path.getsize(path)
    assert size > 20 * CHUNK

    starts = [(off, n) for off, n, flags in recorder.calls if flags == snapshot._SFR_WRITE]
    waits = [
        (off, n)
        for off, n, flags in recorder.calls
        if flags == snapshot._SFR_WAIT_BEFORE | snapshot._SFR_WRITE | snapshot._SFR_WAIT_AFTER
    ]
    assert len(starts) + len(waits) == len(recorder.calls)
    # Every byte handed over once, in order, in chunks of CHUNK (the last one shorter).
    assert [off for off, _ in starts] == list(range(0, size, CHUNK))
    assert sum(n for _, n in starts) == size
    assert all(n == CHUNK for _, n in starts[:-1])
    # After each chunk is started, the writer waits for the one before it: no more than
    # two are ever in flight.
    assert waits == starts[:-1]
    order = [off for off, _, _ in recorder.calls]
    assert order[:1] == [0]
    for k in range(1, len(starts)):
        assert order[2 * k - 1 : 2 * k + 1] == [starts[k][0], starts[k - 1][0]]

    with open(path, "rb") as f:
        got, _ = decode_snapshot(f.read())
    assert got.read("big", limit=10_000) == state.read("big", limit=10_000)
    assert (got.live_entries, got.live_bytes) == (state.live_entries, state.live_bytes)


def test_without_sync_file_range_each_chunk_is_fdatasynced(tmp_path, monkeypatch):
    """A kernel or file system without sync_file_range (ENOSYS, EINVAL): the writer falls
    back to an fdatasync per chunk, and asks sync_file_range no more."""
    recorder = _Recorder(fail_errno=errno.ENOSYS)
    monkeypatch.setattr(snapshot, "_SYNC_FILE_RANGE", recorder)
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    state = _state(3000)
    path, _ = _background_write(tmp_path, state)
    size = os.path.getsize(path)
    assert len(recorder.calls) == 1
    assert synced == [*range(CHUNK, size, CHUNK), size]
    with open(path, "rb") as f:
        got, _ = decode_snapshot(f.read())
    assert got.read("big", limit=10_000) == state.read("big", limit=10_000)
