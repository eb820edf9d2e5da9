"""Issue 7, proof "a wiped server that comes back under a new UUID is never mistaken for its
former self" (seed 000, "Failure of a disk with consensus metadata").

1. Three tablet servers, no coordinator. Two of them are killed, wiped, formatted again
   (`tserver fs format`: new UUIDs) and restarted on their old addresses. The leader's
   messages to the old UUIDs reach the new servers and are refused (INVALID_NAME, seen in
   both servers' logs); the new servers count for nothing: a write proposed while they were
   down never commits and no leader is elected. Control: the same address with the old disk
   (old UUID) back is a member again, and every acknowledged row is there.
2. A cluster (coordinator, 4 tablet servers, the client library), plaintext and secure: a
   tablet server hosting replicas is killed, wiped and restarted on its address under a new
   UUID (secure: with a new key, admitted again, design/security.md section 5) while clients
   write and read. The old UUID is marked DOWN and its replicas are re-replicated, the new
   UUID enlists as a new server at the same address and receives replicas as a fresh server
   (copied, promoted), and no acknowledged row is lost. Plaintext, calls for the old UUID
   reach the new server and are refused; secure, they go with the old key, which the new
   server does not hold, and none reaches it: the client takes that handshake failure for a
   stale location, as INVALID_NAME in plaintext, and refreshes (rpc.client.KeyRefused, a
   refusal of the client's own key, is not one).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from logcentric.client import Client, Column
from logcentric.tablets import TabletServerClient
from rpc import errors
from rpc.protocols.tserver_pb2 import OpType
from tests.replication.helpers import TServerTrio, rows
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for
from tests.tservers.procs import REPO, admit

pytestmark = pytest.mark.integration

T = "wp"


def fs_format(root: Path) -> str:
    """`tserver fs format` on an empty root; returns the new UUID."""
    done = subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def refusals(log_path: Path, old_uuid: str) -> int:
    """Requests for `old_uuid` that the server writing `log_path` refused (INVALID_NAME)."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return text.count(f"not {old_uuid}")


def test_wiped_servers_are_not_their_former_selves(tmp_path, trio: TServerTrio):
    q = trio
    q.create_tablet(T)
    lead = q.leader(T)
    b, c = (i for i in range(3) if i != lead)
    acked: list[int] = []
    for k in range(4):
        ids = range(k * 100, k * 100 + 100)
        q.write(lead, T, ids)
        acked.extend(ids)
    old = {i: q.procs[i].uuid for i in (b, c)}
    address = {i: q.procs[i].address for i in (b, c)}

    # Two of three servers die. A write sent at once is proposed by the leader (unless it
    # already stepped down, having lost its majority) and cannot commit.
    q.kill9(b)
    q.kill9(c)
    leader = q.procs[lead]
    with TabletServerClient(leader.address, leader.uuid, timeout_s=3.0) as ts:
        with pytest.raises((errors.TimedOut, errors.NotLeader, errors.Unavailable)):
            ts.write(T, [(OpType.INSERT, rows(range(1000, 1100)))], schema_version=1)
    before = q.report(lead, T)
    print(
        f"\nleader log {before.last_op_id.index}, committed {before.commit_index} "
        f"({'a write pending' if before.last_op_id.index > before.commit_index else 'none'})"
    )
    backup = tmp_path / "ts-b-disk"
    shutil.copytree(q.roots[b], backup)  # b's disk as it was at the kill, for the control

    # Wiped, formatted again (new UUIDs), restarted on the same addresses.
    for i in (b, c):
        shutil.rmtree(q.roots[i])
        new_uuid = fs_format(q.roots[i])
        assert new_uuid and new_uuid != old[i]
        q.restart(i)
        assert q.procs[i].uuid == new_uuid
        assert q.procs[i].address == address[i]

    # The former leader keeps asking the old names (appends, then pre-votes and votes) at
    # those addresses; each request is refused. Wait for several rounds of refusals.
    for i in (b, c):
        wait_for(
            lambda i=i: refusals(q.procs[i].err_path, old[i]) >= 3,
            60,
            f"server {i} refusing requests for its former UUID {old[i]}",
            interval_s=0.1,
        )
        wait_for(
            lambda i=i: (
                f"peer {old[i]} at {q.procs[i].address} refused"
                in leader.err_path.read_text(errors="replace")
            ),
            60,
            f"the leader seeing INVALID_NAME from {q.procs[i].address}",
            interval_s=0.1,
        )
    # The new servers have no replica of the tablet: nothing there could vote or acknowledge.
    for i in (b, c):
        assert q.client(i).list_tablets().tablets == []
    # Without a majority the former leader steps down (check-quorum, over three election
    # timeouts on the tablet servers) and nothing it proposed commits.
    now = wait_for(
        lambda: (r := q.report(lead, T)).role != "LEADER" and r, 60, "the leader stepping down"
    )
    assert now.commit_index == before.commit_index, now

    # Control: the old disk back at the same address is the old member again; the tablet
    # elects a leader and every acknowledged row is there.
    q.kill9(b)
    shutil.rmtree(q.roots[b])
    shutil.copytree(backup, q.roots[b])
    q.restart(b)
    assert q.procs[b].uuid == old[b]
    q.write_anywhere(T, range(2000, 2100), deadline_s=60)
    acked.extend(range(2000, 2100))
    new_leader = q.leader(T, among=[lead, b])
    got = q.scan_ids(new_leader, T)
    lost = set(acked) - set(got)
    assert not lost, f"{len(lost)} acknowledged rows lost"
    # The unacknowledged write is either wholly there or wholly absent.
    assert set(got) - set(acked) in (set(), set(range(1000, 1100)))


