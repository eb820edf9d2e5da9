"""Membership changes refused before anything changes (in-process replicas): a new member
that could never join (another password, a port that is not a Raft one), one that is a
member already, a removal of a non-member or of the Raft leader."""

from __future__ import annotations

import pytest

from logstore.replicated import ReplicatedLogStore
from rpc.errors import IllegalState
from rpc.server import RpcServer

from .helpers import FAST, free_addresses, leader_of, start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def group(tmp_path):
    stores = start_cluster(tmp_path, 3)
    try:
        yield stores
    finally:
        for s in stores:
            s.close()


def _unchanged(stores, members) -> None:
    leader = leader_of(stores)
    assert leader.status()["members"] == members
    assert leader.append("after", b"x", timeout_s=20.0) >= 1  # the group still commits


def test_a_replica_with_another_password_or_a_non_raft_port_is_not_added(group, tmp_path):
    leader = leader_of(group)
    members = leader.status()["members"]
    (address,) = free_addresses(1)
    stranger = ReplicatedLogStore(
        address, [*members, address], str(tmp_path / "x"), "another-password", config=FAST
    )
    try:
        with pytest.raises(IllegalState, match="does not answer as a replica of this group"):
            leader.add_member(address, timeout_s=10.0)
    finally:
        stranger.close()
    _unchanged(group, members)
    with RpcServer("not-raft", "127.0.0.1:0") as rpc:  # a zmq port: a client rpc port
        with pytest.raises(IllegalState, match="does not answer as a replica of this group"):
            leader.add_member(rpc.address, timeout_s=10.0)
    _unchanged(group, members)


def test_members_are_not_added_twice_and_only_members_are_removed(group):
    leader = leader_of(group)
    members = leader.status()["members"]
    follower = next(s for s in group if s is not leader)
    with pytest.raises(IllegalState, match="is a member already"):
        follower.add_member(members[0], timeout_s=10.0)
    with pytest.raises(IllegalState, match="is not a member"):
        follower.remove_member("127.0.0.1:1", timeout_s=10.0)
    with pytest.raises(IllegalState, match="leads the log now"):
        follower.remove_member(leader.self_address, timeout_s=10.0)
    _unchanged(group, members)
