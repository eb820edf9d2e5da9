"""Disk as a resource (issue 25, design/storage.md "Disk as a resource").

Each tablet server keeps reserved free space on its fs root's file system: past it, new
tablets, tablet copies onto it and writes are refused with NO_SPACE (naming the server, the
free bytes and the reserve), the coordinator places new replicas elsewhere (or refuses a
CreateTable no server set has room for), while reads, deletes and compactions go on.

The in-process part drives a TabletManager and the TServer service on a real file system with
a reserve above (and then below) its free space. The integration part runs a coordinator and
three tablet server processes, each on its own size-limited tmpfs (mounted here; skipped
only when mount is not permitted), fills one of them with real rows, and checks refusals,
placement, `coordinator status`, recovery once space is freed, and after a kill -9 and a
restart that every acknowledged row is there.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

from logcentric.client import Client, Column
from rpc import errors
from rpc.protocols.tserver_pb2 import (
    ColumnSchemaPB,
    CreateTabletRequest,
    DataType,
    OpType,
    SchemaPB,
    WriteRequest,
)
from rpc.server import CallContext
from tests.support.cluster import local_cluster
from tests.support.procs import free_port, wait_for
from tests.support.tmpfs import fill, free_bytes, tmpfs_mounter
from tests.tservers.procs import TServerProcess, joined
from tservers import fs as fs_module
from tservers.fs import DiskSpace, FsLayout, default_reserved_bytes
from tservers.server import ROOT_COUNT_AFTER_OPEN_S
from tservers.service import TServerService
from tservers.tablet.manager import TabletManager
from tservers.wal.log import WalOptions

REPO = Path(__file__).resolve().parents[2]
MB = 1 << 20
TMPFS_SIZE = 64 * MB
RESERVE = 24 * MB
COLUMNS = [Column("id", "int64", key=True), Column("pad", "string")]
PAD = "x" * 1000  # ~1 KB a row: a batch of 500 rows is about half a MB of WAL


def test_default_reserve_is_one_percent_capped_at_one_gib():
    assert default_reserved_bytes(10 * MB) == int(10 * MB * 0.01)
    assert default_reserved_bytes(1000 << 30) == 1 << 30


def _schema_pb() -> SchemaPB:
    return SchemaPB(
        columns=[
            ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
            ColumnSchemaPB(name="pad", type=DataType.STRING, nullable=True),
        ]
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_refusals_past_the_reserve_in_process(tmp_path):
    """Reserve above the free space: CreateTablet, a copy onto the server and writes are
    refused with NO_SPACE naming the server, its free bytes and the reserve; a delete-only
    write, reads and a compaction go on. Reserve 0: accepted again."""
    fs = FsLayout.format(tmp_path / "ts")
    free = DiskSpace(fs.root, fs.uuid, 0).state(fresh=True).free_bytes
    disk = DiskSpace(fs.root, fs.uuid, 0)
    mgr = TabletManager(fs, WalOptions(sync=False), maintenance=False, disk=disk)
    mgr.open()
    try:
        schema = _schema_pb()
        mgr.create_tablet(CreateTabletRequest(tablet_id="t1", table_name="t", schema=schema))
        service = TServerService(mgr, lambda: "127.0.0.1:1")
        tablet = mgr.tablet("t1")
        arrow = pa.schema([("id", pa.int64()), ("pad", pa.string())])

        def write(op, ids):
            rows = pa.table({"id": ids, "pad": [PAD] * len(ids)}, schema=arrow)
            if op == OpType.DELETE:
                rows = rows.select(["id"])
            ctx = CallContext("TServer.Write", "", time.monotonic() + 30, [memoryview(_ipc(rows))])
            req = WriteRequest(tablet_id="t1", schema_version=tablet.sb.schema.version, ops=[op])
            return service.write(req, ctx)

        for start in range(0, 400, 100):  # four blocks, for the compaction below
            write(OpType.INSERT, list(range(start, start + 100)))
            tablet.flush()
        # Full: the reserve is above every byte the file system has free.
        disk.set_reserved_bytes(free * 4)
        with pytest.raises(errors.NoSpace) as e:
            write(OpType.INSERT, [1000])
        text = str(e.value)
        assert fs.uuid in text and "bytes free" in text and f"reserve of {free * 4}" in text
        with pytest.raises(errors.NoSpace, match="new tablet t2"):
            mgr.create_tablet(CreateTabletRequest(tablet_id="t2", table_name="t", schema=schema))
        assert "t2" not in mgr.replicas and not fs.superblock_path("t2").exists()
        with pytest.raises(errors.NoSpace, match="tablet copy of t3"):
            mgr.begin_copy("t3")
        assert "t3" not in mgr.replicas
        write(OpType.DELETE, [0, 1, 2])  # deletes go on
        assert tablet.scan([], [], [], [], 0).num_rows == 397  # reads go on
        blocks = len(tablet.blocks)
        mgr.run_maintenance_once(compact=True)  # compactions go on
        assert len(tablet.blocks) < blocks
        assert mgr.compaction.compactions == 1 and mgr.compaction.bytes_written > 0
        assert disk.refusals == 3
        # Space back (here: the reserve lowered): taken again, at once.
        disk.set_reserved_bytes(0)
        write(OpType.INSERT, [1000])
        mgr.create_tablet(CreateTabletRequest(tablet_id="t2", table_name="t", schema=schema))
        assert tablet.scan([], [], [], [], 0).num_rows == 398
    finally:
        mgr.close()


def test_admitted_bytes_count_against_a_cached_answer(tmp_path, monkeypatch):
    """Bytes that callers admitted said they would write are taken off the cached free space:
    writes are refused at the reserve even before the next statvfs (a client's 0.5 MB
    batches went 8 MB past a stale answer, and a flush then filled the disk)."""
    monkeypatch.setattr(fs_module, "DISK_CHECK_INTERVAL_S", 3600.0)  # the cache, always
    with tmpfs_mounter(tmp_path) as mount:
        m = mount(32 * MB)
        disk = DiskSpace(m, "ts-uuid", 0)
        free = disk.state(fresh=True).free_bytes
        disk.set_reserved_bytes(free - 10 * MB)
        written = []
        for i in range(2):
            disk.require("write", need_bytes=4 * MB)
            written.append(m / f"w{i}")
            written[-1].write_bytes(b"x" * (4 * MB))
        with pytest.raises(errors.NoSpace, match="it needs 4194304 bytes"):
            disk.require("write", need_bytes=4 * MB)
        assert disk.refusals == 1
        assert free_bytes(m) >= free - 10 * MB  # the reserve held
        for p in written:  # space freed: admitted again (the refusal read the fs afresh)
            p.unlink()
        disk.require("write", need_bytes=4 * MB)
        disk.require("write", need_bytes=4 * MB)
        # Admitted bytes never written: a refusal's fresh statvfs sees them free again.
        disk.require("write", need_bytes=4 * MB)
        assert disk.refusals == 1


# ---------------------------------------------------------------------------- integration


@pytest.fixture
def tmpfs_mounts(tmp_path):
    """Three 64 MiB tmpfs file systems under tmp_path, unmounted at the end."""
    with tmpfs_mounter(tmp_path) as mount:
        yield [mount(TMPFS_SIZE) for _ in range(3)]


def _status(cluster, *json_flag: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", "status", "--coordinators",
         ",".join(cluster.spec.coordinator_addresses), *_credentials_args(cluster), *json_flag],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _credentials_args(cluster) -> list[str]:
    """The admin's credentials of a secure cluster, for a coordinator tool."""
    return ["--credentials", str(cluster.spec.admin_credentials)] if cluster.spec.secure else []


