"""Issue 27 section 5, with real processes: a caller who merely reaches a port cannot change
membership or delete a replica. Each privileged method of every service is called without
the cluster's password (and with a wrong one) and is refused with UNAUTHENTICATED; nothing
changes: the tablet keeps every replica and its rows, the coordinator log keeps its members.
The cluster's own privileged calls (the coordinator dropping a table) still work.

That interim password guard (design/security.md section 1) is what protects an `--insecure`
cluster, so its test runs on an explicitly plaintext one. On a secure cluster (the default)
CURVE and roles replace it: the second test calls the same methods with the cluster's
password but no admitted key (plaintext, or an unknown key pair) and gets no connection, and
as the admin (a user, not the `server` role the tablet servers' methods need) gets
PERMISSION_DENIED; nothing changes either."""

from __future__ import annotations

from pathlib import Path

import pytest

import logcentric
from logcentric import Column
from rpc import errors, privileged
from rpc.client import HandshakeFailed, RpcClient
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols import tserver_pb2 as ts
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0


def _server_uuid(address: str) -> str:
    with RpcClient(address, "probe") as c:
        return c.ping(timeout_s=TIMEOUT_S).uuid


def _replicas(address: str, tablet_id: str) -> list[ts.TabletReportPB]:
    with RpcClient(address, "probe") as c:
        answer = c.call(
            _server_uuid(address),
            "TServer.ListTablets",
            ts.ListTabletsRequest(),
            ts.ListTabletsResponse,
            timeout_s=TIMEOUT_S,
        )
    return [t for t in answer.tablets if t.tablet_id == tablet_id]


def test_privileged_methods_refuse_callers_without_the_password(tmp_path):
    # Plaintext on purpose: the password guard is the protection of an --insecure cluster
    # (with CURVE a caller without an admitted key gets no connection at all: below).
    with local_cluster(
        tmp_path / "c", coordinators=3, tservers=3, lease_timeout_s=1.5, secure=False
    ) as cl:
        coordinators = cl.spec.coordinator_addresses
        with logcentric.connect(coordinators, timeout_s=60) as client:
            client.create_table(
                "guarded", [Column("id", "int64", key=True), Column("v", "string")], num_tablets=1
            )
            table = client.table("guarded")
            with client.new_session() as s:
                s.insert(table, [{"id": i, "v": f"r{i}"} for i in range(50)])
            assert not s.errors
            tablet = table.tablets()[0]
            tablet_id = tablet.tablet_id
            members_before = sorted(client.meta.status(coordinators[0]).log_members)
            assert len(members_before) == 3

            wrong = privileged.derive_key("not the cluster's password")
            some_peer = tablet.replicas[0]
            attempts = []
            for node in cl.spec.tservers:
                uuid = _server_uuid(node.rpc)
                attempts += [
                    (node.rpc, uuid, "TServer.DeleteTablet",
                     ts.DeleteTabletRequest(tablet_id=tablet_id), ts.DeleteTabletResponse),
                    (node.rpc, uuid, "TServer.ChangeConfig",
                     ts.ChangeConfigRequest(
                         tablet_id=tablet_id, type=ts.REMOVE_SERVER,
                         peer=ts.RaftPeerPB(uuid=some_peer.server_uuid)),
                     ts.ChangeConfigResponse),
                    (node.rpc, uuid, "TServer.StartTabletCopy",
                     ts.StartTabletCopyRequest(
                         tablet_id=tablet_id, source_uuid=some_peer.server_uuid,
                         source_address=some_peer.address, caller_term=1,
                         expected_state=ts.READY),
                     ts.StartTabletCopyResponse),
                ]  # fmt: skip
            for node in cl.spec.coordinators:
                uuid = _server_uuid(node.rpc)
                other = next(n for n in cl.spec.coordinators if n is not node)
                attempts += [
                    (node.rpc, uuid, "Coordinator.RemoveNode",
                     cpb.RemoveNodeRequest(raft_address=other.raft), cpb.MembershipResponse),
                    (node.rpc, uuid, "Coordinator.AddNode",
                     cpb.AddNodeRequest(raft_address="127.0.0.1:9"), cpb.MembershipResponse),
                ]  # fmt: skip
            for key in (None, wrong):
                for address, uuid, method, request, response in attempts:
                    with RpcClient(address, "intruder", privileged_key=key) as c:
                        with pytest.raises(errors.Unauthenticated, match="privileged"):
                            c.call(uuid, method, request, response, timeout_s=TIMEOUT_S)

            # Nothing changed: every replica is there and running, the rows are all there,
            # the coordinator log has its members.
            for node in cl.spec.tservers:
                (report,) = _replicas(node.rpc, tablet_id)
                assert report.status == "RUNNING" and report.data_state == ts.READY, report
            assert table.count() == 50
            assert sorted(client.meta.status(coordinators[0]).log_members) == members_before

            # The cluster's own privileged calls still work: a drop deletes every replica.
            client.drop_table("guarded")

            def all_deleted() -> bool:
                return all(
                    all(r.data_state == ts.DELETED for r in _replicas(n.rpc, tablet_id))
                    for n in cl.spec.tservers
                )

            wait_for(all_deleted, 60, "the dropped table's replicas deleted by the coordinator")


