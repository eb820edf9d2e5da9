"""Elections that find no leader back off (RaftOptions.election_backoff_doublings_max,
design/consensus.md "Election backoff"): the timeouts of a replica that keeps campaigning
with no leader heard spread out up to [T, T + T * 2^k); a leader heard from (or leading)
brings them back to [T, 2T). Plain function calls on the pure core."""

from __future__ import annotations

import pytest

from tests.consensus.test_raft_core import Cluster, make
from tservers.consensus import RaftConfig, RaftOptions, Role, VoteRequest
from tservers.raft_driver import DriverOptions

T = 10


def _opts(k: int) -> RaftOptions:
    return RaftOptions(
        election_timeout_ticks=T, heartbeat_interval_ticks=2, election_backoff_doublings_max=k
    )


def _timeouts(core, n: int) -> list[int]:
    """The ticks between n campaigns in a row, each finding no leader (its peers dead):
    a campaign is a tick after which the core sends vote requests."""
    out = []
    core.ready()
    for _ in range(n):
        ticks = 0
        while True:
            core.tick()
            ticks += 1
            if any(isinstance(m, VoteRequest) for m in core.ready().messages):
                break
        out.append(ticks)
    return out


@pytest.mark.parametrize("pre_vote", [True, False])
def test_timeouts_spread_out_while_no_leader_is_found(pre_vote):
    cfg = RaftConfig.of_voters("a", "b", "c")
    plain = make("a", cfg, options=RaftOptions(election_timeout_ticks=T, pre_vote=pre_vote))
    backoff = make(
        "a",
        cfg,
        options=RaftOptions(
            election_timeout_ticks=T, pre_vote=pre_vote, election_backoff_doublings_max=3
        ),
    )
    flat = _timeouts(plain, 40)
    grown = _timeouts(backoff, 40)
    assert all(T <= t < 2 * T for t in flat), flat
    assert all(T <= t < T + 8 * T for t in grown), grown
    assert max(grown[3:]) >= 2 * T, grown  # 37 draws from [T, 9T): one at least past 2T


def test_a_leader_heard_brings_the_timeout_back():
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg, options=_opts(3)) for u in "abc"))
    a = c.cores["a"]
    c.down = {"b", "c"}
    for _ in range(60 * T):  # many leaderless timeouts
        a.tick()
        c.settle()
    assert a._leaderless_timeouts >= 5
    c.down = set()
    for _ in range(40 * T):
        for core in c.cores.values():
            core.tick()
        c.settle()
        if any(k.role is Role.LEADER for k in c.cores.values()):
            break
    leader = next(k for k in c.cores.values() if k.role is Role.LEADER)
    for _ in range(2 * T):  # heartbeats reach every follower
        for core in c.cores.values():
            core.tick()
        c.settle()
    for k in c.cores.values():
        assert k._leaderless_timeouts == 0, (k.uuid, k._leaderless_timeouts)
        if k is not leader:
            assert T <= k._randomized_timeout < 2 * T


def test_the_tablet_servers_driver_turns_the_backoff_on():
    assert DriverOptions().raft.election_backoff_doublings_max == 3
    assert RaftOptions().election_backoff_doublings_max == 0  # the simulator's default: off
