"""Full scans of one saved tablet layout, code against code, beside Parquet (issue 25).

`bench/storage.py` loads a fresh tablet each run, and its background compactions leave 3
to 6 runs at 1M rows depending on timing: scans of different runs compare different
layouts. This keeps one layout and scans it with each code tree in turn:

    # a tablet root loaded as bench/storage.py loads it (random keys, flush every 50k,
    # background compaction, quiesced); --compact merges it into one run afterwards
    .venv/bin/python bench/scan_layouts.py load /tmp/root4 [--rows 1000000] [--compact]
    # old and new code alternately, each a tablet server started on a copy of the root
    .venv/bin/python bench/scan_layouts.py scan /tmp/root4 --code /tmp/old /work/main \
        [--scans 8] [--rounds 2]

Per code and round: the best and median full-scan rows/s through `TabletServerClient`,
the server's CPU per scan (median), and pyarrow reading the same rows from a Parquet file
(sorted by key, row groups of 64k, in the page cache; best of `--scans`) just before.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import storage as bs  # noqa: E402
from logcentric.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc.protocols.tserver_pb2 import OpType, WriteRequest, WriteResponse  # noqa: E402

TABLET = "t1"

# Run in a child process with the code tree under test on its path: start its tablet
# server on a root, scan the tablet `scans` times, print "wall_s server_cpu_s" per scan.
SCANNER = r"""
import os, signal, subprocess, sys, time
from pathlib import Path
code, root, scans = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, code)
from bench.storage import cpu_s, start_server
from logcentric.tablets import TabletServerClient
proc, addr = start_server(Path(root), Path(root).parent / "server.out", 50_000, fmt=False)
try:
    c = TabletServerClient(addr, timeout_s=300)
    deadline = time.monotonic() + 60
    while True:  # the tablet opens in the background
        try:
            c.scan_table("t1", limit=1)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for _ in range(scans):
        c0, t0 = cpu_s(proc.pid), time.perf_counter()
        n = c.scan_table("t1").num_rows
        print(n, time.perf_counter() - t0, cpu_s(proc.pid) - c0, flush=True)
    c.close()
finally:
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
"""


def load(root: Path, n: int, compact: bool) -> None:
    """A tablet root loaded as bench/storage.py loads it, the server stopped after."""
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    proc, addr = bs.start_server(root, root.parent / (root.name + ".out"), 50_000)
    try:
        c = TabletServerClient(addr, timeout_s=300)
        c.create_tablet(TABLET, bs.COLS)
        version = c.schema(TABLET).version
        ids = list(range(0, 2 * n, 2))
        random.Random(n).shuffle(ids)
        for b, s in enumerate(range(0, n, bs.BATCH_ROWS)):
            req = WriteRequest(tablet_id=TABLET, schema_version=version, ops=[OpType.INSERT])
            payload = ipc_bytes(bs.rows(ids[s : s + bs.BATCH_ROWS], b))
            c._call("Write", req, WriteResponse, sidecars=[payload])
        bs.quiesce(proc.pid)
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    if compact:
        from tests.tservers.helpers import open_manager

        m = open_manager(root)
        try:
            t = m.tablet(TABLET)
            deadline = time.monotonic() + 120
            while t.status.name != "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.05)
            t.compact()
        finally:
            m.close()
    blocks = sorted(p.name for p in root.rglob("block-*.arrow"))
    runs = {b.split("-r")[-1] if "-r" in b else b for b in blocks}
    print(f"{root}: {n:,} rows in {len(blocks)} blocks, {len(runs)} runs")


def parquet_of(root: Path, out: Path) -> int:
    """The tablet's rows (blocks and what its WAL holds beyond them) sorted by key, as
    Parquet: read by this tree's code, in process, from a copy of the root."""
    from tests.tservers.helpers import open_manager

    copy = out.parent / "parquet-root"
    shutil.copytree(root, copy)
    m = open_manager(copy)
    try:
        t = m.tablet(TABLET)
        deadline = time.monotonic() + 120
        while t.status.name != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = t.scan([], [], [], [], 0)
    finally:
        m.close()
        shutil.rmtree(copy, ignore_errors=True)
    pq.write_table(rows, out, row_group_size=64 * 1024)
    return rows.num_rows


def scan(root: Path, codes: list[Path], scans: int, rounds: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="scan-layouts-"))
    try:
        n = parquet_of(root, tmp / "rows.parquet")
        for rnd in range(1, rounds + 1):
            pqs = []
            for _ in range(scans):
                t0 = time.perf_counter()
                pq.read_table(tmp / "rows.parquet")
                pqs.append(time.perf_counter() - t0)
            for code in codes:
                copy = tmp / "root"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(root, copy)
                load_avg = os.getloadavg()[0]
                out = subprocess.run(
                    [sys.executable, "-c", SCANNER, str(code), str(copy), str(scans)],
                    cwd=code,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split("\n")
                got = [line.split() for line in out if line.strip()]
                assert all(int(g[0]) == n for g in got), f"a scan returned other than {n} rows"
                walls = [float(g[1]) for g in got]
                cpus = [float(g[2]) for g in got]
                best, med = n / min(walls), n / statistics.median(walls)
                pq_best = n / min(pqs)
                print(
                    f"round {rnd} {code}: load {load_avg:.2f}; full scan best {best:,.0f} "
                    f"rows/s, median {med:,.0f}; server CPU {statistics.median(cpus) * 1000:.0f}"
                    f" ms a scan (median); Parquet best {pq_best:,.0f} rows/s (median "
                    f"{n / statistics.median(pqs):,.0f}); ratio best/best {best / pq_best:.2f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("load")
    a.add_argument("root", type=Path)
    a.add_argument("--rows", type=int, default=1_000_000)
    a.add_argument("--compact", action="store_true", help="merge into one run after the load")
    b = sub.add_parser("scan")
    b.add_argument("root", type=Path)
    b.add_argument("--code", type=Path, nargs="+", default=[ROOT])
    b.add_argument("--scans", type=int, default=8)
    b.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "load":
        load(args.root, args.rows, args.compact)
    else:
        scan(args.root, [c.resolve() for c in args.code], args.scans, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
