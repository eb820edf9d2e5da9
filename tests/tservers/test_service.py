"""The tablet server as a process: service methods, bad requests, kill -9, clean shutdown."""

from __future__ import annotations

import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from logcentric.tablets import TabletServerClient, column
from rpc.client import RpcClient
from rpc.errors import (
    AlreadyExists,
    BadRequest,
    CasFailed,
    InvalidName,
    NotFound,
    SchemaVersionMismatch,
    TabletDeleted,
    TabletNotFound,
)
from rpc.protocols.tserver_pb2 import OpType, StatusRequest, StatusResponse
from tests.tservers.procs import REPO, TServerProcess
from tservers.fs import FsLayout
from tservers.wal import segment as seg

COLS = [
    column("id", "int64", key=True),
    column("n", "int32", nullable=True),
    column("x", "double", nullable=True),
    column("s", "string", nullable=True),
    column("b", "bool", nullable=True),
    column("ts", "timestamp", nullable=True),
]


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array(ids, pa.int32()),
            "x": pa.array([i / 2 for i in ids]),
            "s": [f"s{i}" for i in ids],
            "b": [i % 2 == 0 for i in ids],
            "ts": pa.array(ids, pa.timestamp("us")),
        }
    )


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "root"
    FsLayout.format(root)
    procs = []

    def start(**kw) -> TServerProcess:
        p = TServerProcess(root, **kw).start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


@pytest.mark.integration
def test_service_end_to_end(server):
    p = server()
    with TabletServerClient(p.address) as c:
        assert c.server_uuid == p.uuid
        c.create_tablet("t1", COLS, table_name="tbl")
        with pytest.raises(AlreadyExists):
            c.create_tablet("t1", COLS)
        s = c.new_session(flush_rows_max=2000)
        s.insert("t1", rows(range(5000)))  # auto-flushes at 2000 rows
        s.flush()
        assert s.pending_rows() == 0
        batches = list(c.scan("t1", batch_rows_max=700))
        assert all(b.num_rows <= 700 for b in batches)
        assert sum(b.num_rows for b in batches) == 5000
        # 100 batches of 50 rows: more than one response, so the scanner is continued.
        small = list(c.scan("t1", batch_rows_max=50))
        assert len(small) == 100
        assert [i for b in small for i in b.column("id").to_pylist()] == list(range(5000))
        t = c.scan_table(
            "t1",
            projection=["id", "s"],
            predicates=[("id", "in", [3, 4, 99999]), ("s", "is not null")],
        )
        assert t.to_pylist() == [{"id": 3, "s": "s3"}, {"id": 4, "s": "s4"}]
        s.update("t1", [{"id": 3, "s": None}])
        s.delete("t1", [{"id": 4}])
        s.flush()
        assert c.scan_table("t1", predicates=[("s", "is null")])["id"].to_pylist() == [3]
        assert c.scan_table("t1", lower_bound=[3], upper_bound=[6])["id"].to_pylist() == [3, 5]
        c.alter_schema("t1", add=[column("extra", "string", nullable=True)], drop=["b"])
        assert "b" not in c.scan_table("t1", limit=1).column_names
        reports = {r.tablet_id: r for r in c.list_tablets().tablets}
        assert reports["t1"].status == "RUNNING" and reports["t1"].schema_version == 2
        st = c.status()
        assert st.uuid == p.uuid and st.wal_sync_enabled and st.wal_syncs >= 1
        # A delete guarded by an older config index is refused and changes nothing.
        index = reports["t1"].committed_config.opid_index
        live_rows = c.scan_table("t1")["id"].to_pylist()
        with pytest.raises(CasFailed, match="committed config index"):
            c.delete_tablet("t1", cas_config_index=index - 1)
        assert c.scan_table("t1")["id"].to_pylist() == live_rows
        c.delete_tablet("t1", cas_config_index=index)
        with pytest.raises(TabletDeleted):
            c.scan_table("t1")
        c.delete_tablet("t1", cas_config_index=index - 1)  # a tombstone: a no-op
    # Every request names the server: a request for another uuid is refused.
    with RpcClient(p.address) as rc, pytest.raises(InvalidName):
        rc.call("someone-else", "TServer.Status", StatusRequest(), StatusResponse)


