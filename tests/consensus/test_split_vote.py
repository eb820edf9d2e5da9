"""Split votes (issue 28, a kill -9 restart of 10,000 replicas): two candidates of one term
that each voted for themselves, and no third voter answering, cannot win; before, both
waited out a whole election timeout (with its backoff: 2-4 s at the restart) before either
ran again. Now the candidate that ranks first (`split_rank`, alike on both sides) runs again
within half a timeout; the other keeps its timeout. Plain function calls on the pure core,
`Cluster` of test_raft_core delivering every message at once."""

from __future__ import annotations

import pytest

from tests.consensus.test_raft_core import Cluster, make
from tservers.consensus import RaftConfig, RaftOptions, Role
from tservers.consensus.raft_core import split_rank

T = 10


def _opts(pre_vote: bool) -> RaftOptions:
    return RaftOptions(
        election_timeout_ticks=T,
        heartbeat_interval_ticks=2,
        election_backoff_doublings_max=3,
        pre_vote=pre_vote,
    )


def _split(pre_vote: bool, *, third_up: bool) -> Cluster:
    """a and b time out at the same tick and both run in term 1 (c up or down)."""
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg, options=_opts(pre_vote)) for u in "abc"))
    if not third_up:
        c.down = {"c"}
    a, b = c.cores["a"], c.cores["b"]
    for core in (a, b):
        core._election_elapsed = core._randomized_timeout - 1
        core.tick()  # campaigns (pre-vote or vote) before any message is delivered
    assert {a.role, b.role} <= {Role.PRE_CANDIDATE, Role.CANDIDATE}
    c.settle()
    return c


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_split_vote_with_the_third_voter_down_elects_within_half_a_timeout(pre_vote):
    c = _split(pre_vote, third_up=False)
    a, b = c.cores["a"], c.cores["b"]
    assert a.role is Role.CANDIDATE and b.role is Role.CANDIDATE and a.term == b.term == 1
    first, other = sorted((a, b), key=lambda k: -split_rank(k.tablet_id, 1, k.uuid))
    ticks = 0
    while Role.LEADER not in (a.role, b.role):
        assert ticks <= T // 2 + 1, (
            f"no leader {ticks} ticks after the split (the old code waited out a timeout "
            f"of at least {T} ticks)"
        )
        a.tick()
        b.tick()
        c.settle()
        ticks += 1
    assert first.role is Role.LEADER and first.term == 2
    assert first.split_votes_shortened == 1 and other.split_votes_shortened == 0
    assert other.role is Role.FOLLOWER and other.leader_uuid == first.uuid


def test_a_split_vote_a_third_voter_settles_is_not_disturbed():
    """c answers: it votes for whichever asked first, that one leads term 1, and the
    other candidate (ranked first or not) follows it; no second election."""
    c = _split(True, third_up=True)
    cores = list(c.cores.values())
    leaders = [k for k in cores if k.role is Role.LEADER]
    assert len(leaders) == 1 and leaders[0].term == 1
    c.tick_all(3 * T)
    assert [k for k in cores if k.role is Role.LEADER] == leaders
    assert all(k.term == 1 and k.leader_uuid == leaders[0].uuid for k in cores)


def test_the_rank_is_the_same_on_both_sides_and_differs_between_groups():
    assert split_rank("t1", 5, "a") == split_rank("t1", 5, "a")
    orders = {split_rank(f"t{i}", 2, "a") > split_rank(f"t{i}", 2, "b") for i in range(64)}
    assert orders == {True, False}  # each server ranks first in some groups
