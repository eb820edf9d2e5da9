"""Compaction off the tick thread (issue 28, design/logstore.md "compaction off the tick
thread"): the snapshot is encoded by a writer thread from a consistent copy of the state,
appends keep committing while it is written, and the journal is trimmed only once it is
durably in place. Plus the copy on write of the state and the snapshot formats.

The encode is observed through a test hook: the module's encode function is wrapped to
record the thread it runs on and to hold it until the test has seen appends commit (no
wall-clock assertion anywhere)."""

from __future__ import annotations

import os
import struct
import threading

import crc32c
import pytest

from logstore import snapshot
from logstore.api import Entry
from logstore.replicated import SNAPSHOT_FILE, ReplicatedLogStore
from logstore.snapshot import (
    SNAP_HEADER,
    SNAPSHOT_MAGIC,
    SnapshotHooks,
    SnapshotMeta,
    decode_snapshot,
    encode_snapshot,
)
from logstore.state import LogState

from .helpers import FAST, PASSWORD, start_cluster, wait_for

HOLD_S = 60.0  # the held writer gives up after this (a test that failed never hangs)


class _HeldEncode:
    """Wraps the snapshot module's encode function: records the thread of each call and
    holds it until released."""

    def __init__(self, monkeypatch) -> None:
        # The writer encodes with encode_snapshot_parts; the code before issue 28 called
        # encode_snapshot from the serializer (on the tick thread).
        name = "encode_snapshot_parts" if hasattr(snapshot, "encode_snapshot_parts") else None
        name = name or "encode_snapshot"
        self._real = getattr(snapshot, name)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []
        monkeypatch.setattr(snapshot, name, self)

    def __call__(self, *args, **kwargs):
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.release.wait(HOLD_S)
        return self._real(*args, **kwargs)


@pytest.mark.integration
def test_compaction_runs_off_the_tick_thread_while_appends_commit(tmp_path, monkeypatch):
    (store,) = start_cluster(tmp_path, 1)
    addr = store.self_address
    held = _HeldEncode(monkeypatch)
    try:
        futures = [store.append_async("big", b"x%06d" % i) for i in range(3000)]
        futures += [store.append_async("small", b"s%d" % i) for i in range(10)]
        assert [f.result(timeout=60) for f in futures[:3000]] == list(range(1, 3001))
        for f in futures[3000:]:
            f.result(timeout=60)
        store.force_compaction()
        assert held.entered.wait(HOLD_S), "no snapshot encode started"
        tick_thread = store._node._SyncObj__thread.name
        assert held.threads == [f"logstore-snapshot-{addr}"], (held.threads, tick_thread)

        # The writer is held inside its encode: appends still commit, one at a time (each
        # waits for its commit) and conditionally.
        for i in range(200):
            assert store.append("big", b"after-%d" % i, expected_id=3001 + i, timeout_s=30) == (
                3001 + i
            )
        assert store.append("small", b"", invalidates=[1, 2], timeout_s=30) == 11
        assert not held.release.is_set()
        st = store.status()
        assert st["snapshots_written"] == 0 and st["journal_first_index"] <= 1

        held.release.set()
        wait_for(lambda: store.status()["snapshots_written"] >= 1, 60, "the snapshot written")
        wait_for(
            lambda: store.status()["journal_first_index"] > 1, 60, "the journal trimmed behind it"
        )
        # The snapshot is the state at the capture: none of the appends made while it was
        # being written (those are in the journal's tail).
        with open(os.path.join(store.data_dir, SNAPSHOT_FILE), "rb") as f:
            captured, _meta = decode_snapshot(f.read())
        assert captured.last_id("big") == 3000
        assert [e.id for e in captured.read("small", limit=100)] == list(range(1, 11))
        store.append("big", b"tail", timeout_s=30)
    finally:
        held.release.set()
        store.close()

    reopened = ReplicatedLogStore(addr, [addr], str(tmp_path / "r0"), PASSWORD, config=FAST)
    try:
        reopened.barrier(timeout_s=30)
        assert reopened.status()["snapshots_loaded"] == 1
        big = reopened.read("big", limit=10_000)
        assert [e.id for e in big] == list(range(1, 3202))
        assert big[2999].data == b"x%06d" % 2999 and big[3000].data == b"after-0"
        assert big[-1].data == b"tail"
        assert [e.id for e in reopened.read("small")] == list(range(3, 11))
    finally:
        reopened.close()


