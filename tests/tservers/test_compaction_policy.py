"""The background compaction policy (tservers/tablet/compaction.py, design/storage.md).

- The scheduler keeps its byte-rate budget: with a fake clock, the next compaction starts
  only once the bytes the last one wrote are paid for at the configured rate.
- A tablet server process killed during a background compaction (crash points inside the
  compaction: after the new block is written, after the superblock lists it; and a SIGKILL
  while writes, flushes and compactions go on) loses no acknowledged row: after a restart
  every acknowledged row is there, and nothing that was never written.
"""

from __future__ import annotations

import signal
import time

import pyarrow as pa
import pytest

from logcentric.tablets import TabletServerClient, column
from rpc import errors
from rpc.protocols.tserver_pb2 import OpType
from tests.support.procs import wait_for
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tests.tservers.procs import TServerProcess
from tservers.crash import CRASH_ENV, CRASH_EXIT_CODE
from tservers.fs import FsLayout
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler

COLS = [column("id", "int64", key=True), column("s", "string", nullable=True)]
WRITE_DEADLINE_S = 180.0  # writes until two compactions ran (or the crash point)


def test_budget_paces_compactions(tmp_path):
    """Each compaction is charged its written bytes: the next one waits bytes / rate."""
    m = open_manager(tmp_path / "root", flush_rows=10)
    try:
        tablets = []
        for tid in ("t1", "t2"):
            t = create(m, tid)
            for b in range(4):
                ids = range(b * 10, b * 10 + 10)
                t.write(1, [(OpType.INSERT, ipc(six_rows(ids)))], deadline())
                t.flush()
            tablets.append(t)
        now = [100.0]
        waits: list[float] = []
        sched = CompactionScheduler(
            lambda: tablets,
            CompactionOptions(rate_bytes_s=1000, blocks_min=4),
            clock=lambda: now[0],
        )

        def fake_wait(s: float) -> bool:  # the stop event's wait: advance the fake clock
            waits.append(s)
            now[0] += s
            return False

        sched._stop.wait = fake_wait  # type: ignore[method-assign]
        assert sched.run_once() == 2
        assert sched.compactions == 2 and all(len(t.blocks) == 1 for t in tablets)
        first = sched.bytes_written / 2
        assert sched.bytes_read > sched.bytes_written > 0
        # The first ran at once; the second waited for the first's bytes at 1000 B/s.
        assert len(waits) == 1 and waits[0] == pytest.approx(first / 1000, rel=0.2)
        assert sched.throttled_s == pytest.approx(waits[0])
        assert sched.run_once() == 0  # nothing left to compact
    finally:
        m.close()


def test_runs_over_b_bytes_are_left_alone_and_over_k_merged_k_at_a_time(tmp_path):
    """A plan over the bound of bytes merged at once is not merged (and counted once); one
    over K runs has its oldest K merged, listed where they were (the newer runs left stay
    smaller: tests/tservers/test_compaction_many_runs.py, test_compaction_windows.py);
    within both bounds the whole plan is."""
    m = open_manager(tmp_path / "root", flush_rows=10)
    try:
        t = create(m, "t1")
        for b in range(4):
            t.write(1, [(OpType.INSERT, ipc(six_rows(range(b * 10, b * 10 + 10))))], deadline())
            t.flush()
        run = CompactionScheduler(lambda: [t]).planned_run(t)
        assert run == [b.name for b in t.blocks] and len(run) == 4
        size = sum((t.fs.data_dir("t1") / n).stat().st_size for n in run)
        sched = CompactionScheduler(
            lambda: [t], CompactionOptions(rate_bytes_s=0, run_bytes_max=size - 1)
        )
        assert sched.run_once() == 0 and sched.run_once() == 0
        assert len(t.blocks) == 4 and sched.deferred == 1 and sched.compactions == 0
        names = [b.name for b in t.blocks]
        sched = CompactionScheduler(
            lambda: [t], CompactionOptions(rate_bytes_s=0, run_blocks_max=3)
        )
        assert sched.run_once() == 1 and sched.deferred == 0
        assert len(t.blocks) == 2 and t.blocks[1].name == names[3]  # the oldest 3 merged
        t = create(m, "t2")  # the same four flushes: within both bounds, merged whole
        for b in range(4):
            t.write(1, [(OpType.INSERT, ipc(six_rows(range(b * 10, b * 10 + 10))))], deadline())
            t.flush()
        sched = CompactionScheduler(
            lambda: [t], CompactionOptions(rate_bytes_s=0, run_blocks_max=4, run_bytes_max=size)
        )
        assert sched.run_once() == 1 and len(t.blocks) == 1 and sched.deferred == 0
        assert sched.bytes_read == size
    finally:
        m.close()


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"row{i}" for i in ids]})


@pytest.mark.integration
@pytest.mark.parametrize(
    "kill", ["compact.after_block_write", "compact.after_superblock", "sigkill"]
)
def test_kill_during_background_compaction_loses_nothing(tmp_path, kill):
    root = tmp_path / "root"
    FsLayout.format(root)
    env = {CRASH_ENV: kill} if kill != "sigkill" else {}
    # Small flushes: every 200 rows a block, a compaction every 4 blocks.
    args = ["--flush-rows", "200", "--segment-size-mb", "1", "--compaction-rate-mb", "0"]
    p = TServerProcess(root, extra_args=args, env=env).start()
    acked: set[int] = set()
    maybe: set[int] = set()  # in flight when the server died: durable or not
    try:
        with TabletServerClient(p.address, timeout_s=10) as c:
            c.create_tablet("t1", COLS, table_name="tbl")
            compactions_seen = 0
            # Until the kill (or the crash point), with a deadline rather than a number of
            # writes: under load the flushes come further apart, and 1,000 writes once made
            # only one compaction (a CI run).
            write_until = time.monotonic() + WRITE_DEADLINE_S
            n = -1
            while time.monotonic() < write_until:
                n += 1
                ids = range(n * 100, n * 100 + 100)
                try:
                    c.write("t1", [(OpType.INSERT, _rows(ids))])
                except errors.RpcError:
                    maybe.update(ids)
                    break
                acked.update(ids)
                if kill == "sigkill":
                    compactions_seen = p.err_path.read_text().count("compacted")
                    if compactions_seen >= 2:  # writes, flushes, compactions under way
                        p.proc.send_signal(signal.SIGKILL)
                        p.proc.wait(30)
                        break
                elif p.proc.poll() is not None:
                    break
            if kill != "sigkill":
                wait_for(lambda: p.proc.poll() is not None, 60, "the crash point to be reached")
                assert p.proc.returncode == CRASH_EXIT_CODE, p.err_path.read_text()[-2000:]
            else:
                assert compactions_seen >= 2, "no background compaction ran"
        assert len(acked) >= 800  # at least four flushes' worth before the kill
        p.env = {}
        p.start()
        with TabletServerClient(p.address, timeout_s=10) as c:
            got: list[int] = []

            def scanned() -> bool:
                try:
                    got[:] = c.scan_table("t1", projection=["id"])["id"].to_pylist()
                except (errors.Unavailable, errors.NotLeader):
                    return False
                return True

            wait_for(scanned, 60, "the restarted tablet to scan")
        ids = set(got)
        assert len(got) == len(ids), "a key twice after the restart"
        assert acked <= ids, f"{len(acked - ids)} acknowledged rows lost"
        assert ids <= acked | maybe, "rows that were never written"
    finally:
        p.stop()
