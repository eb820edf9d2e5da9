"""Issue 28, third round (design/logstore.md "compaction off the tick thread"): the
background writer hands the snapshot file to the disk a chunk at a time and never has more
than two chunks in flight, so a journal fdatasync running meanwhile waits behind at most
those (written whole and then fsynced, 80 MB held it for up to 146 ms); and it gives the
state the columns of the dict pages it encoded, so the next snapshot copies an unchanged
page in bulk instead of encoding its entries again.

Real files, the real sync_file_range under a recorder."""

from __future__ import annotations

import ctypes
import errno
import os
import threading

from logstore import snapshot
from logstore.api import Entry
from logstore.snapshot import SnapshotHooks, SnapshotMeta, decode_snapshot, encode_snapshot
from logstore.state import LoadedPage, LogState

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


def _pages(state: LogState, log: str) -> list:
    """The pages of `log` as a capture (a snapshot writer) gets them."""
    (copy,) = [c for c in state.capture().logs if c.name == log]
    return list(copy.pages)


def test_the_writer_gives_unchanged_dict_pages_their_columns(tmp_path):
    """After a background write, a small log's page (a dict: its tail never moved on) that
    did not change since the capture is copied as columns by the next capture; one changed
    meanwhile is not, and a change after the write drops the columns. The snapshots stay
    byte for byte what a state never snapshotted would write."""
    state = LogState()
    for i in range(30):
        state.apply_append(f"s{i % 3}", b"d%d" % i, None, ())
    state.apply_append("s0", b"inv", None, (1,))
    lock = threading.Lock()
    hooks = SnapshotHooks(state, lock, name="t", chunk_bytes=CHUNK)
    path = str(tmp_path / "snapshot")

    entered = threading.Event()
    release = threading.Event()
    real_adopt = hooks._adopt_columns

    def held_adopt(encoded):
        entered.set()
        assert release.wait(30)
        return real_adopt(encoded)

    hooks._adopt_columns = held_adopt  # type: ignore[method-assign]
    assert hooks.start_write(path, 9, DATA)
    assert entered.wait(30)
    with lock:  # s2 changes after the capture, before the writer hands its columns over
        state.apply_append("s2", b"late", None, ())
    release.set()
    assert hooks.close()
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.SUCCESS, 9)
    assert hooks._write is None

    s0, s1, s2 = (_pages(state, f"s{i}") for i in range(3))
    assert [type(p) for p in s0 + s1] == [LoadedPage, LoadedPage]
    assert type(s2[0]) is dict
    assert s0[0].invs is not None and list(s0[0].ids) == list(range(2, 12))
    assert state.logs["s0"][11] == Entry(11, b"inv", (1,))

    fresh = LogState()
    for name in state.log_names():
        fresh.restore_log(name, state.last_id(name), list(state.logs[name].values()))
    meta = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1",))
    assert encode_snapshot(state, meta) == encode_snapshot(fresh, meta)

    # A change after the write: the page is a dict again, its columns dropped.
    with lock:
        state.apply_append("s1", b"new", None, ())
        fresh.apply_append("s1", b"new", None, ())
    assert type(_pages(state, "s1")[0]) is dict
    assert encode_snapshot(state, meta) == encode_snapshot(fresh, meta)
    got, _ = decode_snapshot(encode_snapshot(state, meta))
    assert got.read("s1")[-1] == Entry(11, b"new", ())
