"""A paused follower catching up on big entries, through the leader's log, with real processes.

Before the byte budgets (2026-11-22) the leader cut AppendRequests at 64 entries whatever
their size: 64 entries of 2 MB made a 128 MB message, refused by the RPC layer's 64 MiB limit,
and resent forever, while the leader encoded gigabytes of copies for the peer (2 GB RSS),
missed its heartbeats, lost its leadership and sent the follower a tablet copy. Now an
AppendRequest carries at most 4 MiB of payload (one entry at least), a peer at most 64 MiB
unacknowledged, and a Consensus call at most 16 MiB.
"""

from __future__ import annotations

import signal

import pyarrow as pa
import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

ROWS = 1000
ENTRIES = 120


def big_rows(batch: int) -> pa.Table:
    """About 2 MB: 1,000 rows of 2,000-character values."""
    ids = range(batch * ROWS, (batch + 1) * ROWS)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{i:08d}" + "x" * 1992 for i in ids]})


def test_a_paused_follower_catches_up_on_2mb_entries_from_the_log(trio: TServerTrio):
    trio.create_tablet("big")
    lead = trio.leader("big")
    f = next(i for i in range(3) if i != lead)
    term = trio.report(lead, "big").current_term
    paused = trio.procs[f].proc
    paused.send_signal(signal.SIGSTOP)
    try:
        for b in range(ENTRIES):  # a majority of two commits each
            last = trio.client(lead).write("big", [(OpType.INSERT, big_rows(b))], schema_version=1)
    finally:
        paused.send_signal(signal.SIGCONT)
    index = last.op_id.index

    def caught_up() -> bool:
        r = trio.report(f, "big")
        return r is not None and r.applied_index >= index

    wait_for(caught_up, 120, "the paused follower to apply every entry")
    leader_now = trio.report(lead, "big")
    assert leader_now.role == "LEADER" and leader_now.current_term == term
    # From the log, not by a tablet copy.
    assert [j for j in trio.client(f).status().copies if j.tablet_id == "big"] == []
    assert trio.scan_ids(lead, "big") == list(range(ENTRIES * ROWS))
