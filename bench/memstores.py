"""The heap of a tablet server's memstores against its number of tablets (issue 25: a
bounded memstore; `--memstore-bytes-max`, `--flush-idle-s`, design/storage.md "The
memstores of all tablets under one budget").

For each setting, side by side, a fresh tablet server (durable WAL, the storage bench's
4-column table, --flush-rows 50,000): create --tablets tablets and load each with --rows
rows of random keys (under the flush threshold: no row-count flush), through the tablet
server rpc in batches of 10,000; then print the server's heap (RssAnon) idle before, at its
peak (sampled every 0.2 s) and after, the data blocks on disk (each a flush) and the insert
rate. The settings:
- `no bound`: `--memstore-bytes-max 0 --flush-idle-s 0` (the code before this change);
- `budget`: `--memstore-bytes-max` --budget-mb MiB;
- `idle flush`: `--flush-idle-s` --idle-s, the heap read again after 2 x --idle-s idle.

    .venv/bin/python bench/memstores.py [--tablets 40] [--rows 40000] [--budget-mb 64]
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import storage as S  # noqa: E402  (the storage bench's server, table and rows)

from logcentric.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc.protocols.tserver_pb2 import OpType, WriteRequest, WriteResponse  # noqa: E402

FLUSH_ROWS = 50_000
MIB = 1 << 20


def run(name: str, flags: list[str], args: argparse.Namespace) -> dict:
    S.SERVER_ARGS[:] = flags
    tmp = Path(tempfile.mkdtemp(prefix="memstores-bench-"))
    root = tmp / "root"
    proc, address = S.start_server(root, tmp / "server.out", FLUSH_ROWS)
    try:
        client = TabletServerClient(address, timeout_s=300)
        idle = S.rss_bytes(proc.pid)["RssAnon"]
        rng = random.Random(7)
        t0 = time.perf_counter()
        with S.PeakSampler(proc.pid) as peak:
            for i in range(args.tablets):
                tid = f"m{i}"
                client.create_tablet(tid, S.COLS)
                version = client.schema(tid).version
                ids = rng.sample(range(10 * args.rows), args.rows)
                for b, start in enumerate(range(0, args.rows, S.BATCH_ROWS)):
                    req = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
                    payload = ipc_bytes(S.rows(ids[start : start + S.BATCH_ROWS], b))
                    client._call("Write", req, WriteResponse, sidecars=[payload])
            load_s = time.perf_counter() - t0
            time.sleep(1.0)  # the maintenance round after the last write
        r = {
            "name": name,
            "flags": " ".join(flags),
            "idle": idle,
            "after": S.rss_bytes(proc.pid)["RssAnon"],
            "peak": peak.anon,
            "insert": args.tablets * args.rows / load_s,
        }
        if "--flush-idle-s" in flags and "0" != flags[flags.index("--flush-idle-s") + 1]:
            time.sleep(2 * args.idle_s)
            r["after_idle"] = S.rss_bytes(proc.pid)["RssAnon"]
        blocks = list(root.rglob("block-*.arrow"))
        r["blocks"] = len(blocks)
        client.close()
        return r
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tablets", type=int, default=40)
    ap.add_argument("--rows", type=int, default=40_000, help="a tablet (under 50,000)")
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--idle-s", type=float, default=5.0)
    args = ap.parse_args()
    if not 0 < args.rows < FLUSH_ROWS:
        ap.error(f"--rows must be 1 to {FLUSH_ROWS - 1} (under the flush threshold)")
    settings = [
        ("no bound", ["--memstore-bytes-max", "0", "--flush-idle-s", "0"]),
        ("budget", ["--memstore-bytes-max", f"{args.budget_mb}M", "--flush-idle-s", "0"]),
        ("idle flush", ["--memstore-bytes-max", "0", "--flush-idle-s", f"{args.idle_s:g}"]),
    ]
    results = []
    for name, flags in settings:
        results.append(run(name, flags, args))
        print(f"done {name}", file=sys.stderr, flush=True)
    print(
        f"{args.tablets} tablets x {args.rows:,} rows of random keys (flush threshold "
        f"{FLUSH_ROWS:,} rows), one tablet server each setting; heap = RssAnon MiB"
    )
    print(
        f"{'setting':<11} {'flags':<46} {'heap idle':>9} {'peak':>6} {'after':>6} "
        f"{'after idle':>10} {'blocks':>6} {'insert/s':>9}"
    )
    base = results[0]
    for r in results:
        after_idle = f"{r['after_idle'] / MIB:.0f}" if "after_idle" in r else "-"
        print(
            f"{r['name']:<11} {r['flags']:<46} {r['idle'] / MIB:>9.0f} {r['peak'] / MIB:>6.0f} "
            f"{r['after'] / MIB:>6.0f} {after_idle:>10} {r['blocks']:>6} {r['insert']:>9,.0f}"
        )
    for r in results[1:]:
        grown, base_grown = r["peak"] - r["idle"], base["peak"] - base["idle"]
        print(
            f"{r['name']}: peak heap growth {grown / MIB:.0f} MiB against {base_grown / MIB:.0f} "
            f"with no bound ({grown / max(1, base_grown):.2f}x); insert rate "
            f"{r['insert'] / base['insert']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