def _attempts(cl, tablet, server_key) -> list[tuple]:
    """(address, uuid, server key, method, request, response type) of every privileged
    method of every process of `cl`."""
    from tservers.fs import FsLayout

    tablet_id, some_peer = tablet.tablet_id, tablet.replicas[0]
    out = []
    for node in cl.spec.tservers:
        uuid = FsLayout.read_instance(Path(node.data)).uuid
        key = FsLayout(Path(node.data), uuid).public_key()
        out += [
            (node.rpc, uuid, key, "TServer.DeleteTablet",
             ts.DeleteTabletRequest(tablet_id=tablet_id), ts.DeleteTabletResponse),
            (node.rpc, uuid, key, "TServer.ChangeConfig",
             ts.ChangeConfigRequest(
                 tablet_id=tablet_id, type=ts.REMOVE_SERVER,
                 peer=ts.RaftPeerPB(uuid=some_peer.server_uuid)),
             ts.ChangeConfigResponse),
            (node.rpc, uuid, key, "TServer.StartTabletCopy",
             ts.StartTabletCopyRequest(
                 tablet_id=tablet_id, source_uuid=some_peer.server_uuid,
                 source_address=some_peer.address, caller_term=1, expected_state=ts.READY),
             ts.StartTabletCopyResponse),
        ]  # fmt: skip
    for node in cl.spec.coordinators:
        key = server_key(node.rpc)
        out += [
            (node.rpc, "", key, "Coordinator.RemoveNode",
             cpb.RemoveNodeRequest(raft_address=node.raft), cpb.MembershipResponse),
            (node.rpc, "", key, "Coordinator.AddNode",
             cpb.AddNodeRequest(raft_address="127.0.0.1:9"), cpb.MembershipResponse),
        ]  # fmt: skip
    return out


def test_privileged_methods_under_curve_need_an_admitted_key_and_the_role(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=2, lease_timeout_s=1.5) as cl:
        assert cl.spec.secure  # the default
        creds = cl.credentials()
        coordinators = cl.spec.coordinator_addresses
        with cl.client() as meta:
            uuids = {n.rpc: meta.status(n.rpc).uuid for n in cl.spec.coordinators}
        with logcentric.connect(credentials=str(cl.spec.admin_credentials), timeout_s=60) as client:
            client.create_table(
                "guarded", [Column("id", "int64", key=True), Column("v", "string")],
                num_tablets=1, replication_factor=2,
            )  # fmt: skip
            table = client.table("guarded")
            with client.new_session() as s:
                s.insert(table, [{"id": i, "v": f"r{i}"} for i in range(50)])
            assert not s.errors
            tablet = table.tablets()[0]
            members_before = sorted(client.meta.status(coordinators[0]).log_members)
            attempts = _attempts(cl, tablet, creds.server_key)
            password = privileged.derive_key(cl.spec.password_file.read_text().strip())
            stranger = KeyPair.generate()
            for address, uuid, key, method, request, response in attempts:
                uuid = uuid or uuids[address]
                # The cluster's password, but no key: a plaintext caller gets no connection.
                with RpcClient(address, "intruder", privileged_key=password) as c:
                    with pytest.raises(HandshakeFailed, match="CURVE"):
                        c.call(uuid, method, request, response, timeout_s=TIMEOUT_S)
                # The password and the server's right key, but a key the cluster never
                # admitted: refused at the handshake.
                curve = ClientCurve(stranger)
                with RpcClient(address, "intruder", privileged_key=password, curve=curve,
                               server_key=key) as c:  # fmt: skip
                    with pytest.raises(HandshakeFailed, match="not admitted"):
                        c.call(uuid, method, request, response, timeout_s=TIMEOUT_S)
                # The admin, signed with the password: a tablet server's privileged methods
                # are the cluster's own processes' (the server role), not a user's.
                if method.startswith("TServer."):
                    with RpcClient(address, "admin", privileged_key=password,
                                   curve=creds.client_curve(), server_key=key) as c:  # fmt: skip
                        with pytest.raises(errors.PermissionDenied):
                            c.call(uuid, method, request, response, timeout_s=TIMEOUT_S)

            # Nothing changed: both replicas running, every row there, the same members.
            for node in cl.spec.tservers:
                with cl.tserver_client(node, timeout_s=TIMEOUT_S) as c:
                    (report,) = [t for t in c.list_tablets().tablets
                                 if t.tablet_id == tablet.tablet_id]  # fmt: skip
                assert report.status == "RUNNING" and report.data_state == ts.READY, report
            assert table.count() == 50
            assert sorted(client.meta.status(coordinators[0]).log_members) == members_before
