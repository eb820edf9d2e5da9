"""Full scans of one saved tablet layout, code against code, beside Parquet (issue 25).

`bench/storage.py` loads a fresh tablet each run, and its background compactions leave 3
to 6 runs at 1M rows depending on timing: scans of different runs compare different
layouts. This keeps one layout and scans it with each code tree in turn:

    # a tablet root loaded as bench/storage.py loads it (random keys, flush every 50k,
    # background compaction, quiesced); --compact merges it into one run afterwards
    .venv/bin/python bench/scan_layouts.py load /tmp/root4 [--rows 1000000] [--compact]
    # or R overlapping runs of random keys, sized so that the server's tiered policy leaves
    # them alone (at most 3 per size class), each later run also upserting --updates and
    # deleting --deletes of the keys written before it (a fraction of its own rows)
    .venv/bin/python bench/scan_layouts.py load /tmp/root6 --runs 6 [--updates 0.05]
    # old and new code alternately, each a tablet server started on a copy of the root
    .venv/bin/python bench/scan_layouts.py scan /tmp/root4 --code /tmp/old /work/main \
        [--scans 8] [--rounds 2]
    # a tablet server of one code tree started on a copy of a root and left alone until its
    # background compactions settle (no block file changed for --quiet-s); prints the runs
    # and their height before and after and the bytes compactions wrote (write
    # amplification: / the bytes of the blocks before)
    .venv/bin/python bench/scan_layouts.py settle /tmp/root6 /tmp/root6-new --code /work/main
    # one root per code tree (code i scans root i: e.g. each settled by its own code)
    .venv/bin/python bench/scan_layouts.py scan /tmp/root6-old /tmp/root6-new \
        --code /tmp/old /work/main

Per code and round: the best and median full-scan rows/s through `TabletServerClient`,
the server's CPU per scan (median), and pyarrow reading the same rows from a Parquet file
(sorted by key, row groups of 64k, in the page cache; best of `--scans`) just before.
"""

from __future__ import annotations

import argparse
import contextlib
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
CHILD_TIMEOUT_S = 1800.0  # a scanning or settling child, at most (a hung one fails the bench)

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


# Run in a child process with the code tree under test on its path: start its tablet
# server on a root, wait until the tablet is open, then until no block file has changed for
# `quiet_s` seconds; print the blocks before, after, and every block file seen written.
SETTLER = r"""
import os, signal, sys, time
from pathlib import Path
code, root, quiet_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
sys.path.insert(0, code)
from bench.storage import start_server
from logcentric.tablets import TabletServerClient

def files():
    return {p.name: p.stat().st_size for p in root.rglob("block-*.arrow*")
            if p.name.endswith((".arrow", ".arrow.tmp")) and p.exists()}

before = {n: b for n, b in files().items() if n.endswith(".arrow")}
proc, addr = start_server(root, root.parent / (root.name + ".out"), 50_000, fmt=False)
t0 = time.monotonic()
try:
    c = TabletServerClient(addr, timeout_s=300)
    while True:  # the tablet opens in the background
        try:
            c.scan_table("t1", limit=1)
            break
        except Exception:
            if time.monotonic() - t0 > 60:
                raise
            time.sleep(0.2)
    c.close()
    seen, last, changed_at = {}, files(), time.monotonic()
    while time.monotonic() - changed_at < quiet_s:
        time.sleep(0.2)
        now = files()
        for n, b in now.items():
            if n.removesuffix(".tmp") not in before:
                seen[n.removesuffix(".tmp")] = max(b, seen.get(n.removesuffix(".tmp"), 0))
        if now != last:
            last, changed_at = now, time.monotonic()
finally:
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
after = {n: b for n, b in files().items() if n.endswith(".arrow")}
print("before", sum(before.values()), *sorted(before))
print("after", sum(after.values()), *sorted(after))
print("written", sum(seen.values()), len(seen))
print("settled_s", changed_at - t0)
"""


def layout(root: Path) -> tuple[list[int], int]:
    """The rows of each run of the tablet (oldest first) and their height (the most runs
    whose key ranges cover one key), read in process from a copy of the root."""
    from tservers.tablet.blockindex import runs_of
    from tservers.tablet.compaction import height, run_ranges

    copy = root.parent / (root.name + "-layout")
    shutil.rmtree(copy, ignore_errors=True)
    with opened_copy(root, copy) as t:
        runs = runs_of(list(t.blocks))
        return [sum(b.num_rows for b in r) for r in runs], height(run_ranges(runs))


