"""A replication factor the tablet servers cannot hold: UNAVAILABLE (retryable) while the
servers that could hold it are only down, BAD_REQUEST when it can never be met (issue 27,
section 4: a CreateTable while every tablet server was down answered BAD_REQUEST, which
clients do not retry). Pure calls of decide, then the client's retry loop against a real
coordinator node whose tablet servers are down and come back."""

from __future__ import annotations

import threading

import pytest

from coordinator.ops import (
    create_table,
    remove_server,
    retire_server,
    server_down,
    set_replication,
)
from coordinator.ops.server_down import ServerDownRequest
from rpc.errors import BadRequest, Unavailable
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_ops import Log, create_req


def all_down(log: Log, n: int) -> None:
    for i in range(n):
        log.run(server_down, ServerDownRequest(f"s{i}", "test"))


def test_default_factor_with_every_server_down_is_unavailable_and_says_why():
    log = Log(servers=3)
    all_down(log, 3)
    req = create_req(log, rf=0)
    with pytest.raises(Unavailable) as info:
        create_table.decide(log.catalog, req, log.next_id())
    assert info.value.retry_after_ms > 0  # the client retries at the same node
    message = info.value.message
    assert "default replication factor 3 above the 0 live" in message
    assert "s0, s1, s2 DOWN" in message


def test_explicit_factor_within_registered_servers_is_unavailable_above_is_bad_request():
    log = Log(servers=3)
    log.run(server_down, ServerDownRequest("s2", "test"))
    with pytest.raises(Unavailable, match="s2 DOWN"):
        create_table.decide(log.catalog, create_req(log, rf=3), log.next_id())
    # Above the registered servers: no server coming back can meet it.
    with pytest.raises(BadRequest, match="above the 2 live tablet servers not retired"):
        create_table.decide(log.catalog, create_req(log, rf=4), log.next_id())
    with pytest.raises(BadRequest, match="1..7"):
        create_table.decide(log.catalog, create_req(log, rf=8), log.next_id())
    # A factor the live servers hold is decided as before.
    assert create_table.decide(log.catalog, create_req(log, rf=2), log.next_id()) is not None


def test_retired_servers_do_not_count_as_coming_back():
    log = Log(servers=3)
    log.run(
        retire_server,
        pb.RetireServerRequest(request_id=log.rid(), server_uuid="s2"),
    )
    log.run(server_down, ServerDownRequest("s1", "test"))
    with pytest.raises(Unavailable, match="s1 DOWN"):
        create_table.decide(log.catalog, create_req(log, rf=2), log.next_id())
    with pytest.raises(BadRequest, match="2 registered"):
        create_table.decide(log.catalog, create_req(log, rf=3), log.next_id())


def test_set_replication_follows_the_same_rule():
    log = Log(servers=3)
    log.done(log.run(create_table, create_req(log, rf=2)))
    log.run(server_down, ServerDownRequest("s0", "test"))

    def req(rf: int) -> pb.SetReplicationRequest:
        return pb.SetReplicationRequest(request_id=log.rid(), name="t", replication_factor=rf)

    with pytest.raises(Unavailable, match="s0 DOWN"):
        set_replication.decide(log.catalog, req(3), log.next_id())
    with pytest.raises(BadRequest, match="3 registered"):
        set_replication.decide(log.catalog, req(4), log.next_id())


@pytest.mark.integration
def test_client_retries_a_create_until_the_servers_are_back_and_it_runs_once(tmp_path):
    """Real processes: one coordinator node and three tablet servers; every tablet server
    is stopped and marked DOWN; a CreateTable (default factor) is retried by the client
    within its deadline until the servers are back, then succeeds, and is logged once."""
    from tests.coordinator.coordproc import wait_for
    from tests.support.cluster import local_cluster

    with local_cluster(tmp_path / "c", coordinators=1, tservers=3) as cluster:
        with cluster.client(timeout_s=30.0) as client:
            wait_for(lambda: len(client.list_servers()) == 3, 60, "3 tablet servers enlisted")
            for node in cluster.spec.tservers:
                cluster.kill(node)
            wait_for(
                lambda: all(s.state == "DOWN" for s in client.list_servers()),
                60,
                "every tablet server marked DOWN",
            )
            schema = pb.Schema(columns=[pb.ColumnSchema(name="id", type=pb.INT64, is_key=True)])
            outcome: dict[str, object] = {}
            request = pb.CreateTableRequest(
                request_id=client.next_request_id(), name="later", schema=schema, num_tablets=2
            )

            def create() -> None:
                try:
                    outcome["answer"] = client.call(
                        "CreateTable", request, pb.CreateTableResponse, timeout_s=240.0
                    )
                except Exception as e:  # noqa: BLE001 - reported by the assertion below
                    outcome["error"] = e

            creator = threading.Thread(target=create, name="creator", daemon=True)
            creator.start()
            # The client keeps retrying while the servers are down (no answer yet) ...
            creator.join(3.0)
            assert creator.is_alive(), f"the create ended while every server was down: {outcome}"
            assert [t.name for t in client.list_tables()] == []
            for i in range(len(cluster.spec.tservers)):
                cluster.start_tserver(i)
            creator.join(240.0)
            assert not creator.is_alive(), "the create never returned"
            assert "error" not in outcome, outcome
            table_id = outcome["answer"].table_id
            # ... and the request ran once: one table, and the same id for the same request.
            assert [(t.name, t.table_id) for t in client.list_tables()] == [("later", table_id)]
            again = client.call("CreateTable", request, pb.CreateTableResponse, timeout_s=60.0)
            assert again.table_id == table_id
            assert client.describe_table("later").replication_factor == 3


def test_retire_server_follows_the_same_rule():
    log = Log(servers=4)
    log.done(log.run(create_table, create_req(log, rf=3)))
    log.run(server_down, ServerDownRequest("s3", "test"))
    on_s0 = pb.RetireServerRequest(request_id=log.rid(), server_uuid="s0")
    with pytest.raises(Unavailable, match="s3 DOWN"):  # s3 back: 3 others again
        retire_server.decide(log.catalog, on_s0, log.next_id())
    log.run(server_down, ServerDownRequest("s1", "test"))
    log.run(remove_server, pb.RemoveServerRequest(request_id=log.rid(), server_uuid="s1"))
    with pytest.raises(BadRequest, match="add a server"):  # 2 others, even all live
        retire_server.decide(log.catalog, on_s0, log.next_id())
