"""Start-up with many replicas (issue 28): per-tablet costs that were one after another.

- The WALs a crashed process left are made durable by one syncfs of their file system
  before any tablet opens, not by one fdatasync per tablet (only a torn tail zeroed at
  open still syncs its own segment); without syncfs, or when it fails, each WAL syncs.
- No start-up thread waits on one tablet: lone voters (this server the only voter) elect
  themselves and are waited for together once every tablet is open, so a slow first entry
  (held here by stalling the WAL appender) does not hold up the opening of the others.
- The appender syncs the segments a group touched at once, on a few threads: the file
  system commits concurrent syncs together.

The crashed fs roots are made by a child process that creates the tablets and exits with
os._exit (no WAL footer, nothing closed: what kill -9 leaves).
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.support.procs import wait_for
from tests.tservers import test_startup
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletStatus
from tservers.wal import segment as seg
from tservers.wal import syncfs
from tservers.wal.log import Appender, TabletLog, WalOptions

ROOT = Path(__file__).resolve().parents[2]
_entry = test_startup._entry  # a WRITE entry of term 1
TABLETS = 12
WAIT_S = 60.0


def _crashed_root(root: Path, n: int, *, peers: bool) -> list[str]:
    """A formatted fs root with `n` tablets, left as kill -9 leaves it. `peers`: each
    tablet has two more voters (never started: the tablets stay followers, nothing is
    appended at start-up); else this server is the only voter."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from rpc.protocols.tserver_pb2 import CreateTabletRequest, MemberType, RaftConfigPB
        from tests.tservers.helpers import SIX
        from tservers.fs import FsLayout
        from tservers.tablet.manager import TabletManager
        from tservers.wal.log import WalOptions

        fs = FsLayout.format(Path({str(root)!r}))
        m = TabletManager(fs, WalOptions(segment_size_bytes_max=1 << 20), maintenance=False)
        m.open()
        for i in range({n}):
            cfg = RaftConfigPB()
            if {peers!r}:
                for uuid, port in ((fs.uuid, 1), ("peer-a", 2), ("peer-b", 3)):
                    cfg.peers.add(
                        uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{{port}}"
                    )
            m.create_tablet(
                CreateTabletRequest(
                    tablet_id=f"t{{i:03d}}", table_name="tbl", schema=SIX, config=cfg
                )
            )
        os._exit(0)  # like kill -9: no WAL footer, nothing closed
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=WAIT_S, cwd=ROOT)
    return [f"t{i:03d}" for i in range(n)]


class _Counting:
    """Counts the calls of a wrapped function (and may make them fail)."""

    def __init__(self, fn, fail_errno: int = 0) -> None:
        self.fn = fn
        self.calls = 0
        self.fail_errno = fail_errno
        self.lock = threading.Lock()

    def __call__(self, *args):
        with self.lock:
            self.calls += 1
        if self.fail_errno:
            ctypes.set_errno(self.fail_errno)
            return -1
        return self.fn(*args)


def _open(root: Path) -> TabletManager:
    m = TabletManager(
        FsLayout.open(root), WalOptions(segment_size_bytes_max=1 << 20), maintenance=False
    )
    m.list_tablets()
    return m


def _open_counting(root: Path, monkeypatch, syncfs_fn) -> tuple[TabletManager, _Counting]:
    """Open every tablet of `root`, counting the fdatasyncs made meanwhile."""
    fdatasync = _Counting(os.fdatasync)
    monkeypatch.setattr(syncfs, "_SYNCFS", syncfs_fn)
    m = _open(root)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    try:
        m.start_opening()
        assert m.wait_open(WAIT_S)
    finally:
        monkeypatch.setattr(os, "fdatasync", fdatasync.fn)
    return m, fdatasync


def _all_running(m: TabletManager, ids: list[str]) -> None:
    assert sorted(m.replicas) == ids
    assert all(r.status is TabletStatus.RUNNING for r in m.replicas.values())


def test_restart_syncs_the_file_system_once_not_each_wal(tmp_path, monkeypatch):
    assert syncfs.available(), "Linux has syncfs"
    root = tmp_path / "root"
    ids = _crashed_root(root, TABLETS, peers=True)
    # One tablet's WAL has a torn record header after its last good record (zeros after
    # it): zeroed at open, and that write is synced by its own fdatasync.
    torn = root / "wals" / ids[3] / seg.segment_name(1)
    c = seg.read_segment(torn, is_last=True)
    with open(torn, "r+b") as f:
        f.seek(c.data_end)
        f.write(b"\xff" * seg.RECORD_HEADER_BYTES)
    real = syncfs._SYNCFS
    counted = _Counting(real)
    m, fdatasync = _open_counting(root, monkeypatch, counted)
    try:
        assert counted.calls == 1
        assert fdatasync.calls == 1  # the torn tablet's zeroed tail, no other
        _all_running(m, ids)
    finally:
        m.close()


