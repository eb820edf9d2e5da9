"""A hung leader (SIGSTOPped: its process frozen, its TCP connections up) does not stall a
client that still believes in it once another leader is known.

Found by a tester: with the tablet leader's server SIGSTOPped and a new leader reported by
the coordinator for 4 s, a write through a Table handle cached before took the client's whole
timeout (30 s), each attempt being given what was left of the deadline; a create-table at a
SIGSTOPped coordinator leader took its fixed 10 s attempt timeout, or failed TIMED_OUT with
timeout_s=8. Each attempt now gives its server a patience (1 s in the first round): silent
that long, and to a ping as long, the server is given up for the next replica or node.

No wall-clock assertion: an attempt given up for silence says so (TIMED_OUT "hung or cut
off"), which an attempt that waited out its timeout does not; the attempts are recorded by
wrapping the clients' calls.
"""

from __future__ import annotations

import os
import signal

import pytest

from logcentric.client import Client, Column, Table
from logcentric.meta import CoordinatorClient
from logcentric.tablets import TabletServerClient
from rpc import errors
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("name", "string")]
# Much more than a silent server costs (about 2 x 1 s in the first round), and less than what
# the old behaviour spent on it for a coordinator call (its fixed 10 s attempt timeout, then
# further attempts): generous for a loaded machine, without relying on it.
CLIENT_TIMEOUT_S = 20.0
SILENT = "hung or cut off"  # how an attempt given up for silence ends (SilenceWatch)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("hung"), coordinators=3, tservers=3) as c:
        yield c


def rows(ids):
    return [{"id": i, "name": f"n{i}"} for i in ids]


def _leader_address(table: Table) -> str | None:
    (tablet,) = table.tablets()
    return next((r.address for r in tablet.replicas if r.is_leader), None)


def _reported_leader(client: Client, name: str) -> str | None:
    """The address of the tablet's leader as the coordinator reports it now."""
    try:
        (tablet,) = client.tablet_locations(name).tablets
    except (errors.TimedOut, errors.Unavailable):
        return None
    return next((r.address for r in tablet.replicas if r.is_leader), None)


def _record_tserver_calls(monkeypatch, method: str) -> list[dict]:
    """Every TabletServerClient.<method> call from now on: the server it went to, its
    timeouts, and how it ended (error None: answered). Scans are followed to their end."""
    seen: list[dict] = []
    real = getattr(TabletServerClient, method)

    def plain(self, *args, **kwargs):
        entry = {"address": self.address, **kwargs, "error": None}
        seen.append(entry)
        try:
            return real(self, *args, **kwargs)
        except errors.RpcError as err:
            entry["error"] = err
            raise

    def generator(self, *args, **kwargs):
        entry = {"address": self.address, **kwargs, "error": None}
        seen.append(entry)
        try:
            yield from real(self, *args, **kwargs)
        except errors.RpcError as err:
            entry["error"] = err
            raise

    monkeypatch.setattr(TabletServerClient, method, generator if method == "scan" else plain)
    return seen


def _record_coordinator_calls(monkeypatch, method: str) -> list[dict]:
    """Every attempt of a `method` call at a coordinator node from now on (CoordinatorClient
    .call_at): the node, the request, the patience, and how it ended."""
    seen: list[dict] = []
    real = CoordinatorClient.call_at

    def recording(self, address, called, request, *args, **kwargs):
        if called != method:
            return real(self, address, called, request, *args, **kwargs)
        entry = {"address": address, "request": request, **kwargs, "error": None}
        seen.append(entry)
        try:
            return real(self, address, called, request, *args, **kwargs)
        except errors.RpcError as err:
            entry["error"] = err
            raise

    monkeypatch.setattr(CoordinatorClient, "call_at", recording)
    return seen


def _node_at(nodes, address: str):
    (node,) = [n for n in nodes if n.rpc == address]
    return node


