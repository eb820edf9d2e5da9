"""DiskSpace.root_bytes (the bytes under the server's root, reported in heartbeats and shown
as "its files") is refreshed at most every ROOT_BYTES_INTERVAL_S, and at most every
ROOT_BYTES_WALK_SHARE times the CPU time the last refresh took; a refresh counts again only
what may have changed (issue 28: a walk of every file every 10 s was most of an idle tablet
server's CPU at 3,000 replicas): the tablets the server said it wrote, the tablet
directories created or removed, the quarantine; and a slice of every tablet, so that
whatever no one told of is counted within ROOT_BYTES_FULL_S. Real files, fsynced."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from rpc.protocols.tserver_pb2 import ConsensusMetaPB, OpType, SuperblockPB
from tests.tservers.helpers import create, deadline, ipc, six_rows
from tservers import fs as fs_mod
from tservers.fs import DiskSpace, FsLayout, move_dir, tree_bytes
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletOptions
from tservers.wal.log import WalOptions

TABLETS = 200


def _write(path, data: bytes, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _refresh(disk: DiskSpace) -> int:
    disk._root_next_at = float("-inf")
    return disk.root_bytes()


class _Scans:
    """Directories listed and scanned (os.scandir, os.listdir) by anyone in this process."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real_scandir, real_listdir = os.scandir, os.listdir

        def scandir(path="."):
            self.n += 1
            return real_scandir(path)

        def listdir(path="."):
            self.n += 1
            return real_listdir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        monkeypatch.setattr(os, "listdir", listdir)


@pytest.fixture
def no_roll(monkeypatch):
    """No slice of every tablet counted again (it would be within a long full period)."""
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_FULL_S", float("inf"), raising=False)


def _tablet_files(fs: FsLayout, tablet_id: str, wal_bytes: int = 4096) -> None:
    fs.wal_dir(tablet_id).mkdir()
    _write(fs.wal_dir(tablet_id) / "wal-000000001", b"w" * wal_bytes)
    fs.data_dir(tablet_id).mkdir()
    _write(fs.data_dir(tablet_id) / "block-1.arrow", b"d" * 10_000)
    fs.write_superblock(SuperblockPB(tablet_id=tablet_id, table_name="t"))
    fs.write_cmeta(ConsensusMetaPB(tablet_id=tablet_id, current_term=1))


def _server(tmp_path):
    fs = FsLayout.format(tmp_path / "root")
    disk = DiskSpace(fs.root, fs.uuid)
    fs.changed = getattr(disk, "files_changed", None)  # as TabletManager wires them
    return fs, disk


def test_used_bytes_are_counted_again_after_the_interval(tmp_path, monkeypatch):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    disk = DiskSpace(tmp_path, "server-1")
    first = disk.root_bytes()
    assert first >= 100_000  # allocated bytes (st_blocks)
    (tmp_path / "b").write_bytes(b"y" * 200_000)
    assert disk.root_bytes() == first  # within the interval: the last count
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_INTERVAL_S", 0.0)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 0)
    disk._root_next_at = float("-inf")
    assert disk.root_bytes() >= first + 200_000


def test_a_costly_refresh_waits_longer_before_the_next(tmp_path, monkeypatch):
    refreshes: list[float] = []
    real = fs_mod.RootBytes.refresh

    def costly(self, now, interval_s):
        refreshes.append(now)
        t = time.thread_time()
        while time.thread_time() - t < 0.01:  # CPU time: the share is of CPU, not wall time
            pass
        return real(self, now, interval_s)

    monkeypatch.setattr(fs_mod.RootBytes, "refresh", costly)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_INTERVAL_S", 0.0)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 10**6)  # 10,000 s after that one
    disk = DiskSpace(tmp_path, "server-1")
    for _ in range(5):
        disk.root_bytes()
    assert len(refreshes) == 1
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 0)  # the interval alone: 0 s
    disk._root_next_at = float("-inf")
    disk.root_bytes()
    disk.root_bytes()
    assert len(refreshes) == 3


def test_an_idle_refresh_reads_no_directory_whatever_the_tablets(tmp_path, monkeypatch, no_roll):
    """The old code walked every directory and file at every refresh: O(files); here a
    refresh reads what changed."""
    fs, disk = _server(tmp_path)
    for i in range(TABLETS):
        _tablet_files(fs, f"t{i:04d}")
    first = _refresh(disk)
    assert first == tree_bytes(fs.root)
    _refresh(disk)  # what changed at the first is looked at once more
    scans = _Scans(monkeypatch)
    for _ in range(3):
        assert _refresh(disk) == first
    assert scans.n == 0  # idle: no directory read (the old walk: over 2 x TABLETS each)
    fs.write_cmeta(ConsensusMetaPB(tablet_id="t0007", current_term=2))  # an election
    counted = _refresh(disk)
    # consensus-meta/ listed (its mtime changed) and that tablet's four entries looked at,
    # none of the other tablets'.
    assert scans.n <= 8, scans.n
    assert counted == tree_bytes(fs.root)


