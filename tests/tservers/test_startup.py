"""Tablet server start-up: the port answers at once, tablets open in the background and each
serves as soon as it is open; a call to one still opening gets UNAVAILABLE (retry), never
TABLET_NOT_FOUND, and the client succeeds once it opens (issue 27, section 4).

The opening is made observable with the pause point `startup.before_open_tablet`
(tservers/crash.py): armed, every start-up thread waits before opening its tablet until the
test creates a release file, so nothing here depends on timing. Also: the WAL of a crashed
tablet is read once and appended to where it left off (no new segment, no truncation).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

import logcentric
from logcentric import Column
from optools.localcluster import LocalCluster
from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    EntryType,
    ListTabletsRequest,
    ListTabletsResponse,
    LogEntryPB,
    OpType,
    RowBlockPB,
    ScanRequest,
    ScanResponse,
    WriteOpPB,
)
from tests.support.procs import wait_for
from tests.tservers.helpers import create, ipc, open_manager, six_rows
from tservers.consensus.types import ReplicaStatus
from tservers.crash import PAUSE_DIR_ENV, PAUSE_ENV
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletStatus
from tservers.wal import segment as seg
from tservers.wal.log import Appender, TabletLog, WalOptions
from tservers.wal.segment import WalCorruption

POINT = "startup.before_open_tablet"
TABLETS = 60
ROWS = 600
WAIT_S = 120.0


# ------------------------------------------------------------------ WAL: reopen after a crash
def _entry(i: int, size: int = 100) -> LogEntryPB:
    return LogEntryPB(
        term=1,
        index=i,
        type=EntryType.WRITE,
        write=WriteOpPB(
            schema_version=1, blocks=[RowBlockPB(op=1, arrow_ipc=bytes([i % 251]) * size)]
        ),
    )


def _append(app: Appender, tl: TabletLog, i: int, size: int = 100) -> None:
    done = threading.Event()
    errs: list = []
    app.append(tl, [_entry(i, size)], lambda err: (errs.append(err), done.set()))
    assert done.wait(30) and errs == [None]


def test_crashed_segment_with_torn_tail_is_zeroed_and_appended_to(tmp_path):
    wal = tmp_path / "wal"
    opts = WalOptions(segment_size_bytes_max=1 << 20)
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    for i in range(1, 21):
        _append(app, tl, i)
    os.close(tl.writer.fd)  # a crash: no footer, the segment stays preallocated
    path = wal / seg.segment_name(1)
    c = seg.read_segment(path, is_last=True)
    # Tear the last record: garbage at the end of its payload, as a torn write leaves it.
    with open(path, "r+b") as f:
        f.seek(c.data_end - 4)
        f.write(b"\xff" * 4)
    tl, entries = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in entries] == list(range(1, 20))
    assert tl.segment_count() == 1  # the crashed segment is the open one again
    # A shorter record where the torn one was: had its garbage stayed after it, the next
    # open would have taken it for corruption.
    _append(app, tl, 20, size=10)
    _append(app, tl, 21, size=10)
    os.close(tl.writer.fd)  # crash again
    tl, entries = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in entries] == list(range(1, 22))
    tl.close()
    app.close()
    assert [s for s, _ in seg.list_segments(wal)] == [1]


def _crashed(wal: Path, n: int, opts: WalOptions) -> Path:
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    for i in range(1, n + 1):
        _append(app, tl, i)
    app.close()
    os.close(tl.writer.fd)  # a crash: no footer, the segment stays preallocated
    return wal / seg.segment_name(1)


def test_crashed_segment_read_up_to_its_holes_or_whole(tmp_path):
    """The last segment is read up to its first hole when only holes follow (what a file
    system without SEEK_HOLE, or with the zero pages cached, cannot tell: read whole);
    either way the same entries, and data written into the preallocated tail is still
    found and refused."""
    opts = WalOptions(segment_size_bytes_max=4 << 20)
    path = _crashed(tmp_path / "a", 30, opts)
    quick = seg.read_segment(path, is_last=True)
    whole = seg.decode_segment(path, path.read_bytes(), is_last=True)  # caches zero pages
    assert [e.index for e in quick.entries] == [e.index for e in whole.entries]
    assert quick.entries == whole.entries and quick.data_end == whole.data_end
    assert quick.size == whole.size == path.stat().st_size  # preallocated in steps
    tl, entries = TabletLog.open(tmp_path / "a", "t1", opts)
    assert [e.index for e in entries] == list(range(1, 31))
    tl.close()

    path = _crashed(tmp_path / "b", 30, opts)
    with open(path, "r+b") as f:
        f.seek(2 << 20)
        f.write(b"stray bytes deep in the preallocated tail")
    with pytest.raises(WalCorruption, match="zero record header followed by data"):
        TabletLog.open(tmp_path / "b", "t1", opts)


# ------------------------------------------------------------------ in process: the manager
def test_manager_lists_starting_tablets_and_opens_each_on_its_own(tmp_path, monkeypatch):
    root = tmp_path / "root"
    m = open_manager(root)
    ids = [f"t{i}" for i in range(6)]
    for tid in ids:
        t = create(m, tid)
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(3))))], time.monotonic() + 30)
    m.close()

    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(PAUSE_ENV, POINT)
    monkeypatch.setenv(PAUSE_DIR_ENV, str(pause))
    # A thread per tablet: each waits at its own pause point, so any one can be let go.
    m = TabletManager(
        FsLayout.open(root), WalOptions(segment_size_bytes_max=1 << 20), startup_threads=len(ids)
    )
    try:
        m.open(wait=False)
        assert m.starting == len(ids)
        assert not m.wait_open(0.5)
        for tid in ids:
            with pytest.raises(errors.Unavailable, match="starting") as e:
                m.tablet(tid)
            assert e.value.retry_after_ms > 0
            with pytest.raises(errors.Unavailable):
                m.data_state(tid)
            with pytest.raises(errors.Unavailable):
                m.delete_tablet(tid)
            assert m._missing_status(tid) is None  # Raft: no answer, no tablet copy
        assert {r.status for r in m.reports()} == {"BOOTSTRAPPING"}
        assert m.reports(starting=False) == []  # the heartbeat reports open tablets only
        # Release one tablet: it serves, the others still start.
        (pause / f"{POINT}.t3").touch()
        wait_for(lambda: m.starting == len(ids) - 1, WAIT_S, "t3 to open")
        t3 = m.tablet("t3")
        assert t3.status is TabletStatus.RUNNING
        wait_for(lambda: t3.wait_leader_ready(time.monotonic() + 1), WAIT_S, "t3 to lead")
        assert t3.scan([], [], [], [], 0).num_rows == 3
        assert [r.tablet_id for r in m.reports(starting=False)] == ["t3"]
        with pytest.raises(errors.Unavailable):
            m.tablet("t0")
        (pause / POINT).touch()
        assert m.wait_open(WAIT_S)
        assert m.starting == 0
        for tid in ids:
            assert m.tablet(tid).scan([], [], [], [], 0).num_rows == 3
        assert m._missing_status("nope") is ReplicaStatus.TABLET_NOT_FOUND
    finally:
        (pause / POINT).touch()
        m.close()


# ------------------------------------------------------------------ real processes
def _rpc(cluster: LocalCluster, node) -> RpcClient:
    """A raw client of the tablet server `node` of the secure (default) `cluster`: CURVE as
    the admin, with the server's key from its fs root (the restarted server admits the admin
    by its principals table: kept on disk, or brought by a heartbeat answer)."""
    creds = cluster.credentials()
    key = FsLayout(Path(node.data), "").public_key()
    return RpcClient(node.rpc, "test-startup", curve=creds.client_curve(), server_key=key)


def _list(cluster: LocalCluster, node) -> ListTabletsResponse | None:
    try:
        with _rpc(cluster, node) as rc:
            uuid = rc.ping(timeout_s=1.0).uuid
            return rc.call(
                uuid, "TServer.ListTablets", ListTabletsRequest(), ListTabletsResponse,
                timeout_s=5.0,
            )  # fmt: skip
    except errors.RpcError:
        return None


def _paused_tablets(log_path: Path) -> list[str]:
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return re.findall(rf"pause point {re.escape(POINT)} \(([^)]+)\) reached", text)


@pytest.mark.integration
def test_restart_serves_tablets_as_they_open(tmp_path, monkeypatch):
    """A server with 60 replicas (one table of 60 tablets, replication 1) killed -9 and
    restarted with every start-up thread paused before its tablet: (i) its port answers and
    lists all 60 as starting, none open; (ii) a scan of one answers UNAVAILABLE, and a
    client scan of it (logcentric) waiting meanwhile succeeds once that one tablet is let go,
    the others still starting; (iii) once all are let go every tablet serves every row."""
    cluster = LocalCluster.create(tmp_path / "cluster", 1, 1, lease_timeout_s=1.5)
    pause = tmp_path / "pause"
    pause.mkdir()
    try:
        cluster.up(timeout_s=WAIT_S)
        coords = ",".join(cluster.spec.coordinator_addresses)
        admin = str(cluster.spec.admin_credentials)  # a secure cluster, the default
        with logcentric.connect(coords, timeout_s=WAIT_S, credentials=admin) as client:
            client.create_table(
                "many",
                [Column("id", "int64", key=True), Column("v", "string", nullable=True)],
                num_tablets=TABLETS,
                replication_factor=1,
            )
            table = client.table("many")
            with client.new_session() as s:
                s.upsert(table, [{"id": i, "v": f"v{i}"} for i in range(ROWS)])
            tablet_ids = [t.tablet_id for t in table.tablets()]
            assert len(tablet_ids) == TABLETS
            per_tablet = {t: table.scan_tablet(t) for t in tablet_ids}
            per_tablet = {t: sum(b.num_rows for b in bs) for t, bs in per_tablet.items()}
            assert sum(per_tablet.values()) == ROWS

        node = cluster.spec.tservers[0]
        cluster.kill(node, signal.SIGKILL)
        monkeypatch.setenv(PAUSE_ENV, POINT)
        monkeypatch.setenv(PAUSE_DIR_ENV, str(pause))
        cluster.start_tserver(0)
        monkeypatch.delenv(PAUSE_ENV)
        log_path = cluster.log_dir / f"{node.name}.log"

        # (i) The port answers while no tablet is open.
        listed = wait_for(lambda: _list(cluster, node), WAIT_S, "the restarted server to answer")
        assert {t.tablet_id for t in listed.tablets} == set(tablet_ids)
        assert {t.status for t in listed.tablets} == {"BOOTSTRAPPING"}, listed
        paused = wait_for(lambda: _paused_tablets(log_path), WAIT_S, "a paused tablet")
        target = paused[0]
        other = next(t for t in tablet_ids if t != target)

        # (ii) Retryable, not gone: UNAVAILABLE with a retry hint.
        with _rpc(cluster, node) as rc:
            uuid = rc.ping(timeout_s=5.0).uuid
            with pytest.raises(errors.Unavailable, match="starting") as e:
                rc.call(
                    uuid, "TServer.Scan", ScanRequest(tablet_id=target), ScanResponse,
                    timeout_s=1.0,
                )  # fmt: skip
            assert e.value.retry_after_ms > 0
        result: dict[str, object] = {}

        def client_scan() -> None:
            try:
                with logcentric.connect(coords, timeout_s=WAIT_S, credentials=admin) as c:
                    bs = list(c.table("many").scan_tablet(target))
                    result["rows"] = sum(b.num_rows for b in bs)
            except Exception as exc:  # reported by the assertion below
                result["error"] = exc

        th = threading.Thread(target=client_scan, name="client-scan")
        th.start()
        time.sleep(1.0)  # let the client meet the starting tablet (not needed to pass)
        assert th.is_alive(), result  # still waiting: nothing is open
        (pause / f"{POINT}.{target}").touch()
        th.join(WAIT_S)
        assert not th.is_alive()
        assert result.get("rows") == per_tablet[target], result
        now = {t.tablet_id: t.status for t in _list(cluster, node).tablets}
        assert now[target] == "RUNNING"
        assert now[other] == "BOOTSTRAPPING"  # the others are still paused

        # (iii) Everything serves in the end.
        (pause / POINT).touch()
        wait_for(
            lambda: (
                {t.status for t in (_list(cluster, node) or ListTabletsResponse()).tablets}
                == {"RUNNING"}
            ),
            WAIT_S,
            "every tablet to run",
        )
        with logcentric.connect(coords, timeout_s=WAIT_S, credentials=admin) as client:
            assert client.table("many").count() == ROWS
    finally:
        (pause / POINT).touch()
        cluster.down()
