"""A leader declared down is replaced by one successor, not by every follower at once
(`RaftCore.successor`, `_successor_timeout`; design/consensus.md, "Restart without a
storm"): the followers agree on the successor from the config alone, it times out in
[1.5T, 2T) and the others in [2.5T, 3.5T), so it runs alone and wins in one election, its
pre-vote past the others' lease. Plain calls on the pure core."""

from __future__ import annotations

import random

from tests.consensus.test_raft_core import Cluster
from tests.consensus.test_startup_hold import _campaigns as _ticks_to_campaign
from tservers.consensus import HardState, RaftConfig, RaftCore, RaftOptions, Role, VoteRequest

T = 10
OPTS = RaftOptions(election_timeout_ticks=T, heartbeat_interval_ticks=2)


QUIET = RaftOptions(election_timeout_ticks=T, heartbeat_interval_ticks=2, quiesce=True)


def _core(
    uuid: str, cfg: RaftConfig, tablet: str = "tablet-a", seed: int = 0, options=OPTS
) -> RaftCore:
    return RaftCore(
        uuid, tablet, options=options, rng=random.Random(f"{uuid}/{seed}"), base_config=cfg
    )


def test_every_follower_names_the_same_successor_and_the_choice_spreads():
    cfg = RaftConfig.of_voters("a", "b", "c")
    picks = {}
    for i in range(300):
        tablet = f"t{i}"
        named = {_core(u, cfg, tablet).successor("a") for u in "bc"}
        assert len(named) == 1, named  # b and c agree
        picks[tablet] = named.pop()
    assert set(picks.values()) == {"b", "c"}
    share = sum(1 for v in picks.values() if v == "b") / len(picks)
    assert 0.35 < share < 0.65, share  # crc32 spread: the two survivors share the work
    # A voter declared down is never the successor.
    b = _core("b", cfg, "t0")
    b.peer_down("c")
    assert b.successor("a") == "b"


def _leader_with_committed_term(c: Cluster) -> RaftCore:
    a = c.cores["a"]
    for _ in range(3 * T):
        a.tick()
        if a.role is not Role.FOLLOWER:
            break
    c.settle()
    assert a.role is Role.LEADER
    c.tick_all(2)  # its no-op committed, every follower told
    return a


def test_the_successor_times_out_first_and_the_others_later():
    cfg = RaftConfig.of_voters("a", "b", "c")
    for seed in range(40):
        c = Cluster(*(_core(u, cfg, seed=seed) for u in "abc"))
        _leader_with_committed_term(c)
        c.tick_all(2)
        first = c.cores["b"].successor("a")
        other = "c" if first == "b" else "b"
        for u in (first, other):
            c.cores[u].peer_down("a")
        n_first = _ticks_to_campaign(c.cores[first], 10 * T)
        n_other = _ticks_to_campaign(c.cores[other], 10 * T)
        assert n_first is not None and T + T // 2 <= n_first < 2 * T, n_first
        assert n_other is not None and 2 * T + T // 2 <= n_other < 3 * T + T // 2, n_other


def test_a_dead_leader_is_replaced_in_one_election():
    cfg = RaftConfig.of_voters("a", "b", "c")
    for seed in range(40):
        c = Cluster(*(_core(u, cfg, seed=seed) for u in "abc"))
        a = _leader_with_committed_term(c)
        term = a.term
        c.tick_all(2)
        c.down = {"a"}
        for u in "bc":
            c.cores[u].peer_down("a")
        first = c.cores["b"].successor("a")
        for _ in range(4 * T):
            c.tick_all()
            if any(c.cores[u].role is Role.LEADER for u in "bc"):
                break
        assert c.cores[first].role is Role.LEADER
        assert c.cores[first].term == term + 1  # one election: no term lost to a split


def test_a_leader_back_before_its_successor_ran_gets_its_group_back():
    """Its server restarted and opened its replicas quickly: the followers, told it is back
    before any of them ran, wait a timeout longer, and its replica (released from the
    start-up hold, asking through their lease) wins the group back in one election."""
    cfg = RaftConfig.of_voters("a", "b", "c")
    for seed in range(40):
        c = Cluster(*(_core(u, cfg, seed=seed) for u in "abc"))
        a = _leader_with_committed_term(c)
        term, entries = a.term, a.entries()
        c.down = {"a"}
        for u in "bc":
            c.cores[u].peer_down("a")
        c.tick_all(T // 2)  # the restart and the open, shorter than any follower's timeout
        a2 = RaftCore(
            "a",
            "tablet-a",
            options=OPTS,
            rng=random.Random(f"a2/{seed}"),
            base_config=cfg,
            hard_state=HardState(term, "a"),
            entries=entries,
        )
        a2.hold_elections()
        c.cores["a"] = a2
        c.down = set()
        for u in "bc":
            assert c.cores[u].peer_up("a")  # its timer moved: the driver processes it
        a2.release_elections()
        for _ in range(5 * T):
            c.tick_all()
            if any(k.role is Role.LEADER for k in c.cores.values()):
                break
        assert a2.role is Role.LEADER, seed
        assert a2.term == term + 1  # one election, nobody else ran


def test_a_leader_only_silent_for_a_while_keeps_its_group():
    """Declared down for a silence (a starved machine), heard from again without having
    restarted: its followers go back to quiet, nobody runs, it leads on in its term (on the
    old code they ran once their timeout came, and deposed it: 2,742 groups of 10,000 woke
    so at one false declaration)."""
    cfg = RaftConfig.of_voters("a", "b", "c")
    for seed in range(20):
        c = Cluster(*(_core(u, cfg, seed=seed, options=QUIET) for u in "abc"))
        a = _leader_with_committed_term(c)
        term = a.term
        for _ in range(4 * T):  # every member quiet
            c.tick_all()
            if all(k.quiesced for k in c.cores.values()):
                break
        assert all(k.quiesced for k in c.cores.values())
        for u in "bc":
            c.cores[u].peer_down("a")
        c.tick_all(T // 2)
        for u in "bc":
            c.cores[u].peer_up("a", restarted=False)
        seen = {u: len(c.readies[u]) for u in "bc"}
        c.tick_all(10 * T)
        asked = [
            m
            for u in "bc"
            for rd in c.readies[u][seen[u] :]
            for m in rd.messages
            if isinstance(m, VoteRequest)
        ]
        assert not asked, asked  # not even a pre-vote: nothing woke the leader
        assert a.role is Role.LEADER and a.term == term, seed
        assert all(c.cores[u].leader_uuid == "a" and c.cores[u].quiesced for u in "bc")
