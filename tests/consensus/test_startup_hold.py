"""A replica opened at its server's start-up starts no election until the driver releases it
(`RaftCore.hold_elections` / `release_elections`; design/consensus.md, "Restart without a
storm"): it still votes, follows a leader and campaigns on its leader's TimeoutNow, and once
released it times out a whole randomized timeout later, not at once. Plain calls on the
pure core (tests/consensus/test_raft_core.py's synchronous cluster)."""

from __future__ import annotations

from tests.consensus.test_raft_core import OPTS, Cluster, _leader_with_committed_term, make
from tservers.consensus import HardState, ProposalStatus, RaftConfig, Role, VoteRequest

T = OPTS.election_timeout_ticks


def _campaigns(core, ticks: int) -> int:
    """Ticks until the core sends a vote request (None: none within `ticks`)."""
    core.ready()
    for n in range(1, ticks + 1):
        core.tick()
        if any(isinstance(m, VoteRequest) for m in core.ready().messages):
            return n
    return None


def test_a_held_replica_never_campaigns_and_after_release_waits_a_whole_timeout():
    cfg = RaftConfig.of_voters("a", "b", "c")
    a = make("a", cfg)
    a.hold_elections()
    assert a.elections_held
    assert _campaigns(a, 50 * T) is None  # far past every timeout: held
    assert a.role is Role.FOLLOWER and a.term == 0
    a.release_elections()
    assert not a.elections_held
    n = _campaigns(a, 3 * T)
    assert n is not None and T <= n < 2 * T, n  # a fresh timeout, counted from the release


def test_a_held_replica_votes_and_follows():
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg) for u in "abc"))
    for core in c.cores.values():
        core.hold_elections()
    c.tick_all(10 * T)
    assert all(k.role is Role.FOLLOWER and k.term == 0 for k in c.cores.values())
    # An election started by one released replica is won with the held ones' votes.
    a = c.cores["a"]
    a.release_elections()
    for _ in range(3 * T):
        c.tick_all()
        if a.role is Role.LEADER:
            break
    assert a.role is Role.LEADER
    assert a.propose(b"x").status is ProposalStatus.OK
    c.tick_all(2)
    for u in "bc":
        assert c.cores[u].leader_uuid == "a" and c.cores[u].elections_held


def test_a_held_replica_campaigns_when_its_leader_hands_over():
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg) for u in "abc"))
    a = _leader_with_committed_term(c)
    b = c.cores["b"]
    b.hold_elections()
    assert a.transfer_leadership("b").status is ProposalStatus.OK
    c.settle()
    assert b.role is Role.LEADER and b.term == a.term
    b.release_elections()  # a leader's release changes nothing
    assert b.role is Role.LEADER


def test_releasing_a_replica_that_was_never_held_changes_nothing():
    cfg = RaftConfig.of_voters("a", "b", "c")
    a = make("a", cfg)
    for _ in range(T - 1):
        a.tick()
    a.release_elections()  # the clock is not restarted: it times out as it would have
    assert _campaigns(a, T + 1) is not None


def test_a_restarted_leader_is_voted_back_in_through_its_followers_lease():
    """Its followers, quiet and still naming it their leader, refuse every other candidate
    for the lease but not the leader itself asking again (it restarted: a new core from
    the same durable state, in no role): one election, no waiting out the lease."""
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg) for u in "abc"))
    a = _leader_with_committed_term(c)
    term = a.term
    c.tick_all(2)
    b, cc = c.cores["b"], c.cores["c"]
    assert b.leader_uuid == "a" and cc.leader_uuid == "a"
    # Another candidate inside the lease: refused, the term unchanged.
    b.step(VoteRequest("tablet-a", "c", "b", term + 1, a.last_term, a.last_index, pre_vote=True))
    (resp,) = [m for m in b.ready().messages if m.recipient == "c"]
    assert not resp.granted
    # "a" restarted: a fresh core from its durable state (term, vote, log).
    a2 = make("a", cfg, hard_state=HardState(a.term, "a"), entries=a.entries())
    c.cores["a"] = a2
    for _ in range(3 * T):
        a2.tick()
        if a2.role is not Role.FOLLOWER:
            break
    c.settle()
    assert a2.role is Role.LEADER and a2.term == term + 1
