"""Tablet servers on CURVE (design/security.md section 4), against a real CURVE coordinator
node (embedded logstore) and a real tablet server, both in this process on real sockets:

- admission: a tablet server's heartbeats and enlistment are refused until an admin adds a
  `tserver` principal named by its UUID with its key; a known key claiming another
  server's UUID is refused;
- the leader pushes the principals table in heartbeat answers; the tablet server admits
  and authorizes each call by it (role table), without asking the coordinator;
- revocation: a revoked reader is refused by the tablet server within one heartbeat
  interval and a round trip (measured, bounded wait);
- a tablet server that hears no coordinator leader for --leader-silence-s refuses users'
  calls, not the cluster's own, until it hears one again.
"""

from __future__ import annotations

import time

import pytest

from coordinator.node import CoordinatorNode, NodeConfig
from rpc.client import HandshakeFailed, RpcClient
from rpc.errors import RpcError, Unauthenticated, Unavailable
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts
from tests.support.procs import free_port, wait_for
from tservers.fs import FsLayout
from tservers.server import TabletServer, TServerConfig

pytestmark = pytest.mark.integration

HEARTBEAT_S = 0.2
WAIT_S = 60.0


class Admin:
    """Admin calls to a CURVE coordinator node with a bootstrap admin key."""

    def __init__(self, node: CoordinatorNode, pair: KeyPair) -> None:
        self.node = node
        self.client = RpcClient(
            node.address, "admin", curve=ClientCurve(pair, {node.uuid: node.public_key})
        )
        self.seq = 0

    def call(self, method: str, request, response_type, timeout_s: float = 20.0):
        return self.client.call(
            self.node.uuid, f"Coordinator.{method}", request, response_type, timeout_s=timeout_s
        )

    def rid(self) -> pb.RequestId:
        self.seq += 1
        return pb.RequestId(client_id="admin", seq=self.seq)

    def leads(self) -> bool:
        try:
            return self.call("Status", pb.StatusRequest(), pb.StatusResponse).role == "LEADER"
        except RpcError:
            return False

    def add(self, name: str, key: str, kind: str, role: str) -> None:
        request = pb.AddPrincipalRequest(
            request_id=self.rid(), name=name, kind=kind, public_key=key, roles=[role]
        )
        self.call("AddPrincipal", request, pb.AddPrincipalResponse)

    def revoke(self, name: str) -> None:
        request = pb.RevokePrincipalRequest(request_id=self.rid(), name=name)
        self.call("RevokePrincipal", request, pb.RevokePrincipalResponse)

    def close(self) -> None:
        self.client.close()


def node_config(tmp_path, admin: KeyPair, bind: str, raft: str) -> NodeConfig:
    return NodeConfig(
        node_id="c0",
        data_dir=str(tmp_path / "c0"),
        bind=bind,
        raft_address=raft,
        password="a-cluster-password",
        curve=True,
        admin_keys=(admin.public,),
    )


def tserver(root, node: CoordinatorNode, **kw) -> TabletServer:
    config = TServerConfig(
        fs_root=root,
        coordinators=(node.address,),
        coordinator_keys=(node.public_key,),
        heartbeat_interval_s=HEARTBEAT_S,
        curve=True,
        fs_reserved_bytes=0,
        **kw,
    )
    return TabletServer(config).start()


def user_client(server: TabletServer, pair: KeyPair, name: str) -> RpcClient:
    return RpcClient(
        server.address, name, curve=ClientCurve(pair, {server.uuid: server.keypair.public})
    )


def scan(c: RpcClient, server: TabletServer, tablet_id: str) -> ts.ScanResponse:
    return c.call(
        server.uuid, "TServer.Scan", ts.ScanRequest(tablet_id=tablet_id), ts.ScanResponse,
        timeout_s=5,
    )  # fmt: skip


