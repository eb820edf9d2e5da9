"""Background compaction throughput with and without the rate limit (design/storage.md).

    python bench/compaction.py [--tablets 4] [--rows 200000] [--blocks 4] [--rate-mb 8]

In one process: `--tablets` tablets, each loaded with `--rows` rows (an int64 key and a
~100-byte string) in `--blocks` flushes; then a CompactionScheduler compacts every tablet
once, unthrottled, and again on a fresh copy of the data with `--rate-mb` MB/s. Prints the
bytes written, the wall time, the write rate, and how long the budget held compactions back.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tablets", type=int, default=4)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--rate-mb", type=float, default=8.0)
    args = ap.parse_args()
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
