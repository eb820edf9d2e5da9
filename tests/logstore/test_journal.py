"""Unit tests of logstore's journal and snapshot formats: CRC, torn tails, corruption,
atomic rewrites, meta persistence."""

from __future__ import annotations

import os

import pytest

from logstore.api import Entry
from logstore.journal import (
    HEADER_SIZE,
    DurableJournal,
    decode_meta,
    encode_meta,
    encode_record,
    scan_journal,
)
from logstore.snapshot import SnapshotHooks, SnapshotMeta, decode_snapshot, encode_snapshot
from logstore.state import LogState
from rpc.errors import Corruption


def _fill(j: DurableJournal, n: int, start: int = 1, term: int = 1) -> None:
    for i in range(start, start + n):
        j.add(b"cmd-%d" % i, i, term)


def _reopen(path) -> DurableJournal:
    return DurableJournal(str(path))


def test_round_trip_after_sync(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 50)
    assert j.has_unsynced()
    assert j.sync() is True
    assert j.sync() is False  # nothing new: no second fdatasync
    j.setCurrentTerm(7, "127.0.0.1:1")
    j.setRaftCommitIndex(40)
    j.close()
    k = _reopen(tmp_path)
    assert len(k) == 50
    assert k[0] == (b"cmd-1", 1, 1) and k[-1] == (b"cmd-50", 50, 1)
    assert k.getCurrentTerm() == 7 and k.getVotedForNodeId() == "127.0.0.1:1"
    assert k.getRaftCommitIndex() == 40
    k.close()


def test_unsynced_records_are_not_on_disk(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 3)
    j.sync()
    _fill(j, 2, start=4)
    # Simulate a crash: the process dies without sync; nothing buffered reached the file.
    size = os.path.getsize(tmp_path / "journal")
    os.close(j._fd)
    j._closed = True
    k = _reopen(tmp_path)
    assert len(k) == 3 and os.path.getsize(tmp_path / "journal") == size
    k.close()


def test_group_commit_one_sync_per_batch(tmp_path):
    j = _reopen(tmp_path)
    for batch in range(5):
        _fill(j, 100, start=1 + batch * 100)
        j.sync()
    assert j.stats().syncs == 5
    assert j.stats().records_written == 500
    j.close()


def test_torn_tail_cut_at_every_byte(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 5)
    j.close()
    path = tmp_path / "journal"
    full = path.read_bytes()
    last = encode_record(b"cmd-5", 5, 1)
    start_last = len(full) - len(last)
    for cut in range(start_last, len(full)):
        path.write_bytes(full[:cut])
        k = _reopen(tmp_path)
        assert len(k) == 4, cut
        assert k.torn_bytes_cut == cut - start_last
        assert os.path.getsize(path) == start_last
        # The journal keeps working after the cut.
        k.add(b"again", 5, 2)
        k.sync()
        k.close()
        k = _reopen(tmp_path)
        assert k[-1] == (b"again", 5, 2)
        k.close()


def test_flipped_byte_in_last_record_is_a_torn_tail(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 5)
    j.close()
    path = tmp_path / "journal"
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x40
    path.write_bytes(bytes(data))
    k = _reopen(tmp_path)
    assert len(k) == 4
    k.close()


@pytest.mark.parametrize("where", ["length", "crc", "index", "payload"])
def test_flipped_byte_in_the_middle_is_corruption(tmp_path, where):
    j = _reopen(tmp_path)
    _fill(j, 10)
    j.close()
    path = tmp_path / "journal"
    data = bytearray(path.read_bytes())
    rec = len(encode_record(b"cmd-1", 1, 1))
    third = HEADER_SIZE + 2 * rec
    offset = {"length": 0, "crc": 5, "index": 8, "payload": 8 + 17}[where]
    data[third + offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(Corruption):
        _reopen(tmp_path)


def test_bad_header_is_corruption(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 2)
    j.close()
    path = tmp_path / "journal"
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Corruption):
        _reopen(tmp_path)


def test_scan_rejects_gaps_in_indexes():
    from logstore.journal import FORMAT_VERSION, HEADER, JOURNAL_MAGIC

    image = HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION) + encode_record(b"a", 1, 1)
    image += encode_record(b"b", 3, 1)
    with pytest.raises(Corruption):
        scan_journal(image)


def test_delete_entries_from_buffered_and_written(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 10)
    j.sync()
    _fill(j, 5, start=11)
    j.deleteEntriesFrom(12)  # inside the buffered part
    assert j[-1][1] == 12
    j.deleteEntriesFrom(6)  # inside the written part: truncates the file
    assert j[-1][1] == 6 and j.has_unsynced()
    j.add(b"new", 7, 3)
    j.sync()
    j.close()
    k = _reopen(tmp_path)
    assert [e[1] for e in k[:]] == list(range(1, 8)) and k[-1] == (b"new", 7, 3)
    k.close()


