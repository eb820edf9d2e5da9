"""A tablet copy onto a server short of space, and a full server freeing space
(design/storage.md "Disk as a resource").

An acceptance probe filled a 48 MiB tmpfs to 0 bytes with a move-replica: the copy hit
ENOSPC, its cleanup failed too (it wrote a superblock first), the replica stayed FAILED with
its partial files, and the coordinator sent config changes for the move for minutes. Now:

- the copy target refuses (NO_SPACE) a copy whose announced size does not fit above its
  reserve, before writing anything;
- a copy that fails mid-way (ENOSPC) deletes its partial data first, so the cleanup needs no
  space, and the replica ends a tombstone (reported COPY_FAILED for a while), not FAILED;
- the coordinator cancels a move whose target refused or failed the copy, and says so;
- at or below its reserve a server reaps its quarantine/ oldest first, so dropping a table
  frees space (the NO_SPACE hint says so).

All on real size-limited tmpfs mounts (tests run as root; skipped when mount is refused).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from logcentric.client import Client, Column
from rpc.errors import NoSpace
from tests.support.cluster import local_cluster
from tests.support.procs import free_port, wait_for
from tests.support.tmpfs import fill, free_bytes, tmpfs_mounter
from tests.tservers.helpers import create, open_manager
from tests.tservers.procs import TServerProcess, joined
from tservers.fs import DiskSpace

REPO = Path(__file__).resolve().parents[2]
MB = 1 << 20


@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mounter(tmp_path) as mount:
        yield mount


def _write_until_enospc(path: Path) -> int:
    """Write random bytes to `path` until the file system is full; the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(os.urandom(64 * 1024))
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                return written


def test_a_copy_failing_with_enospc_cleans_up_without_space(tmpfs):
    mount = tmpfs(16 * MB)
    m = open_manager(mount / "ts")
    try:
        m.begin_copy("t1")
        data = m.fs.data_dir("t1")
        data.mkdir(parents=True, exist_ok=True)
        assert _write_until_enospc(data / "000001.block") > 8 * MB
        assert free_bytes(mount) < 64 * 1024  # the disk is full, as in the probe
        m.abort_copy("t1")  # failed before: it wrote into quarantine/ first (ENOSPC)
        assert m.replicas["t1"].status.value == "TOMBSTONED"
        assert not data.exists() and not m.fs.wal_dir("t1").exists()  # no partial files
        assert free_bytes(mount) > 12 * MB  # the partial data is gone, not quarantined
        (rep,) = [r for r in m.reports() if r.tablet_id == "t1"]
        assert rep.status == "COPY_FAILED" and "tablet copy failed" in rep.error
        m.begin_copy("t1")  # and a new copy may start
        assert m.replicas["t1"].status.value == "COPYING"
    finally:
        m.close()


def test_the_copy_target_refuses_a_copy_larger_than_its_room(tmpfs):
    mount = tmpfs(16 * MB)
    m = open_manager(mount / "ts")
    m.disk = DiskSpace(mount / "ts", m.fs.uuid, 4 * MB)
    try:
        free = free_bytes(mount)
        m.require_copy_space("t1", free - 5 * MB)  # fits above the reserve
        with pytest.raises(NoSpace, match=r"needs \d+ bytes.*less than its reserve"):
            m.require_copy_space("t1", free - 3 * MB)
        assert "t1" not in m.replicas  # nothing written
    finally:
        m.close()


def test_a_full_server_reaps_its_quarantine_so_a_drop_frees_space(tmpfs):
    mount = tmpfs(32 * MB)
    root = mount / "ts"
    m = open_manager(root)
    m.disk = DiskSpace(root, m.fs.uuid, 8 * MB)
    try:
        for tid in ("t1", "t2"):
            create(m, tid)
            with open(m.fs.data_dir(tid) / "blob", "wb") as f:  # the replica's bytes
                f.write(os.urandom(6 * MB))
        fill(mount, 8 * MB - 1 * MB)  # below the reserve
        assert m.disk.state(fresh=True).full
        with pytest.raises(NoSpace, match="quarantine"):  # the hint names what frees space
            m.disk.require("a write")
        m.delete_tablet("t1")  # a drop: the replica goes to quarantine/ (86,400 s)
        m.quarantine.run_once()
        assert free_bytes(mount) > 8 * MB, "the dropped replica's bytes were not freed"
        m.disk.require("a write")  # above the reserve again
        assert [e.name.split(".")[0] for e in _entries(m)] == []
        # Above the reserve the retention holds: a second drop stays in quarantine/.
        m.delete_tablet("t2")
        m.quarantine.run_once()
        assert [e.name.split(".")[0] for e in _entries(m)] == ["t2"]
    finally:
        m.close()