def test_capture_is_a_consistent_copy_while_the_state_changes():
    from logstore.state import PAGE_ID_BITS  # imported here: the module loads on older code

    state = LogState()
    page = 1 << PAGE_ID_BITS
    for i in range(2 * page + 10):
        state.apply_append("a", b"%d" % i, None, ())
    state.apply_append("b", b"only", None, ())
    meta = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1",))
    before = encode_snapshot(state, meta)

    copy = state.capture()
    # Change every page the copy holds: appends to the tail page, invalidations in the
    # first and second, a whole log's entry gone, a new log.
    state.apply_append("a", b"new", None, ())
    state.apply_append("a", b"", None, (1, page + 1, 2 * page + 1))
    state.apply_append("b", b"", None, (1,))
    state.apply_append("c", b"c1", None, ())

    assert encode_snapshot(copy, meta) == before
    restored, _ = decode_snapshot(before)
    assert restored.last_id("a") == 2 * page + 10 and len(restored.read("a", limit=10_000)) == (
        2 * page + 10
    )
    assert restored.read("b") == [Entry(1, b"only", ())]
    assert restored.last_id("c") == 0
    # The state itself moved on.
    assert 1 not in state.logs["a"] and page + 1 not in state.logs["a"]
    assert state.read("b") == [] and state.read("c") == [Entry(1, b"c1", ())]
    assert state.live_entries == 2 * page + 10 + 1 - 3 + 1


def _encode_v1(state: LogState, meta: SnapshotMeta) -> bytes:
    """The version 1 layout (the snapshot files written before issue 28)."""

    def entry(e):
        command, idx, term = e
        return struct.pack("<QQI", idx, term, len(command)) + command

    body = entry(meta.prev_entry) + entry(meta.last_entry)
    body += struct.pack("<I", len(meta.members))
    for m in meta.members:
        body += struct.pack("<H", len(m)) + m.encode()
    names = list(state.iter_logs())
    body += struct.pack("<I", len(names))
    for name, last_id, live in names:
        body += (
            struct.pack("<H", len(name)) + name.encode() + struct.pack("<QQ", last_id, len(live))
        )
        for e in live.values():
            inv = e.invalidates
            body += struct.pack("<QI", e.id, len(e.data)) + e.data
            body += struct.pack(f"<I{len(inv)}Q", len(inv), *inv)
    return SNAP_HEADER.pack(SNAPSHOT_MAGIC, 1, len(body), crc32c.crc32c(body)) + body


def test_version_1_snapshots_still_load():
    state = LogState()
    for i in range(1, 6):
        state.apply_append("a", b"a%d" % i, None, ())
    state.apply_append("a", b"inv", None, (2, 3))
    state.apply_append("z", b"", None, ())
    meta = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1", "h:2"))
    for blob in (_encode_v1(state, meta), encode_snapshot(state, meta)):
        got, got_meta = decode_snapshot(blob)
        assert got_meta == meta
        assert got.read("a") == state.read("a")
        assert got.read("a")[-1] == Entry(6, b"inv", (2, 3))
        assert got.last_id("z") == 1 and got.read("z") == []
        assert (got.live_entries, got.live_bytes) == (state.live_entries, state.live_bytes)