def create_table(admin: Admin, name: str) -> str:
    """A one-tablet, one-replica table; its tablet id."""
    request = pb.CreateTableRequest(
        request_id=admin.rid(),
        name=name,
        schema=pb.Schema(columns=[pb.ColumnSchema(name="k", type=pb.INT64, is_key=True)]),
        num_tablets=1,
        replication_factor=1,
    )
    admin.call("CreateTable", request, pb.CreateTableResponse, timeout_s=30)
    locations = admin.call(
        "GetTabletLocations", pb.GetTabletLocationsRequest(name=name),
        pb.GetTabletLocationsResponse,
    )  # fmt: skip
    return locations.tablets[0].tablet_id


def heard(node: CoordinatorNode, uuid: str) -> bool:
    with node.catalog.lock:
        return uuid in node.catalog.heartbeats


def test_admission_push_roles_and_revocation(tmp_path):
    admin_pair, reader_pair, stranger = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    fs = FsLayout.format(tmp_path / "ts1")
    other = FsLayout.format(tmp_path / "ts2")  # an admitted server, used as an impostor
    node = CoordinatorNode(
        node_config(tmp_path, admin_pair, "127.0.0.1:0", f"127.0.0.1:{free_port()}")
    )
    admin = Admin(node, admin_pair)
    server = None
    try:
        wait_for(admin.leads, WAIT_S, "the coordinator node leads")
        server = tserver(fs.root, node)
        assert server.principals is not None
        # Not admitted: its heartbeats get no connection, it is not enlisted, has no table.
        wait_for(lambda: server.heartbeater.beats >= 5, WAIT_S, "five heartbeat rounds")
        assert not heard(node, fs.uuid) and fs.uuid not in node.catalog.servers
        assert server.principals.version == 0

        # Admitted by its UUID and key: it enlists, and gets the table in an answer.
        admin.add(fs.uuid, fs.public_key(), "tserver", "server")
        wait_for(
            lambda: fs.uuid in node.catalog.servers and server.principals.version != 0,
            WAIT_S,
            "the tablet server enlisted with the table",
        )
        pushed = node.principals_push.pushed
        time.sleep(5 * HEARTBEAT_S)  # same version: nothing more is pushed
        assert node.principals_push.pushed == pushed

        # A known key claiming another server's UUID: refused, on heartbeat and enlistment.
        other_pair = KeyPair(other.public_key(), _secret(other))
        admin.add(other.uuid, other.public_key(), "tserver", "server")
        with RpcClient(
            node.address, other.uuid, curve=ClientCurve(other_pair, {node.uuid: node.public_key})
        ) as impostor:
            for method, request, response_type in (
                ("Heartbeat", pb.HeartbeatRequest(server_uuid=fs.uuid, address="127.0.0.1:9"),
                 pb.HeartbeatResponse),
                ("EnlistServer", pb.EnlistServerRequest(server_uuid=fs.uuid,
                 address="127.0.0.1:9"), pb.EnlistServerResponse),
            ):  # fmt: skip
                with pytest.raises(RpcError) as err:
                    impostor.call(node.uuid, f"Coordinator.{method}", request, response_type,
                                  timeout_s=5)  # fmt: skip
                assert f"tablet server {other.uuid} may not speak for tablet server {fs.uuid}" in (
                    err.value.message
                )
        assert node.catalog.servers[fs.uuid].address == server.address  # unchanged

        # The coordinator's calls reach the server over CURVE (CreateTablet).
        tablet = create_table(admin, "t")
        # A reader the server has not heard of yet gets no connection; once pushed, scans.
        admin.add("rita", reader_pair.public, "user", "reader")
        with user_client(server, reader_pair, "rita") as rita:

            def scans() -> bool:
                try:
                    return scan(rita, server, tablet).rows == 0
                except HandshakeFailed:
                    return False

            wait_for(scans, WAIT_S, "the reader's scan")
            # A reader that writes: refused by the server's role check, naming the role.
            with pytest.raises(RpcError) as err:
                rita.call(server.uuid, "TServer.Write", ts.WriteRequest(tablet_id=tablet),
                          ts.WriteResponse, timeout_s=5)  # fmt: skip
            assert err.value.message == (
                "permission denied: TServer.Write needs the writer role; the caller has reader"
            )
            # Users may not make the coordinator's calls either.
            with pytest.raises(RpcError, match="needs the server role"):
                rita.call(server.uuid, "TServer.DeleteTablet",
                          ts.DeleteTabletRequest(tablet_id=tablet), ts.DeleteTabletResponse,
                          timeout_s=5)  # fmt: skip
            assert tablet in server.manager.replicas  # nothing changed

            # Revocation: refused on the open connection within a heartbeat and a round trip,
            # i.e. by the heartbeat round after the one in flight when the revoke committed
            # (counted in rounds, so the check does not depend on the machine's speed).
            rounds_before = server.heartbeater.beats
            admin.revoke("rita")
            revoked_at = time.monotonic()
            wait_for(
                lambda: server.principals.authorize_key(reader_pair.public) is None,
                10.0,
                "the table without the reader at the tablet server",
                0.001,
            )
            delay = time.monotonic() - revoked_at
            rounds = server.heartbeater.beats - rounds_before
            assert rounds <= 2, rounds
            with pytest.raises(Unauthenticated, match="not admitted"):
                scan(rita, server, tablet)  # the next call on the open connection
            print(
                f"revocation took effect on the tablet server {delay * 1000:.0f} ms after "
                f"the revoke returned, {rounds} heartbeat round(s) later (interval "
                f"{HEARTBEAT_S * 1000:.0f} ms)"
            )
        # An unknown key never gets a connection.
        with user_client(server, stranger, "stranger") as s, pytest.raises(HandshakeFailed):
            scan(s, server, tablet)
    finally:
        if server is not None:
            server.close()
        admin.close()
        node.close()


