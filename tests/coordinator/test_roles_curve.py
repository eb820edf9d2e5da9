"""A coordinator node with CURVE (NodeConfig.curve): callers admitted by the principals table
of its log, every call checked against the role table (coordinator/authz.py). A real node
(embedded logstore, one replica, with the cluster's password) and real CURVE clients."""

from __future__ import annotations

import pytest
from coordproc import wait_for

from coordinator.node import CoordinatorNode, NodeConfig
from rpc.addresses import free_port
from rpc.client import RpcClient
from rpc.errors import PermissionDenied, RpcError, Unauthenticated
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as pb

pytestmark = pytest.mark.integration


def client(node: CoordinatorNode, pair: KeyPair, name: str) -> RpcClient:
    return RpcClient(node.address, name, curve=ClientCurve(pair, {node.uuid: node.public_key}))


def call(c: RpcClient, node, method: str, request, response_type):
    return c.call(node.uuid, f"Coordinator.{method}", request, response_type, timeout_s=10)


def test_roles_are_enforced_per_call_and_revocation_holds_at_the_next_call(tmp_path):
    admin, reader = KeyPair.generate(), KeyPair.generate()
    config = NodeConfig(
        node_id="c0",
        data_dir=str(tmp_path / "c0"),
        raft_address=f"127.0.0.1:{free_port()}",
        password="a-cluster-password",
        curve=True,
        admin_keys=(admin.public,),
    )
    with CoordinatorNode(config) as node:
        assert node.public_key  # made with the data dir
        with client(node, admin, "admin") as a, client(node, reader, "reader") as r:

            def serving() -> bool:
                try:
                    return call(a, node, "Status", pb.StatusRequest(), pb.StatusResponse).role == (
                        "LEADER"
                    )
                except RpcError:
                    return False

            wait_for(serving, 60, "the node leads")
            # An unknown key gets no connection at all.
            with pytest.raises(Unauthenticated):
                call(r, node, "ListTables", pb.ListTablesRequest(), pb.ListTablesResponse)

        with client(node, admin, "admin") as a, client(node, reader, "reader") as r:
            # The admin's key, without the cluster's password: roles replace the HMAC guard.
            add = pb.AddPrincipalRequest(
                request_id=pb.RequestId(client_id="admin", seq=1),
                name="rita",
                public_key=reader.public,
                roles=["reader"],
            )
            assert call(a, node, "AddPrincipal", add, pb.AddPrincipalResponse).name == "rita"
            tables = call(r, node, "ListTables", pb.ListTablesRequest(), pb.ListTablesResponse)
            assert list(tables.tables) == []
            refusals = {
                "CreateTable": (
                    pb.CreateTableRequest(
                        request_id=pb.RequestId(client_id="reader", seq=1),
                        name="t",
                        schema=pb.Schema(
                            columns=[pb.ColumnSchema(name="k", type=pb.INT64, is_key=True)]
                        ),
                        num_tablets=1,
                    ),
                    pb.CreateTableResponse,
                    "admin",
                ),
                "ListPrincipals": (pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse, "admin"),
                "Heartbeat": (
                    pb.HeartbeatRequest(server_uuid="ts", address="127.0.0.1:1"),
                    pb.HeartbeatResponse,
                    "server",
                ),
            }
            for method, (request, response_type, role) in refusals.items():
                with pytest.raises(PermissionDenied) as err:
                    call(r, node, method, request, response_type)
                assert err.value.message == (
                    f"permission denied: Coordinator.{method} needs the {role} role; "
                    "the caller has reader"
                )
            # Nothing changed: no table, no server heard of, one principal.
            tables = call(a, node, "ListTables", pb.ListTablesRequest(), pb.ListTablesResponse)
            assert list(tables.tables) == []
            listed = call(a, node, "ListPrincipals", pb.ListPrincipalsRequest(),
                          pb.ListPrincipalsResponse).principals  # fmt: skip
            assert [(p.name, p.state) for p in listed] == [("rita", "active")]
            with node.catalog.lock:
                assert node.catalog.heartbeats == {}

            # Revoked: the very next call on the open connection is refused.
            revoke = pb.RevokePrincipalRequest(
                request_id=pb.RequestId(client_id="admin", seq=2), name="rita"
            )
            call(a, node, "RevokePrincipal", revoke, pb.RevokePrincipalResponse)
            with pytest.raises(Unauthenticated, match="not admitted"):
                call(r, node, "ListTables", pb.ListTablesRequest(), pb.ListTablesResponse)
