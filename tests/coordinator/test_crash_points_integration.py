"""Every crash point of every operation, with real coordinator processes and tablet servers.

Node c0 is armed (COORDINATOR_CRASH_POINT) and leads first (shorter lease timeout; c1 and
c2 wait longer, which keeps the timing argument: a follower's timeout is never shorter than
the leader's). The armed request kills c0 at the point (exit status 86); c1 or c2 takes
over, and the test checks that the operation either completed everywhere (catalog and
tablet servers agree) or left no trace, and that a retry with the same request id returns
the right result.
"""

from __future__ import annotations

import pytest
from coordproc import CoordinatorGroup, TServer, wait_for

from coordinator.crashpoints import ALL_POINTS, CRASH_EXIT_STATUS, ENV_VAR
from rpc.errors import RpcError
from rpc.keys import KeyPair
from rpc.protocols import coordinator_pb2 as pb

pytestmark = pytest.mark.integration

SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)
GHOST = "ghost-server"
ALICE_KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a CURVE public key, Z85
FOLLOWER_LEASE_S = 2.5
EXTRA = ("--tserver-timeout-s", "1.5")


def request_for(kind: str, rid: pb.RequestId):
    if kind == "create_table":
        return (
            "CreateTable",
            pb.CreateTableRequest(
                request_id=rid, name="t", schema=SCHEMA, num_tablets=4, replication_factor=1
            ),
            pb.CreateTableResponse,
        )
    if kind == "drop_table":
        return "DropTable", pb.DropTableRequest(request_id=rid, name="t"), pb.DropTableResponse
    if kind == "alter_table":
        req = pb.AlterTableRequest(
            request_id=rid,
            name="t",
            new_name="t2",
            add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)],
        )
        return "AlterTable", req, pb.AlterTableResponse
    if kind == "remove_server":
        req = pb.RemoveServerRequest(request_id=rid, server_uuid=GHOST)
        return "RemoveServer", req, pb.RemoveServerResponse
    if kind == "set_replication":
        req = pb.SetReplicationRequest(request_id=rid, name="t", replication_factor=2)
        return "SetReplication", req, pb.SetReplicationResponse
    if kind == "retire_server":
        req = pb.RetireServerRequest(request_id=rid, server_uuid=GHOST)
        return "RetireServer", req, pb.RetireServerResponse
    if kind == "principal":
        req = pb.AddPrincipalRequest(
            request_id=rid, name="alice", public_key=ALICE_KEY, roles=["writer"]
        )
        return "AddPrincipal", req, pb.AddPrincipalResponse
    raise AssertionError(kind)


def servers_state(client) -> dict[str, str]:
    return {s.uuid: s.state for s in client.list_servers()}


def check(kind: str, client, tservers: list[TServer], done: bool) -> None:
    """done: the operation completed everywhere; else: it left no trace."""
    live = set().union(*(s.live_tablets() for s in tservers))
    tables = {t.name for t in client.list_tables()}
    if kind == "create_table":
        if done:
            locs = client.get_tablet_locations("t")
            assert live == {t.tablet_id for t in locs.tablets} and len(live) == 4
            assert client.describe_table("t").state == "RUNNING"
        else:
            assert tables == set() and live == set()
    elif kind == "drop_table":
        assert (tables == set() and live == set()) if done else (tables == {"t"} and len(live) == 4)
    elif kind == "alter_table":
        if done:
            assert tables == {"t2"} and client.describe_table("t2").schema.version == 2
            versions = [v for s in tservers for v in s.schema_versions().values()]
            assert versions == [2, 2, 2, 2]
        else:
            assert tables == {"t"} and client.describe_table("t").schema.version == 1
    elif kind == "enlist_server":
        if done:
            assert set(servers_state(client).values()) == {"LIVE"}
    elif kind == "server_down":
        if done:
            assert servers_state(client)[GHOST] == "DOWN"
    elif kind == "remove_server":
        state = servers_state(client)
        assert (GHOST not in state) if done else state[GHOST] == "DOWN"
    elif kind == "set_replication":
        assert client.describe_table("t").replication_factor == (2 if done else 1)
    elif kind == "retire_server":
        assert {s.uuid: s.retired for s in client.list_servers()}[GHOST] == done
    elif kind == "principal":
        listed = client.call(
            "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
        ).principals
        # The bootstrap admin and the tablet servers are principals too.
        got = [(p.name, p.state, p.pending, p.public_key) for p in listed if p.name == "alice"]
        assert got == ([("alice", "active", False, ALICE_KEY)] if done else [])


def converged(kind: str, client, tservers: list[TServer], done: bool) -> None:
    """check(), once the tablet servers have settled: work a replica had in flight when the
    leader died (a tablet copy, a config change) finishes or fails asynchronously, so the
    end state is awaited, with a deadline; a replica left behind for good still fails."""

    def holds() -> bool:
        try:
            check(kind, client, tservers, done)
            return True
        except AssertionError:
            return False

    try:
        wait_for(holds, 30, f"{kind}: the end state on every server")
    except AssertionError:
        check(kind, client, tservers, done)  # fails with the precise difference
        raise


