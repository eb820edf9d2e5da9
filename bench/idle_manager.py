"""Idle CPU of a tablet server's housekeeping at N replicas (issue 28), in one process.

A TabletManager (the tablet server's replica host, with its maintenance and compaction
threads and the Raft driver) gets N single-voter tablets, empty; once every one leads and
`--settle-s` has passed, the bench reads the process's CPU time (user + system) over
`--window-s` with no traffic and prints it as % of one core, for a baseline of `--baseline`
tablets and for N, and the same again for the code of `--against DIR` (another checkout,
e.g. a `git worktree` of an older commit) in the same run, so the two are side by side.
CPU time, not wall time: another process's load moves it little. Under each run, its
busiest threads' CPU over the same window (each thread's own CPU clock), by name.

    .venv/bin/python bench/idle_manager.py --tablets 1000 [--against /tmp/old] [--window-s 20]

No rpc, no peers and no coordinator heartbeat: what is left is the per-tablet work of the
server's own loops (flush checks, compaction rounds, the driver's timers, disk accounting).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 900.0


def child(tablets: int, settle_s: float, window_s: float) -> dict:
    sys.path.insert(0, os.getcwd())
    from rpc.protocols.tserver_pb2 import (
        ColumnSchemaPB,
        CreateTabletRequest,
        DataType,
        SchemaPB,
    )
    from tservers.fs import FsLayout
    from tservers.tablet.manager import TabletManager
    from tservers.tablet.tablet import TabletOptions
    from tservers.wal.log import WalOptions

    schema = SchemaPB(
        columns=[
            ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
            ColumnSchemaPB(name="v", type=DataType.STRING, nullable=True),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="idle-manager-") as tmp:
        m = TabletManager(
            FsLayout.format(Path(tmp) / "root"),
            WalOptions(),
            TabletOptions(),
            maintenance=True,
        )
        m.open()
        try:
            t0 = time.monotonic()
            for i in range(tablets):
                m.create_tablet(
                    CreateTabletRequest(tablet_id=f"t{i:05d}", table_name=f"t{i}", schema=schema)
                )
            created_s = time.monotonic() - t0
            time.sleep(settle_s)
            c0, w0, t0s = os.times(), time.monotonic(), thread_cpu()
            time.sleep(window_s)
            c1, w1, t1s = os.times(), time.monotonic(), thread_cpu()
        finally:
            m.close()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    threads: dict[str, float] = {}
    for key, s1 in t1s.items():
        name = key[1]
        threads[name] = threads.get(name, 0.0) + 100.0 * (s1 - t0s.get(key, 0.0)) / (w1 - w0)
    return {
        "tablets": tablets,
        "cpu_pct": 100.0 * cpu / (w1 - w0),
        "created_s": created_s,
        "threads": threads,
    }


def thread_cpu() -> dict[tuple[int, str], float]:
    """CPU seconds of each live thread (its own clock), by (ident, name)."""
    import threading

    out = {}
    for th in threading.enumerate():
        try:
            out[(th.ident, th.name)] = time.clock_gettime(time.pthread_getcpuclockid(th.ident))
        except (OSError, TypeError):
            pass  # ended meanwhile
    return out


def run_child(tree: Path, tablets: int, settle_s: float, window_s: float) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(tablets),
            "--settle-s",
            str(settle_s),
            "--window-s",
            str(window_s),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_S + window_s * 4,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if out.returncode != 0:
        raise SystemExit(f"idle_manager: the run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tablets", type=int, default=1000, help="replicas of the big run")
    ap.add_argument("--baseline", type=int, default=10, help="replicas of the baseline run")
    ap.add_argument("--against", type=Path, help="another checkout, run the same way")
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--window-s", type=float, default=20.0)
    ap.add_argument(
        "--threads", type=int, default=6, help="the busiest threads' CPU printed per run"
    )
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.settle_s, args.window_s)))
        return 0
    trees = [("this", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'code':8} {'tablets':>8} {'idle CPU % of a core':>22} {'created in s':>13}")
    for n in (args.baseline, args.tablets):
        for name, tree in trees:
            r = run_child(tree, n, args.settle_s, args.window_s)
            print(f"{name:8} {n:8d} {r['cpu_pct']:22.2f} {r['created_s']:13.1f}", flush=True)
            top = sorted(r.get("threads", {}).items(), key=lambda kv: -kv[1])[: args.threads]
            if top:
                print("         threads: " + ", ".join(f"{k} {v:.3f}%" for k, v in top), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
