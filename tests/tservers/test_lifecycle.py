"""Tablet lifecycle (seed 000): deletion steps with crash points, startup rules, failed start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from rpc.errors import TabletDeleted, TabletFailed
from rpc.protocols.tserver_pb2 import DataState, OpType
from tests.tservers.helpers import deadline, ipc, open_manager, six_rows
from tservers.crash import CRASH_ENV, CRASH_EXIT_CODE, DELETION_POINTS
from tservers.fs import FsLayout
from tservers.tablet.manager import quarantine_dirs
from tservers.tablet.tablet import TabletStatus
from tservers.wal import segment as seg

REPO = Path(__file__).resolve().parents[2]


def run(root: Path, action: str, crash: str | None = None) -> int:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    p = subprocess.run(
        [sys.executable, "-m", "tests.tservers.lifecycle_driver", str(root), action],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if crash:
        assert p.returncode == CRASH_EXIT_CODE, p.stderr
        assert f"crash point {crash} reached" in p.stderr
    else:
        assert p.returncode == 0, p.stderr
    return p.returncode


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "root"
    run(r, "setup")
    return r


def _rows(m, tid="t1") -> int:
    return m.tablet(tid).scan([], [], [], [], 0).num_rows


def _assert_tombstoned(root: Path, last_index: int) -> None:
    fs = FsLayout.open(root)
    sb = fs.read_superblock("t1")
    assert sb.data_state == DataState.DELETED
    assert sb.last_op_id.index == last_index and sb.last_op_id.term >= 1
    assert not fs.wal_dir("t1").exists() and not fs.data_dir("t1").exists()
    qdir = root / sb.quarantine_path
    assert (qdir / "superblock").exists() and (qdir / "consensus-meta").exists()
    assert (qdir / "wal").is_dir() and (qdir / "data").is_dir()
    assert fs.read_cmeta("t1").current_term >= 1  # kept forever


def _last_index_on_disk(root: Path) -> int:
    m = open_manager(root)
    try:
        return m.tablet("t1").last_op_id().index  # this open adds a NO_OP of its own
    finally:
        m.close()


@pytest.mark.integration
@pytest.mark.parametrize("point", [*DELETION_POINTS, "delete.after_move_data"])
def test_deletion_crash_points(root, point):
    last = _last_index_on_disk(root)
    run(root, "delete", crash=point)
    before_tombstone = point in (
        "delete.after_step_1",
        "delete.after_step_2",
        "delete.after_step_3",
    )
    m = open_manager(root)
    try:
        if before_tombstone:
            # Not yet tombstoned: the tablet starts normally with all its rows.
            assert m.replicas["t1"].status is TabletStatus.RUNNING
            assert _rows(m) == 301
        else:
            assert m.replicas["t1"].status is TabletStatus.TOMBSTONED
            with pytest.raises(TabletDeleted):
                m.tablet("t1")
        assert _rows(m, "t2") == 300
    finally:
        m.close()
    if not before_tombstone:
        # The crashed process shut the tablet down (step 1), which ends no entry: the last op
        # id is the one the tablet had.
        _assert_tombstoned(root, last + 1)
    else:
        run(root, "delete")
        _assert_tombstoned(root, last + 3)  # each of the three opens since began a term


@pytest.mark.integration
def test_roll_forward_crash_then_finish(root):
    run(root, "delete", crash="delete.after_step_4")
    run(root, "open", crash="startup.after_roll_forward")
    run(root, "open")
    fs = FsLayout.open(root)
    assert fs.read_superblock("t1").data_state == DataState.DELETED
    assert not fs.wal_dir("t1").exists()
    assert len(quarantine_dirs(fs, "t1")) == 1


@pytest.mark.integration
@pytest.mark.parametrize("crash", [None, "copy.after_copying_superblock"])
def test_copying_at_startup_deletes_itself(root, crash):
    run(root, "delete")
    fs = FsLayout.open(root)
    tomb = fs.read_superblock("t1")
    term = fs.read_cmeta("t1").current_term
    run(root, "begin_copy", crash=crash)
    sb = fs.read_superblock("t1")
    assert sb.data_state == DataState.COPYING and sb.quarantine_path == ""
    assert sb.last_op_id == tomb.last_op_id
    # A copy that had started downloading: a WAL directory with a partial segment.
    fs.wal_dir("t1").mkdir()
    (fs.wal_dir("t1") / seg.segment_name(1)).write_bytes(b"partial")
    m = open_manager(root)
    try:
        assert m.replicas["t1"].status is TabletStatus.TOMBSTONED
        assert _rows(m, "t2") == 300
    finally:
        m.close()
    sb = fs.read_superblock("t1")
    assert sb.data_state == DataState.DELETED
    assert sb.last_op_id == tomb.last_op_id  # kept through COPYING, so it can still vote
    assert fs.read_cmeta("t1").current_term == term
    assert not fs.wal_dir("t1").exists()
    assert len(quarantine_dirs(fs, "t1")) == 2


@pytest.mark.integration
def test_failed_start_leaves_tablet_offline_and_others_running(root):
    fs = FsLayout.open(root)
    segs = seg.list_segments(fs.wal_dir("t2"))
    # t2 was never flushed: its rows are only in the WAL. Flip a byte in its first segment,
    # which has later records after it.
    path = segs[0][1]
    c = seg.read_segment(path, is_last=False)
    assert len(c.entries) >= 3
    data = bytearray(path.read_bytes())
    data[c.data_end // 2] ^= 0x10
    path.write_bytes(bytes(data))
    m = open_manager(root)
    try:
        r = m.replicas["t2"]
        assert r.status is TabletStatus.FAILED
        assert str(path) in r.error and "offset" in r.error
        with pytest.raises(TabletFailed):
            m.tablet("t2")
        reports = {x.tablet_id: x for x in m.reports()}
        assert reports["t2"].status == "FAILED" and reports["t2"].error
        t1 = m.tablet("t1")
        t1.write(1, [(OpType.INSERT, ipc(six_rows([5000])))], deadline())
        assert _rows(m) == 302
        # A failed tablet can still be deleted (tombstoned) by an operator or the coordinator.
        m.delete_tablet("t2")
        assert m.replicas["t2"].status is TabletStatus.TOMBSTONED
    finally:
        m.close()


@pytest.mark.integration
def test_corrupt_superblock_leaves_tablet_offline(root):
    fs = FsLayout.open(root)
    p = fs.superblock_path("t2")
    data = bytearray(p.read_bytes())
    data[-2] ^= 0xFF
    p.write_bytes(bytes(data))
    m = open_manager(root)
    try:
        assert m.replicas["t2"].status is TabletStatus.FAILED
        assert "CRC" in m.replicas["t2"].error
        assert _rows(m) == 301
    finally:
        m.close()


def test_delete_then_recreate_keeps_term_monotonic(tmp_path):
    m = open_manager(tmp_path / "r")
    try:
        from tests.tservers.helpers import create

        t = create(m)
        t.write(1, [(OpType.INSERT, ipc(pa.table({"id": pa.array([1], pa.int64())})))], deadline())
        term = t.cmeta.current_term
        last = m.delete_tablet("t1")
        assert m.delete_tablet("t1") == last  # idempotent
        t2 = create(m)
        assert t2.cmeta.current_term > term
        assert t2.scan([], [], [], [], 0).num_rows == 0
    finally:
        m.close()


def test_data_states_and_orphan_blocks(tmp_path):
    from tests.tservers.helpers import create
    from tservers.tablet.manager import TabletDataState

    root = tmp_path / "r"
    m = open_manager(root)
    try:
        assert m.data_state("t1") is TabletDataState.DOES_NOT_EXIST
        t = create(m)
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(10))))], deadline())
        t.flush()
        assert m.data_state("t1") is TabletDataState.READY
    finally:
        m.close()
    orphan = FsLayout.open(root).data_dir("t1") / "block-000000099.arrow"
    orphan.write_bytes(b"left by a crashed flush")
    m = open_manager(root)
    try:
        assert not orphan.exists()
        assert m.tablet("t1").scan([], [], [], [], 0).num_rows == 10
        last = m.last_op_id("t1")
        m.delete_tablet("t1")
        assert m.data_state("t1") is TabletDataState.DELETED
        assert m.last_op_id("t1") == last
    finally:
        m.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    "action,point,t1_rows,t2_rows",
    [
        ("flush", "flush.after_block_write", 301, 300),
        ("flush", "flush.after_superblock", 301, 300),
        # Compaction runs after three flushed deletes: they are durable whatever happens next.
        ("compact", "compact.after_block_write", 298, 300),
        ("compact", "compact.after_superblock", 298, 300),
        # The write is durable but was never acknowledged: after restart it may be there.
        ("write", "write.after_sync_before_apply", 301, 301),
        ("write", "wal.after_append_before_sync", 301, None),
    ],
)
def test_storage_crash_points(root, action, point, t1_rows, t2_rows):
    run(root, action, crash=point)
    m = open_manager(root)
    try:
        assert m.replicas["t1"].status is TabletStatus.RUNNING
        assert m.replicas["t2"].status is TabletStatus.RUNNING
        assert _rows(m) == t1_rows
        if t2_rows is not None:
            assert _rows(m, "t2") == t2_rows
        else:
            assert _rows(m, "t2") in (300, 301)
    finally:
        m.close()
