"""The role table (coordinator/authz.py): every method that any service registers has an
entry, no entry names a method nobody registers, and authorize() decides by role."""

from __future__ import annotations

import pytest

from coordinator import authz
from coordinator.node import CoordinatorNode, NodeConfig
from logstore.service import LogStoreService
from rpc.addresses import free_port
from rpc.server import RpcServer
from tservers.service import TServerService


def registered(register) -> set[str]:
    """The methods a service registers on a real (never started) rpc server."""
    server = RpcServer("authz-test", "127.0.0.1:0", metrics=False)
    try:
        register(server)
        return set(server._methods)
    finally:
        server.close()


@pytest.fixture(scope="module")
def every_method(tmp_path_factory) -> dict[str, set[str]]:
    root = tmp_path_factory.mktemp("authz")
    config = NodeConfig(
        node_id="a",
        data_dir=str(root / "c"),
        raft_address=f"127.0.0.1:{free_port()}",
        allow_insecure_dev=True,
    )
    with CoordinatorNode(config) as node:
        coordinator = set(node.server._methods)
    return {
        "coordinator": coordinator,
        "tserver": registered(TServerService(None, lambda: "").register),
        "logstore": registered(LogStoreService(None, "u").register),
    }


def test_every_registered_method_has_an_entry(every_method):
    for service, methods in every_method.items():
        missing = sorted(m for m in methods if authz.needed(m) is None)
        assert not missing, f"{service} methods without roles in coordinator/authz.py: {missing}"


def test_every_entry_is_a_registered_method(every_method):
    known = set().union(*every_method.values())
    assert sorted(set(authz.METHOD_ROLES) - known) == []
    for method, roles in authz.METHOD_ROLES.items():
        assert roles and set(roles) <= set(authz.ROLES), method


def test_authorize_by_role():
    assert authz.authorize("Coordinator.CreateTable", ["admin"]) is None
    assert authz.authorize("Coordinator.CreateTable", ["writer", "reader"]) == (
        "Coordinator.CreateTable needs the admin role; the caller has reader, writer"
    )
    assert authz.authorize("TServer.Write", ["admin"]) is None  # admin implies writer
    assert authz.authorize("TServer.Write", ["reader"]) == (
        "TServer.Write needs the writer role; the caller has reader"
    )
    assert authz.authorize("TServer.Scan", ["writer"]) is None
    assert authz.authorize("TServer.Scan", []) == (
        "TServer.Scan needs a role of reader, server; the caller has no role"
    )
    # A server key is no user key, and a user key (even an admin's) is no server key.
    assert authz.authorize("TServer.Consensus", ["admin"]) is not None
    assert authz.authorize("Coordinator.Heartbeat", ["server"]) is None
    assert authz.authorize("Coordinator.DropTable", ["server"]) is not None
    assert authz.authorize("TServer.Write", ["server"]) is not None
    # Unknown methods and unknown roles give nothing.
    assert "no entry" in authz.authorize("Coordinator.Nope", ["admin"])
    assert authz.authorize("Coordinator.ListTables", ["root"]) is not None