def _entries(m):
    from tservers.quarantine import scan

    return scan(m.fs.quarantine_root)


COLUMNS = [Column("id", "int64", key=True), Column("pad", "string")]


def _credentials_args(cluster) -> list[str]:
    """The admin's credentials of a secure cluster, for a coordinator tool."""
    return ["--credentials", str(cluster.spec.admin_credentials)] if cluster.spec.secure else []


def _replication(cluster) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", "replication", "--json",
         "--coordinators", ",".join(cluster.spec.coordinator_addresses),
         *_credentials_args(cluster)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return json.loads(r.stdout)


@pytest.mark.integration
def test_a_move_onto_a_server_without_room_is_refused_and_cancelled(tmp_path, tmpfs):
    mount = tmpfs(48 * MB)
    # A secure cluster (the default); the tablet servers are admitted and run CURVE.
    with local_cluster(tmp_path / "cluster", coordinators=1, tservers=0) as cluster:
        coordinators = ",".join(cluster.spec.coordinator_addresses)
        procs: list[TServerProcess] = []

        def tserver(root: Path, reserve: int) -> TServerProcess:
            subprocess.run(
                [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
                cwd=REPO, check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            p = joined(
                cluster,
                root,
                extra_args=[
                    "--fs-reserved-bytes", str(reserve),
                    "--http", f"127.0.0.1:{free_port()}",
                ],
            )  # fmt: skip
            procs.append(p.start())
            return p

        try:
            source = tserver(tmp_path / "a", 0)
            with Client(
                cluster.spec.coordinator_addresses,
                timeout_s=60,
                credentials=cluster.credentials(),
            ) as client:
                wait_for(lambda: len(client.list_servers()) == 1, 60, "the source enlisted")
                client.create_table("a", COLUMNS, num_tablets=1, replication_factor=1)
                t = client.table("a")
                tablet = t.tablets()[0].tablet_id
                s = client.new_session()
                for start in range(0, 12_000, 500):  # ~12 MiB of WAL, incompressible
                    s.insert(t, [{"id": i, "pad": os.urandom(500).hex()}
                                 for i in range(start, start + 500)])  # fmt: skip
                    assert s.flush() == []
                target = tserver(mount / "ts", 4 * MB)
                wait_for(lambda: len(client.list_servers()) == 2, 60, "the target enlisted")
                tablet_bytes = sum(
                    f.stat().st_size
                    for d in (source.root / "wals" / tablet, source.root / "data" / tablet)
                    if d.exists()
                    for f in d.rglob("*")
                    if f.is_file()
                )
                assert tablet_bytes > 8 * MB, tablet_bytes
                # Room for about 2/3 of the tablet above the 4 MiB reserve.
                fill(mount, 4 * MB + tablet_bytes * 2 // 3)
                free_before = free_bytes(mount)
                r = subprocess.run(
                    [sys.executable, "-m", "optools.coordinator_cli", "move-replica", tablet,
                     "--from", source.uuid, "--to", target.uuid, "--coordinators", coordinators,
                     *_credentials_args(cluster)],
                    cwd=REPO, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                # The command waits for the move, and learns that it was given up.
                assert r.returncode != 0, r.stdout
                assert f"target {target.uuid} refused or failed a copy" in r.stderr, r.stderr

                def cancelled() -> bool:
                    return not _replication(cluster).get("moves")

                wait_for(cancelled, 60, "the coordinator cancelling the refused move")
                logs = "".join(
                    p.read_text(errors="replace")
                    for p in (tmp_path / "cluster").rglob("*")
                    if p.is_file() and p.suffix in (".log", ".err", ".out")
                )
                assert f"move of tablet {tablet} off {source.uuid} cancelled" in logs
                assert "NO_SPACE" in logs or "refused" in logs
                # Nothing was written on the target: no partial files, the disk not filled.
                assert free_bytes(mount) >= free_before - 1 * MB
                assert not (mount / "ts" / "data" / tablet).exists()
                # The tablet stays whole on its source, and the source stays in its config.
                wait_for(
                    lambda: [r.server_uuid for r in t.tablets()[0].replicas] == [source.uuid],
                    60,
                    "the target removed from the tablet's config",
                )
                assert t.count() == 12_000
        finally:
            for p in procs:
                p.stop()