def _secret(fs: FsLayout) -> str:
    from rpc import keys
    from tservers.fs import KEY_NAME

    return keys.load_keypair(fs.keys_dir, KEY_NAME).secret


def test_a_server_without_a_leader_refuses_users_until_it_hears_one(tmp_path):
    admin_pair, reader_pair = KeyPair.generate(), KeyPair.generate()
    fs = FsLayout.format(tmp_path / "ts1")
    config = node_config(
        tmp_path, admin_pair, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    )
    node = CoordinatorNode(config)
    admin = Admin(node, admin_pair)
    server = None
    try:
        wait_for(admin.leads, WAIT_S, "the coordinator node leads")
        admin.add(fs.uuid, fs.public_key(), "tserver", "server")
        admin.add("rita", reader_pair.public, "user", "reader")
        server = tserver(fs.root, node, leader_silence_s=1.0)
        wait_for(lambda: fs.uuid in node.catalog.servers, WAIT_S, "the tablet server enlisted")
        tablet = create_table(admin, "t")
        coordinator_pair = node.keypair
        with user_client(server, reader_pair, "rita") as rita, RpcClient(
            server.address, node.uuid,
            curve=ClientCurve(coordinator_pair, {server.uuid: server.keypair.public}),
        ) as coordinator:  # fmt: skip

            def scan_ok() -> bool:
                try:
                    return scan(rita, server, tablet).rows == 0
                except (HandshakeFailed, Unavailable):
                    return False

            wait_for(scan_ok, WAIT_S, "the reader's scan")
            admin.close()
            node.close()  # no leader from now on

            def stale() -> str:
                try:
                    scan(rita, server, tablet)
                    return ""
                except Unavailable as err:
                    return err.message

            message = wait_for(stale, 10.0, "users refused without a leader")
            assert "heard no coordinator leader" in message, message
            assert server.principals.silent_s() > 1.0  # refused only past the silence limit
            # The cluster's own calls go on.
            listed = coordinator.call(server.uuid, "TServer.ListTablets",
                                      ts.ListTabletsRequest(), ts.ListTabletsResponse,
                                      timeout_s=5)  # fmt: skip
            assert tablet in {t.tablet_id for t in listed.tablets}
            # A leader again: users are served again.
            node = CoordinatorNode(config)
            admin = Admin(node, admin_pair)
            wait_for(scan_ok, WAIT_S, "the reader's scan after a leader is back")
            assert server.principals.refused_stale >= 1
    finally:
        if server is not None:
            server.close()
        admin.close()
        node.close()