@contextlib.contextmanager
def opened(root: Path):
    """The tablet of `root`, opened in process by this tree's code once it runs (within
    120 s)."""
    from tests.tservers.helpers import open_manager

    m = open_manager(root)
    try:
        t = m.tablet(TABLET)
        deadline = time.monotonic() + 120
        while t.status.name != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)
        yield t
    finally:
        m.close()


@contextlib.contextmanager
def opened_copy(root: Path, copy: Path):
    """`opened` on a copy of `root` at `copy`, removed after."""
    shutil.copytree(root, copy)
    try:
        with opened(copy) as t:
            yield t
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def run_child(script: str, code: Path, *args) -> list[str]:
    """The lines `script` prints, run by a child python in the code tree `code` (its
    imports are that tree's), within CHILD_TIMEOUT_S; a failure raises with its output."""
    return subprocess.run(
        [sys.executable, "-c", script, str(code), *map(str, args)],
        cwd=code,
        capture_output=True,
        text=True,
        check=True,
        timeout=CHILD_TIMEOUT_S,
    ).stdout.split("\n")


def settle(root: Path, out: Path, code: Path, quiet_s: float) -> None:
    """A copy of `root` at `out`, after `code`'s tablet server ran on it until its
    compactions settled (see SETTLER)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(root, out)
    runs0, h0 = layout(out)
    got = run_child(SETTLER, code, out, quiet_s)
    f = {line.split()[0]: line.split()[1:] for line in got if line.strip()}
    runs1, h1 = layout(out)
    before, written = int(f["before"][0]), int(f["written"][0])
    print(
        f"{code}: runs {runs0} (height {h0}) -> {runs1} (height {h1}); compactions wrote "
        f"{written:,} bytes in {f['written'][1]} blocks = {written / max(1, before):.2f} x "
        f"the {before:,} bytes of blocks before; settled {float(f['settled_s'][0]):.1f} s "
        f"after start",
        flush=True,
    )


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
        with opened(root) as t:
            t.compact()
    blocks = sorted(p.name for p in root.rglob("block-*.arrow"))
    runs = {b.split("-r")[-1] if "-r" in b else b for b in blocks}
    print(f"{root}: {n:,} rows in {len(blocks)} blocks, {len(runs)} runs")


# Run sizes (fractions of the rows, oldest first) the tiered policy (fanout 4, flushes of
# 50k rows) does not merge at 1M rows: at most 3 runs of a size class.
RUN_SHARES = {
    1: [1.0],
    2: [0.9, 0.1],
    3: [0.34, 0.33, 0.33],
    4: [0.3, 0.3, 0.3, 0.1],
    5: [0.3, 0.3, 0.3, 0.06, 0.04],
    6: [0.28, 0.28, 0.28, 0.06, 0.06, 0.04],
    7: [0.28, 0.28, 0.28, 0.06, 0.06, 0.02, 0.02],
    8: [0.28, 0.28, 0.27, 0.06, 0.06, 0.02, 0.02, 0.01],
}


def load_runs(root: Path, n: int, runs: int, updates: float, deletes: float) -> None:
    """`runs` overlapping runs of random keys (RUN_SHARES of `n` new keys each), written in
    process with explicit flushes and no compaction; each run after the first also upserts
    `updates` and deletes `deletes` (fractions of its new rows) of the keys written before."""
    from rpc.protocols.tserver_pb2 import OpType
    from tests.tservers.helpers import deadline, open_manager
    from tservers.tablet.tablet import compaction_run

    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    proc, addr = bs.start_server(root, root.parent / (root.name + ".out"), 50_000)
    try:  # the tablet made by a server, as a server makes it
        c = TabletServerClient(addr, timeout_s=300)
        c.create_tablet(TABLET, bs.COLS)
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    sizes = [int(n * f) for f in RUN_SHARES[runs]]
    sizes[0] += n - sum(sizes)
    if compaction_run(sizes, 4, 50_000) is not None:
        print(f"warning: the server's policy would merge runs of {sizes}", file=sys.stderr)
    rng = random.Random(n * 31 + runs)
    ids = list(range(0, 2 * n, 2))
    rng.shuffle(ids)
    m = open_manager(root, flush_rows=10**12)
    try:
        t = m.tablet(TABLET)
        until = time.monotonic() + 120
        while t.status.name != "RUNNING" and time.monotonic() < until:
            time.sleep(0.05)
        version = t.schema.version
        live: list[int] = []
        start = 0
        for r, size in enumerate(sizes):
            new = ids[start : start + size]
            start += size
            ops: list[tuple[int, list[int]]] = [(OpType.INSERT, new)]
            if live:
                picked = rng.sample(live, min(len(live), int(size * (updates + deletes))))
                cut = int(size * updates)
                ops.append((OpType.UPSERT, picked[:cut]))
                gone = set(picked[cut:])
                ops.append((OpType.DELETE, picked[cut:]))
                live = [k for k in live if k not in gone]
            for op, keys in ops:
                for s in range(0, len(keys), bs.BATCH_ROWS):
                    part = keys[s : s + bs.BATCH_ROWS]
                    if op == OpType.DELETE:
                        rows = bs.rows(part, r).select(["id"])
                    else:
                        rows = bs.rows(part, r)
                    t.write(version, [(op, ipc_bytes(rows))], deadline(60))
            live.extend(new)
            t.flush()
        print(f"runs of {sizes} new keys; {len(live):,} live rows")
    finally:
        m.close()


def parquet_of(root: Path, out: Path) -> int:
    """The tablet's rows (blocks and what its WAL holds beyond them) sorted by key, as
    Parquet: read by this tree's code, in process, from a copy of the root."""
    with opened_copy(root, out.parent / "parquet-root") as t:
        rows = t.scan([], [], [], [], 0)
    pq.write_table(rows, out, row_group_size=64 * 1024)
    return rows.num_rows


