"""Issue 27 section 5, with real processes: a caller who merely reaches a port cannot change
membership or delete a replica. Each privileged method of every service is called without
the cluster's password (and with a wrong one) and is refused with UNAUTHENTICATED; nothing
changes: the tablet keeps every replica and its rows, the coordinator log keeps its members.
The cluster's own privileged calls (the coordinator dropping a table) still work."""

from __future__ import annotations

import pytest

import logcentric
from logcentric import Column
from rpc import errors, privileged
from rpc.client import RpcClient
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
    with local_cluster(tmp_path / "c", coordinators=3, tservers=3, lease_timeout_s=1.5) as cl:
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
