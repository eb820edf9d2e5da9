"""Issue 28, second round (design/logstore.md "compaction off the tick thread"): pages the
tail has moved past are kept in columns (sealed), so a snapshot writer copies them in bulk
instead of encoding their entries one Python object at a time; a reopen maps the snapshot
file and checks its columns without a list of ids; the snapshot is decoded while the
replica starts (in parallel with the password's key derivation and pysyncobj's start).

Pure tests on the state and the codec, plus the replica's open on a real data dir."""

from __future__ import annotations

import os
import struct
import threading
from array import array

import crc32c
import pytest

from logstore import snapshot
from logstore.api import Entry
from logstore.snapshot import (
    SNAP_HEADER,
    SNAPSHOT_MAGIC,
    SnapshotHooks,
    SnapshotMeta,
    decode_snapshot,
    encode_snapshot,
)
from logstore.state import PAGE_ID_BITS, LoadedPage, LogState
from rpc.errors import Corruption

PAGE = 1 << PAGE_ID_BITS
META = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1",))


def _fill(state: LogState, log: str, n: int) -> None:
    for i in range(n):
        state.apply_append(log, b"%s-%d" % (log.encode(), i), None, ())


def _kinds(state: LogState, log: str) -> list[str]:
    return [type(p).__name__ for p in state.logs[log].pages.values()]


def test_pages_the_tail_moved_past_are_kept_in_columns():
    """Appends that start a new page seal the one before: a capture then holds only the
    tail page as a dict, and the snapshot of the sealed state is the same bytes as the
    snapshot of the same entries loaded back."""
    state = LogState()
    _fill(state, "a", 3 * PAGE + 5)
    _fill(state, "small", 10)
    assert _kinds(state, "a") == ["LoadedPage", "LoadedPage", "LoadedPage", "dict"]
    assert _kinds(state, "small") == ["dict"]
    copy = state.capture()
    by_name = {log.name: log for log in copy.logs}
    assert [type(p).__name__ for p in by_name["a"].pages] == _kinds(state, "a")

    blob = encode_snapshot(state, META)
    loaded, _ = decode_snapshot(blob)
    assert encode_snapshot(loaded, META) == blob
    assert loaded.read("a", limit=100_000) == state.read("a", limit=100_000)
    assert state.read("a", PAGE - 1, limit=3) == [
        Entry(PAGE - 1, b"a-%d" % (PAGE - 2), ()),
        Entry(PAGE, b"a-%d" % (PAGE - 1), ()),
        Entry(PAGE + 1, b"a-%d" % PAGE, ()),
    ]


def test_a_sealed_page_read_then_changed_is_encoded_as_it_is_now():
    """A read makes a sealed page a dict and keeps its columns for the next snapshot; its
    first change drops them (the snapshot shows the change), and a capture taken before
    the change keeps what it captured."""
    state = LogState()
    _fill(state, "a", 2 * PAGE + 3)
    reference = LogState()
    _fill(reference, "a", 2 * PAGE + 3)

    live = state.logs["a"]
    assert state.read("a", 5, limit=2)[0] == Entry(5, b"a-4", ())
    assert type(live.pages[0]) is LoadedPage  # a read makes its entries, not a dict
    assert live[5] == Entry(5, b"a-4", ())  # a lookup by id makes the dict
    assert type(live.pages[0]) is dict and 0 in live.sealed
    before = state.capture()
    assert before.logs[0].pages[0] is live.sealed[0]  # the columns, not the dict
    blob_before = encode_snapshot(before, META)
    assert blob_before == encode_snapshot(reference, META)

    for s in (state, reference):
        s.apply_append("a", b"", None, (7, PAGE + 1))  # in page 0 (read) and page 1 (sealed)
        s.apply_append("a", b"x", None, ())
    assert 0 not in live.sealed and type(live.pages[0]) is dict
    assert encode_snapshot(state, META) == encode_snapshot(reference, META)
    assert encode_snapshot(before, META) == blob_before
    restored, _ = decode_snapshot(encode_snapshot(state, META))
    assert 7 not in restored.logs["a"] and PAGE + 1 not in restored.logs["a"]
    assert restored.read("a", limit=100_000) == reference.read("a", limit=100_000)


