"""Coordinator groups as real processes with real tablet servers: the service end to end,
kill -9 and SIGSTOP/SIGCONT of the leader while clients write."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from coordproc import CoordinatorGroup, TServer, wait_for

from rpc.errors import NotLeader, RpcError
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

pytestmark = pytest.mark.integration

SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)


@pytest.fixture
def env(tmp_path):
    group = CoordinatorGroup(tmp_path, 3)
    servers: list[TServer] = []
    client = None
    try:
        for i in range(3):
            group.start(i)
        group.wait_started()
        group.wait_admin()
        # The tablet servers enlist and heartbeat to every node by themselves, once admitted.
        servers = [TServer(tmp_path, f"ts{i}", group) for i in range(2)]
        group.admit(servers)
        client = group.client(timeout_s=30.0)
        wait_for(lambda: len(client.list_servers()) == 2, 60, "tablet servers enlisted")
        yield group, servers, client
    finally:
        if client is not None:
            client.close()
        for s in servers:
            s.close()
        group.close()


def all_tablets(servers: list[TServer]) -> set[str]:
    out: set[str] = set()
    for s in servers:
        out |= s.live_tablets()
    return out


def test_service_end_to_end(env):
    group, servers, client = env
    table_id = client.create_table("t", SCHEMA, num_tablets=4, replication_factor=1)
    desc = client.describe_table("t")
    assert desc.table_id == table_id and desc.state == "RUNNING" and desc.num_tablets == 4
    locs = client.get_tablet_locations("t")
    tablet_ids = {t.tablet_id for t in locs.tablets}
    assert all_tablets(servers) == tablet_ids
    assert {r.server_uuid for t in locs.tablets for r in t.replicas} == {s.uuid for s in servers}
    resp = client.alter_table(
        "t", add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)]
    )
    assert resp.schema_version == 2
    assert client.drop_table("t") == table_id
    assert all_tablets(servers) == set()
    deleted = {t for s in servers for t, st in s.tablets().items() if st == ts.DELETED}
    assert deleted == tablet_ids
    # Followers refuse clients with a hint to the leader.
    leader = group.leader_index(client)
    follower = group.rpc[(leader + 1) % 3]
    with pytest.raises(NotLeader) as info:
        client.call_at(follower, "ListTables", pb.ListTablesRequest(), pb.ListTablesResponse, 2.0)
    assert info.value.leader_hint.address == group.rpc[leader]
    # Bad input: a clear status, nothing logged.
    with pytest.raises(RpcError, match="above the 2 live"):
        client.create_table("u", SCHEMA, num_tablets=2, replication_factor=3)


class Writer:
    """A client creating tables in a loop; records what was acknowledged."""

    def __init__(self, group: CoordinatorGroup) -> None:
        self.client = group.client(timeout_s=60.0, call_timeout_s=5.0)
        self.acked: dict[str, str] = {}
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            name = f"w{i}"
            start = time.monotonic()
            try:
                self.acked[name] = self.client.create_table(name, SCHEMA, 2, 1)
            except RpcError as e:
                self.errors.append(f"{name}: {e}")
            self.latencies.append(time.monotonic() - start)
            i += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self.client.close()


def check_consistent(client, servers: list[TServer], writer: Writer) -> None:
    tables = {t.name: t for t in client.list_tables()}
    for name, table_id in writer.acked.items():
        assert tables[name].table_id == table_id, name
    assert all(t.state == "RUNNING" for t in tables.values())
    expected = set()
    for name in tables:
        expected |= {t.tablet_id for t in client.get_tablet_locations(name).tablets}
    assert all_tablets(servers) == expected


def test_kill_leader_while_clients_write(env):
    group, servers, client = env
    writer = Writer(group)
    try:
        wait_for(lambda: len(writer.acked) >= 3, 60, "first writes")
        old = group.leader_index(client)
        group.procs[old].kill()
        before = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= before + 3, 60, "writes after failover")
        new = group.leader_index(client)
        assert new != old
    finally:
        writer.close()
    assert writer.errors == []
    check_consistent(client, servers, writer)


def test_sigstop_leader_past_lease_then_sigcont(env):
    group, servers, client = env
    writer = Writer(group)
    try:
        wait_for(lambda: len(writer.acked) >= 3, 60, "first writes")
        old = group.leader_index(client)
        proc = group.procs[old]
        proc.p.send_signal(signal.SIGSTOP)
        before = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= before + 3, 60, "writes by the new leader")
        new = group.leader_index(client)
        assert new != old
        paused_log = len(proc.text())  # nothing is logged while it is stopped
        proc.p.send_signal(signal.SIGCONT)
        # On waking its lease has run out: it refuses writes at once (NOT_LEADER)...
        request = pb.CreateTableRequest(
            request_id=client.next_request_id(),
            name="after-wake",
            schema=SCHEMA,
            num_tablets=1,
            replication_factor=1,
        )
        with pytest.raises(NotLeader):
            client.call_at(
                group.rpc[old], "CreateTable", request, pb.CreateTableResponse, timeout_s=5.0
            )
        assert "after-wake" not in {t.name for t in client.list_tables()}
        # ... and ends up a follower of the new epoch.
        wait_for(
            lambda: client.status(group.rpc[old], 1.0).role == "FOLLOWER",
            30,
            "old leader steps down",
        )
        wait_for(
            lambda: client.status(group.rpc[old], 1.0).leader_address == group.rpc[new],
            30,
            "old leader hints at the new one",
        )
        more = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= more + 2, 60, "writes after SIGCONT")
    finally:
        writer.close()
    assert writer.errors == []
    check_consistent(client, servers, writer)
    # On waking, the old leader logged its step-down before anything else about its role (it
    # may lead again later, in a new epoch, if the new leader loses its lease in turn).
    woke = group.procs[old].text()[paused_log:]
    assert "FOLLOWER epoch" in woke, woke[-3000:]
    assert "LEADER epoch" not in woke.split("FOLLOWER epoch", 1)[0], woke[-3000:]
