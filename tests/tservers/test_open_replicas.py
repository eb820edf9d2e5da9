"""Opening many replicas at start-up (issue 28): what each replica costs there.

- After a clean shutdown each replica's WAL gets a new segment at start-up; it is made
  durable by its first sync (file and directory entry), not by two fsyncs per replica at
  open, and a crash before any write leaves a root that opens again.
- An empty replica's footerless segment is one page: a restart after a crash reads that,
  not a whole preallocation step.
- Metadata files are read whole, small or past the first read's size.
- Start-up threads take the tablets in the order given and go on past one that fails.
"""

from __future__ import annotations

import os
import threading

import pytest

from rpc.protocols.tserver_pb2 import CreateTabletRequest, OpType
from tests.tservers.helpers import SIX, deadline, ipc, open_manager, six_rows
from tests.tservers.test_hard_state_batch import _followers  # 3-voter, 2 peers absent
from tests.tservers.test_startup import _entry  # a WRITE entry of term 1
from tservers import metafile
from tservers.tablet import manager as manager_mod
from tservers.tablet.tablet import TabletStatus
from tservers.wal import log as wal_log
from tservers.wal import segment as seg
from tservers.wal.log import Appender, TabletLog, WalOptions

TABLETS = 6


class _FsyncCounter:
    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        real = os.fsync

        def fsync(fd):
            with self.lock:
                self.calls += 1
            return real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def test_open_after_clean_shutdown_fsyncs_no_new_segment(tmp_path, monkeypatch):
    """Reopening replicas closed cleanly fsyncs nothing per replica (their new segments wait
    for their first sync); a write to one then makes its segment and its directory entry
    durable before it is acknowledged, and every replica reopens with its entries."""
    root = tmp_path / "fs"
    m = open_manager(root)
    try:
        ids = _followers(m, TABLETS)
    finally:
        m.close()
    counter = _FsyncCounter(monkeypatch)
    m = open_manager(root)
    try:
        assert all(m.replicas[t].status is TabletStatus.RUNNING for t in ids)
        # (fsync_dir calls os.fsync too: none per replica either.)
        assert counter.calls < TABLETS, counter.calls
        w = m.replicas[ids[0]].tablet.wal.writer
        assert w is not None and w.dir_unsynced
        dirs: list[str] = []
        real_fsync_dir = wal_log.fsync_dir
        monkeypatch.setattr(
            wal_log, "fsync_dir", lambda p: (dirs.append(str(p)), real_fsync_dir(p))[1]
        )
        # A lone voter written through Raft: its first sync covers the new segment.
        t = m.create_tablet(CreateTabletRequest(tablet_id="lone", table_name="t", schema=SIX))
    finally:
        m.close()
    m = open_manager(root)
    try:
        t = m.tablet("lone")
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(3))))], deadline(30))
        w = t.wal.writer
        assert w is not None and not w.dir_unsynced  # synced (file and entry) before the ack
        assert str(w.path.parent) in dirs
    finally:
        m.close()
    m = open_manager(root)
    try:
        assert m.tablet("lone").memstore_rows() == 3
        assert all(m.replicas[t].status is TabletStatus.RUNNING for t in ids)
    finally:
        m.close()


def test_crash_before_a_deferred_segment_is_synced_reopens(tmp_path):
    """A new segment never synced (start-up after a clean shutdown, then a crash) may be
    anything from absent to torn at creation: the next open goes on from the closed ones."""
    opts = WalOptions(segment_size_bytes_max=1 << 20)
    wal = tmp_path / "wal"
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    entries = [_entry(i) for i in range(1, 4)]
    done = threading.Event()
    app.append(tl, entries, lambda err: done.set())
    assert done.wait(10)
    tl.close()  # clean shutdown: segment 1 has its footer
    tl, got = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in got] == [1, 2, 3]
    assert tl.writer is not None and tl.writer.dir_unsynced and tl.writer_seq == 2
    os.close(tl.writer.fd)  # crash
    new = wal / seg.segment_name(2)
    with open(new, "r+b") as f:  # as if only part of its header reached the disk
        f.truncate(5)
    tl, got = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in got] == [1, 2, 3]
    os.close(tl.writer.fd)  # crash again; now the new segment is lost altogether
    (wal / seg.segment_name(2)).unlink()
    tl, got = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in got] == [1, 2, 3]
    tl.close()
    app.close()


def test_empty_replica_segment_is_one_page(tmp_path):
    """An empty replica's segment holds one page; the first append past it grows the file
    by a preallocation step."""
    opts = WalOptions(segment_size_bytes_max=16 << 20, sync=False)
    wal = tmp_path / "wal"
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    path = wal / seg.segment_name(1)
    assert os.path.getsize(path) == opts.preallocate_first_bytes == 4096
    done = threading.Event()
    big = _entry(1, 5000)
    app.append(tl, [big], lambda err: done.set())
    assert done.wait(10)
    assert os.path.getsize(path) >= 4096 + opts.preallocate_step_bytes_min
    os.close(tl.writer.fd)  # crash
    tl, got = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in got] == [1]
    tl.close()
    app.close()


@pytest.mark.parametrize("size", [0, 10, 64 << 10, (64 << 10) + 1, 300_000])
def test_read_file_reads_every_size_whole(tmp_path, size):
    path = tmp_path / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    assert metafile.read_file(path, 1 << 20) == data
    assert metafile.read_file(str(path), 100) == data[:100]


def test_start_up_threads_take_tablets_in_order_and_go_past_a_failure():
    seen: list[str] = []
    lock = threading.Lock()

    def fn(item: str) -> None:
        if item == "b":
            raise RuntimeError("a bug opening b")
        with lock:
            seen.append(item)

    items = [f"{c}" for c in "abcdefgh"]
    manager_mod._on_threads(1, fn, items, "t")
    assert seen == [i for i in items if i != "b"]
    seen.clear()
    manager_mod._on_threads(4, fn, items, "t")
    assert sorted(seen) == [i for i in items if i != "b"]
    manager_mod._on_threads(4, fn, [], "t")  # nothing to do: returns
