"""Tablet storage at size: point reads, inserts with existence checks, server RSS (issue 25).

One tablet server process (durable WAL, flushes every --flush-rows rows), one tablet per
size, replication 1, written through the tablet server rpc. For a baseline size (10k rows)
and for --rows N, in the same run: load the rows in batches of 10,000 INSERTs of keys in a
random order over the whole key space (so every batch is checked against every block:
range, bloom filter, binary search where they say maybe), then point reads (`id == k`) of
random loaded keys, and the server's RSS after each load (VmRSS; the bytes a row added
between the two sizes is the per-row cost).

    .venv/bin/python bench/storage.py [--rows 100000] [--reads 200]

With --open-rows N it measures instead what an open tablet of N flushed rows costs in
memory: one process writes and flushes them (in-process tablet manager), a fresh one
opens the tablet, checks one key's existence (a write), and prints the heap (RssAnon) the
open added, per row. The same script runs against older code (a worktree) for "before".
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logcentric.tablets import TabletServerClient, column, ipc_bytes  # noqa: E402
from rpc.protocols.tserver_pb2 import OpType, WriteRequest, WriteResponse  # noqa: E402

BASE_ROWS = 10_000
BATCH_ROWS = 10_000
COLS = [
    column("id", "int64", key=True),
    column("v", "int64", nullable=True),
    column("s", "string", nullable=True),
]


def rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([i * 3 for i in ids], pa.int64()),
            "s": [f"row-{i:012d}" for i in ids],
        }
    )


def start_server(root: Path, out_file: Path, flush_rows: int) -> tuple[subprocess.Popen, str]:
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    out = open(out_file, "w")  # noqa: SIM115 (the server's stdout for its life)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tservers.cli",
            "start",
            "--fs-root",
            str(root),
            "--bind",
            "127.0.0.1:0",
            "--flush-rows",
            str(flush_rows),
            "--log-level",
            "warning",
        ],
        stdout=out,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while "serving on" not in out_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tablet server did not start")
        time.sleep(0.05)
    return proc, out_file.read_text().split()[-1]


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon (the heap) and RssFile (mapped files) of a process, bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            found[name] = int(value.split()[0]) * 1024
    return found


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def measure(client: TabletServerClient, pid: int, tid: str, n: int, reads: int) -> dict:
    client.create_tablet(tid, COLS)
    version = client.schema(tid).version
    rng = random.Random(n)
    ids = list(range(0, 2 * n, 2))  # odd keys are never written: misses
    rng.shuffle(ids)
    t0 = time.perf_counter()
    for start in range(0, n, BATCH_ROWS):
        req = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
        payload = ipc_bytes(rows(ids[start : start + BATCH_ROWS]))
        client._call("Write", req, WriteResponse, sidecars=[payload])
    load_s = time.perf_counter() - t0
    # A key that exists: refused (the existence check through the blocks).
    dup = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
    try:
        client._call("Write", dup, WriteResponse, sidecars=[ipc_bytes(rows([ids[0]]))])
        raise SystemExit("an insert of an existing key was accepted")
    except Exception as e:  # the AlreadyExists error class of the client
        if "already exists" not in str(e):
            raise
    time.sleep(1.5)  # the maintenance thread's flush of the last rows, if due
    lat = []
    for _ in range(reads):
        k = rng.choice(ids) if rng.random() < 0.9 else rng.randrange(n) * 2 + 1
        t1 = time.perf_counter()
        got = client.scan_table(tid, predicates=[("id", "==", k)])
        lat.append(time.perf_counter() - t1)
        if got.num_rows != (1 if k % 2 == 0 else 0):
            raise SystemExit(f"point read of {k} returned {got.num_rows} rows")
    return {
        "insert": n / load_s,
        "p50": pct(lat, 0.5) * 1000,
        "p99": pct(lat, 0.99) * 1000,
        **rss_bytes(pid),
    }


_WRITE_CODE = """
import sys, pyarrow as pa
sys.path.insert(0, {root!r})
from pathlib import Path
from rpc.protocols.tserver_pb2 import OpType, SchemaPB, ColumnSchemaPB, DataType
from tests.tservers.helpers import create, deadline, ipc, open_manager
schema = SchemaPB(columns=[
    ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
    ColumnSchemaPB(name="v", type=DataType.INT64, nullable=True),
    ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True)])
