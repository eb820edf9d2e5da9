"""The coordinator client's leader search against real rpc servers: NOT_LEADER hints."""

from __future__ import annotations

import threading
import time

from logcentric.meta import CoordinatorClient
from rpc import errors
from rpc.protocols import coordinator_pb2 as pb
from rpc.server import RpcServer


def test_nodes_naming_each_other_are_followed_with_pauses_until_one_leads():
    """While an election settles, two nodes may each name the other as leader. Following
    such hints at once and round and round spent every attempt in a few milliseconds (the
    call failed with TIMED_OUT long before its deadline); the client pauses between rounds
    and reaches the node once it leads."""
    calls = {"a": 0, "b": 0}
    lock = threading.Lock()
    leads_at = time.monotonic() + 1.0  # b leads from then on
    servers = {
        name: RpcServer(f"node-{name}", service="coordinator", workers=2) for name in ("a", "b")
    }

    def handler(name: str, other: str):
        def list_tables(req: pb.ListTablesRequest, ctx) -> pb.ListTablesResponse:
            with lock:
                calls[name] += 1
            if name == "b" and time.monotonic() >= leads_at:
                return pb.ListTablesResponse()
            hint = errors.LeaderHintValue(uuid=f"node-{other}", address=servers[other].address)
            raise errors.NotLeader(f"{name} is not the leader", leader_hint=hint)

        return list_tables

    for name, other in (("a", "b"), ("b", "a")):
        servers[name].register("Coordinator.ListTables", pb.ListTablesRequest, handler(name, other))
    with servers["a"], servers["b"]:
        addresses = [servers["a"].address, servers["b"].address]
        with CoordinatorClient(addresses, timeout_s=20) as client:
            t0 = time.monotonic()
            assert client.list_tables() == []
            took = time.monotonic() - t0
    assert took >= 0.5  # it did wait for b to lead
    with lock:
        # Paused between rounds of hints: a handful of calls a second, not hundreds.
        assert calls["a"] + calls["b"] < 60, calls


def test_a_deadline_gone_before_the_first_attempt_says_so():
    """Not 'no leader answered (last error: None)': nothing was asked."""
    server = RpcServer("node-a", service="coordinator", workers=1)
    server.register("Coordinator.ListTables", pb.ListTablesRequest, lambda req, ctx: req)
    with server, CoordinatorClient([server.address], timeout_s=20) as client:
        try:
            client.call("ListTables", pb.ListTablesRequest(), pb.ListTablesResponse, 1e-9)
        except errors.TimedOut as e:
            assert "no time left for a first attempt" in str(e), e
        else:
            raise AssertionError("a call with no time left answered")


def test_a_leader_that_cannot_do_it_yet_is_not_called_absent():
    """A leader answering UNAVAILABLE with a retry hint (tablet servers down) until the
    deadline: the error says the leader could not do it, not that no leader answered."""
    server = RpcServer("node-a", service="coordinator", workers=1)

    def create(req, ctx):
        raise errors.Unavailable("3 tablet servers are DOWN", retry_after_ms=100)

    server.register("Coordinator.ListTables", pb.ListTablesRequest, create)
    with server, CoordinatorClient([server.address], timeout_s=20) as client:
        try:
            client.call("ListTables", pb.ListTablesRequest(), pb.ListTablesResponse, 1.0)
        except errors.TimedOut as e:
            assert "the leader could not do it before the deadline" in str(e), e
            assert "3 tablet servers are DOWN" in str(e), e
        else:
            raise AssertionError("an UNAVAILABLE leader answered OK")