def test_delete_entries_to_and_clear_are_atomic_rewrites(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 10)
    j.sync()
    j.deleteEntriesTo(8)
    assert [e[1] for e in j[:]] == [9, 10]
    assert j.trim_settled()  # the file's rewrite runs on a thread of its own
    assert not (tmp_path / "journal.tmp").exists()
    j.close()
    k = _reopen(tmp_path)
    assert [e[1] for e in k[:]] == [9, 10]
    k.clear()
    k.add(b"x", 20, 4)
    k.sync()
    k.close()
    k = _reopen(tmp_path)
    assert k[:] == [(b"x", 20, 4)]
    k.close()


def test_commit_index_clamped_to_journal_end(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 3)
    j.sync()
    j.setRaftCommitIndex(9)  # committed elsewhere, never durable here
    j.close()
    k = _reopen(tmp_path)
    assert k.getRaftCommitIndex() == 3
    k.close()


def test_meta_crc():
    blob = encode_meta(5, 9, "127.0.0.1:9")
    assert decode_meta(blob) == (5, 9, "127.0.0.1:9")
    assert decode_meta(encode_meta(1, 1, None)) == (1, 1, None)
    bad = bytearray(blob)
    bad[-1] ^= 1
    with pytest.raises(Corruption):
        decode_meta(bytes(bad))


def _sample_state() -> LogState:
    s = LogState()
    for i in range(1, 8):
        s.apply_append("a", b"a%d" % i, None, ())
    s.apply_append("a", b"", None, (1, 2, 3))
    s.apply_append("b", bytes(range(256)), 1, ())
    s.apply_append("b", b"", None, (1,))
    return s


def test_snapshot_round_trip_holds_only_live_entries():
    s = _sample_state()
    meta = SnapshotMeta((b"\x00last", 41, 3), (b"\x00prev", 40, 3), ("h:1", "h:2"))
    state, got = decode_snapshot(encode_snapshot(s, meta))
    assert got == meta
    assert state.last_id("a") == 8 and state.last_id("b") == 2
    assert [e.id for e in state.read("a")] == [4, 5, 6, 7]
    assert state.read("b") == []
    assert state.live_entries == 4 and state.live_bytes == s.live_bytes
    assert state.read("a", 7)[0] == Entry(7, b"a7", ())


def test_snapshot_detects_any_flipped_byte():
    blob = encode_snapshot(_sample_state(), SnapshotMeta((b"l", 2, 1), (b"p", 1, 1), ("h:1",)))
    for pos in range(0, len(blob), 7):
        bad = bytearray(blob)
        bad[pos] ^= 0x10
        with pytest.raises(Corruption):
            decode_snapshot(bytes(bad))
    with pytest.raises(Corruption):
        decode_snapshot(blob[:-1])


def test_snapshot_hooks_write_fsynced_temp_and_load(tmp_path):
    import threading

    s = _sample_state()
    hooks = SnapshotHooks(s, threading.Lock())
    tmp = str(tmp_path / "snapshot.tmp")
    hooks.serialize(tmp, ((b"l", 12, 2), (b"p", 11, 2), {"h:1"}))
    os.replace(tmp, tmp_path / "snapshot")
    target = LogState()
    loaded = SnapshotHooks(target, threading.Lock())
    last, prev, members = loaded.deserialize(str(tmp_path / "snapshot"))
    assert last == (b"l", 12, 2) and prev == (b"p", 11, 2)
    assert [m.id for m in members] == ["h:1"]
    assert target.read("a") == s.read("a")


def test_align_to_snapshot_drops_only_the_covered_prefix(tmp_path):
    j = _reopen(tmp_path)
    _fill(j, 10)
    j.sync()
    # The snapshot's two entries are #4 and #5: entries 1..3 go, 4..10 stay (durably).
    assert j.align_to_snapshot(j[3], j[4]) is True
    assert [e[1] for e in j[:]] == list(range(4, 11))
    assert j.align_to_snapshot(j[0], j[1]) is True  # already aligned: nothing to do
    assert len(j) == 7
    j.close()
    k = _reopen(tmp_path)
    assert [e[1] for e in k[:]] == list(range(4, 11))
    # Entries that differ (another term at that index) or lie outside: no change.
    assert k.align_to_snapshot((b"cmd-5", 5, 1), (b"cmd-6", 6, 2)) is False
    assert k.align_to_snapshot((b"cmd-11", 11, 1), (b"cmd-12", 12, 1)) is False
    assert k.align_to_snapshot((b"cmd-2", 2, 1), (b"cmd-3", 3, 1)) is False
    assert len(k) == 7
    k.close()