m = open_manager(Path({fs!r}), flush_rows=1 << 40)
t = create(m, "t1", schema)
n = {n}
for start in range(0, n, 100_000):
    ids = list(range(start, min(n, start + 100_000)))
    rows = pa.table({{"id": pa.array(ids, pa.int64()), "v": pa.array(ids, pa.int64()),
                      "s": [f"row-{{i:012d}}" for i in ids]}})
    t.write(1, [(OpType.INSERT, ipc(rows))], deadline(120))
    if (start // 100_000) % 3 == 2:
        t.flush()
t.flush()
m.close()
"""

_OPEN_CODE = """
import sys, time, pyarrow as pa
sys.path.insert(0, {root!r})
from pathlib import Path
from rpc.errors import AlreadyExists
from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import deadline, ipc, open_manager

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024

before = anon()
t0 = time.perf_counter()
m = open_manager(Path({fs!r}), flush_rows=1 << 40)
t = m.tablet("t1")
while t.status.value != "RUNNING":
    time.sleep(0.01)
opened = time.perf_counter() - t0
row = pa.table({{"id": pa.array([{n} // 2], pa.int64()), "v": pa.array([0], pa.int64()),
                 "s": ["x"]}})
try:  # an existence check: the old code builds its key set here at the latest
    t.write(1, [(OpType.INSERT, ipc(row))], deadline(120))
    raise SystemExit("an existing key was inserted")
except AlreadyExists:
    pass
print(anon() - before, opened)
m.close()
"""


def open_cost(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="storage-open-"))
    try:
        fs = str(tmp / "root")
        subprocess.run(
            [sys.executable, "-c", _WRITE_CODE.format(root=str(ROOT), fs=fs, n=n)],
            check=True,
            cwd=ROOT,
        )
        out = subprocess.run(
            [sys.executable, "-c", _OPEN_CODE.format(root=str(ROOT), fs=fs, n=n)],
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.split()
        grown, opened_s = int(out[-2]), float(out[-1])
        print(
            f"code at {ROOT}: a tablet of {n:,} flushed rows (int64 key) opened in "
            f"{opened_s:.2f} s; heap added by opening it and one existence check: "
            f"{grown / 2**20:.1f} MiB, {grown / n:.1f} bytes a row"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--flush-rows", type=int, default=50_000)
    ap.add_argument("--open-rows", type=int, default=0, help="measure an open tablet's heap")
    args = ap.parse_args()
    if args.open_rows:
        open_cost(args.open_rows)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="storage-bench-"))
    results = {}
    try:
        proc, address = start_server(tmp / "root", tmp / "server.out", args.flush_rows)
        try:
            client = TabletServerClient(address, timeout_s=120)
            rss0 = rss_bytes(proc.pid)["VmRSS"]
            for n in (BASE_ROWS, args.rows):
                results[n] = measure(client, proc.pid, f"bench{n}", n, args.reads)
            client.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"one tablet, 3 columns, durable WAL, flush every {args.flush_rows:,} rows, "
        f"{args.reads} point reads (10% misses) per size; idle server RSS {rss0 / 2**20:.0f} MiB"
    )
    print(
        f"{'rows':>10} {'p50 ms':>8} {'p99 ms':>8} {'insert rows/s':>14} {'RSS MiB':>8} "
        f"{'anon MiB':>9} {'file MiB':>9} {'peak MiB':>9}"
    )
    mib = 2**20
    for n, r in results.items():
        print(
            f"{n:>10,} {r['p50']:>8.2f} {r['p99']:>8.2f} {r['insert']:>14,.0f} "
            f"{r['VmRSS'] / mib:>8.0f} {r['RssAnon'] / mib:>9.0f} {r['RssFile'] / mib:>9.0f} "
            f"{r['VmHWM'] / mib:>9.0f}"
        )
    base, big = results[BASE_ROWS], results[args.rows]
    per_row = (big["VmRSS"] - base["VmRSS"]) / max(1, args.rows)
    anon_row = (big["RssAnon"] - base["RssAnon"]) / max(1, args.rows)
    print(
        f"p50 at {args.rows:,} / p50 at {BASE_ROWS:,}: {big['p50'] / base['p50']:.2f}   "
        f"RSS added per row of the second tablet: {per_row:.0f} bytes "
        f"({anon_row:.0f} of heap)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
