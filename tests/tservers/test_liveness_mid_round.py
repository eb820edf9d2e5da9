"""Liveness pings during a long Raft driver round (issue 28). A round over thousands of
woken groups can outlast the 1 s liveness timeout; when the pings waited for the round's
end, the busy server's peers declared it dead, woke their quiet groups and loaded it more:
after a restart of 3,000 replicas the servers logged about 10,000 candidacies a minute for
minutes (design/consensus.md). The driver now pings its peers between groups once a
heartbeat interval has passed.

In process, real files: TABLETS followers (their two other voters absent, so watched),
one delivery of a higher term for all of them (one round), each Ready's handling slowed
so that the round lasts about 40 heartbeat intervals."""

from __future__ import annotations

import time

from tests.support.procs import wait_for
from tests.tservers.helpers import open_manager
from tests.tservers.test_hard_state_batch import _followers
from tservers.consensus.types import AppendRequest

TABLETS = 16
SLOW_S = 0.5  # per Ready: the round takes TABLETS * SLOW_S = 8 s


def test_pings_go_out_during_a_long_round(tmp_path):
    m = open_manager(tmp_path / "fs")
    try:
        ids = _followers(m, TABLETS)
        driver = m.driver
        assert driver.options.raft.quiesce  # quiet groups (and liveness) on by default
        assert {"peer-a", "peer-b"} <= driver._watch
        real = driver._handle_ready
        handled = []

        def slow(g, rd, is_leader, **kw):
            if g.tablet_id in ids and rd.hard_state is not None:
                time.sleep(SLOW_S)
                handled.append(g.tablet_id)
            return real(g, rd, is_leader, **kw)

        driver._handle_ready = slow
        before = driver.mid_round_pings
        msgs = [AppendRequest(t, "peer-a", m.fs.uuid, 9, 0, 0, (), 0) for t in ids]
        assert driver.deliver(msgs, {"peer-a": "127.0.0.1:2"}) == TABLETS
        wait_for(lambda: len(handled) == TABLETS, 120, "every slowed Ready handled")
        # Pings went out while the round went on (each Ready takes 2.5 heartbeat intervals):
        # at least one between most Readies; none before this change.
        assert driver.mid_round_pings - before >= TABLETS // 2
    finally:
        m.close()
