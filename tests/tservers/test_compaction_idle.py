"""The compaction scheduler's idle rounds wait longer each time (doubling up to
IDLE_ROUND_INTERVAL_S_MAX), so an idle server with thousands of replicas does not list them
five times a second; a flush pokes it, and the next round starts at once (issue 28).
Event.wait never returns before its timeout unless set, so the gaps below are lower bounds
that no machine load can break."""

from __future__ import annotations

import threading
import time

from tservers.tablet import compaction as compaction_mod
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler

WAIT_S = 60.0


class Rounds:
    """The scheduler's `tablets` callable: records when each round listed the tablets."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.cond = threading.Condition()

    def __call__(self) -> list:
        with self.cond:
            self.at.append(time.monotonic())
            self.cond.notify_all()
        return []

    def wait_for(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.at) >= n, WAIT_S), len(self.at)


def test_idle_rounds_back_off_up_to_the_maximum(monkeypatch):
    monkeypatch.setattr(compaction_mod, "IDLE_ROUND_INTERVAL_S_MAX", 0.08)
    rounds = Rounds()
    sched = CompactionScheduler(rounds, CompactionOptions(round_interval_s=0.01)).start()
    try:
        rounds.wait_for(6)
    finally:
        sched.close()
    gaps = [b - a for a, b in zip(rounds.at, rounds.at[1:], strict=False)][:5]
    for gap, least in zip(gaps, [0.01, 0.02, 0.04, 0.08, 0.08], strict=True):
        assert gap >= least, gaps


def test_a_poke_starts_the_next_round_at_once():
    rounds = Rounds()
    # Unpoked, the second round would come 1,000 s after the first.
    sched = CompactionScheduler(rounds, CompactionOptions(round_interval_s=1000.0)).start()
    try:
        rounds.wait_for(1)
        sched.poke()
        rounds.wait_for(2)
        sched.poke()
        rounds.wait_for(3)
    finally:
        sched.close()
    assert len(rounds.at) == 3