COLUMNS = [Column("id", "int64", key=True), Column("name", "string")]
CONVERGE_TIMEOUT_S = 180.0


def converged(client: Client, table: str, factor: int, banned: set[str]) -> bool:
    """Every tablet: `factor` VOTERs on LIVE servers, none banned, a leader reported."""
    for t in client.tablet_locations(table).tablets:
        if len(t.replicas) != factor or not any(r.is_leader for r in t.replicas):
            return False
        for r in t.replicas:
            if r.server_uuid in banned or r.server_state != "LIVE" or r.member_type != "VOTER":
                return False
    return True


class Load:
    """A writer and a reader thread on one shared Client: upserts of 50 rows at a time
    (acknowledged ones recorded), and full scans, each of which must hold every row
    acknowledged before it started."""

    def __init__(self, client: Client, table: str) -> None:
        self.client = client
        self.table = client.table(table)
        self.acked: list[int] = []
        self.sent: set[int] = set()
        self.write_errors: list[str] = []
        self.scan_errors: list[str] = []
        self.scans = 0
        self.missing: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, name="load-write", daemon=True),
            threading.Thread(target=self._read, name="load-read", daemon=True),
        ]

    def start(self) -> Load:
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(120)
            assert not th.is_alive(), f"{th.name} did not stop"

    def _write(self) -> None:
        next_id = 0
        while not self._stop.is_set():
            ids = list(range(next_id, next_id + 50))
            self.sent.update(ids)
            try:
                with self.client.new_session(flush_rows_max=100) as s:
                    s.upsert(self.table, [{"id": i, "name": f"n{i}"} for i in ids])
                    s.flush()
            except errors.RpcError as err:  # not acknowledged: the same rows again
                self.write_errors.append(f"{type(err).__name__}: {err}")
                continue
            if s.errors:
                self.write_errors.append(f"row errors: {s.errors[:3]}")
                continue
            with self._lock:
                self.acked.extend(ids)
            next_id += 50

    def _read(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                before = set(self.acked)
            try:
                got = set(self.table.to_arrow(["id"])["id"].to_pylist())
            except errors.RpcError as err:
                self.scan_errors.append(f"{type(err).__name__}: {err}")
                continue
            self.scans += 1
            if not before <= got:
                self.missing.append(f"scan {self.scans}: {sorted(before - got)[:10]}")

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)