def test_a_snapshot_from_the_leader_is_never_overwritten_by_a_running_write(tmp_path, monkeypatch):
    """A follower's own background write that finishes after a snapshot from the leader
    was renamed into place drops its file (renaming it would put an older state under a
    journal that starts after it)."""
    held = _HeldEncode(monkeypatch)
    state = LogState()
    state.apply_append("a", b"old", None, ())
    hooks = SnapshotHooks(state, threading.Lock(), name="t")
    path = str(tmp_path / "snapshot")
    try:
        assert hooks.start_write(path, 7, ((b"l", 7, 1), (b"p", 6, 1), {"h:1"}))
        assert held.entered.wait(HOLD_S)
        assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.SERIALIZING, 7)
        with hooks.replacing_file():
            with open(path, "wb") as f:
                f.write(b"from the leader")
    finally:
        held.release.set()
    assert hooks.close()
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.NOT_SERIALIZING, None)
    with open(path, "rb") as f:
        assert f.read() == b"from the leader"
    assert not os.path.exists(path + ".tmp")
    assert hooks.snapshots_written == 0

    # The next write goes through: SUCCESS once, then nothing running.
    assert hooks.start_write(path, 8, ((b"l", 8, 1), (b"p", 7, 1), {"h:1"}))
    assert hooks.close()
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.SUCCESS, 8)
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.NOT_SERIALIZING, None)
    with open(path, "rb") as f:
        assert decode_snapshot(f.read())[0].read("a") == [Entry(1, b"old", ())]
    assert held.threads == ["logstore-snapshot-t", "logstore-snapshot-t"]


@pytest.mark.integration
def test_three_replicas_compact_off_their_tick_threads(tmp_path, monkeypatch):
    """Every replica compacts on its own writer thread; the group keeps committing."""
    held = _HeldEncode(monkeypatch)
    stores = start_cluster(tmp_path, 3)
    try:
        leader = next(s for s in stores if s.is_leader())
        for i in range(50):
            leader.append("k", b"%d" % i, timeout_s=30)
        for s in stores:
            s.barrier(timeout_s=30)
            s.force_compaction()
        wait_for(lambda: len(held.threads) == 3, 60, "three snapshot encodes")
        assert sorted(held.threads) == sorted(f"logstore-snapshot-{s.self_address}" for s in stores)
        assert leader.append("k", b"during", timeout_s=30) == 51
        held.release.set()
        for s in stores:
            wait_for(lambda s=s: s.status()["snapshots_written"] >= 1, 60, "a snapshot")
            s.barrier(timeout_s=30)
            assert s.read("k", 51)[0].data == b"during"
    finally:
        held.release.set()
        for s in stores:
            s.close()


def test_a_reopened_state_makes_entries_only_for_the_pages_it_uses():
    """A loaded snapshot keeps each page in its columns (LoadedPage) until a read or a
    change uses it; re-encoding an unused page copies its columns. Every operation gives
    what it gives on the state the snapshot was taken from."""
    from logstore.state import PAGE_ID_BITS, LoadedPage

    page = 1 << PAGE_ID_BITS
    original = LogState()
    for i in range(3 * page + 5):
        original.apply_append("a", b"d%d" % i, None, ())
    original.apply_append("a", b"inv", None, (2, page + 2))
    original.apply_append("b", b"b1", None, ())
    meta = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1",))
    blob = encode_snapshot(original, meta)
    loaded, _ = decode_snapshot(blob)
    assert all(type(p) is LoadedPage for p in loaded.logs["a"].pages.values())
    assert encode_snapshot(loaded, meta) == blob  # unused pages re-encoded as loaded
    assert (loaded.live_entries, loaded.live_bytes) == (original.live_entries, original.live_bytes)

    for s in (original, loaded):
        s.apply_append("a", b"tail", None, ())  # the loaded tail page
        s.apply_append("a", b"", None, (page + 7,))  # a loaded middle page
    assert loaded.read("a", page, limit=20) == original.read("a", page, limit=20)
    assert page + 7 not in loaded.logs["a"] and page + 8 in loaded.logs["a"]
    kinds = [type(p).__name__ for p in loaded.logs["a"].pages.values()]
    assert kinds == ["LoadedPage", "dict", "LoadedPage", "dict"], kinds
    assert encode_snapshot(loaded, meta) == encode_snapshot(original, meta)
    assert list(loaded.logs["a"]) == list(original.logs["a"])
    assert list(loaded.logs["a"].values()) == list(original.logs["a"].values())
    assert loaded.read("a", limit=100_000) == original.read("a", limit=100_000)
    assert loaded.read("b") == [Entry(1, b"b1", ())]