def _ipc(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_tablet_raft_and_tablet_copy_between_curve_servers(tmp_path):
    """Three CURVE tablet servers host a 3-replica tablet: its Raft messages, the
    coordinator's calls and a tablet copy (a replica moved to a fourth server) all run
    between admitted keys, each peer's key the one its UUID names in the pushed table."""
    import pyarrow as pa

    admin_pair, writer_pair = KeyPair.generate(), KeyPair.generate()
    roots = [FsLayout.format(tmp_path / f"ts{i}") for i in range(4)]
    node = CoordinatorNode(
        node_config(tmp_path, admin_pair, "127.0.0.1:0", f"127.0.0.1:{free_port()}")
    )
    admin = Admin(node, admin_pair)
    servers: list[TabletServer] = []
    try:
        wait_for(admin.leads, WAIT_S, "the coordinator node leads")
        for fs in roots:
            admin.add(fs.uuid, fs.public_key(), "tserver", "server")
        admin.add("will", writer_pair.public, "user", "writer")
        servers = [tserver(fs.root, node) for fs in roots[:3]]
        wait_for(
            lambda: all(fs.uuid in node.catalog.servers for fs in roots[:3]),
            WAIT_S,
            "three servers enlisted",
        )
        request = pb.CreateTableRequest(
            request_id=admin.rid(),
            name="t3",
            schema=pb.Schema(columns=[pb.ColumnSchema(name="k", type=pb.INT64, is_key=True)]),
            num_tablets=1,
            replication_factor=3,
        )
        admin.call("CreateTable", request, pb.CreateTableResponse, timeout_s=30)
        by_uuid = {s.uuid: s for s in servers}

        def leader():
            for s in servers:
                replica = s.manager.replicas.get(tablet_id())
                if replica is not None and s.service is not None:
                    for r in s.manager.reports(starting=False):
                        if r.tablet_id == tablet_id() and r.role == "LEADER":
                            return s
            return None

        def tablet_id() -> str:
            loc = admin.call("GetTabletLocations", pb.GetTabletLocationsRequest(name="t3"),
                             pb.GetTabletLocationsResponse)  # fmt: skip
            return loc.tablets[0].tablet_id

        tid = tablet_id()
        lead = wait_for(leader, WAIT_S, "a leader elected over CURVE links")
        rows = pa.table({"k": pa.array(range(100), pa.int64())})
        with user_client(lead, writer_pair, "will") as will:

            def written() -> bool:
                try:
                    write = ts.WriteRequest(tablet_id=tid, schema_version=1, ops=[ts.OpType.INSERT])
                    will.call(lead.uuid, "TServer.Write", write, ts.WriteResponse, timeout_s=10,
                              sidecars=[_ipc(rows)])  # fmt: skip
                    return True
                except (HandshakeFailed, Unavailable):
                    return False

            wait_for(written, WAIT_S, "a write by the writer, replicated by Raft over CURVE")

        def applied_everywhere(ss) -> bool:
            indexes = set()
            for s in ss:
                reports = [r for r in s.manager.reports(starting=False) if r.tablet_id == tid]
                if not reports:
                    return False
                indexes.add(reports[0].applied_index)
            return len(indexes) == 1 and indexes.pop() >= 2

        wait_for(lambda: applied_everywhere(servers), WAIT_S, "every replica applied the write")

        # A tablet copy over CURVE: a follower's replica moved to a fourth server.
        servers.append(tserver(roots[3].root, node))
        wait_for(lambda: roots[3].uuid in node.catalog.servers, WAIT_S, "the fourth enlisted")
        follower = next(s for s in servers[:3] if s is not leader())
        admin.call("MoveReplica",
                   pb.MoveReplicaRequest(tablet_id=tid, from_uuid=follower.uuid,
                                         to_uuid=roots[3].uuid),
                   pb.MoveReplicaResponse, timeout_s=30)  # fmt: skip
        fourth = servers[3]
        wait_for(
            lambda: applied_everywhere([leader() or by_uuid[lead.uuid], fourth]),
            WAIT_S,
            "the moved replica copied and caught up",
        )
        assert fourth.manager.copy_jobs.done >= 1
    finally:
        for s in servers:
            s.close()
        admin.close()
        node.close()
