"""Tablet server restart after kill -9: how soon it answers and serves, against a baseline.

A local cluster (one coordinator, three tablet servers) gets N one-tablet tables of
replication 3, created through the client package (`logcentric`), each with a few rows.
Then one tablet server (`--kill one`) or all three (`--kill all`) are killed with -9 and
restarted on the same fs roots, and the bench prints, from the restart:
- the rpc port answering a ping;
- the first, half and all of the tablets serving: RUNNING on every restarted server
  (`TServer.ListTablets`) with a leader reported by some server;
- every table scanned through the client once (`logcentric`, retrying as a user would).
The same run measures a baseline of `--baseline` tables (10) first, and prints each figure
with its ratio to the baseline's: process start-up (interpreter, imports) costs both the same.

    .venv/bin/python bench/tserver_startup.py [--tablets 150] [--baseline 10] [--kill one|all]
        [--profile DIR]

`--profile DIR` sets TSERVER_STARTUP_PROFILE for the restarted servers: each writes a
cProfile of its start-up to DIR/<server>-<N>.prof, and the bench prints the top entries.
The machine this runs on is small: N=150 x 3 servers is already heavy; 450 may not fit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster_probe import list_tablets, serving  # noqa: E402,F401  (bench/, first on sys.path)

import logcentric  # noqa: E402
from logcentric import Column  # noqa: E402
from optools.localcluster import LocalCluster  # noqa: E402
from rpc import errors  # noqa: E402
from rpc.client import RpcClient  # noqa: E402

COLUMNS = [Column("id", "int64", key=True), Column("v", "string", nullable=True)]
ROWS_PER_TABLE = 5
CREATE_THREADS = 4
POLL_S = 0.1
RESTART_TIMEOUT_S = 600.0
SETTLE_TIMEOUT_S = 600.0


@dataclass
class Figures:
    tablets: int
    port_s: float = float("nan")
    first_s: float = float("nan")
    half_s: float = float("nan")
    all_s: float = float("nan")
    scans_s: float = float("nan")
    notes: list[str] = field(default_factory=list)


def pings(address: str, timeout_s: float = 0.5) -> bool:
    try:
        with RpcClient(address, "bench-startup") as rc:
            rc.ping(timeout_s=timeout_s)
        return True
    except errors.RpcError:
        return False


def wait_settled(cluster: LocalCluster, tablet_ids: set[str]) -> None:
    victims = [n.rpc for n in cluster.spec.tservers]
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        ok = serving(cluster, victims, tablet_ids)
        if ok is not None and len(ok) == len(tablet_ids):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"cluster did not settle: {len(ok or ())}/{len(tablet_ids)}")
        time.sleep(0.5)


def build(root: Path, n: int) -> tuple[LocalCluster, list[str], set[str]]:
    cluster = LocalCluster.create(root, 1, 3, lease_timeout_s=1.5, secure=False)
    cluster.up(timeout_s=180)
    names = [f"t{i:05d}" for i in range(n)]
    coords = ",".join(cluster.spec.coordinator_addresses)
    with logcentric.connect(coords, timeout_s=120) as client:

        def create(name: str) -> None:
            client.create_table(name, COLUMNS, num_tablets=1, replication_factor=3)
            table = client.table(name)
            with client.new_session() as s:
                s.upsert(table, [{"id": i, "v": f"{name}-{i}"} for i in range(ROWS_PER_TABLE)])

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
            for f in [pool.submit(create, nm) for nm in names]:
                f.result()
        tablet_ids = set()
        for name in names:
            tablet_ids |= {t.tablet_id for t in client.table(name).tablets()}
        print(f"  {n} tables created and written in {time.monotonic() - t0:.1f} s", flush=True)
    wait_settled(cluster, tablet_ids)
    return cluster, names, tablet_ids


def restart(
    cluster: LocalCluster, names: list[str], tablet_ids: set[str], kill: str, profile: Path | None
) -> Figures:
    fig = Figures(len(tablet_ids))
    nodes = cluster.spec.tservers if kill == "all" else cluster.spec.tservers[:1]
    for node in nodes:
        cluster.kill(node)
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for node in nodes:
        i = cluster.spec.tservers.index(node)
        if profile is not None:
            os.environ["TSERVER_STARTUP_PROFILE"] = str(profile / f"{node.name}-{len(names)}.prof")
        cluster.start_tserver(i)
    os.environ.pop("TSERVER_STARTUP_PROFILE", None)
    victims = [n.rpc for n in nodes]
    up: set[str] = set()
    half = (len(tablet_ids) + 1) // 2
    deadline = t0 + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        for v in victims:
            if v not in up and pings(v):
                up.add(v)
        if len(up) == len(victims) and fig.port_s != fig.port_s:
            fig.port_s = time.monotonic() - t0
        if len(up) == len(victims):
            ok = serving(cluster, victims, tablet_ids)
            now = time.monotonic() - t0
            if ok is not None:
                if ok and fig.first_s != fig.first_s:
                    fig.first_s = now
                if len(ok) >= half and fig.half_s != fig.half_s:
                    fig.half_s = now
                if len(ok) == len(tablet_ids):
                    fig.all_s = now
                    break
        time.sleep(POLL_S)
    else:
        fig.notes.append("timed out waiting for every tablet")
    coords = ",".join(cluster.spec.coordinator_addresses)
    with logcentric.connect(coords, timeout_s=120) as client:
        for name in names:
            rows = client.table(name).count()
            if rows != ROWS_PER_TABLE:
                fig.notes.append(f"table {name}: {rows} rows, expected {ROWS_PER_TABLE}")
    fig.scans_s = time.monotonic() - t0
    return fig


def print_profile(path: Path, top: int) -> None:
    if not path.exists():
        return
    print(f"\n  profile {path.name} (cumulative, top {top}):")
    stats = pstats.Stats(str(path))
    stats.sort_stats("cumulative").print_stats(top)


def run_one(workdir: Path, n: int, kill: str, profile: Path | None) -> Figures:
    print(f"N={n}: building the cluster (plaintext: --insecure)", flush=True)
    cluster, names, tablet_ids = build(workdir / f"n{n}", n)
    try:
        fig = restart(cluster, names, tablet_ids, kill, profile)
    finally:
        cluster.down()
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tablets", type=int, default=150, help="tables (one tablet each)")
    ap.add_argument("--baseline", type=int, default=10, help="tables of the baseline")
    ap.add_argument("--kill", choices=("one", "all"), default="one")
    ap.add_argument("--profile", type=Path, help="directory for start-up profiles")
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tserver-startup-bench-"))
    try:
        base = run_one(workdir, args.baseline, args.kill, args.profile)
        big = run_one(workdir, args.tablets, args.kill, args.profile)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    print(f"\nrestart after kill -9 of {args.kill} tablet server(s); seconds from the restart")
    print(f"  {'':<28}{base.tablets:>10}{big.tablets:>10}     ratio")
    for label, attr in (
        ("rpc port answers", "port_s"),
        ("first tablet serves", "first_s"),
        ("half the tablets serve", "half_s"),
        ("all tablets serve", "all_s"),
        ("every table scanned", "scans_s"),
    ):
        b, g = getattr(base, attr), getattr(big, attr)
        print(f"  {label:<28}{b:>10.2f}{g:>10.2f}{g / b if b else float('nan'):>10.2f}")
    for fig in (base, big):
        for note in fig.notes:
            print(f"  N={fig.tablets}: {note}")
    if args.profile is not None:
        for p in sorted(args.profile.glob(f"*-{args.tablets}.prof")):
            print_profile(p, args.profile_top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
