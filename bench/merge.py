"""CPU of the merge under every flush, compaction and scan (`tablet.newest_versions`), in one run
next to two baselines on the same rows:

  - sort only: concatenate and sort by key, nothing deduplicated (the floor of any merge);
  - generation tag: the merge before 2026-11-22 (a generation column per part, a two-key
    sort, keys compared with their neighbours, a filter).

Rows are the 6-column rows of bench/tserver.py. Cases: a bulk-load flush (200 memstore row
blocks of 1,000 rows, no key repeated), and a compaction of 4 blocks of 200,000 rows where a
quarter of each block's keys are in the next one too (updates). Process CPU per merge, the
median of --repeats; ratios against the sort-only floor.

Then a scan's merged slabs (`merge._merge_parts` with tombstones dropped, as
`Tablet.scan_pieces` asks since 2026-11-26) against the slab merge before it (a take of the
rows, a filter of the older versions, then the scan's filter of the tombstones: three
copies of every column), on the slabs of 6 overlapping runs of random keys (3 big, 3 small)
where each later run also updates 5% and deletes 1% of the keys before it: ms per 1M rows.

    .venv/bin/python bench/merge.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tserver import BATCH_ROWS, batch  # noqa: E402
from tservers.tablet import merge  # noqa: E402
from tservers.tablet.schema import DELETED_FIELD  # noqa: E402
from tservers.tablet.tablet import newest_versions  # noqa: E402

KEYS = ["id"]


def sort_only(parts: list[pa.Table]) -> pa.Table:
    t = pa.concat_tables(parts)
    return t.take(pc.sort_indices(t, sort_keys=[("id", "ascending")]))


def generation_tag(parts: list[pa.Table]) -> pa.Table:
    tagged = [
        p.append_column("__gen", pa.array([g] * p.num_rows, pa.int32()))
        for g, p in enumerate(parts)
    ]
    t = pa.concat_tables(tagged)
    t = t.take(pc.sort_indices(t, sort_keys=[("id", "ascending"), ("__gen", "descending")]))
    n = t.num_rows
    first = pc.not_equal(t.column("id").slice(1), t.column("id").slice(0, n - 1))
    mask = pa.concat_arrays([pa.array([True]), first.combine_chunks()])
    return t.filter(mask).drop_columns(["__gen"])


def slab_before(parts: list[pa.Table]) -> pa.Table:
    """A scan's merged slab before 2026-11-26: stable sort, take, keep the last of equal
    keys (a filter of the rows), then the scan's filter of the tombstones."""
    t = pa.concat_tables(parts)
    keys = t.column("id")
    t = t.take(pc.array_sort_indices(pa.concat_arrays(keys.chunks)))
    n = t.num_rows
    col = t.column("id")
    last = pc.not_equal(col.slice(0, n - 1), col.slice(1))
    if not pc.all(last).as_py():
        t = t.filter(pa.concat_arrays([last.combine_chunks(), pa.array([True], pa.bool_())]))
    deleted = t.column(DELETED_FIELD)
    return t.filter(pc.invert(deleted)) if pc.any(deleted).as_py() else t


