"""Power loss of real nodes (tests/nemesis/power.py) under a workload of acknowledged writes.

Each node's data dir is a lazyfs mount that loses what was not fsynced. Writers record what
the system acknowledged; after a power loss of one node (kill -9 and the loss of its
unsynced data, the last write torn at a sector) and then of every node at once, every node
must start again and every acknowledged write must be there:

- a `logstore serve` group of 3 (its journal, and its snapshots: compaction every 50
  commands), appends through its zmq API;
- a local cluster of 3 coordinators (their embedded logstore journals, uuid and meta files)
  and 3 tablet servers (WAL, blocks flushed every 300 rows, consensus metadata and
  superblocks), upserts through `logcentric` and tables created through the coordinator.

The same checks catch a broken build: the logstore journal acknowledging before its fsync
(LOGSTORE_TEST_UNSAFE_NO_FDATASYNC, test-only) and tablet servers whose WAL is not fsynced
(`tserver start --no-wal-sync`), each in a test.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import logcentric
from logcentric import Column
from logstore.journal import UNSAFE_NO_FDATASYNC_ENV
from logstore.remote import RemoteLogStore
from optools.localcluster import NodeSpec
from rpc import errors
from tests.logstore.helpers import PASSWORD, free_addresses
from tests.nemesis.power import PowerCluster, PowerLogGroup
from tests.nemesis.workloads import Access

pytestmark = [
    pytest.mark.integration,
    pytest.mark.nemesis,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse"),
]

log = logging.getLogger("nemesis.test_power")

WRITERS = 3
WAIT_S = 120.0
LOG = "acked"
ROWS_PER_BATCH = 50
BATCHES_MAX = 20_000
PAUSE_S = 0.02  # between one writer's operations: the servers keep some CPU for restarts


def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


class Writers:
    """Threads that write until stopped, keeping what was acknowledged."""

    def __init__(self, write_one: Callable[[int, int], object], n: int = WRITERS) -> None:
        self.write_one = write_one
        self.acked: dict[object, object] = {}
        self.failures = 0
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(t,), name=f"writer-{t}", daemon=True)
            for t in range(n)
        ]
        for th in self._threads:
            th.start()

    def _run(self, t: int) -> None:
        for seq in range(BATCHES_MAX):
            if self._stop.is_set():
                return
            try:
                got = self.write_one(t, seq)
            except errors.RpcError as e:  # not acknowledged: may or may not be there
                log.info("writer %d: %s", t, e)
                with self._mu:
                    self.failures += 1
                time.sleep(0.1)
                continue
            with self._mu:
                self.acked.update(got)
            time.sleep(PAUSE_S)

    def count(self) -> int:
        with self._mu:
            return len(self.acked)

    def wait_more(self, n: int, what: str) -> None:
        target = self.count() + n
        wait_until(lambda: self.count() >= target, f"{n} more acknowledged writes ({what})")

    def stop(self) -> dict:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=WAIT_S)
            assert not th.is_alive(), th.name
        return dict(self.acked)

    def __enter__(self) -> Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()  # also when the test failed: no writer outlives its client


# --- logstore serve group ------------------------------------------------------------------


def read_log(store: RemoteLogStore) -> dict[int, bytes]:
    """Every entry of LOG after a barrier, retried until the group serves again."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            store.barrier(timeout_s=5.0)
            out: dict[int, bytes] = {}
            last = store.last_id(LOG, timeout_s=5.0)
            pos = 1
            while pos <= last:
                batch = store.read(LOG, from_id=pos, limit=1000, timeout_s=10.0)
                if not batch:
                    break
                for e in batch:
                    out[e.id] = e.data
                pos = batch[-1].id + 1
            return out
        except errors.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def lost_appends(acked: dict, found: dict[int, bytes]) -> list[str]:
    return [
        f"append {i} acknowledged as {data!r}, found {found.get(i)!r}"
        for i, data in sorted(acked.items())
        if found.get(i) != data
    ]


def logstore_run(root: Path, env: dict[str, str], args: list[str], single: bool) -> list[str]:
    """Appends under power losses (of one replica, then all); returns what went wrong: a
    replica that cannot start again, acknowledged appends lost."""
    env = {"LOGSTORE_PASSWORD": PASSWORD, **env}
    with PowerLogGroup(root, free_addresses(6), args, env, secure=True) as g:
        for i in range(3):
            g.start(i)
        with g.remote() as store:

            def append(t: int, seq: int) -> dict:
                data = f"w{t}-{seq}".encode()
                return {store.append(LOG, data, timeout_s=10.0): data}

            with Writers(append) as writers:
                writers.wait_more(150, "before any fault")
                if single:
                    for i in (0, 1):
                        log.info("power loss of replica %d: %s", i, g.power_loss(i, torn=True))
                        g.start(i)
                        writers.wait_more(100, f"after replica {i} restarted")
                    assert g.snapshots() >= 1, "no replica wrote a snapshot"
                acked = writers.stop()
            g.power_loss_all(torn=True)
            dead = []
            for i in range(3):
                try:
                    g.start(i)
                except RuntimeError as e:  # its log says why (a journal it refuses)
                    dead.append(f"replica {i} does not start again: {e}")
            if len(dead) > 1:  # no majority: nothing to read
                return dead
            found = read_log(store)
        log.info("logstore: %d appends acknowledged, %d found", len(acked), len(found))
        assert len(acked) >= 150
        return dead + lost_appends(acked, found)