def _server(client: Client, uuid: str):
    return next(s for s in client.list_servers() if s.uuid == uuid)


def _listing(mount: Path) -> str:
    """Every file under `mount` with its size, biggest first (what took the space)."""
    files = []
    for p in mount.rglob("*"):
        try:
            if p.is_file():
                files.append((p.stat().st_size, p))
        except FileNotFoundError:
            pass  # removed meanwhile (a WAL segment's GC)
    lines = [f"{size:>10} {p.relative_to(mount)}" for size, p in sorted(files, reverse=True)]
    return f"{free_bytes(mount)} bytes free; files:\n" + "\n".join(lines)


def _insert(client: Client, t, ids) -> None:
    s = client.new_session()
    s.insert(t, [{"id": i, "pad": PAD} for i in ids])
    row_errors = s.flush()  # NO_SPACE raises (the rows stay buffered in this session)
    assert row_errors == [], row_errors


@pytest.mark.integration
def test_full_disk_refuses_places_elsewhere_and_loses_nothing(tmp_path, tmpfs_mounts):
    # A secure cluster (the default); the tablet servers are admitted and run CURVE.
    with local_cluster(tmp_path / "cluster", coordinators=1, tservers=0) as cluster:
        procs: list[TServerProcess] = []
        try:
            for m in tmpfs_mounts:
                root = m / "ts"
                subprocess.run(
                    [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
                    cwd=REPO, check=True, capture_output=True, timeout=60,
                )  # fmt: skip
                procs.append(
                    joined(
                        cluster,
                        root,
                        extra_args=[
                            "--fs-reserved-bytes", str(RESERVE),
                            "--segment-size-mb", "1",
                            "--http", f"127.0.0.1:{free_port()}",
                        ],
                    ).start()
                )  # fmt: skip
            by_uuid = {p.uuid: p for p in procs}
            with Client(
                cluster.spec.coordinator_addresses,
                timeout_s=60,
                credentials=cluster.credentials(),
            ) as client:
                wait_for(
                    lambda: len([s for s in client.list_servers() if s.state == "LIVE"]) == 3,
                    60,
                    "three live tablet servers",
                )
                client.create_table("a", COLUMNS, num_tablets=1, replication_factor=1)
                t = client.table("a")
                full_uuid = t.tablets()[0].replicas[0].server_uuid
                full = by_uuid[full_uuid]
                mount = full.root.parent
                acked: set[int] = set()
                _insert(client, t, range(0, 500))
                acked.update(range(0, 500))
                # Leave 3 MiB above the reserve, then fill that with rows until refused.
                filler = fill(mount, RESERVE + 3 * MB)
                refused = None
                for n in range(1, 40):
                    ids = range(n * 500, n * 500 + 500)
                    try:
                        _insert(client, t, ids)
                    except errors.NoSpace as e:
                        refused = e
                        break
                    acked.update(ids)
                assert refused is not None, "writes never refused past the reserve"
                text = refused.message
                assert full_uuid in text and "bytes free" in text, text
                assert f"reserve of {RESERVE} bytes" in text, text
                # The reserve held: the disk is not full.
                assert free_bytes(mount) > RESERVE // 2, _listing(mount)
                http = full.extra_args[full.extra_args.index("--http") + 1]
                with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
                    metrics = r.read().decode()
                assert "logcentric_tserver_no_space_refusals_total 1.0" in metrics, metrics
                found = re.search(r"^logcentric_tserver_fs_reserved_bytes (\S+)$", metrics, re.M)
                assert found and float(found.group(1)) == RESERVE, metrics
                # Reads and deletes go on.
                assert t.count() == len(acked)
                s = client.new_session()
                s.delete(t, [{"id": i} for i in range(10)])
                assert s.flush() == []
                acked -= set(range(10))
                assert t.count() == len(acked)
                # The coordinator knows (heartbeats) and places new replicas elsewhere.
                wait_for(lambda: _server(client, full_uuid).fs_full, 30, "a full heartbeat")
                row = _server(client, full_uuid)
                assert row.fs_reserved_bytes == RESERVE and row.fs_free_bytes <= RESERVE
                assert row.fs_total_bytes == TMPFS_SIZE
                # Its files are counted once its tablets have been open a while
                # (tservers/server.py ROOT_COUNT_AFTER_OPEN_S).
                wait_for(
                    lambda: _server(client, full_uuid).fs_root_bytes > 0,
                    ROOT_COUNT_AFTER_OPEN_S + 30,
                    "the full server's files counted",
                )
                other = _server(client, next(u for u in by_uuid if u != full_uuid))
                assert not other.fs_full and other.fs_free_bytes > RESERVE
                client.create_table("b", COLUMNS, num_tablets=4, replication_factor=1)
                placed = {r.server_uuid for tb in client.table("b").tablets() for r in tb.replicas}
                assert full_uuid not in placed and len(placed) == 2
                with pytest.raises(errors.NoSpace) as e:
                    client.create_table("c", COLUMNS, num_tablets=1, replication_factor=3)
                assert full_uuid in e.value.message and "full" in e.value.message
                assert "c" not in client.list_tables()
                st = _status(cluster)
                assert "FULL" in st.stdout and f"{full_uuid} " in st.stdout, st.stdout
                st = _status(cluster, "--json")
                servers = {s["uuid"]: s for s in json.loads(st.stdout)["servers"]}
                assert servers[full_uuid]["fs_full"] is True
                assert servers[full_uuid]["fs_reserved_bytes"] == RESERVE
                # Dropping a table (DeleteTablet) works while full.
                client.drop_table("b")
                # Space freed: writes accepted again, the server gets replicas again.
                filler.unlink()
                _insert(client, t, range(100_000, 100_500))
                acked.update(range(100_000, 100_500))
                wait_for(lambda: not _server(client, full_uuid).fs_full, 30, "not full")
                client.create_table("c", COLUMNS, num_tablets=1, replication_factor=3)
                # kill -9 and restart: every acknowledged row is there, nothing else.
                full.kill9()
                full.start()
                t = client.table("a")

                def all_back() -> bool:
                    try:
                        ids = t.to_arrow(projection=["id"])["id"].to_pylist()
                    except (errors.Unavailable, errors.TimedOut, errors.NotLeader):
                        return False
                    except errors.Unauthenticated:
                        # Restarted, it admits the admin again once its principals table is
                        # back (read from disk or pushed: security.md section 4).
                        return False
                    assert sorted(ids) == sorted(acked), "rows lost or resurrected"
                    return True

                wait_for(all_back, 60, "the restarted server's rows")
        finally:
            for p in procs:
                p.stop()