def scan_slabs(rows: int) -> list[list[pa.Table]]:
    """The parts of the merged slabs of a scan of 6 overlapping runs of random keys (3 of
    28% of `rows`, 2 of 6%, 1 of 4%), each later run updating 5% and deleting 1% of the
    keys before it (tombstones: null values)."""
    rng = random.Random(7)
    ids = list(range(0, 2 * rows, 2))
    rng.shuffle(ids)
    runs: list[dict] = []
    live: list[int] = []
    at = 0
    for share in [0.28, 0.28, 0.28, 0.06, 0.06, 0.04]:
        size = int(rows * share)
        new = ids[at : at + size]
        at += size
        run = {k: False for k in new}
        if live:
            picked = rng.sample(live, int(size * 0.06))
            run.update({k: False for k in picked[: int(size * 0.05)]})
            run.update({k: True for k in picked[int(size * 0.05) :]})
        live.extend(new)
        runs.append(run)
    tables = []
    for r, run in enumerate(runs):
        keys = sorted(run)
        cols = {
            "id": pa.array(keys, pa.int64()),
            "n": pa.array([None if run[k] else k % 9999 for k in keys], pa.int32()),
            "x": pa.array([None if run[k] else k * 0.25 for k in keys], pa.float64()),
            "s": pa.array([None if run[k] else f"row-{k:012d}-{r}" for k in keys], pa.string()),
            "b": pa.array([None if run[k] else k % 3 == 0 for k in keys], pa.bool_()),
            "ts": pa.array(
                [None if run[k] else 1_700_000_000_000_000 + k for k in keys],
                pa.timestamp("us"),
            ),
            DELETED_FIELD: pa.array([run[k] for k in keys], pa.bool_()),
        }
        tables.append(pa.table(cols))
    slabs: list[list[pa.Table]] = []
    real = merge._merge_parts

    def capture(parts, key_names, drop_deleted):
        slabs.append(parts)
        return real(parts, key_names, drop_deleted)

    merge._merge_parts = capture
    try:
        for _ in merge.merge_slabs(tables, KEYS, lambda i, t: t, drop_deleted=True):
            pass
    finally:
        merge._merge_parts = real
    return slabs


def cpu_ms(fn, parts, repeats: int) -> tuple[float, int]:
    times = []
    rows = 0
    for _ in range(repeats):
        t0 = time.process_time()
        rows = fn(parts).num_rows
        times.append((time.process_time() - t0) * 1000)
    return statistics.median(times), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9, help="merges per variant (median printed)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    flush = [batch(i * BATCH_ROWS) for i in range(200)]
    block_rows = 200_000
    step = block_rows * 3 // 4  # each block's last quarter of keys is in the next block too
    compaction = [
        sort_only([batch(b * step + i * BATCH_ROWS) for i in range(200)]) for b in range(4)
    ]
    cases = [
        ("flush: 200 row blocks x 1,000, no key repeated", flush),
        ("compaction: 4 blocks x 200,000, 25% keys repeated", compaction),
    ]
    print(f"merge CPU, median ms of {args.repeats} (process time); ratio = variant / sort only")
    print(f"  {'case':52} {'sort only':>10} {'merge':>8} {'ratio':>6} {'gen tag':>8} {'ratio':>6}")
    for name, parts in cases:
        floor, n0 = cpu_ms(sort_only, parts, args.repeats)
        new, n1 = cpu_ms(lambda p: newest_versions(p, KEYS), parts, args.repeats)
        old, n2 = cpu_ms(generation_tag, parts, args.repeats)
        if n1 != n2:
            raise SystemExit(f"{name}: merge kept {n1} rows, generation tag {n2}")
        print(
            f"  {name:52} {floor:10.1f} {new:8.1f} {new / floor:6.2f} {old:8.1f} {old / floor:6.2f}"
        )
        print(f"  {'':52} rows in {n0:,}, out {n1:,}")

    slabs = scan_slabs(1_000_000)
    rows_in = sum(p.num_rows for parts in slabs for p in parts)

    def each(fn):
        return lambda _: pa.table({"n": [sum(fn(parts).num_rows for parts in slabs)]})

    before, _ = cpu_ms(each(slab_before), None, args.repeats)
    after, _ = cpu_ms(each(lambda parts: merge._merge_parts(parts, KEYS, True)), None, args.repeats)
    out_b = sum(slab_before(parts).num_rows for parts in slabs)
    out_a = sum(merge._merge_parts(parts, KEYS, True).num_rows for parts in slabs)
    if out_a != out_b:
        raise SystemExit(f"scan slabs: before kept {out_b} rows, after {out_a}")
    print(
        f"scan slabs of 6 overlapping runs, 5% updates, 1% deletes: {len(slabs)} merged slabs, "
        f"rows in {rows_in:,}, out {out_a:,}"
    )
    print(
        f"  before (take, filter, filter) {before:8.1f} ms; one take {after:8.1f} ms; "
        f"ratio {after / before:.2f}"
    )


if __name__ == "__main__":
    main()
