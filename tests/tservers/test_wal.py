"""WAL: segments, replay, torn tails, corruption with file and offset, group commit, roll, GC."""

from __future__ import annotations

import os
import threading

import pytest

from rpc.protocols.tserver_pb2 import EntryType, LogEntryPB, RowBlockPB, WriteOpPB
from tservers.wal import segment as seg
from tservers.wal.log import Appender, TabletLog, WalOptions
from tservers.wal.segment import WalCorruption


def _entry(i: int, size: int = 100) -> LogEntryPB:
    return LogEntryPB(
        term=1,
        index=i,
        type=EntryType.WRITE,
        write=WriteOpPB(
            schema_version=1, blocks=[RowBlockPB(op=1, arrow_ipc=bytes([i % 251]) * size)]
        ),
    )


def _append_sync(app: Appender, tl: TabletLog, entries: list[LogEntryPB]) -> None:
    done = threading.Event()
    errs = []

    def cb(err):
        errs.append(err)
        done.set()

    app.append(tl, entries, cb)
    assert done.wait(10)
    assert errs == [None]


def _write_log(wal_dir, n: int, opts: WalOptions | None = None, size: int = 100) -> None:
    opts = opts or WalOptions(segment_size_bytes_max=64 << 10)
    app = Appender(opts)
    tl = TabletLog.create(wal_dir, "t1", opts)
    for i in range(1, n + 1):
        _append_sync(app, tl, [_entry(i, size)])
    tl.close()
    app.close()


def _open(wal_dir, opts: WalOptions | None = None):
    return TabletLog.open(wal_dir, "t1", opts or WalOptions(segment_size_bytes_max=64 << 10))


def test_replay_rolls_and_footers(tmp_path):
    wal = tmp_path / "wal"
    _write_log(wal, 300, size=1000)  # ~300 KB over 64 KB segments
    segs = seg.list_segments(wal)
    assert len(segs) >= 4
    for _, p in segs:
        c = seg.read_segment(p, is_last=False)
        assert c.footer is not None and c.footer.num_entries == len(c.entries)
    tl, entries = _open(wal)
    assert [e.index for e in entries] == list(range(1, 301))
    assert entries[41] == _entry(42, 1000)
    tl.close()


def test_open_segment_after_crash_is_appended_to(tmp_path):
    wal = tmp_path / "wal"
    opts = WalOptions(segment_size_bytes_max=1 << 20)
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    for i in range(1, 11):
        _append_sync(app, tl, [_entry(i)])
    app.close()  # no tl.close(): like a crash, the segment has no footer and is preallocated
    assert os.path.getsize(wal / seg.segment_name(1)) < 1 << 20  # preallocated in steps
    tl2, entries = _open(wal, opts)
    assert [e.index for e in entries] == list(range(1, 11))
    app = Appender(opts)
    _append_sync(app, tl2, [_entry(11)])  # goes on in the crashed segment: no new file
    app.close()
    tl2.close()
    assert [s for s, _ in seg.list_segments(wal)] == [1]
    c = seg.read_segment(wal / seg.segment_name(1), is_last=False)
    assert c.footer is not None and c.footer.max_index == 11
    assert [e.index for e in c.entries] == list(range(1, 12))


def _last_segment_with_data(wal):
    return seg.list_segments(wal)[-1][1]


def _crashed_log(wal, n: int) -> None:
    opts = WalOptions(segment_size_bytes_max=1 << 20)
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    for i in range(1, n + 1):
        _append_sync(app, tl, [_entry(i)])
    app.close()
    os.close(tl.writer.fd)  # abandon without a footer


def test_torn_tail_is_cut(tmp_path):
    wal = tmp_path / "wal"
    _crashed_log(wal, 20)
    path = _last_segment_with_data(wal)
    c = seg.read_segment(path, is_last=True)
    # Tear the last record: zero its second half, as an interrupted write leaves it.
    last_start = c.data_end - len(seg.encode_batch([_entry(20)]))
    with open(path, "r+b") as f:
        f.seek(last_start + 40)
        f.write(b"\0" * (c.data_end - last_start - 40))
    tl, entries = _open(wal)
    assert [e.index for e in entries] == list(range(1, 20))
    tl.close()
    # Reopened again: the cut is permanent and appends continue after index 19.
    tl, entries = _open(wal)
    assert entries[-1].index == 19
    tl.close()


def test_truncated_last_segment(tmp_path):
    wal = tmp_path / "wal"
    _crashed_log(wal, 20)
    path = _last_segment_with_data(wal)
    c = seg.read_segment(path, is_last=True)
    os.truncate(path, c.data_end - 7)
    tl, entries = _open(wal)
    assert [e.index for e in entries] == list(range(1, 20))
    tl.close()