def test_a_cached_handle_writes_and_scans_past_a_hung_tablet_leader(cluster, monkeypatch):
    with Client(
        cluster.spec.coordinator_addresses,
        timeout_s=CLIENT_TIMEOUT_S,
        credentials=cluster.credentials(),
    ) as client:
        client.create_table("hung_t", COLUMNS, num_tablets=1, replication_factor=3)
        table = client.table("hung_t")
        with client.new_session() as s:
            s.upsert(table, rows(range(100)))
        assert s.errors == []
        # Two handles (one to write, one to scan) cache the same leader: the one to freeze.
        scan_handle = Table(client, "hung_t")

        def one_leader_cached() -> str | None:
            table.refresh()
            scan_handle.refresh()
            leader = _leader_address(table)
            return leader if leader == _leader_address(scan_handle) else None

        old_leader = wait_for(one_leader_cached, 60, "a leader in both handles")
        node = _node_at(cluster.spec.tservers, old_leader)
        writes = _record_tserver_calls(monkeypatch, "write")
        os.kill(node.pid, signal.SIGSTOP)
        try:
            with Client(
                cluster.spec.coordinator_addresses, timeout_s=10, credentials=cluster.credentials()
            ) as other:
                wait_for(
                    lambda: _reported_leader(other, "hung_t") not in (None, old_leader),
                    60,
                    "the coordinator reporting another leader for the tablet",
                    interval_s=0.2,
                )
            assert _leader_address(table) == old_leader  # the handle still believes in it
            with client.new_session() as s:
                s.upsert(table, rows(range(100, 200)))
            assert s.errors == []
            # The frozen leader was asked first, once, and given up for its silence (not at
            # the deadline: the attempt could have worked until then, so a large write is
            # not cut); the write landed at another replica.
            at_old = [w for w in writes if w["address"] == old_leader]
            assert writes[0]["address"] == old_leader
            assert len(at_old) == 1
            assert isinstance(at_old[0]["error"], errors.TimedOut)
            assert SILENT in str(at_old[0]["error"]), at_old[0]["error"]
            assert at_old[0]["patience_s"] < at_old[0]["timeout_s"]
            assert writes[-1]["error"] is None and writes[-1]["address"] != old_leader

            # A scan through a handle that still names the frozen leader: the same.
            scans = _record_tserver_calls(monkeypatch, "scan")
            assert _leader_address(scan_handle) == old_leader
            got = scan_handle.to_arrow()
            assert sorted(got["id"].to_pylist()) == list(range(200))
            assert scans[0]["address"] == old_leader
            assert SILENT in str(scans[0]["error"]), scans[0]["error"]
            assert scans[-1]["error"] is None and scans[-1]["address"] != old_leader
        finally:
            os.kill(node.pid, signal.SIGCONT)
            monkeypatch.undo()
    cluster.wait_ready(120)


def test_a_create_table_goes_on_past_a_hung_coordinator_leader(cluster, monkeypatch):
    with Client(
        cluster.spec.coordinator_addresses,
        timeout_s=CLIENT_TIMEOUT_S,
        credentials=cluster.credentials(),
    ) as client:
        with cluster.client() as meta:
            leader = wait_for(lambda: cluster.leader(meta), 60, "a coordinator leader")
        client.list_tables()  # the client learns the leader: its next call goes there
        creates = _record_coordinator_calls(monkeypatch, "CreateTable")
        os.kill(leader.pid, signal.SIGSTOP)
        try:
            with cluster.client() as meta:
                wait_for(
                    lambda: (cluster.leader(meta) or leader).name != leader.name,
                    60,
                    "another coordinator leading",
                    interval_s=0.2,
                )
            client.create_table("after_hang_t", COLUMNS, num_tablets=1)
            # The old leader, still believed in, was asked first and given up for its silence
            # (before: its whole 10 s attempt timeout); every attempt carried the same request
            # id, so that the table is created once whichever node logged it.
            assert creates[0]["address"] == leader.rpc
            assert isinstance(creates[0]["error"], errors.TimedOut)
            assert SILENT in str(creates[0]["error"]), creates[0]["error"]
            assert creates[-1]["error"] is None and creates[-1]["address"] != leader.rpc
            assert len({c["request"].request_id.SerializeToString() for c in creates}) == 1
            assert client.list_tables().count("after_hang_t") == 1
        finally:
            os.kill(leader.pid, signal.SIGCONT)
            monkeypatch.undo()
    cluster.wait_ready(120)
