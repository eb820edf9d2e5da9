"""A server runs at most `DriverOptions.campaigns_max` elections at once (design/consensus.md,
"Restart without a storm"): a replica whose timeout comes while that many run waits a new
timeout (`RaftCore.set_campaign_gate`); a place is held from an election's first try until
its group has a leader or follower again, or at most CAMPAIGN_SLOT_TIMEOUTS timeouts (one
that cannot win must not keep it). Plain calls on the core and on a driver never started."""

from __future__ import annotations

import random

from tservers.consensus import RaftConfig, RaftCore, RaftOptions, VoteRequest
from tservers.raft_driver import CAMPAIGN_SLOT_TIMEOUTS, DriverOptions, RaftDriver

T = 10
OPTS = RaftOptions(election_timeout_ticks=T, heartbeat_interval_ticks=2)


def _votes_asked(core: RaftCore, ticks: int) -> int:
    n = 0
    for _ in range(ticks):
        core.tick()
        n += sum(1 for m in core.ready().messages if isinstance(m, VoteRequest))
    return n


def test_a_refused_election_waits_a_new_timeout_and_runs_when_let():
    cfg = RaftConfig.of_voters("a", "b", "c")
    core = RaftCore("a", "t1", options=OPTS, rng=random.Random(1), base_config=cfg)
    asked: list[str] = []
    allow = [False]

    def gate(tablet_id: str) -> bool:
        asked.append(tablet_id)
        return allow[0]

    core.set_campaign_gate(gate)
    assert _votes_asked(core, 10 * T) == 0  # refused at every timeout
    assert len(asked) >= 5 and set(asked) == {"t1"}
    allow[0] = True
    assert _votes_asked(core, 2 * T) > 0


def test_a_lone_voter_is_never_gated():
    core = RaftCore(
        "a", "t1", options=OPTS, rng=random.Random(1), base_config=RaftConfig.of_voters("a")
    )
    core.set_campaign_gate(lambda tablet_id: False)
    for _ in range(2 * T + 1):
        core.tick()
    assert core.role.value == "LEADER"


def test_the_driver_bounds_the_elections_it_runs_at_once():
    d = RaftDriver("me", appender=None, options=DriverOptions(raft=OPTS, campaigns_max=2))
    assert d._campaign_slot("t1") and d._campaign_slot("t2")
    assert not d._campaign_slot("t3") and d.campaigns_deferred == 1
    assert d._campaign_slot("t1")  # a running one asks again: still its place
    d._campaign_over("t1")  # its group has a leader
    assert d._campaign_slot("t3")
    # A place held past CAMPAIGN_SLOT_TIMEOUTS timeouts is given to the next that asks.
    d._clock_tick += CAMPAIGN_SLOT_TIMEOUTS * T + 1
    assert d._campaign_slot("t4")
    assert set(d._campaigns) == {"t4"} or len(d._campaigns) <= 2


def test_check_quorum_over_several_timeouts():
    """`check_quorum_timeouts` = 3 (the tablet servers'): a leader cut off from its
    followers leads on past one election timeout (the window is three), and steps down
    within two windows (the first may count answers from before the cut)."""
    from tests.consensus.test_raft_core import Cluster

    cfg = RaftConfig.of_voters("a", "b", "c")
    opts = RaftOptions(
        election_timeout_ticks=T, heartbeat_interval_ticks=2, check_quorum_timeouts=3
    )
    c = Cluster(
        *(RaftCore(u, "t1", options=opts, rng=random.Random(u), base_config=cfg) for u in "abc")
    )
    a = c.cores["a"]
    for _ in range(3 * T):
        a.tick()
        if a.role.value != "FOLLOWER":
            break
    c.settle()
    assert a.role.value == "LEADER"
    c.down = {"b", "c"}
    for _ in range(2 * T + T // 2):
        a.tick()
        c.flush("a")
    assert a.role.value == "LEADER"  # one timeout would have ended it
    for _ in range(4 * T):  # within two windows of three timeouts (the first may count
        a.tick()  # answers from before the cut)
        c.flush("a")
    assert a.role.value == "FOLLOWER" and a.leader_uuid is None


def _gated_core(tablet_id: str, gate) -> RaftCore:
    cfg = RaftConfig.of_voters("a", "b", "c")
    core = RaftCore("a", tablet_id, options=OPTS, rng=random.Random(tablet_id), base_config=cfg)
    core.set_campaign_gate(gate)
    return core


def test_campaign_soon_starts_a_deferred_election_at_the_next_tick():
    """A follower refused a place times out again at its next tick once the driver has
    room (`campaign_soon`), not a whole timeout later; once it has heard from a live
    leader, or after it ran, it does not."""
    allow = [False]
    core = _gated_core("t1", lambda tablet_id: allow[0])
    assert _votes_asked(core, 3 * T) == 0  # refused at its timeouts
    allow[0] = True
    assert core.campaign_soon()  # deferred and no leader since: it will run
    assert _votes_asked(core, 1) > 0  # at the very next tick
    assert not core.campaign_soon()  # it ran: nothing deferred any more

    allow[0] = False
    other = _gated_core("t2", lambda tablet_id: allow[0])
    assert _votes_asked(other, 3 * T) == 0
    from tservers.consensus import AppendRequest

    other.step(AppendRequest("t2", "b", "a", 1, 0, 0, (), 0))  # a live leader, heard
    other.ready()
    allow[0] = True
    assert not other.campaign_soon()
    assert _votes_asked(other, T // 2) == 0  # its timer runs from the leader's message


def test_a_freed_place_goes_to_the_oldest_deferred_election_at_once():
    """campaigns_max = 1: of two followers timing out, one runs and one is deferred; when
    the first's group has a leader again the round's end (`_refill_campaigns`) starts the
    deferred one at its next tick (a whole timeout later before)."""
    from tservers.raft_driver import RaftGroup

    d = RaftDriver("a", appender=None, options=DriverOptions(raft=OPTS, campaigns_max=1))
    groups = {}
    for tid in ("t1", "t2"):
        g = RaftGroup(d, None, _gated_core(tid, d._campaign_slot))
        d._groups[tid] = groups[tid] = g
    running = waiting = None
    for _ in range(3 * T):
        for tid, g in groups.items():
            g.core.tick()
            if any(isinstance(m, VoteRequest) for m in g.core.ready().messages):
                running = running or tid
        if running and d.campaigns_deferred:
            break
    assert running is not None and d.campaigns_deferred >= 1
    waiting = next(t for t in groups if t != running)
    assert list(d._campaigns_waiting) == [waiting]
    d._campaign_over(running)  # its group has a leader
    d._refill_campaigns()
    assert d.campaigns_refilled == 1 and not d._campaigns_waiting
    assert _votes_asked(groups[waiting].core, 1) > 0
    assert set(d._campaigns) == {waiting}