@pytest.mark.integration
def test_bad_requests_get_clear_errors_and_change_nothing(server):
    p = server()
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        resp = c.write("t1", [(OpType.INSERT, rows(range(10)))])
        assert resp.rows == 10 and resp.op_id.term == 1 and resp.op_id.index == 2
        before = c.scan_table("t1")
        with pytest.raises(TabletNotFound, match="nope"):
            c.write("nope", [(OpType.INSERT, rows([1]))], 1)
        with pytest.raises(SchemaVersionMismatch, match="schema mismatch"):
            c.write("t1", [(OpType.INSERT, rows([20]))], 7)
        with pytest.raises(BadRequest, match="'n' is INT32"):
            c.write(
                "t1", [(OpType.INSERT, pa.table({"id": pa.array([21], pa.int64()), "n": ["text"]}))]
            )
        with pytest.raises(BadRequest, match="exceeds"):
            c.write(
                "t1", [(OpType.INSERT, pa.table({"id": pa.array(range(100, 100_200), pa.int64())}))]
            )
        with pytest.raises(AlreadyExists):
            c.write("t1", [(OpType.INSERT, rows([30, 31, 5]))])
        with pytest.raises(NotFound):
            c.write("t1", [(OpType.UPDATE, pa.table({"id": pa.array([77], pa.int64())}))])
        with pytest.raises(BadRequest, match="bad tablet id"):
            c.write("../etc", [(OpType.INSERT, rows([1]))], 1)
        with pytest.raises(BadRequest, match="unknown column"):
            c.scan_table("t1", projection=["zz"])
        with pytest.raises(BadRequest):
            c.create_tablet("t2", [column("v", "string", nullable=True)])
        assert c.scan_table("t1").equals(before)


@pytest.mark.integration
def test_kill9_during_heavy_writes_keeps_every_acknowledged_row(server):
    p = server(extra_args=["--flush-rows", "3000", "--segment-size-mb", "1"])
    c = TabletServerClient(p.address)
    c.create_tablet("t1", COLS)
    acked: list[list[int]] = [[] for _ in range(4)]
    stop = threading.Event()

    def writer(k: int) -> None:
        with TabletServerClient(p.address, p.uuid) as wc:
            b = 0
            while not stop.is_set():
                ids = list(range((k * 1_000_000) + b * 200, (k * 1_000_000) + (b + 1) * 200))
                try:
                    wc.write("t1", [(OpType.INSERT, rows(ids))], 1)
                except Exception:
                    return  # the server died under us: that write was not acknowledged
                acked[k].extend(ids)
                b += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    from tests.support.procs import wait_for

    wait_for(lambda: sum(len(a) for a in acked) >= 50_000, 120, "50k acknowledged rows")
    p.kill9()
    stop.set()
    for t in threads:
        t.join(30)
    c.close()
    p2 = server(extra_args=["--flush-rows", "3000"])
    with TabletServerClient(p2.address) as c2:
        got = set(c2.scan_table("t1", projection=["id"])["id"].to_pylist())
    want = {i for a in acked for i in a}
    assert want <= got, f"{len(want - got)} acknowledged rows lost"


@pytest.mark.integration
def test_restart_with_truncated_last_segment(server):
    p = server()
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        for b in range(5):
            c.write("t1", [(OpType.INSERT, rows(range(b * 10, b * 10 + 10)))])
    p.kill9()
    fs = FsLayout.open(p.root)
    path = seg.list_segments(fs.wal_dir("t1"))[-1][1]
    contents = seg.read_segment(path, is_last=True)
    import os

    os.truncate(path, contents.data_end - 5)  # the last write's record is cut short
    p2 = server()
    with TabletServerClient(p2.address) as c:
        ids = c.scan_table("t1", projection=["id"])["id"].to_pylist()
        assert ids == list(range(40))
        c.write("t1", [(OpType.INSERT, rows([40]))])


