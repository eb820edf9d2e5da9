"""CPU of the merge under every flush, compaction and scan (`tablet.newest_versions`), in one run
next to two baselines on the same rows:

  - sort only: concatenate and sort by key, nothing deduplicated (the floor of any merge);
  - generation tag: the merge before 2026-11-22 (a generation column per part, a two-key
    sort, keys compared with their neighbours, a filter).

Rows are the 6-column rows of bench/tserver.py. Cases: a bulk-load flush (200 memstore row
blocks of 1,000 rows, no key repeated), and a compaction of 4 blocks of 200,000 rows where a
quarter of each block's keys are in the next one too (updates). Process CPU per merge, the
median of --repeats; ratios against the sort-only floor.

    .venv/bin/python bench/merge.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tserver import BATCH_ROWS, batch  # noqa: E402
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


if __name__ == "__main__":
    main()
