"""Issue 7, proof "restart a long-dead server whose log was collected and see it copied".

Three real tablet servers with 1 MiB WAL segments, small flushes and a WAL retention cap of
20 entries (`tserver start --wal-retain-entries`), or of 2 MiB of payload, about 20 entries
(`--wal-retain-mb`; the entry cap left at its default). A follower is killed with -9; the
leader takes ~100 KB writes until its WAL GC, capped, has deleted the segments holding what the dead
follower would need next (checked in the leader's files). The follower is restarted: the
leader finds that it needs entries below its log and sends StartTabletCopy; the follower is
copied (a DONE copy job from the leader in its Status), catches up, and then holds every
acknowledged row: with the third server killed, writes still commit (the leader and the
copied replica), and once the old leader is killed and the third server is back, the copied
replica is the only one that can lead (it alone has the last writes) and serves every row.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from rpc.protocols.tserver_pb2 import DataState, OpType
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tests.tservers.procs import TServerProcess
from tservers.fs import FsLayout
from tservers.wal.segment import WalCorruption, list_segments, read_segment

pytestmark = pytest.mark.integration

RETAIN = 20  # entries kept below the flushed index for a lagging peer
ARGS = ["--segment-size-mb", "1", "--flush-rows", "400"]
CAPS = {
    "entries": ["--wal-retain-entries", str(RETAIN)],
    "bytes": ["--wal-retain-mb", "2"],  # ~20 writes of ~100 KB
}
ROWS_PER_WRITE = 50
PAD = "x" * 2000  # ~100 KB per write: ~10 entries per 1 MiB segment
WRITES_MAX = 600  # bound on the writes it may take for the GC to pass the cap
T = "ld"


@pytest.fixture(params=sorted(CAPS))
def trio(tmp_path, request):
    args = ARGS + CAPS[request.param]
    t = TServerTrio(tmp_path, extra_args=args)
    t.cap = request.param
    try:
        for root in t.roots:
            FsLayout.format(root)
            t.procs.append(TServerProcess(root, extra_args=args).start())
        yield t
    finally:
        t.stop_all()


def big_rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{i}:{PAD}" for i in ids]})


def write(q: TServerTrio, i: int, ids) -> int:
    """One acknowledged write at server i; returns its index."""
    r = q.client(i).write(T, [(OpType.INSERT, big_rows(ids))], schema_version=1)
    return r.op_id.index


def applied(q: TServerTrio, i: int) -> int:
    r = q.report(i, T)
    return r.applied_index if r is not None and r.status == "RUNNING" else -1


def wal_indexes(root, tablet_id: str) -> tuple[int, int] | None:
    """(lowest, highest) entry index in a server's WAL files for the tablet; None while a
    segment vanishes under the reader (GC) - the caller asks again."""
    segments = list_segments(root / "wals" / tablet_id)
    low, high = 0, 0
    for k, (_, path) in enumerate(segments):
        try:
            entries = read_segment(path, is_last=k == len(segments) - 1).entries
        except FileNotFoundError:
            return None
        except WalCorruption:
            if k == len(segments) - 1:  # the open segment, mid-append: ask again
                return None
            raise
        if entries:
            low = low or min(e.index for e in entries)
            high = max(high, max(e.index for e in entries))
    return low, high


def test_long_dead_follower_whose_log_was_collected_is_copied(trio: TServerTrio):
    q = trio
    q.create_tablet(T)
    lead = q.leader(T)
    f, o = (i for i in range(3) if i != lead)
    acked: list[int] = []
    last = 0
    for b in range(5):
        ids = range(b * ROWS_PER_WRITE, (b + 1) * ROWS_PER_WRITE)
        last = write(q, lead, ids)
        acked.extend(ids)

    # The follower has everything so far; then it dies.
    wait_for(lambda: applied(q, f) >= last, 30, "the follower caught up before the kill")
    q.kill9(f)
    dead_last = wal_indexes(q.roots[f], T)[1]  # the dead follower's log ends here
    assert dead_last >= last

    # Write until the leader's WAL no longer holds the entry the follower needs next: its GC
    # kept at most RETAIN entries below the flushed index for the dead peer, then went past.
    next_id = len(acked)

    def collected() -> bool:
        span = wal_indexes(q.roots[lead], T)
        return span is not None and span[0] > dead_last + 1

    writes = 0
    while not collected():
        assert writes < WRITES_MAX, (
            f"after {writes} writes the leader still keeps index {dead_last + 1} "
            f"(WAL {wal_indexes(q.roots[lead], T)}, report {q.report(lead, T)})"
        )
        ids = range(next_id, next_id + ROWS_PER_WRITE)
        last = write(q, lead, ids)
        acked.extend(ids)
        next_id += ROWS_PER_WRITE
        writes += 1
    low, high = wal_indexes(q.roots[lead], T)
    rep = q.report(lead, T)
    assert rep.role == "LEADER" and rep.flushed_index > dead_last + (
        RETAIN if q.cap == "entries" else 1
    )
    assert low > dead_last + 1  # really gone from the leader's files
    print(
        f"\ndead follower's log ends at {dead_last}; after {writes} writes the leader's WAL "
        f"holds {low}..{high} ({len(list_segments(q.roots[lead] / 'wals' / T))} segments), "
        f"flushed index {rep.flushed_index}"
    )

    # The leader knows the dead follower needs a copy: its StartTabletCopy failed. The GC
    # dropped every consensus message still queued for the follower, and one already on its
    # way (sent before the GC, with the same connect deadline as the later StartTabletCopy)
    # has failed by now: a late batch of old entries cannot catch the follower up from the
    # leader's memory when it comes back.
    dead_uuid = q.procs[f].uuid

    def copy_tried() -> bool:
        text = q.procs[lead].err_path.read_text(errors="replace")
        return f"StartTabletCopy to {dead_uuid}:" in text

    wait_for(copy_tried, 60, "the leader trying StartTabletCopy on the dead follower")

    # Restarted, the follower is behind the leader's log: the leader has it copied.
    q.restart(f)
    leader_uuid = q.procs[lead].uuid

    def copied():
        done = [
            j
            for j in q.client(f).status().copies
            if j.tablet_id == T and j.source_uuid == leader_uuid and j.state == "DONE"
        ]
        return done[-1] if done else None

    # The leader retries StartTabletCopy with a backoff of up to COPY_BACKOFF_MAX_S (30 s).
    job = wait_for(copied, 120, "a tablet copy from the leader done on the restarted follower")
    assert job.files_done == job.files_total and job.bytes_done == job.bytes_total > 0

    wait_for(lambda: applied(q, f) >= last, 60, f"the copied follower applying up to {last}")
    assert q.report(f, T).data_state == DataState.READY
    assert q.report(lead, T).role == "LEADER"

    # The copy is a working voter: with the third server gone, writes still commit.
    q.kill9(o)
    ids = range(next_id, next_id + ROWS_PER_WRITE)
    write(q, lead, ids)
    acked.extend(ids)
    next_id += ROWS_PER_WRITE

    # Old leader gone, third server back: only the copied replica has the last write, so it
    # alone can win an election (log up-to-date check) - and it serves every acknowledged row.
    q.kill9(lead)
    q.restart(o)
    new = q.leader(T, timeout_s=60, among=[f, o])
    assert new == f
    assert q.scan_ids(f, T) == sorted(acked)


@pytest.fixture
def trio_default_cap(tmp_path):
    # The default retention cap (200,000 entries): far more than this test writes.
    t = TServerTrio(tmp_path, extra_args=["--segment-size-mb", "1", "--flush-rows", "100000"])
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


def test_dead_follower_within_the_cap_catches_up_from_the_log(trio_default_cap: TServerTrio):
    """Below the cap the leader keeps every segment the dead follower needs (so its WAL
    grows past the segment count that triggers a flush) without flushing on every
    maintenance round; the restarted follower catches up from the log, with no copy."""
    q = trio_default_cap
    q.create_tablet(T)
    lead = q.leader(T)
    f = next(i for i in range(3) if i != lead)
    last = write(q, lead, range(ROWS_PER_WRITE))
    wait_for(lambda: applied(q, f) >= last, 30, "the follower caught up before the kill")
    q.kill9(f)
    dead_last = wal_indexes(q.roots[f], T)[1]
    writes = 150  # ~15 MB: ~15 segments of 1 MiB
    acked = list(range(ROWS_PER_WRITE))
    for k in range(1, writes + 1):
        ids = range(k * ROWS_PER_WRITE, (k + 1) * ROWS_PER_WRITE)
        last = write(q, lead, ids)
        acked.extend(ids)
    wait_for(lambda: q.report(lead, T).flushed_index > dead_last, 30, "a flush at the leader")
    span = wait_for(lambda: wal_indexes(q.roots[lead], T), 30, "the leader's WAL")
    segments = len(list_segments(q.roots[lead] / "wals" / T))
    sb = FsLayout.open(q.roots[lead]).read_superblock(T)
    written = sb.next_block_id - 1  # block ids start at 1; flushes and compactions write
    print(f"\nleader WAL {span} in {segments} segments; {written} blocks written")
    assert span[0] <= dead_last + 1 and segments > 9  # kept for the dead follower
    # Flushes came from unflushed segments only (one per ~9 MiB written), not from the
    # segments kept for the peer on every maintenance round, nor compactions of those.
    assert 1 <= written <= 2, sb

    q.restart(f)
    wait_for(lambda: applied(q, f) >= last, 60, f"the restarted follower applying up to {last}")
    assert [j for j in q.client(f).status().copies if j.tablet_id == T] == []
    q.kill9(lead)
    new = q.leader(T, timeout_s=60)
    assert q.scan_ids(new, T) == sorted(acked)
