"""Every tablet server killed -9 while a client creates tables, then restarted (issue 27,
section 3): every table the client saw acknowledged must become readable and writable once
the servers are back, with no manual step.

Before the fix, a CreateTable decided while the servers were dead but not yet marked DOWN
completed with every replica skipped (DONE record), so its tablets existed nowhere: no
leader could be elected and re-replication had no source, TABLET_NOT_FOUND for ever. The
test checks, from the coordinator's own log, that such a table was acknowledged (so that it
cannot pass without exercising the case), then that it heals. That table is also altered
while its tablets exist nowhere, and again as the servers come back: before the audit's fix
the replicas of a table altered since its creation were never created (TABLET_NOT_FOUND for
good: "timed out after 240.0s waiting for: table w1 readable and writable").
"""

from __future__ import annotations

import threading

import pytest

from coordinator.ops import decode
from logcentric.client import Client, Column
from logstore.api import read_live
from logstore.remote import RemoteLogStore
from rpc.errors import BadRequest, RpcError
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("v", "string")]
ROWS = 40
HEAL_TIMEOUT_S = 240.0
X1 = Column("x1", "int64", nullable=True)
X2 = Column("x2", "int64", nullable=True)


class Creator:
    """A thread creating tables one after another; what was acknowledged, and refusals."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acked: list[str] = []
        self.refused: list[str] = []  # BAD_REQUEST (old code: factor above the live servers)
        self.failed: list[str] = []  # outcome unknown (deadline): not counted as acked
        self._n = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="creator", daemon=True)

    def start(self) -> Creator:
        self._thread.start()
        return self

    def create(self, prefix: str = "t") -> None:
        with self._lock:
            self._n += 1
            name = f"{prefix}{self._n}"
        try:
            self.client.create_table(name, COLUMNS, num_tablets=2)
        except BadRequest as e:
            self.refused.append(f"{name}: {e}")
        except RpcError as e:
            self.failed.append(f"{name}: {e}")
        else:
            self.acked.append(name)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.create()
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(300)
        assert not self._thread.is_alive(), "the creator did not stop"


def tables_never_placed(addresses: list[str], creds) -> set[str]:
    """Names of tables whose CreateTable DONE record skipped every replica of a tablet.
    `creds`: the admin's credentials of a secure cluster (CURVE to each node's log), or None."""
    out: set[str] = set()
    curve = creds.client_curve() if creds is not None else None
    keys = creds.coordinator_keys() if creds is not None else None
    with RemoteLogStore(addresses, curve=curve, server_keys=keys) as store:
        for entry in read_live(store, "coordinator"):
            record = decode(entry.data)
            if record.WhichOneof("record") != "create_table":
                continue
            ct = record.create_table
            skipped = set(ct.skipped_replicas)
            for t in ct.tablets:
                if all(f"{t.tablet_id}/{u}" in skipped for u in t.replica_uuids):
                    out.add(ct.name)
    return out


def alter_or_error(client: Client, name: str, column: Column) -> int | str:
    """The new schema version, or the error (the test's assertion shows it)."""
    try:
        return client.alter_table(name, add_columns=[column])
    except RpcError as e:
        return f"{type(e).__name__}: {e}"


def readable_and_writable(addresses: list[str], name: str, creds) -> bool:
    """Rows written to every tablet of the table and read back; False on any error."""
    try:
        with Client(addresses, timeout_s=20, credentials=creds) as client:
            table = client.table(name)
            rows = [{"id": i, "v": f"{name}-{i}"} for i in range(ROWS)]
            with client.new_session(flush_rows_max=ROWS) as session:
                session.upsert(table, rows)
                session.flush()
            if session.errors:
                return False
            got = table.to_arrow().to_pylist()
    except RpcError:
        return False
    return sorted((r["id"], r["v"]) for r in got) == sorted((r["id"], r["v"]) for r in rows)


def test_every_acknowledged_table_heals_after_all_tservers_were_killed(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=3) as cluster:
        addresses = cluster.spec.coordinator_addresses
        creds = cluster.credentials()
        with Client(addresses, timeout_s=180, credentials=creds) as client:
            wait_for(
                lambda: sum(s.state == "LIVE" for s in client.list_servers()) == 3,
                60,
                "3 tablet servers live",
            )
            creator = Creator(client).start()
            try:
                wait_for(lambda: len(creator.acked) >= 2, 120, "tables created")
                for node in cluster.spec.tservers:
                    cluster.kill(node)
                # Decided at once, while the dead servers are still LIVE in the catalog (for
                # the coordinator's 5 s tablet-server timeout): placed on them, every replica
                # skipped once they are marked DOWN, then acknowledged.
                window = Creator(client)
                during = threading.Thread(target=window.create, args=("w",), daemon=True)
                during.start()
                wait_for(
                    lambda: all(s.state == "DOWN" for s in client.list_servers()),
                    60,
                    "every tablet server marked DOWN",
                )
                during.join(200)
                assert not during.is_alive(), "the create in the window never returned"
                assert window.acked == ["w1"], (window.acked, window.refused, window.failed)
                never_placed = tables_never_placed(addresses, creds)
                assert "w1" in never_placed, never_placed
                # Altered while its tablets exist nowhere (acknowledged: every replica
                # skipped again): the replicas are then to be created at version 2, not 1.
                assert client.alter_table("w1", add_columns=[X1]) == 2
                for i in range(len(cluster.spec.tservers)):
                    cluster.start_tserver(i)
                # And altered as the servers come back: skipped (servers not LIVE yet),
                # pending until the replicas exist (TABLET_NOT_FOUND), or after they were
                # created; any way version 3, and the replicas end at it.
                late: list[object] = []
                alter = threading.Thread(
                    target=lambda: late.append(alter_or_error(client, "w1", X2)), daemon=True
                )
                alter.start()
                acked_before = len(creator.acked)
                wait_for(lambda: len(creator.acked) >= acked_before + 2, 180, "creates go on")
                alter.join(HEAL_TIMEOUT_S)
                assert late == [3], late
            finally:
                creator.stop()
            acked = [*creator.acked, *window.acked]
            assert not creator.failed, creator.failed
            # Every acknowledged table, also those whose tablets existed nowhere.
            for name in acked:
                wait_for(
                    lambda name=name: readable_and_writable(addresses, name, creds),
                    HEAL_TIMEOUT_S,
                    f"table {name} readable and writable",
                )
            assert set(never_placed) & set(acked)
            with Client(addresses, timeout_s=20, credentials=creds) as client:
                names = client.table("w1").to_arrow().column_names
            assert names == ["id", "v", "x1", "x2"], names