def test_sealing_the_tail_page_leaves_a_capture_of_it_unchanged():
    state = LogState()
    _fill(state, "a", PAGE - 2)  # ids 1..PAGE-2: page 0 is the tail
    copy = state.capture()
    blob = encode_snapshot(copy, META)
    _fill(state, "a", 10)  # fills page 0, starts page 1: page 0 sealed
    state.apply_append("a", b"", None, (1,))
    assert _kinds(state, "a") == ["dict", "dict"]  # page 0 sealed, then changed
    assert encode_snapshot(copy, META) == blob
    again, _ = decode_snapshot(blob)
    assert again.last_id("a") == PAGE - 2 and len(again.logs["a"]) == PAGE - 2


def test_reads_of_sealed_pages_leave_them_in_columns():
    """Every read gives what the same read gives on a state of dict pages (built through
    restore_log, which never seals), and leaves the pages sealed; sealed pages with holes
    and with entries that invalidated others included."""

    def build() -> LogState:
        state = LogState()
        _fill(state, "a", PAGE - 10)
        state.apply_append("a", b"inv", None, (3, 5))
        _fill(state, "a", 20)  # page 0 sealed with its holes
        state.apply_append("a", b"inv2", None, (PAGE + 3,))
        _fill(state, "a", 2 * PAGE)  # pages 1 and 2 sealed
        return state

    state = build()
    source = build()
    reference = LogState()
    reference.restore_log("a", source.last_id("a"), list(source.logs["a"].values()))
    assert _kinds(state, "a") == ["LoadedPage"] * 3 + ["dict"]
    assert _kinds(reference, "a") == ["dict"] * 4
    for from_id in (-5, 0, 1, 2, 3, 4, 6, PAGE - 1, PAGE, PAGE + 3, 2 * PAGE, 3 * PAGE, 10**9):
        for limit in (1, 2, 7, PAGE, 3 * PAGE):
            assert state.read("a", from_id, limit) == reference.read("a", from_id, limit)
    for i in (1, 3, 5, 6, PAGE + 3, PAGE + 4, 2 * PAGE, 3 * PAGE + 7, 10**9, -1):
        assert (i in state.logs["a"]) == (i in reference.logs["a"]), i
    assert _kinds(state, "a") == ["LoadedPage"] * 3 + ["dict"]
    got = state.read("a", PAGE - 12, 4)
    assert [e.invalidates for e in got if e.data == b"inv"] == [(3, 5)]


def _v2_with_ids(ids: list[int], last_id: int) -> bytes:
    """A version 2 snapshot of one log with these ids (any order), CRC correct."""
    body = bytearray()
    for idx in (8, 9):
        body += struct.pack("<QQI", idx, 1, 1) + b"c"
    body += struct.pack("<I", 0) + struct.pack("<I", 1)
    body += struct.pack("<H", 1) + b"a" + struct.pack("<QQ", last_id, len(ids))
    body += array("Q", ids).tobytes() + array("I", [1] * len(ids)).tobytes()
    body += bytes(4 * len(ids)) + b"d" * len(ids)
    return SNAP_HEADER.pack(SNAPSHOT_MAGIC, 2, len(body), crc32c.crc32c(bytes(body))) + body


@pytest.mark.parametrize(
    "ids, last_id",
    [([1, 3, 2], 3), ([1, 2, 2, 3], 3), ([0, 1], 1), ([1, 2, 5], 4), ([5, PAGE + 1, 4], 9999)],
)
def test_ids_out_of_order_or_beyond_the_last_id_are_corruption(ids, last_id):
    with pytest.raises(Corruption):
        decode_snapshot(_v2_with_ids(ids, last_id))


def test_ids_in_order_load():
    ids = [1, 2, PAGE - 1, PAGE, 3 * PAGE + 1]
    state, _ = decode_snapshot(_v2_with_ids(ids, 3 * PAGE + 1))
    assert [e.id for e in state.read("a", limit=100)] == ids
    assert {e.data for e in state.read("a", limit=100)} == {b"d"}


