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
from logstore.state import PAGE_ID_BITS, LogState
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

    assert state.read("a", 5, limit=2)[0] == Entry(5, b"a-4", ())
    live = state.logs["a"]
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
