"""`RaftCore.tick(n)` equals n calls of `tick()` (issue 28). A non-leader counts the ticks
that cannot start an election at once (all of them while its elections are held); a
restarted server's release catches up 10,000 held replicas of ~50 slept ticks each, and
one by one that was half a million calls. Two clusters built alike (same seeds) go through
the same random history, one ticked in batches and the other tick by tick: after every
step each core's role, term, leader, clocks and every message it sent are the same.
Plain function calls on the pure core (`Cluster` of test_raft_core)."""

from __future__ import annotations

import random

import pytest

from tests.consensus.test_raft_core import Cluster, make
from tservers.consensus import RaftConfig, RaftOptions

T = 10


def _cluster(pre_vote: bool) -> Cluster:
    opts = RaftOptions(
        election_timeout_ticks=T,
        heartbeat_interval_ticks=2,
        election_backoff_doublings_max=3,
        pre_vote=pre_vote,
    )
    cfg = RaftConfig.of_voters("a", "b", "c")
    return Cluster(*(make(u, cfg, options=opts) for u in "abc"))


def _state(c: Cluster) -> list[tuple]:
    out = []
    for u, k in sorted(c.cores.items()):
        out.append(
            (
                u,
                k.role,
                k.term,
                k.leader_uuid,
                k._election_elapsed,
                k._randomized_timeout,
                k.elections_held,
                [repr(r.messages) for r in c.readies[u]],
            )
        )
    return out


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_of_ticks_is_the_same_as_one_tick_after_another(seed):
    rng = random.Random(seed)
    batched, single = _cluster(seed % 2 == 0), _cluster(seed % 2 == 0)
    for step in range(120):
        what = rng.random()
        u = rng.choice("abc")
        if what < 0.15:  # a server goes down or comes back in both
            for c in (batched, single):
                c.down ^= {u}
        elif what < 0.25:  # held and released alike, as a restarted server's replicas
            for c in (batched, single):
                k = c.cores[u]
                if k.elections_held:
                    k.release_elections()
                else:
                    k.hold_elections()
        else:
            n = rng.choice([1, 2, 3, T - 1, T, 2 * T, 5 * T])
            batched.cores[u].tick(n)
            for _ in range(n):
                single.cores[u].tick()
        for c in (batched, single):
            c.settle()
        assert _state(batched) == _state(single), f"seed {seed}, step {step}"