LEAD_ATTEMPTS_MAX = 5
# Operations started by a client request (the others by heartbeats and the monitor).
REQUESTED = (
    "create_table",
    "drop_table",
    "alter_table",
    "remove_server",
    "set_replication",
    "retire_server",
    "principal",
)


def lead_with_armed_node(group, client, point: str, tservers: list[TServer]):
    """Start the secure group so that the armed node c0 leads, with the bootstrap admin
    logged and the tablet servers admitted: c0 starts first with the shorter lease timeout.
    Under heavy load another node can still win a takeover; then that node is killed and
    restarted (a bounded number of times) until c0 leads.

    The bootstrap admin and the admissions are principal operations: for a `principal.*`
    point c0 starts unarmed, and is restarted armed once they are logged. Otherwise the
    servers are admitted once c0 leads, so that c0 is the node that enlists them."""
    principal = point.startswith("principal.")
    armed = group.start(0, env=None if principal else {ENV_VAR: point}, lease_timeout_s=1.0,
                        extra=EXTRA)  # fmt: skip
    for i in (1, 2):
        group.start(i, lease_timeout_s=FOLLOWER_LEASE_S, extra=EXTRA)
    if principal:
        group.admit(tservers)
        group.procs[0].kill()
        armed = group.start(0, env={ENV_VAR: point}, lease_timeout_s=1.0, extra=EXTRA)
    for _ in range(LEAD_ATTEMPTS_MAX):
        leader = group.leader_index(client, 60)
        if leader == 0:
            group.wait_admin()  # every node has applied the admin: none refuses its key
            if not principal:
                group.admit(tservers)
            return armed
        group.procs[leader].kill()
        group.start(leader, lease_timeout_s=FOLLOWER_LEASE_S, extra=EXTRA)
    raise AssertionError(f"the armed node did not lead after {LEAD_ATTEMPTS_MAX} attempts")


@pytest.mark.parametrize("point", sorted(ALL_POINTS))
def test_crash_point(tmp_path, point):
    kind = point.split(".")[0]
    committed = not point.endswith("before_commit_point")
    # CURVE (the default): the client calls as the group's admin, and the tablet servers,
    # given the group's addresses and keys, heartbeat by themselves once admitted (refused
    # until then).
    group = CoordinatorGroup(tmp_path, 3)
    tservers = [TServer(tmp_path, f"ts{i}", group) for i in range(2)]
    client = group.client(timeout_s=60.0, call_timeout_s=5.0)
    try:
        armed = lead_with_armed_node(group, client, point, tservers)
        if kind != "enlist_server":
            wait_for(lambda: len(client.list_servers()) == 2, 60, "tablet servers enlisted")
        if kind in ("drop_table", "alter_table", "set_replication"):
            client.create_table("t", SCHEMA, 4, 1)
        if kind in ("server_down", "remove_server", "retire_server"):
            # Admitted with a key of its own, enlisted with that key; never heartbeats.
            ghost = KeyPair.generate()
            group.admit_key(GHOST, ghost.public)
            with group.server_client(GHOST, ghost, timeout_s=60.0) as as_ghost:
                as_ghost.enlist_server(GHOST, "127.0.0.1:1")
        if kind == "remove_server":
            wait_for(lambda: servers_state(client)[GHOST] == "DOWN", 60, "ghost marked down")
        rid = client.next_request_id()
        if kind in REQUESTED:
            method, request, response_type = request_for(kind, rid)
            with pytest.raises(RpcError):
                client.call(method, request, response_type, timeout_s=2.0)
        # enlist_server and server_down are triggered by the heartbeats and the monitor.
        assert armed.p.wait(60) == CRASH_EXIT_STATUS, armed.text()[-2000:]
        new = group.leader_index(client, 60)
        assert new in (1, 2)
        if kind in REQUESTED:
            converged(kind, client, tservers, done=committed)
            result = client.call(method, request, response_type, timeout_s=60.0)
            converged(kind, client, tservers, done=True)
            if kind in ("create_table", "drop_table"):
                assert result.table_id.startswith("t")
            if kind == "principal":
                assert result.name == "alice"
            if kind == "alter_table":
                assert result.schema_version == 2
        elif kind == "enlist_server":
            wait_for(lambda: len(client.list_servers()) == 2, 60, "servers enlisted again")
            converged(kind, client, tservers, done=True)
        else:
            wait_for(lambda: servers_state(client)[GHOST] == "DOWN", 60, "ghost down")
            converged(kind, client, tservers, done=True)
    finally:
        client.close()
        for s in tservers:
            s.close()
        group.close()