def test_writes_deletes_and_a_copy_are_counted(tmp_path, no_roll):
    fs, disk = _server(tmp_path)
    for i in range(20):
        _tablet_files(fs, f"t{i:04d}")
    assert _refresh(disk) == tree_bytes(fs.root)

    # A WAL segment grown in place (no directory changes), the tablet told as written.
    _write(fs.wal_dir("t0003") / "wal-000000001", b"w" * 300_000, "ab")
    disk.tablets_changed(["t0003"])
    assert _refresh(disk) == tree_bytes(fs.root)

    # A flush: a new block, then the superblock (told through FsLayout), then WAL GC.
    _write(fs.data_dir("t0004") / "block-2.arrow", b"d" * 500_000)
    fs.write_superblock(SuperblockPB(tablet_id="t0004", table_name="t", flushed_index=9))
    os.unlink(fs.wal_dir("t0004") / "wal-000000001")
    assert _refresh(disk) == tree_bytes(fs.root)

    # A deletion: the replica's directories moved to the quarantine, then reaped.
    q = fs.new_quarantine_dir("t0005")
    move_dir(fs.data_dir("t0005"), q / "data")
    move_dir(fs.wal_dir("t0005"), q / "wals")
    assert _refresh(disk) == tree_bytes(fs.root)
    shutil.rmtree(q)
    assert _refresh(disk) == tree_bytes(fs.root)

    # A tablet copy: a new replica's directories and files, the last written after a
    # refresh saw its directory (no directory change after it; the superblock says so).
    _tablet_files(fs, "copied")
    assert _refresh(disk) == tree_bytes(fs.root)
    _write(fs.data_dir("copied") / "block-1.arrow", b"c" * 2_000_000, "ab")
    fs.write_superblock(SuperblockPB(tablet_id="copied", table_name="t", flushed_index=5))
    assert _refresh(disk) == tree_bytes(fs.root)
    # A whole tablet removed (a tombstone's data and WAL gone), no one told.
    shutil.rmtree(fs.data_dir("t0006"))
    shutil.rmtree(fs.wal_dir("t0006"))
    assert _refresh(disk) == tree_bytes(fs.root)


def test_what_no_one_told_of_is_counted_within_the_full_period(tmp_path, monkeypatch):
    """The slice of every tablet: with a full period of 4 intervals, an untold in-place
    growth is counted within 4 refreshes."""
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_FULL_S", 4 * fs_mod.ROOT_BYTES_INTERVAL_S)
    fs, disk = _server(tmp_path)
    for i in range(40):
        _tablet_files(fs, f"t{i:04d}")
    _refresh(disk)
    _refresh(disk)
    _write(fs.wal_dir("t0011") / "wal-000000001", b"w" * 1_000_000, "ab")  # untold
    counts = [_refresh(disk) for _ in range(4)]
    assert counts[-1] == tree_bytes(fs.root)


def test_a_tablet_managers_writes_are_counted(tmp_path, monkeypatch, no_roll):
    """Real tablets: rows written (their WAL grows in place: told by maintenance), a flush,
    a deletion; root_bytes follows each, and an idle refresh stats no file."""
    fs = FsLayout.format(tmp_path / "root")
    disk = DiskSpace(fs.root, fs.uuid, reserved_bytes=0)
    m = TabletManager(
        fs,
        WalOptions(segment_size_bytes_max=1 << 20, preallocate_step_bytes_min=64 << 10),
        TabletOptions(flush_rows_threshold=10**9),
        maintenance=False,
        disk=disk,
    )
    m.open()
    try:
        tablets = [create(m, f"t{i}") for i in range(5)]
        for t in tablets:
            m._wait_lone_voter(t, deadline())
        assert _refresh(disk) == tree_bytes(fs.root)
        _refresh(disk)
        scans = _Scans(monkeypatch)
        _refresh(disk)
        assert scans.n == 0  # idle
        monkeypatch.undo()
        monkeypatch.setattr(fs_mod, "ROOT_BYTES_FULL_S", float("inf"), raising=False)
        t = tablets[2]
        for k in range(30):
            rows = six_rows(range(k * 1000, (k + 1) * 1000))
            t.write(1, [(OpType.INSERT, ipc(rows))], deadline())
        m.run_maintenance_once()  # tells the disk of the tablets written (flushes none)
        assert _refresh(disk) == tree_bytes(fs.root)
        assert t.flush()
        assert _refresh(disk) == tree_bytes(fs.root)
        _refresh(disk)
        m.delete_tablet("t3")
        assert _refresh(disk) == tree_bytes(fs.root)
        assert _refresh(disk) == tree_bytes(fs.root)
    finally:
        m.close()


def test_the_heartbeat_counts_no_file_while_the_tablets_open(tmp_path, monkeypatch):
    """While the tablets open at start-up the heartbeat's disk report carries the bytes as
    last counted (none yet: 0) and lists no directory: the first count stats every file of
    every replica, 1-2 s of CPU at 10,000 replicas that the opening threads want then. Once
    open, the report counts them."""
    from tservers.heartbeat import disk_report

    fs = FsLayout.format(tmp_path / "root")
    disk = DiskSpace(fs.root, fs.uuid, 0)
    _write(fs.root / "blob", b"x" * 100_000)
    scans = _Scans(monkeypatch)
    opening = disk_report(disk, count_root=False)
    assert opening.root_bytes == 0 and scans.n == 0 and opening.total_bytes > 0
    opened = disk_report(disk)
    assert opened.root_bytes >= 100_000 and scans.n > 0
    assert disk_report(disk, count_root=False).root_bytes == opened.root_bytes