def scan(roots: list[Path], codes: list[Path], scans: int, rounds: int) -> None:
    """Each code scans the one root, or code i root i (the same rows: the Parquet file is
    made from the first)."""
    assert len(roots) in (1, len(codes)), "one root, or one per code"
    tmp = Path(tempfile.mkdtemp(prefix="scan-layouts-"))
    try:
        n = parquet_of(roots[0], tmp / "rows.parquet")
        for rnd in range(1, rounds + 1):
            pqs = []
            for _ in range(scans):
                t0 = time.perf_counter()
                pq.read_table(tmp / "rows.parquet")
                pqs.append(time.perf_counter() - t0)
            for i, code in enumerate(codes):
                root = roots[i] if len(roots) > 1 else roots[0]
                copy = tmp / "root"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(root, copy)
                load_avg = os.getloadavg()[0]
                out = run_child(SCANNER, code, copy, scans)
                got = [line.split() for line in out if line.strip()]
                assert all(int(g[0]) == n for g in got), f"a scan returned other than {n} rows"
                walls = [float(g[1]) for g in got]
                cpus = [float(g[2]) for g in got]
                best, med = n / min(walls), n / statistics.median(walls)
                pq_best = n / min(pqs)
                print(
                    f"round {rnd} {code} on {root.name}: load {load_avg:.2f}; full scan best "
                    f"{best:,.0f} rows/s, median {med:,.0f}; server CPU "
                    f"{statistics.median(cpus) * 1000:.0f} ms a scan (median); Parquet best "
                    f"{pq_best:,.0f} rows/s (median "
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
    a.add_argument(
        "--runs",
        type=int,
        choices=sorted(RUN_SHARES),
        help="R overlapping runs written in process (no background compaction, no --compact)",
    )
    a.add_argument("--updates", type=float, default=0.05, help="with --runs: upserts per run")
    a.add_argument("--deletes", type=float, default=0.01, help="with --runs: deletes per run")
    b = sub.add_parser("scan")
    b.add_argument("root", type=Path, nargs="+", help="one root, or one per --code")
    b.add_argument("--code", type=Path, nargs="+", default=[ROOT])
    b.add_argument("--scans", type=int, default=8)
    b.add_argument("--rounds", type=int, default=2)
    c = sub.add_parser("settle")
    c.add_argument("root", type=Path)
    c.add_argument("out", type=Path, help="the copy of root the server runs on")
    c.add_argument("--code", type=Path, default=ROOT)
    c.add_argument("--quiet-s", type=float, default=30.0, help="no block file changed for")
    args = ap.parse_args()
    if args.cmd == "load" and args.runs:
        load_runs(args.root, args.rows, args.runs, args.updates, args.deletes)
    elif args.cmd == "load":
        load(args.root, args.rows, args.compact)
    elif args.cmd == "settle":
        settle(args.root, args.out, args.code.resolve(), args.quiet_s)
    else:
        scan(args.root, [c.resolve() for c in args.code], args.scans, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