def test_logstore_group_keeps_acknowledged_appends(tmp_path: Path) -> None:
    wrong = logstore_run(tmp_path, {}, ["--compaction-min-entries", "50"], single=True)
    assert wrong == []


def test_broken_logstore_journal_is_caught(tmp_path: Path) -> None:
    """The journal acknowledging before fsync: a power loss of every replica loses appends,
    or leaves replicas that refuse their journal (when the torn write lands past a hole of
    lost writes, the journal's scan calls it corruption in the middle)."""
    wrong = logstore_run(tmp_path, {UNSAFE_NO_FDATASYNC_ENV: "1"}, [], single=False)
    assert wrong, "the broken journal lost nothing: the power loss would not catch it"
    log.info("broken journal: %d anomalies, e.g. %s", len(wrong), wrong[0])


# --- coordinators and tablet servers ---------------------------------------------------------

COLUMNS = [Column("id", "int64", key=True), Column("v", "string")]
TABLE = "acked"


def scan_ids(client: logcentric.Client) -> set[int]:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            client._forget(TABLE)  # fresh locations after the restart
            table = client.table(TABLE)
            return set(table.to_arrow(projection=["id"]).column("id").to_pylist())
        except errors.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def cluster_run(
    root: Path, tserver_args: tuple[str, ...], single: bool, coordinators: int = 3
) -> list[str]:
    """Upserts and DDL under power losses; returns the acknowledged writes that were lost."""
    with PowerCluster(root, coordinators, 3, tserver_args=tserver_args, secure=True) as c:
        c.up(timeout_s=180)
        log.info("cluster up")
        access = Access.of(c)  # the admin's credentials: the cluster runs CURVE
        tables = [f"ddl{i}" for i in range(3)]
        with access.connect(20.0) as client:
            client.create_table(TABLE, COLUMNS, num_tablets=2, replication_factor=3)
            for name in tables:
                client.create_table(name, COLUMNS, num_tablets=1, replication_factor=3)
            table = client.table(TABLE)

            def upsert(t: int, seq: int) -> dict:
                base = (t * BATCHES_MAX + seq) * ROWS_PER_BATCH
                rows = [{"id": base + k, "v": f"{t}-{seq}"} for k in range(ROWS_PER_BATCH)]
                with client.new_session(flush_rows_max=ROWS_PER_BATCH) as session:
                    session.upsert(table, rows)
                    failed = session.flush()
                done = {r["id"] for r in rows} - {e.row["id"] for e in failed}
                return dict.fromkeys(done, True)

            with Writers(upsert) as writers:
                writers.wait_more(600, "before any fault")
                log.info("cluster: %d rows acknowledged before any fault", writers.count())
                if single:
                    with c.client() as meta:
                        # One pass of c.leader (1 s Status calls) can miss the leader under
                        # load or mid-election: wait for one, bounded.
                        found: list[NodeSpec | None] = [None]

                        def leads() -> bool:
                            found[0] = c.leader(meta)
                            return found[0] is not None

                        wait_until(leads, "a coordinator leader")
                        leader = found[0]
                    for node in (leader, c.node("tserver-0")):
                        log.info("power loss of %s: %s", node.name, c.power_loss(node, torn=True))
                        c.restart(node)
                        c.wait_ready(180)
                        log.info("%s restarted", node.name)
                        writers.wait_more(300, f"after {node.name} restarted")
                acked = writers.stop()
        c.power_loss_all(torn=True)
        log.info("power loss of every node")
        c.up(timeout_s=180)  # every node starts again, a leader serves, every tserver lives
        with access.connect(20.0) as client:
            lost = [f"table {n} created, then missing" for n in [TABLE, *tables]]
            lost = [line for line, n in zip(lost, [TABLE, *tables], strict=True)
                    if n not in client.list_tables()]  # fmt: skip
            log.info("cluster up again")
            if not lost:
                found = scan_ids(client)
                missing = sorted(set(acked) - found)
                lost = [f"row {i} acknowledged, then missing" for i in missing]
        log.info("cluster: %d rows acknowledged, %d lost", len(acked), len(lost))
        return lost