def test_a_mapped_snapshot_stays_readable_after_a_new_one_replaces_it(tmp_path):
    """deserialize maps the file; the loaded pages read from the mapping, which a rename of
    a newer snapshot over the file does not disturb."""
    original = LogState()
    _fill(original, "a", 2 * PAGE + 1)
    path = str(tmp_path / "snapshot")
    with open(path, "wb") as f:
        f.write(encode_snapshot(original, META))
    state = LogState()
    hooks = SnapshotHooks(state, threading.Lock(), name="t")
    hooks.deserialize(path)
    other = LogState()
    _fill(other, "zz", 3)
    with open(path + ".new", "wb") as f:
        f.write(encode_snapshot(other, META))
    os.replace(path + ".new", path)
    assert state.read("a", limit=100_000) == original.read("a", limit=100_000)
    assert encode_snapshot(state, META) == encode_snapshot(original, META)


def test_an_empty_snapshot_file_is_corruption_not_a_mapping_error(tmp_path):
    path = tmp_path / "snapshot"
    path.write_bytes(b"")
    hooks = SnapshotHooks(LogState(), threading.Lock(), name="t")
    with pytest.raises(Corruption):
        hooks.deserialize(str(path))
    assert snapshot.SNAPSHOT_VERSION == 2


def _write_snapshot(path: str, state: LogState) -> None:
    with open(path, "wb") as f:
        f.write(encode_snapshot(state, META))


def test_a_preloaded_snapshot_is_loaded_only_if_it_is_still_the_file(tmp_path):
    """preload decodes the file on its own thread; deserialize takes that result, unless a
    snapshot from the leader replaced the file meanwhile (then it loads the new one)."""
    path = str(tmp_path / "snapshot")
    first = LogState()
    _fill(first, "a", 5)
    _write_snapshot(path, first)

    state = LogState()
    hooks = SnapshotHooks(state, threading.Lock(), name="t")
    assert hooks.preload(path)
    hooks.deserialize(path)
    assert state.read("a") == first.read("a") and hooks.snapshots_loaded == 1

    state2 = LogState()
    hooks2 = SnapshotHooks(state2, threading.Lock(), name="t2")
    assert hooks2.preload(path)
    second = LogState()
    _fill(second, "b", 3)
    _write_snapshot(path + ".1.tmp", second)
    os.replace(path + ".1.tmp", path)  # as pysyncobj installs the leader's snapshot
    hooks2.deserialize(path)
    assert state2.read("b") == second.read("b") and state2.read("a") == []
    assert not hooks2.preload(str(tmp_path / "absent"))


def test_a_corrupt_preloaded_snapshot_is_refused_as_a_loaded_one(tmp_path):
    path = str(tmp_path / "snapshot")
    state = LogState()
    _fill(state, "a", 5)
    blob = bytearray(encode_snapshot(state, META))
    blob[-1] ^= 0xFF
    with open(path, "wb") as f:
        f.write(blob)
    hooks = SnapshotHooks(LogState(), threading.Lock(), name="t")
    assert hooks.preload(path)
    with pytest.raises(Corruption):
        hooks.deserialize(path)


@pytest.mark.integration
def test_a_reopen_decodes_the_snapshot_while_the_replica_starts(tmp_path, monkeypatch):
    """The snapshot of a reopened replica is decoded on the preload thread, not on the tick
    thread after pysyncobj's start, and the replica serves what it held."""
    from logstore.replicated import ReplicatedLogStore

    from .helpers import FAST, PASSWORD, start_cluster, wait_for

    (store,) = start_cluster(tmp_path, 1)
    addr = store.self_address
    try:
        futures = [store.append_async("k", b"v%d" % i) for i in range(300)]
        assert [f.result(timeout=60) for f in futures] == list(range(1, 301))
        store.force_compaction()
        wait_for(lambda: store.status()["snapshots_written"] >= 1, 60, "a snapshot written")
        store.append("k", b"tail", timeout_s=30)
    finally:
        store.close()

    threads: list[str] = []
    real = snapshot.decode_snapshot

    def recording(buf):
        threads.append(threading.current_thread().name)
        return real(buf)

    monkeypatch.setattr(snapshot, "decode_snapshot", recording)
    reopened = ReplicatedLogStore(addr, [addr], str(tmp_path / "r0"), PASSWORD, config=FAST)
    try:
        reopened.barrier(timeout_s=30)
        assert threads == [f"logstore-snapshot-load-{addr}"], threads
        assert reopened.status()["snapshots_loaded"] == 1
        got = reopened.read("k", limit=1000)
        assert [e.id for e in got] == list(range(1, 302)) and got[-1].data == b"tail"
    finally:
        reopened.close()