@pytest.mark.parametrize(
    "secure",
    [
        pytest.param(False, id="plaintext"),
        pytest.param(True, id="secure"),
    ],
)
def test_wiped_tserver_rejoins_as_a_new_server_at_its_address(tmp_path, secure):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=4, secure=secure) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=10, credentials=cluster.credentials()
        ) as client:
            wait_for(lambda: len(client.list_servers()) == 4, 60, "4 tablet servers enlisted")
            client.create_table("w", COLUMNS, num_tablets=4, replication_factor=3)
            wait_for(lambda: converged(client, "w", 3, set()), 60, "leaders reported")
            load = Load(client, "w").start()
            try:
                wait_for(lambda: load.acked_count() >= 500, 60, "writes before the wipe")

                # A server leading a tablet: killed, wiped, formatted again, restarted.
                first = client.tablet_locations("w").tablets[0]
                old_uuid = next(r.server_uuid for r in first.replicas if r.is_leader)
                address = next(r.address for r in first.replicas if r.is_leader)
                i, node = next(
                    (k, n) for k, n in enumerate(cluster.spec.tservers) if n.rpc == address
                )
                # The new disk, formatted (a new UUID, a new key) and admitted by the admin
                # before the wipe: a new key is a new identity, admitted again. Ready first,
                # the server is back within the coordinator's down timeout, as a plaintext
                # one formatted at start is.
                new_root = Path(f"{node.data}.new")
                new_uuid = fs_format(new_root)
                assert new_uuid != old_uuid
                if secure:
                    assert admit(cluster, new_root) == new_uuid
                cluster.kill(node)
                shutil.rmtree(node.data)
                new_root.rename(node.data)
                cluster.start_tserver(i)
                wiped_at = time.monotonic()

                def two_records():
                    at = {s.uuid: s.state for s in client.list_servers() if s.address == address}
                    return at == {old_uuid: "DOWN", new_uuid: "LIVE"}

                wait_for(two_records, 60, "old UUID DOWN and new UUID LIVE at one address")
                wait_for(
                    lambda: converged(client, "w", 3, {old_uuid}),
                    CONVERGE_TIMEOUT_S,
                    "every tablet back to 3 live voters without the old UUID",
                    interval_s=0.5,
                )
                converged_s = time.monotonic() - wiped_at

                # The fresh server at the old address took replicas (least loaded: it had
                # none), copied from their leaders; it serves them.
                def on_new() -> list[str]:
                    return [
                        t.tablet_id
                        for t in client.tablet_locations("w").tablets
                        if any(r.server_uuid == new_uuid for r in t.replicas)
                    ]

                hosted, moved = on_new(), ""
                if not hosted:
                    # On a loaded machine the wiped server may start later than the
                    # coordinator's down timeout (5 s): the old UUID's replicas were then
                    # placed on the others before the new UUID enlisted. One moved onto it
                    # still comes to it as to a fresh server (copied, promoted).
                    t0 = client.tablet_locations("w").tablets[0]
                    moved = next(r.server_uuid for r in t0.replicas if not r.is_leader)
                    done = subprocess.run(
                        [sys.executable, "-m", "optools.coordinator_cli", "move-replica",
                         t0.tablet_id, "--from", moved, "--to", new_uuid,
                         "--coordinators", ",".join(cluster.spec.coordinator_addresses),
                         *(["--credentials", str(cluster.spec.admin_credentials)] if secure
                           else [])],
                        cwd=REPO, capture_output=True, text=True, timeout=240,
                    )  # fmt: skip
                    assert done.returncode == 0, done.stderr
                    wait_for(
                        lambda: converged(client, "w", 3, {old_uuid}) and on_new(),
                        CONVERGE_TIMEOUT_S,
                        "a replica moved onto the new server",
                        interval_s=0.5,
                    )
                    hosted = on_new()
                assert hosted, "the new server received no replica"
                # Secure: as the admin, with the new server's key (its fs root's).
                with cluster.tserver_client(node, timeout_s=10) as ts:
                    assert ts.server_uuid == new_uuid

                    def caught_up() -> dict | None:
                        # The removal of the old UUID is committed at the leader (converged);
                        # a follower learns that commit with the leader's next message.
                        try:
                            reports = {r.tablet_id: r for r in ts.list_tablets().tablets}
                        except errors.Unauthenticated:  # the admin not in its table yet
                            return None
                        for tablet_id in hosted:
                            r = reports[tablet_id]
                            assert r.status == "RUNNING" and r.applied_index > 0, r
                            if old_uuid in {p.uuid for p in r.committed_config.peers}:
                                return None
                        return reports

                    wait_for(caught_up, 30, "the new server's replicas without the old UUID")
                log_text = (cluster.log_dir / f"{node.name}.log").read_text(errors="replace")
                if secure:
                    # Requests for the old UUID go with the old key, which the new server
                    # does not hold: the handshake fails, none of them reaches it.
                    assert f"not {old_uuid}" not in log_text
                else:
                    # Requests for the old UUID reached the new server and were refused.
                    assert f"not {old_uuid}" in log_text
                acked_at_convergence = load.acked_count()
                try:
                    wait_for(
                        lambda: load.acked_count() >= acked_at_convergence + 500,
                        60,
                        "writes after the re-replication",
                    )
                except AssertionError as e:  # say why the writes did not go through
                    errors_seen = load.write_errors[-3:]
                    raise AssertionError(f"{e}; last write errors: {errors_seen}") from None
            finally:
                load.stop()
            print(
                f"\nwiped -> converged {converged_s:.1f} s; {len(hosted)} replicas on the new "
                f"server{' (moved there: placed elsewhere first)' if moved else ''}; "
                f"{load.acked_count()} rows acknowledged, {load.scans} scans, "
                f"{len(load.write_errors)} write retries, {len(load.scan_errors)} scan retries"
            )
            assert not load.missing, load.missing[:5]
            assert load.scans > 0
            table = client.table("w")
            table.refresh()
            final = set(table.to_arrow(["id"])["id"].to_pylist())
            assert set(load.acked) <= final, f"{len(set(load.acked) - final)} acked rows lost"
            assert final <= load.sent


def test_client_keeps_one_tablet_server_client_per_uuid_at_a_shared_address():
    """A wiped server's old UUID (DOWN) and new UUID share an address in tablet locations for
    a while: asking for one must neither close nor replace the other's client, which another
    thread may be using."""
    from logcentric.client import ReplicaInfo

    with Client(["127.0.0.1:9"], timeout_s=1.0) as client:
        old = ReplicaInfo("old-uuid", "127.0.0.1:9", False, "DOWN")
        new = ReplicaInfo("new-uuid", "127.0.0.1:9", True, "LIVE")
        ts_new = client.tserver(new)
        ts_old = client.tserver(old)
        assert ts_old is not ts_new and ts_old.server_uuid == "old-uuid"
        assert client.tserver(new) is ts_new and ts_new.server_uuid == "new-uuid"
        # Still open: a call reaches the transport (and times out: nobody serves there),
        # it is not refused as a closed client's would be.
        with pytest.raises(errors.TimedOut):
            ts_new.status()
