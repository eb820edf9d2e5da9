"""The tool on the log a real CoordinatorNode writes (embedded logstore replica).

Tablet servers are enlisted at addresses where nothing listens, so a CreateTable stays
STARTED (its replicas cannot be created) until the servers are marked down. The test reads
the running node's data dir until the tool shows that pending operation, stops the node,
checks it offline, then restarts the node with a short tablet-server timeout: the new epoch
marks the servers down and finishes the operation, and the tool shows both epochs and the
DONE record invalidating STARTED.
"""

from __future__ import annotations

import datetime
import threading

import pytest

from coordinator.engine import EngineConfig
from coordinator.node import CoordinatorNode, NodeConfig
from logcentric.meta import CoordinatorClient
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb
from tests.logstore.helpers import free_addresses, wait_for

from .conftest import items, run_tool

pytestmark = pytest.mark.integration

SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)


def lines(text: str) -> list[dict]:
    """The records (or epochs, or pending operations) of a --json run's one document."""
    return items(text)


def _config(data_dir: str, raft: str, tserver_timeout_s: float) -> NodeConfig:
    return NodeConfig(
        node_id="c1",
        data_dir=data_dir,
        raft_address=raft,
        allow_insecure_dev=True,
        engine=EngineConfig(tserver_timeout_s=tserver_timeout_s, call_timeout_s=0.2),
    )


def test_pending_operation_then_recovery_by_a_new_epoch(tmp_path, capsys):
    data_dir = str(tmp_path / "c1")
    raft, *ts_addrs = free_addresses(4)
    node = CoordinatorNode(_config(data_dir, raft, tserver_timeout_s=600.0))
    try:
        first_uuid = node.uuid
        with CoordinatorClient([node.address], timeout_s=30.0) as client:
            for i, a in enumerate(ts_addrs):
                client.enlist_server(f"ts{i}", a)

        def create() -> None:
            with CoordinatorClient([node.address], timeout_s=2.0) as c:
                try:
                    c.create_table("users", SCHEMA, 2, 3)
                except RpcError:
                    pass  # it stays pending: the servers cannot be reached

        t = threading.Thread(target=create, name="create-users")
        t.start()
        pending = wait_for(
            lambda: lines(run_tool("--data-dir", data_dir, "--pending", "--json")[1]),
            timeout_s=30.0,
            what="the pending CreateTable in the running node's data dir",
        )
        t.join(30)
        # Live from the running node's RPC address: the same pending operation.
        code, text = run_tool("--address", node.address, "--pending", "--json", "--timeout-s", "5")
        assert code == 0
        assert [r["id"] for r in lines(text)] == [r["id"] for r in pending]
        # A dead node among the addresses (the usual case during an incident): the tool
        # reads from the live one and says which did not answer.
        dead = ts_addrs[0]  # nothing listens there
        capsys.readouterr()
        code, text = run_tool(
            "--address", f"{dead},{node.address}", "--pending", "--json", "--timeout-s", "5"
        )
        assert code == 0
        assert [r["id"] for r in lines(text)] == [r["id"] for r in pending]
        err = capsys.readouterr().err
        assert f"{dead} did not answer" in err and f"reading from {node.address}" in err
        # Only dead nodes: a clear failure naming them.
        code, _ = run_tool("--address", dead, "--timeout-s", "1")
        assert code == 1
        assert f"no address answered: {dead} did not answer" in capsys.readouterr().err
        # An address that serves no log is refused clearly.
        from rpc.server import RpcServer

        with RpcServer("not-a-log", service="other") as other:
            code, _ = run_tool("--address", other.address, "--timeout-s", "5")
        assert code == 1
    finally:
        node.close()
    assert "serves no log" in capsys.readouterr().err
    (started,) = pending
    assert started["type"] == "create_table" and started["phase"] == "STARTED"
    op = started["op_id"]
    assert started["table_names"] == ["users"] and started["table_id"] == f"t{op}"

    # Offline, node stopped.
    code, text = run_tool("--data-dir", data_dir, "--pending", "--json")
    assert code == 0 and [r["id"] for r in lines(text)] == [op]
    code, text = run_tool("--data-dir", data_dir, "--type", "enlist_server", "--json")
    assert sorted(s for r in lines(text) for s in r["servers"]) == ["ts0", "ts1", "ts2"]

    # A new epoch: the restarted node marks the silent servers down and finishes the op.
    node = CoordinatorNode(_config(data_dir, raft, tserver_timeout_s=0.5))
    try:
        with CoordinatorClient([node.address], timeout_s=30.0) as client:
            wait_for(
                lambda: (
                    client.status(node.address).pending_ops == 0
                    and client.status(node.address).role == "LEADER"
                ),
                timeout_s=60.0,
                what="the operation finished by the new epoch",
            )
    finally:
        node.close()
    assert node.uuid == first_uuid  # same data dir, same node

    code, text = run_tool("--data-dir", data_dir, "--json", "--op", str(op))
    recs = lines(text)
    assert [(r["phase"], r["status"]) for r in recs] == [
        ("STARTED", "invalidated"),
        ("DONE", "live"),
    ]
    assert recs[0]["invalidated_by"] == recs[1]["id"] and recs[1]["invalidates"] == [op]
    assert recs[1]["record"]["create_table"]["skipped_replicas"]
    code, text = run_tool("--data-dir", data_dir, "--pending", "--json")
    assert lines(text) == []
    code, text = run_tool("--data-dir", data_dir, "--leases", "--json")
    epochs = lines(text)
    assert len(epochs) == 2 and all(e["holder_uuid"] == first_uuid for e in epochs)
    assert epochs[0]["ended_by"] == epochs[1]["epoch"] and epochs[1]["ended_by"] is None
    assert epochs[0]["last_record_id"] < epochs[1]["epoch"]
    # Each lease record carries its writer's wall clock, shown as UTC ISO 8601.
    taken = [datetime.datetime.fromisoformat(e["taken_over_at"]) for e in epochs]
    assert all(e["taken_over_at"].endswith("Z") for e in epochs)
    assert all(t.utcoffset() == datetime.timedelta(0) for t in taken) and taken[0] <= taken[1]
    for e in epochs:
        assert e["lease_records"] and all(r["written_at"] for r in e["lease_records"])
    code, text = run_tool("--data-dir", data_dir, "--leases")
    assert code == 0 and f"taken over at {epochs[1]['taken_over_at']}" in text
    code, text = run_tool("--data-dir", data_dir, "--type", "server_down", "--json")
    downs = lines(text)
    assert sorted(r["servers"][0] for r in downs) == ["ts0", "ts1", "ts2"]
    assert all(r["id"] > epochs[1]["epoch"] for r in downs)
    code, text = run_tool("--data-dir", data_dir, "--summary", "--json")
    (s,) = lines(text)
    assert s["undecodable"] == 0 and s["pending_operations"] == 0
    assert s["by_type"]["create_table"] == {
        "live": 1,
        "invalidated_held": 1,
        "live_bytes": recs[1]["size_bytes"],
        "invalidated_held_bytes": recs[0]["size_bytes"],
    }
