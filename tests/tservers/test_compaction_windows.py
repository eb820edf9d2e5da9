"""Size-tiered compaction over adjacent runs, not only the newest (`compaction_window`).

Found by `bench/storage.py --rows 50000000` (session 26): after the load the tablet kept 48
runs for minutes, the newest a run of 7.13M rows and behind it 43 runs of 50-110k rows
(class 1), none merged: the tiered policy looked only at suffixes (each stopped at the big
newest run), the overlap term at suffixes of at most K runs whose biggest is at most 4x the
rest (none), and the scheduler did not look at the tablet again. Every insert batch was
checked against each of those runs, every scan merged them. Now the newest window of
adjacent runs of one class (bounded by bigger runs) is merged where it is listed, and a
pile longer than K has its oldest K merged, so the newer runs left stay smaller than the
output. Real files, the manager's own scheduler."""

from __future__ import annotations

import random

from rpc.protocols.tserver_pb2 import OpType, PredicateOp, PredicatePB, ValuePB
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet.blockindex import runs_of
from tservers.tablet.tablet import compaction_run, compaction_window, size_class

# The runs of that tablet, oldest first (rows), as its superblock listed them.
STUCK = [35_430_000, 1_370_000, 1_260_000, 1_360_000, 80_000, 110_000, 100_000, 100_000]
STUCK += [100_000, 110_000, 100_000, 110_000, 90_000, 100_000, 90_000, 100_000, 80_000]
STUCK += [90_000, 80_000, 80_000, 80_000, 80_000, 90_000, 70_000] + [80_000] * 6
STUCK += [70_000] * 4 + [60_000] + [70_000] * 8 + [60_000, 50_000, 60_000, 60_000, 7_130_000]
BASE = 200_000  # the tablet's flush threshold (the server's default)


def test_the_stuck_layout_has_a_window():
    assert len(STUCK) == 48
    assert compaction_run(STUCK, 4, BASE) is None  # no suffix: what the old policy saw
    start, end = compaction_window(STUCK, 4, BASE)
    assert (start, end) == (4, 47)  # every small run behind the big newest one
    assert {size_class(r, 4, BASE) for r in STUCK[start:end]} <= {0, 1}


def test_a_suffix_is_still_what_it_was():
    for rows in ([100, 100, 100, 100], [400, 100, 100, 100, 100], [1600, 400, 400, 400, 400, 50]):
        start = compaction_run(rows, 4, 100)
        assert compaction_window(rows, 4, 100) == (start, len(rows))
    assert compaction_window([400, 100, 100, 100], 4, 100) is None


def _settle(rows: list[int], fanout: int, base: int, k: int) -> tuple[list[int], int]:
    """Apply the policy (the oldest K of a longer window) until it has nothing to do."""
    rounds = 0
    while (w := compaction_window(rows, fanout, base)) is not None:
        start, end = w
        end = min(end, start + k)
        rows[start:end] = [sum(rows[start:end])]
        rounds += 1
        assert rounds < 10_000
    return rows, rounds


def test_the_policy_settles_any_layout_to_few_runs():
    """Random layouts (runs of any size in any order): merges end, rows are kept, and no
    window of one class holds `fanout` runs of it at the end."""
    rng = random.Random(7)
    for _ in range(300):
        rows = [
            rng.choice([50, 100, 150, 400, 1500, 7000, 30_000]) for _ in range(rng.randrange(1, 80))
        ]
        total = sum(rows)
        out, _ = _settle(list(rows), 4, 100, 16)
        assert sum(out) == total
        classes = [size_class(r, 4, 100) for r in out]
        for c in set(classes):
            seg = 0
            for x in classes:
                seg = seg + (x == c) if x <= c else 0
                assert seg < 4, (rows, out)
    out, rounds = _settle(list(STUCK), 4, BASE, 16)
    assert len(out) <= 6, out
    assert out[0] == STUCK[0] and out[-1] == STUCK[-1]  # the big runs were not rewritten


ROWS = 150  # a small run's rows (flush_rows=100: class 1 at fanout 4)


def _write(t, op, keys):
    t.write(1, [(op, ipc(six_rows(keys)))], deadline(30))


def test_runs_behind_a_newer_big_run_are_merged_in_place(tmp_path):
    """[big old run, 6 small runs, big newest run]: the old code planned nothing (every
    suffix stops at the newest run); now the 6 small ones are merged where they are, and
    every key reads as before: the newest run's upserts still win over the window's rows,
    the window's deletes still hide the old run's rows."""
    m = open_manager(tmp_path / "root", flush_rows=100)
    try:
        t = create(m, "t")
        rng = random.Random(3)
        old = list(range(0, 8000))
        rng.shuffle(old)
        _write(t, OpType.INSERT, old)
        t.flush()  # one run of 8,000 rows: class 4
        small = list(range(8000, 8000 + 6 * ROWS))
        rng.shuffle(small)
        for i in range(6):
            part = small[i * ROWS : (i + 1) * ROWS]
            _write(t, OpType.INSERT, part)
            if i == 2:
                _write(t, OpType.DELETE, old[:50])  # tombstones in the window
            t.flush()
        newest = list(range(10_000, 12_000)) + small[:40]
        _write(t, OpType.UPSERT, newest)  # new keys, and newer versions of window rows
        t.flush()  # one run of 2,040 rows: class 3, newest
        runs = runs_of(list(t.blocks))
        rows = [sum(b.num_rows for b in r) for r in runs]
        # (The third small run holds the 50 tombstones too.)
        assert rows == [8000, ROWS, ROWS, ROWS + 50, ROWS, ROWS, ROWS, 2040], rows
        assert compaction_run(rows, 4, 100) is None  # the old policy: nothing
        before = t.scan([], [], [], [], 0)
        plan = t.compaction_plan(tiered=True)
        assert [r[0].name for r in plan] == [r[0].name for r in runs[1:7]]
        assert m.compaction.run_once() == 1
        after_runs = runs_of(list(t.blocks))
        assert len(after_runs) == 3
        assert [b.name for b in after_runs[0]] == [b.name for b in runs[0]]
        assert [b.name for b in after_runs[2]] == [b.name for b in runs[7]]
        after = t.scan([], [], [], [], 0)
        assert after.equals(before)
        ids = set(after.column("id").to_pylist())
        assert not ids & set(old[:50])  # still deleted
        assert ids == (set(old[50:]) | set(small) | set(range(10_000, 12_000)))
        # Point reads (blocks asked newest first): the same rows as the scan's.
        by_id = {r["id"]: r for r in before.to_pylist()}
        for k in (old[0], old[60], small[0], small[39], small[-1], 10_500):
            got = t.scan([], [_eq(k)], [], [], 0).to_pylist()
            assert got == ([by_id[k]] if k in by_id else []), k
        assert m.compaction.run_once() == 0  # settled
    finally:
        m.close()


def _eq(k: int) -> PredicatePB:
    return PredicatePB(column="id", op=PredicateOp.EQ, values=[ValuePB(int_value=k)])