def test_restart_without_syncfs_or_with_it_failing_syncs_each_wal(tmp_path, monkeypatch):
    root = tmp_path / "root"
    ids = _crashed_root(root, TABLETS, peers=True)
    m, fdatasync = _open_counting(root, monkeypatch, None)  # no syncfs on this platform
    try:
        assert fdatasync.calls == TABLETS
        _all_running(m, ids)
    finally:
        m.close()
    # A failing syncfs (a write-back error of any file of the file system): each WAL syncs.
    failing = _Counting(syncfs._SYNCFS, fail_errno=errno.EIO)
    root2 = tmp_path / "root2"
    ids2 = _crashed_root(root2, TABLETS, peers=True)
    m, fdatasync = _open_counting(root2, monkeypatch, failing)
    try:
        assert failing.calls == 1
        assert fdatasync.calls == TABLETS
        _all_running(m, ids2)
    finally:
        m.close()


def test_lone_voters_do_not_hold_up_the_opening_of_the_others(tmp_path, monkeypatch):
    """With one start-up thread and the WAL appender stalled (no lone voter's first entry
    can be made durable, so none is ready to lead), every tablet still opens; start-up ends
    once the appender goes on and they all lead. (Each thread used to wait for its lone
    voter before opening the next tablet: up to 10 s each.)"""
    root = tmp_path / "root"
    ids = _crashed_root(root, TABLETS, peers=False)
    release = threading.Event()
    real_write = TabletLog.write_locked

    def stalled(self, *args):
        assert release.wait(WAIT_S)
        return real_write(self, *args)

    monkeypatch.setattr(TabletLog, "write_locked", stalled)
    m = TabletManager(
        FsLayout.open(root),
        WalOptions(segment_size_bytes_max=1 << 20),
        maintenance=False,
        startup_threads=1,
    )
    try:
        m.list_tablets()
        m.start_opening()
        wait_for(lambda: m.starting == 0, 8.0, "every tablet open, no lone voter leading")
        assert sorted(m.replicas) == ids
        assert not m.wait_open(0)  # the lone voters are not leading yet
        with m._lock:
            tablets = [r.tablet for r in m.replicas.values()]
        assert all(t is not None and t.status is TabletStatus.RUNNING for t in tablets)
        release.set()
        assert m.wait_open(WAIT_S)
        assert all(t.wait_leader_ready(0) for t in tablets)
    finally:
        release.set()
        m.close()


def test_appender_syncs_the_segments_of_a_group_at_once(tmp_path, monkeypatch):
    """A group that touched many segments syncs them concurrently (the file system commits
    them together); every write is synced before its callback, each callback once."""
    opts = WalOptions(segment_size_bytes_max=1 << 20)  # sync_threads: 8
    logs = [TabletLog.create(tmp_path / f"w{i}", f"t{i}", opts) for i in range(16)]
    app = Appender(opts)
    in_flight = 0
    peak = 0
    lock = threading.Lock()
    two = threading.Event()
    real_fdatasync = os.fdatasync

    def fdatasync(fd):
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight >= 2:
                two.set()
        try:
            two.wait(2.0)  # bounded: another sync of the group comes in meanwhile
            return real_fdatasync(fd)
        finally:
            with lock:
                in_flight -= 1

    done: list = []
    all_done = threading.Event()

    def callback(err) -> None:
        with lock:
            done.append(err)
            if len(done) == len(logs):
                all_done.set()

    # One group: the first tablet's log is held, so the appender stops at its write while
    # the others queue up behind it (they form the next group together).
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    try:
        with logs[0].lock:
            app.append(logs[0], [_entry(1)], callback)
            wait_for(app._q.empty, 10.0, "the appender at the first write")
            for tl in logs[1:]:
                app.append(tl, [_entry(1)], callback)
        assert all_done.wait(WAIT_S)
    finally:
        monkeypatch.setattr(os, "fdatasync", real_fdatasync)
        app.close()
        for tl in logs:
            tl.close()
    assert done == [None] * len(logs)
    assert app.groups == 2 and app.syncs == len(logs)
    assert peak >= 2
    for i in range(len(logs)):
        tl, entries = TabletLog.open(tmp_path / f"w{i}", f"t{i}", opts)
        assert [e.index for e in entries] == [1]
        tl.close()
