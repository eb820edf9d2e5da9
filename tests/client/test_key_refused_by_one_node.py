"""The coordinator client when one node refuses its key at the CURVE handshake (KeyRefused)
while others admit it: a node behind the log (a follower that has not replayed the
principal's record yet) refuses a key the leader has just added. The call goes on to the
other nodes; it fails with KeyRefused, naming the nodes, only once every node refused the key
or did not answer. Real sockets: CURVE rpc servers in this process, each with its own
authorizer (design/client.md, "Coordinator calls")."""

from __future__ import annotations

import pytest

from logcentric.meta import CoordinatorClient
from rpc import errors
from rpc.client import KeyRefused
from rpc.credentials import Credentials
from rpc.keys import KeyPair, ServerCurve
from rpc.protocols import coordinator_pb2 as pb
from rpc.server import RpcServer
from tests.support.procs import free_port


class Node:
    """A CURVE 'coordinator' rpc server whose authorizer admits the keys in `admitted`."""

    def __init__(self, name: str, admitted: set[str], leader_hint: str = "") -> None:
        self.keypair = KeyPair.generate()
        self.admitted = admitted
        self.calls = 0
        self.server = RpcServer(
            f"node-{name}",
            service="coordinator",
            workers=2,
            curve=ServerCurve(self.keypair, lambda key: "user" if key in self.admitted else None),
        )
        self.hint = leader_hint
        self.server.register("Coordinator.ListTables", pb.ListTablesRequest, self._list_tables)

    def _list_tables(self, req, ctx) -> pb.ListTablesResponse:
        self.calls += 1
        if self.hint:
            hint = errors.LeaderHintValue(uuid="", address=self.hint)
            raise errors.NotLeader("not the leader", leader_hint=hint)
        return pb.ListTablesResponse()

    @property
    def address(self) -> str:
        return self.server.address


def credentials_for(user: KeyPair, coordinators: list[tuple[str, str]]) -> Credentials:
    return Credentials("u", "user", ("reader",), user, tuple(coordinators))


def test_a_node_that_refuses_the_key_while_others_admit_it_is_passed_over():
    user = KeyPair.generate()
    behind = Node("a", set())  # has not replayed the user's record
    up_to_date = Node("b", {user.public})
    with behind.server, up_to_date.server:
        creds = credentials_for(
            user,
            [
                (behind.address, behind.keypair.public),
                (up_to_date.address, up_to_date.keypair.public),
            ],
        )
        with CoordinatorClient(creds.addresses, credentials=creds, timeout_s=20) as client:
            assert client.list_tables() == []  # the old code: KeyRefused from a, at once
            assert client.list_tables() == []  # and the next call goes to b straight away
        assert up_to_date.calls == 2 and behind.calls == 0


def test_a_hint_at_a_node_that_refused_the_key_is_not_followed_back():
    user = KeyPair.generate()
    behind = Node("a", set())
    leader = Node("c", {user.public})
    follower = Node("b", {user.public})
    with behind.server, follower.server, leader.server:
        follower.hint = behind.address  # names the node that refused: not followed
        creds = credentials_for(
            user,
            [
                (behind.address, behind.keypair.public),
                (follower.address, follower.keypair.public),
                (leader.address, leader.keypair.public),
            ],
        )
        with CoordinatorClient(creds.addresses, credentials=creds, timeout_s=20) as client:
            assert client.list_tables() == []
        assert leader.calls == 1 and follower.calls == 1


def test_a_key_every_node_refuses_is_refused_naming_them():
    user = KeyPair.generate()
    nodes = [Node(name, set()) for name in "abc"]
    with nodes[0].server, nodes[1].server, nodes[2].server:
        creds = credentials_for(user, [(n.address, n.keypair.public) for n in nodes])
        with CoordinatorClient(creds.addresses, credentials=creds, timeout_s=20) as client:
            with pytest.raises(KeyRefused) as info:
                client.list_tables()
        text = str(info.value)
        assert "every coordinator node that answered" in text, text
        for n in nodes:
            assert n.address in text, text
        assert "no answer from" not in text, text


def test_a_key_refused_by_every_node_that_answers_is_refused_without_waiting_for_the_rest():
    """A node down (nothing listens at its address) never refuses: the key refused by the
    others is refused once that node has failed to answer, not at the call's deadline."""
    user = KeyPair.generate()
    refusing = Node("a", set())
    down = f"127.0.0.1:{free_port()}"
    with refusing.server:
        creds = credentials_for(
            user, [(refusing.address, refusing.keypair.public), (down, KeyPair.generate().public)]
        )
        with CoordinatorClient(creds.addresses, credentials=creds, timeout_s=60) as client:
            with pytest.raises(KeyRefused) as info:
                client.list_tables()
        text = str(info.value)
        assert refusing.address in text and f"no answer from {down}" in text, text