@pytest.mark.integration
def test_sigterm_is_a_clean_shutdown_and_unformatted_root_is_refused(server, tmp_path):
    p = server()
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        c.write("t1", [(OpType.INSERT, rows([1]))])
    assert p.terminate() == 0
    fs = FsLayout.open(p.root)
    for _, path in seg.list_segments(fs.wal_dir("t1")):
        assert seg.read_segment(path, is_last=False).footer is not None  # closed cleanly
    r = subprocess.run(
        # --insecure: a standalone server (this tests the fs root's check, not security).
        [
            sys.executable,
            "-m",
            "tservers.cli",
            "start",
            "--fs-root",
            str(tmp_path / "empty"),
            "--insecure",
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "not formatted" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.integration
def test_flipped_byte_takes_one_tablet_offline_and_reports_it(server):
    from rpc.errors import TabletFailed

    p = server()
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        c.create_tablet("t2", COLS)
        for b in range(5):
            c.write("t1", [(OpType.INSERT, rows(range(b * 10, b * 10 + 10)))])
            c.write("t2", [(OpType.INSERT, rows(range(b * 10, b * 10 + 10)))])
    p.kill9()
    fs = FsLayout.open(p.root)
    path = seg.list_segments(fs.wal_dir("t2"))[0][1]
    contents = seg.read_segment(path, is_last=True)
    data = bytearray(path.read_bytes())
    data[contents.data_end // 2] ^= 0x04
    path.write_bytes(bytes(data))
    p2 = server()
    with TabletServerClient(p2.address) as c:
        reports = {r.tablet_id: r for r in c.list_tablets().tablets}
        assert reports["t2"].status == "FAILED"
        assert str(path) in reports["t2"].error and "offset" in reports["t2"].error
        assert reports["t1"].status == "RUNNING"
        with pytest.raises(TabletFailed):
            c.scan_table("t2")
        c.write("t1", [(OpType.INSERT, rows([100]))])
        assert c.scan_table("t1").num_rows == 51


@pytest.mark.integration
def test_client_session_mixed_operations_and_timestamps(server):
    import datetime

    p = server()
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        s = c.new_session()
        t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
        s.insert(
            "t1",
            [{"id": i, "s": f"v{i}", "ts": t0 + datetime.timedelta(seconds=i)} for i in range(10)],
        )
        s.upsert("t1", [{"id": 20, "n": 5}])
        s.update("t1", [{"id": 1, "n": 7}])
        s.delete("t1", [{"id": 2}])
        assert s.pending_rows() == 13
        (resp,) = s.flush()
        assert resp.rows == 13
        got = c.scan_table(
            "t1",
            projection=["id", "n", "s"],
            predicates=[("ts", ">=", t0 + datetime.timedelta(seconds=8))],
        )
        assert got.to_pylist() == [{"id": 8, "n": None, "s": "v8"}, {"id": 9, "n": None, "s": "v9"}]
        assert c.scan_table("t1", predicates=[("id", "=", 1)])["n"].to_pylist() == [7]
        assert 2 not in c.scan_table("t1", projection=["id"])["id"].to_pylist()
        empty = c.scan_table("t1", predicates=[("id", ">", 1000)])
        assert empty.num_rows == 0 and "id" in empty.column_names


@pytest.mark.integration
def test_no_wal_sync_flag(server):
    p = server(extra_args=["--no-wal-sync"])
    with TabletServerClient(p.address) as c:
        c.create_tablet("t1", COLS)
        c.write("t1", [(OpType.INSERT, rows(range(10)))])
        st = c.status()
        assert not st.wal_sync_enabled and st.wal_syncs == 0 and st.wal_entries >= 2


@pytest.mark.integration
def test_brief_listing_names_each_replica_with_its_role_and_no_more(server):
    """ListTablets with `brief`: every replica with its status and, running, its Raft role,
    term and leader; none of the superblock's or the config's fields (a full listing of
    10,000 replicas cost the server 180-190 ms of CPU, and benches poll it)."""
    p = server()
    with TabletServerClient(p.address) as c:
        for t in ("t1", "t2"):
            c.create_tablet(t, COLS, table_name="tbl")
        s = c.new_session()
        s.insert("t1", rows(range(10)))
        s.flush()
        full = {r.tablet_id: r for r in c.list_tablets().tablets}
        brief = {r.tablet_id: r for r in c.list_tablets(brief=True).tablets}
    assert set(brief) == set(full) == {"t1", "t2"}
    for t, r in brief.items():
        f = full[t]
        assert (r.status, r.role, r.current_term, r.leader_uuid) == (
            f.status,
            f.role,
            f.current_term,
            f.leader_uuid,
        )
        assert r.status == "RUNNING" and r.role == "LEADER" and r.leader_uuid == p.uuid
        assert f.table_name == "tbl" and f.committed_config.peers and f.last_op_id.index > 0
        assert not r.table_name and not r.committed_config.peers and not r.HasField("last_op_id")
