"""Background compaction throughput with and without the rate limit (design/storage.md).

    python bench/compaction.py [--tablets 4] [--rows 200000] [--blocks 4] [--rate-mb 8]
    python bench/compaction.py --amplification [--rows 1000000] [--flushes 40]

In one process: `--tablets` tablets, each loaded with `--rows` rows (an int64 key and a
~100-byte string) in `--blocks` flushes; then a CompactionScheduler compacts every tablet
once, unthrottled, and again on a fresh copy of the data with `--rate-mb` MB/s. Prints the
bytes written, the wall time, the write rate, and how long the budget held compactions back.

`--amplification`: the write amplification of the policy (tiered alone: the key-overlap
term off, `overlap_height=0`, against tiered and overlap as configured by default) on one
tablet loaded with `--rows` rows in `--flushes` flushes, random or sequential keys, the
scheduler's rounds run to the end after each flush with the overlap term's idle wait at 0
(its worst case: every flush followed by a pause). Prints the bytes compactions wrote per
byte flushed, compactions by reason, the runs and their height at the end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rpc.protocols.tserver_pb2 import (  # noqa: E402
    ColumnSchemaPB,
    CreateTabletRequest,
    DataType,
    OpType,
    SchemaPB,
)
from tservers.fs import FsLayout  # noqa: E402
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler  # noqa: E402
from tservers.tablet.manager import TabletManager  # noqa: E402
from tservers.tablet.tablet import TabletOptions  # noqa: E402
from tservers.wal.log import WalOptions  # noqa: E402

SCHEMA = SchemaPB(
    columns=[
        ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
    ]
)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def load(root: Path, tablets: int, rows: int, blocks: int) -> None:
    fs = FsLayout.format(root)
    per_block = rows // blocks
    m = TabletManager(
        fs,
        WalOptions(sync=False),
        TabletOptions(flush_rows_threshold=per_block, compaction_blocks_min=blocks),
        maintenance=False,
    )
    m.open()
    try:
        for i in range(tablets):
            tid = f"t{i}"
            m.create_tablet(CreateTabletRequest(tablet_id=tid, table_name="b", schema=SCHEMA))
            t = m.tablet(tid)
            for b in range(blocks):
                for start in range(b * per_block, (b + 1) * per_block, 10_000):
                    ids = list(range(start, min(start + 10_000, (b + 1) * per_block)))
                    table = pa.table(
                        {"id": pa.array(ids, pa.int64()), "s": [f"{k:0100d}" for k in ids]}
                    )
                    t.write(1, [(OpType.INSERT, _ipc(table))], time.monotonic() + 60)
                t.flush()
    finally:
        m.close()


def run(root: Path, rate_bytes_s: int, blocks: int) -> dict:
    fs = FsLayout.open(root)
    m = TabletManager(
        fs,
        WalOptions(sync=False),
        TabletOptions(compaction_blocks_min=blocks, flush_rows_threshold=10**9),
        maintenance=False,
    )
    m.open()
    try:
        sched = CompactionScheduler(
            m.running_tablets, CompactionOptions(rate_bytes_s=rate_bytes_s, blocks_min=blocks)
        )
        t0 = time.monotonic()
        ran = sched.run_once()
        wall = time.monotonic() - t0
        return {
            "compactions": ran,
            "bytes_written": sched.bytes_written,
            "wall_s": wall,
            "mb_s": sched.bytes_written / wall / 1e6,
            "throttled_s": sched.throttled_s,
        }
    finally:
        m.close()


def amplification(root: Path, rows: int, flushes: int, keys: str, overlap: bool) -> dict:
    """One tablet loaded in `flushes` flushes, the scheduler's rounds run out after each."""
    import random

    from tservers.tablet.blockindex import runs_of
    from tservers.tablet.compaction import height, run_ranges

    fs = FsLayout.format(root)
    per = rows // flushes
    m = TabletManager(
        fs,
        WalOptions(sync=False),
        TabletOptions(flush_rows_threshold=per, compaction_blocks_min=4),
        maintenance=False,
    )
    m.open()
    try:
        m.create_tablet(CreateTabletRequest(tablet_id="t", table_name="b", schema=SCHEMA))
        t = m.tablet("t")
        ids = list(range(rows))
        if keys == "random":
            random.Random(rows).shuffle(ids)
        opts = CompactionOptions(rate_bytes_s=0, overlap_idle_s=0.0)
        if not overlap:
            opts = CompactionOptions(rate_bytes_s=0, overlap_height=0)
        sched = CompactionScheduler(m.running_tablets, opts)
        flushed = 0
        data_dir = fs.data_dir("t")
        for f in range(flushes):
            part = ids[f * per : (f + 1) * per]
            for s in range(0, len(part), 10_000):
                chunk = part[s : s + 10_000]
                table = pa.table(
                    {"id": pa.array(chunk, pa.int64()), "s": [f"{k:0100d}" for k in chunk]}
                )
                t.write(1, [(OpType.INSERT, _ipc(table))], time.monotonic() + 60)
            t.flush()
            flushed += (data_dir / t.blocks[-1].name).stat().st_size
            while sched.run_once():
                pass
        runs = runs_of(list(t.blocks))
        return {
            "flushed": flushed,
            "written": sched.bytes_written,
            "reasons": dict(sched.reasons),
            "runs": [sum(b.num_rows for b in r) for r in runs],
            "height": height(run_ranges(runs)),
        }
    finally:
        m.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tablets", type=int, default=4)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--rate-mb", type=float, default=8.0)
    ap.add_argument("--amplification", action="store_true")
    ap.add_argument("--flushes", type=int, default=40)
    args = ap.parse_args()
    if args.amplification:
        with tempfile.TemporaryDirectory(prefix="bench-compaction-") as d:
            for keys in ("random", "sequential"):
                for overlap in (False, True):
                    root = Path(d) / f"{keys}-{overlap}"
                    t0 = time.monotonic()
                    r = amplification(root, args.rows, args.flushes, keys, overlap)
                    label = "tiered+overlap" if overlap else "tiered only"
                    print(
                        f"{keys:>10} keys, {label:>14}: {r['written'] / 1e6:.1f} MB written "
                        f"by compactions for {r['flushed'] / 1e6:.1f} MB flushed = "
                        f"{r['written'] / r['flushed']:.2f} x; {r['reasons']}; runs at the "
                        f"end {r['runs']} (height {r['height']}); "
                        f"{time.monotonic() - t0:.1f} s",
                        flush=True,
                    )
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as d:
        base = Path(d) / "base"
        load(base, args.tablets, args.rows, args.blocks)
        for label, rate in (("unthrottled", 0), (f"{args.rate_mb} MB/s", args.rate_mb * 1e6)):
            root = Path(d) / f"run-{rate}"
            shutil.copytree(base, root)
            r = run(root, int(rate), args.blocks)
            print(
                f"{label:>14}: {r['compactions']} compactions, {r['bytes_written'] / 1e6:.1f} MB "
                f"written in {r['wall_s']:.2f} s = {r['mb_s']:.1f} MB/s "
                f"(held back {r['throttled_s']:.2f} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