def test_flipped_byte_mid_segment_refuses_and_says_where(tmp_path):
    wal = tmp_path / "wal"
    _crashed_log(wal, 20)
    path = _last_segment_with_data(wal)
    rec = len(seg.encode_batch([_entry(5)]))
    header = seg.read_segment(path, is_last=True).data_end - 20 * rec
    target = header + 5 * rec + 30  # inside the payload of entry 6
    data = bytearray(path.read_bytes())
    data[target] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruption) as e:
        _open(wal)
    assert e.value.path == str(path)
    assert e.value.offset == header + 5 * rec
    assert "CRC" in str(e.value)


def test_corruption_in_closed_segment_is_never_a_torn_tail(tmp_path):
    wal = tmp_path / "wal"
    _write_log(wal, 200, size=1000)
    first = seg.list_segments(wal)[0][1]
    data = bytearray(first.read_bytes())
    data[len(data) - 60] ^= 0x01  # inside the footer of a closed segment
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruption) as e:
        _open(wal)
    assert e.value.path == str(first)


def test_group_commit_one_sync_per_group(tmp_path):
    opts = WalOptions(segment_size_bytes_max=8 << 20)
    app = Appender(opts)
    logs = [TabletLog.create(tmp_path / f"w{i}", f"t{i}", opts) for i in range(2)]
    n_threads, per_thread = 8, 50
    counters = [0, 0]
    locks = [threading.Lock(), threading.Lock()]

    def writer(k: int) -> None:
        tl_i = k % 2
        for _ in range(per_thread):
            with locks[tl_i]:  # indexes are assigned and queued in order, as a tablet does
                counters[tl_i] += 1
                idx = counters[tl_i]
                done = threading.Event()
                app.append(logs[tl_i], [_entry(idx)], lambda err, d=done: d.set())
            assert done.wait(10)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert app.records == n_threads * per_thread
    # Every group syncs each touched segment once, so syncs <= groups * 2 < records.
    assert app.syncs <= 2 * app.groups
    assert app.groups < app.records
    for tl in logs:
        tl.close()
    app.close()
    for i in range(2):
        tl, entries = TabletLog.open(tmp_path / f"w{i}", f"t{i}", opts)
        assert [e.index for e in entries] == list(range(1, counters[i] + 1))
        tl.close()


def test_sync_disabled_does_not_sync(tmp_path):
    opts = WalOptions(sync=False, preallocate=False)
    app = Appender(opts)
    tl = TabletLog.create(tmp_path / "w", "t1", opts)
    for i in range(1, 6):
        _append_sync(app, tl, [_entry(i)])
    assert app.syncs == 0 and app.records == 5
    tl.close()
    app.close()


def test_gc_deletes_segments_below_flushed_index(tmp_path):
    wal = tmp_path / "wal"
    _write_log(wal, 300, size=1000)
    tl, entries = _open(wal)
    before = tl.segment_count()
    removed = tl.gc(150)
    assert removed >= 1
    assert tl.segment_count() == before - removed
    tl.close()
    tl, entries = _open(wal)
    assert entries[0].index <= 151 and entries[-1].index == 300
    tl.close()


@pytest.mark.parametrize("size", [0, 5, 200])
def test_segment_torn_at_creation_is_removed(tmp_path, size):
    wal = tmp_path / "wal"
    _write_log(wal, 5)
    nxt = seg.list_segments(wal)[-1][0] + 1
    (wal / seg.segment_name(nxt)).write_bytes(b"\0" * size)  # created, header never written
    tl, entries = _open(wal)
    assert [e.index for e in entries] == [1, 2, 3, 4, 5]
    tl.close()


def test_garbage_header_in_closed_segment_is_corruption(tmp_path):
    wal = tmp_path / "wal"
    _write_log(wal, 300, size=1000)
    first = seg.list_segments(wal)[0][1]
    data = bytearray(first.read_bytes())
    data[0] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruption, match="bad magic") as e:
        _open(wal)
    assert not isinstance(e.value, seg.TornSegmentHeader)


def test_read_entries_from_index_across_segments(tmp_path):
    opts = WalOptions(segment_size_bytes_max=64 << 10)
    app = Appender(opts)
    tl = TabletLog.create(tmp_path / "wal", "t1", opts)
    for i in range(1, 201):
        _append_sync(app, tl, [_entry(i, 1000)])
    assert tl.segment_count() > 2
    assert [e.index for e in tl.read_entries(150)] == list(range(150, 201))
    assert [e.index for e in tl.read_entries(1, entries_max=5)] == [1, 2, 3, 4, 5]
    assert tl.read_entries(201) == []
    tl.close()
    app.close()