def test_cluster_keeps_acknowledged_writes(tmp_path: Path) -> None:
    # Small blocks and WAL segments: flushes, segment rolls and WAL GC happen in the run.
    lost = cluster_run(tmp_path, ("--flush-rows", "300", "--segment-size-mb", "1"), single=True)
    assert lost == []


def test_broken_wal_is_caught(tmp_path: Path) -> None:
    """Tablet servers whose WAL is not fsynced: a power loss of every node loses rows."""
    lost = cluster_run(tmp_path, ("--no-wal-sync",), single=False, coordinators=1)
    assert lost, "the unsynced WAL lost nothing: the power loss would not catch it"
    log.info("broken WAL: %d acknowledged writes lost, e.g. %s", len(lost), lost[0])


# --- a tablet copy ---------------------------------------------------------------------------

COPY_POINT = "copy.after_ready_superblock"


def voters(client: logcentric.Client, table: str) -> dict[str, str]:
    """Every voter of the table's one tablet (address: server state), as the coordinator
    reports it: a dead member still in the config is there, DOWN, and still counts toward
    the majority."""
    try:
        loc = client.tablet_locations(table).tablets[0]
    except errors.RpcError:
        return {}
    return {r.address: r.server_state for r in loc.replicas if r.member_type == "VOTER"}


def test_power_loss_during_a_tablet_copy(tmp_path: Path) -> None:
    """A tablet server that loses power as it finishes a tablet copy (after the copied
    tablet's READY superblock, before anything else) must come back with a working replica:
    re-replication ends with it a voter and the dead member out; then a second original
    member loses power for good, so the copy is half of every majority, through a power loss
    of every node: it opens with no FAILED tablet and no acknowledged row is lost."""
    args = ("--flush-rows", "300", "--segment-size-mb", "1")
    with PowerCluster(tmp_path, 3, 4, tserver_args=args, secure=True) as c:
        ts = c.spec.tservers
        for i in range(3):
            c.start_coordinator(i)
            c.start_tserver(i)  # tserver-3 joins later: the copy's target
        c.admit_all(180)  # all four (tserver-3 formatted now, started later)
        c.wait_ready(180)
        access = Access.of(c)
        want = dict.fromkeys([ts[1].rpc, ts[2].rpc, ts[3].rpc], "LIVE")
        with access.connect(20.0) as client:
            client.create_table(TABLE, COLUMNS, num_tablets=1, replication_factor=3)
            table = client.table(TABLE)

            def upsert(t: int, seq: int) -> dict:
                base = (t * BATCHES_MAX + seq) * ROWS_PER_BATCH
                rows = [{"id": base + k, "v": f"{t}-{seq}"} for k in range(ROWS_PER_BATCH)]
                with client.new_session(flush_rows_max=ROWS_PER_BATCH) as session:
                    session.upsert(table, rows)
                    failed = session.flush()
                done = {r["id"] for r in rows} - {e.row["id"] for e in failed}
                return dict.fromkeys(done, True)

            with Writers(upsert) as writers:
                writers.wait_more(900, "before the copy")  # blocks flushed, WAL rolled
                c.restart(ts[3], env={"TSERVER_CRASH_POINT": COPY_POINT})
                c.wait_ready(180)
                c.power_loss(ts[0])  # stays down: the tablet is copied to tserver-3
                log.info("tserver-0 lost power; waiting for the copy to reach %s", COPY_POINT)
                wait_until(lambda: not c.is_up(ts[3]), f"tserver-3 to stop at {COPY_POINT}")
                assert COPY_POINT in (c.log_dir / "tserver-3.log").read_text(errors="replace")
                ts[3].pid = 0
                log.info("power loss of tserver-3: %s", c.power_loss(ts[3], torn=True))
                c.restart(ts[3])
                wait_until(lambda: voters(client, TABLE) == want, "tserver-3 voter, tserver-0 out")
                log.info("re-replicated onto tserver-3; tserver-1 loses power for good")
                c.power_loss(ts[1])  # the copy is now half of the tablet's majority
                writers.wait_more(300, "acknowledged by tserver-2 and the copy")
                acked = writers.stop()
        c.power_loss_all(torn=True)
        for i in range(3):
            c.start_coordinator(i)
        for i in (2, 3):
            c.start_tserver(i)
        c.wait_ready(180)
        with access.connect(20.0) as client:
            found = scan_ids(client)  # needs a leader elected by tserver-2 and the copy
        starts = [
            line
            for line in (c.log_dir / "tserver-3.log").read_text(errors="replace").splitlines()
            if "start-up:" in line and "tablets opened" in line
        ]
        assert starts and "(0 FAILED)" in starts[-1], starts[-1:]
        missing = sorted(set(acked) - found)
        log.info("tablet copy: %d rows acknowledged, %d missing", len(acked), len(missing))
        assert missing == []
