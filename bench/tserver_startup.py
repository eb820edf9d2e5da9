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

`--single` is the many-replicas mode (issue 28: 10,000 replicas on one server): one
coordinator, one tablet server, replication 1, so that thousands of replicas fit this VM.
`--rows` sets the rows written per table (0: empty tables; creating is then faster) and
`--no-scan` skips scanning every table after the restart (slow at thousands of tables).

    .venv/bin/python bench/tserver_startup.py [--tablets 150] [--baseline 10] [--kill one|all]
        [--single] [--rows 5] [--no-scan] [--profile DIR]

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
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # load average at the restart
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
        ok = serving(victims, tablet_ids)
        if ok is not None and len(ok) == len(tablet_ids):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"cluster did not settle: {len(ok or ())}/{len(tablet_ids)}")
        time.sleep(0.5)


@dataclass(frozen=True)
class Mode:
    tservers: int = 3
    replication: int = 3
    rows: int = ROWS_PER_TABLE
    scan: bool = True


def build(root: Path, n: int, mode: Mode) -> tuple[LocalCluster, list[str], set[str]]:
    cluster = LocalCluster.create(root, 1, mode.tservers, lease_timeout_s=1.5, secure=False)
    cluster.up(timeout_s=180)
    names = [f"t{i:05d}" for i in range(n)]
    coords = ",".join(cluster.spec.coordinator_addresses)
    with logcentric.connect(coords, timeout_s=120) as client:

        def create(name: str) -> None:
            client.create_table(name, COLUMNS, num_tablets=1, replication_factor=mode.replication)
            if mode.rows:
                table = client.table(name)
                with client.new_session() as s:
                    s.upsert(table, [{"id": i, "v": f"{name}-{i}"} for i in range(mode.rows)])

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
    cluster: LocalCluster,
    names: list[str],
    tablet_ids: set[str],
    kill: str,
    profile: Path | None,
    mode: Mode,
) -> Figures:
    fig = Figures(len(tablet_ids))
    nodes = cluster.spec.tservers if kill == "all" else cluster.spec.tservers[:1]
    for node in nodes:
        cluster.kill(node)
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    fig.load = os.getloadavg()
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
            ok = serving(victims, tablet_ids)
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
    for node in nodes:
        fig.notes += startup_lines(cluster, node)
    if not mode.scan:
        return fig
    coords = ",".join(cluster.spec.coordinator_addresses)
    with logcentric.connect(coords, timeout_s=120) as client:
        for name in names:
            rows = client.table(name).count()
            if rows != mode.rows:
                fig.notes.append(f"table {name}: {rows} rows, expected {mode.rows}")
    fig.scans_s = time.monotonic() - t0
    return fig


def startup_lines(cluster: LocalCluster, node, timeout_s: float = 30.0) -> list[str]:
    """The restarted server's own account of its start-up (the manager's "start-up:" line,
    where the thread time went), waited for a while: it is logged once all are open."""
    path = cluster.log_dir / f"{node.name}.log"
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if "start-up:" in ln]
        if len(lines) >= 2 or time.monotonic() > deadline:  # the first is the initial start
            return [f"{node.name}: {lines[-1].split('start-up:', 1)[1].strip()}"] if lines else []
        time.sleep(0.2)


def print_profile(path: Path, top: int) -> None:
    if not path.exists():
        return
    print(f"\n  profile {path.name} (cumulative, top {top}):")
    stats = pstats.Stats(str(path))
    stats.sort_stats("cumulative").print_stats(top)


def run_one(workdir: Path, n: int, kill: str, profile: Path | None, mode: Mode) -> Figures:
    print(
        f"N={n}: building the cluster ({mode.tservers} tablet server(s), replication "
        f"{mode.replication}, plaintext: --insecure)",
        flush=True,
    )
    cluster, names, tablet_ids = build(workdir / f"n{n}", n, mode)
    try:
        fig = restart(cluster, names, tablet_ids, kill, profile, mode)
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
    ap.add_argument(
        "--single",
        action="store_true",
        help="one tablet server, replication 1 (many replicas on one server)",
    )
    ap.add_argument("--rows", type=int, default=ROWS_PER_TABLE, help="rows written per table")
    ap.add_argument("--no-scan", action="store_true", help="skip scanning every table")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    mode = Mode(
        tservers=1 if args.single else 3,
        replication=1 if args.single else 3,
        rows=args.rows,
        scan=not args.no_scan,
    )
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    workdir = Path(tempfile.mkdtemp(prefix="tserver-startup-bench-"))
    try:
        base = run_one(workdir, args.baseline, args.kill, args.profile, mode)
        big = run_one(workdir, args.tablets, args.kill, args.profile, mode)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"restart after kill -9 of {args.kill} of {mode.tservers} tablet server(s), "
        f"replication {mode.replication}; seconds from the restart"
    )
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
    if big.tablets > base.tablets:
        per = (big.all_s - base.all_s) / (big.tablets - base.tablets) * 1000
        print(f"  {'all serve, per extra tablet':<28}{per:>17.2f} ms")
    for fig in (base, big):
        load = " ".join(f"{x:.2f}" for x in fig.load)
        print(f"  N={fig.tablets}: load average at the restart {load}")
        for note in fig.notes:
            print(f"  N={fig.tablets}: {note}")
    if args.profile is not None:
        for p in sorted(args.profile.glob(f"*-{args.tablets}.prof")):
            print_profile(p, args.profile_top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
