"""Tablet server write and scan throughput against a plain-file baseline, in one run.

One tablet server process on loopback with a durable WAL (one fdatasync per group). Batches
of 1,000 rows of a 6-column schema are written by 1 and by 8 concurrent writers; then a full
scan. Beside them, the same batches are appended to a plain file by the same number of
threads with the same policy (durable before acknowledged: fdatasync after each append, no
group commit), and the same rows are read back from Parquet with pyarrow.

    .venv/bin/python bench/tserver.py [--batches 100] [--writers 8]
        [--metrics both | --curve [--rounds 3]]

The server is plaintext unless `--curve` (this bench measures storage and the rpc path; the
baseline is insecure, said in the output). `--metrics on|off|both`: the server keeps its rpc
metrics and serves /metrics (on, the default; scraped once a second during the run) or keeps
none (off); `both` runs the write and scan measurements against one server each way, in the
same run, and prints the ratio on/off (target >= 0.95).

`--curve`: the same measurements against a plaintext server and a CURVE one (design/security.md
§7), in the same run, and the ratio CURVE / plaintext (target >= 0.8): --rounds rounds (3) of
a fresh server each way, in alternating order, each figure the median (the range beside it;
the full scan, once the server is idle after the writes, is the median of three scans in
each round). The CURVE server is the
tablet server of `tserver start` (CURVE, its key pair in keys/ of the fs root, callers admitted
by its principals table and every call checked against the role table); writes, scans and
point reads go through TabletServerClient with a key pair and the server's public key, as a
real client's, as a user with the writer role: the bench hands the server a principals table
holding that user, as a coordinator leader's heartbeat answer does (a standalone server has no
coordinator). Creating tablets, as the coordinator would, uses the server's own key pair
(server role). Besides writes and the full scan, point reads (`id == k`) from --writers
threads, each with its own connection.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scraper import Scraper  # noqa: E402  (bench/, first on sys.path when run)

from logcentric.tablets import TabletServerClient, column, ipc_bytes  # noqa: E402
from rpc import keys  # noqa: E402
from rpc.protocols.tserver_pb2 import OpType, WriteRequest, WriteResponse  # noqa: E402
from tservers.fs import KEY_NAME, FsLayout  # noqa: E402

BATCH_ROWS = 1000
COLS = [
    column("id", "int64", key=True),
    column("n", "int32", nullable=True),
    column("x", "double", nullable=True),
    column("s", "string", nullable=True),
    column("b", "bool", nullable=True),
    column("ts", "timestamp", nullable=True),
]


def batch(start: int) -> pa.Table:
    ids = range(start, start + BATCH_ROWS)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array([i % 9999 for i in ids], pa.int32()),
            "x": pa.array([i * 0.25 for i in ids]),
            "s": [f"row-{i:012d}" for i in ids],
            "b": [i % 3 == 0 for i in ids],
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us")),
        }
    )


# The server as `tserver start` runs it, but with the rpc metrics on or off (no flag for
# that: it is for this comparison only), plaintext or CURVE (standalone: no coordinators; the
# principals table with the bench's user, argv[4], is handed to the server as a leader's
# heartbeat answer would, and no leader's silence ends it). Prints "serving on ADDRESS HTTP_URL".
SERVER = """
import signal, sys, threading
from pathlib import Path
from rpc.protocols.coordinator_pb2 import PrincipalEntry, PrincipalsTable
from tservers.server import TabletServer, TServerConfig
root, metrics, curve = sys.argv[1], sys.argv[2] == "on", sys.argv[3] == "curve"
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
http = "127.0.0.1:0" if metrics else ""
config = TServerConfig(
    fs_root=Path(root), metrics=metrics, http_bind=http, curve=curve, leader_silence_s=1e9
)
with TabletServer(config) as server:
    if curve:
        user = PrincipalEntry(
            name="bench", kind="user", public_key=sys.argv[4], roles=["writer"], state="active"
        )
        server.principals.heard_leader(PrincipalsTable(version=1, entries=[user]))
    print("serving on", server.address, server.observer.url or "-", flush=True)
    stop.wait()
"""


def start_server(
    root: Path, port_file: Path, metrics: str, user_key: str = ""
) -> tuple[subprocess.Popen, str, str]:
    """A tablet server on `root`, CURVE admitting `user_key` as a writer if one is given."""
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    out = open(port_file, "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(root), metrics, "curve" if user_key else "plain"]
        + ([user_key] if user_key else []),
        stdout=out,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while "serving on" not in port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tablet server did not start")
        time.sleep(0.05)
    words = port_file.read_text().split()
    return proc, words[-2], "" if words[-1] == "-" else words[-1]


def run_writers(n_writers: int, batches_per_writer: int, fn) -> float:
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            for j in range(batches_per_writer):
                fn(k, j)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(target=body, args=(k,), name=f"writer-{k}") for k in range(n_writers)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def server_keys(root: Path) -> dict:
    """TabletServerClient's CURVE arguments as the server on `root` itself (server role):
    its own key pair (made at its first start) and its public key."""
    pair = keys.load_keypair(root / "keys", KEY_NAME)
    assert pair.public == FsLayout.open(root).public_key()
    return {"keypair": pair, "server_key": pair.public}


def server_cpu_s(pid: int) -> float:
    """CPU seconds used so far by process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_s(pid: int) -> float:
    """CPU seconds used so far by process `pid` and by this one (the server's and the client's
    work: a cost that a loaded machine stretches less than wall-clock time)."""
    return server_cpu_s(pid) + time.process_time()


def quiesce(pid: int, limit_s: float = 60.0) -> None:
    """Wait (bounded) until the server is idle, under 5% of a core over 1 s: the flush of the
    written rows and background compactions done, so that they are not counted as reads."""
    deadline = time.monotonic() + limit_s
    time.sleep(1.0)  # the maintenance thread's flush, if due
    while time.monotonic() < deadline:
        c0 = server_cpu_s(pid)
        time.sleep(1.0)
        if server_cpu_s(pid) - c0 < 0.05:
            return


def point_reads(address: str, uuid: str, kw: dict, tid: str, n_rows: int, args) -> float:
    """Point reads (`id == k`, every key present) per second from --writers threads, each
    with its own client (connection), --reads in all."""
    per_thread = max(1, args.reads // args.writers)
    clients = [TabletServerClient(address, uuid, timeout_s=60, **kw) for _ in range(args.writers)]
    try:

        def read(k, j):
            key = ((k * per_thread + j) * 7919) % n_rows
            got = clients[k].scan_table(tid, predicates=[("id", "==", key)])
            assert got.num_rows == 1, (key, got.num_rows)

        elapsed = run_writers(args.writers, per_thread, read)
    finally:
        for c in clients:
            c.close()
    return args.writers * per_thread / elapsed


def measure_server(
    root: Path, args, payloads: list[bytes], metrics: str, curve: bool = False
) -> dict[str, float]:
    """Writes by 1 and by N writers, then a full scan (and point reads), against one server."""
    results: dict[str, float] = {}
    label = f"{'curve' if curve else 'plain'}-{metrics}"
    user = keys.KeyPair.generate() if curve else None
    proc, address, http = start_server(
        root, root.parent / f"server-{label}.out", metrics, user.public if user else ""
    )
    try:
        # The coordinator's part (create tablets) as the server's own key; the user's, with
        # the writer role, for writes, scans and point reads.
        admin = TabletServerClient(address, timeout_s=60, **(server_keys(root) if curve else {}))
        kw = {"keypair": user, "server_key": admin.server_key} if curve else {}
        client = TabletServerClient(address, admin.server_uuid, timeout_s=60, **kw)
        tables = {}
        with Scraper(http) as scraper:
            for nw in (1, args.writers):
                tid = f"bench{nw}"
                admin.create_tablet(tid, COLS)
                version = client.schema(tid).version
                base = 0 if nw == 1 else args.batches
                clients = [
                    TabletServerClient(address, client.server_uuid, timeout_s=60, **kw)
                    for _ in range(nw)
                ]

                def write(k, j, tid=tid, version=version, clients=clients, base=base, nw=nw):
                    req = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
                    clients[k]._call(
                        "Write", req, WriteResponse, sidecars=[payloads[base + j * nw + k]]
                    )

                s0 = client.status()
                c0 = cpu_s(proc.pid)
                elapsed = run_writers(nw, args.batches, write)
                c1 = cpu_s(proc.pid)
                s1 = client.status()
                rows = nw * args.batches * BATCH_ROWS
                results[f"cpu_write_{nw}"] = (c1 - c0) / rows * 1e6
                acked = s1.writes - s0.writes
                results[f"write_{nw}"] = rows / elapsed
                results[f"syncs_per_batch_{nw}"] = (s1.wal_syncs - s0.wal_syncs) / max(1, acked)
                for c in clients:
                    c.close()
                tables[nw] = tid
            # Full scan of the N-writer tablet.
            tid = tables[args.writers]
            quiesce(proc.pid)
            scans = []
            c0 = cpu_s(proc.pid)
            for _ in range(3):  # the median of three
                t0 = time.perf_counter()
                n = sum(b.num_rows for b in client.scan(tid, batch_rows_max=65536))
                scans.append(n / (time.perf_counter() - t0))
                assert n == args.writers * args.batches * BATCH_ROWS, n
            results["scan"] = statistics.median(scans)
            results["cpu_scan"] = (cpu_s(proc.pid) - c0) / (3 * n) * 1e6
            if args.reads:
                # The 1-writer tablet holds ids 0 .. batches*BATCH_ROWS-1.
                n_rows = args.batches * BATCH_ROWS
                c0 = cpu_s(proc.pid)
                results["point_reads"] = point_reads(
                    address, client.server_uuid, kw, tables[1], n_rows, args
                )
                reads = args.writers * max(1, args.reads // args.writers)
                results["cpu_point_reads"] = (cpu_s(proc.pid) - c0) / reads * 1e6
        if http:
            print(f"({label}: /metrics scraped {scraper.scrapes} times)")
        client.close()
        admin.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40, help="batches per writer")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument(
        "--metrics",
        choices=("on", "off", "both"),
        default="on",
        help="the server's rpc metrics and /metrics; both: side by side, ratio on/off",
    )
    ap.add_argument(
        "--curve",
        action="store_true",
        help="a CURVE server beside a plaintext one in the same run, ratio curve/plain",
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="--curve: rounds of a fresh server each way"
    )
    ap.add_argument(
        "--reads",
        type=int,
        default=2000,
        help="point reads in all (0: none), from --writers threads",
    )
    args = ap.parse_args()
    if args.curve and args.metrics == "both":
        ap.error("--curve compares with the metrics as --metrics says (on or off), not both")
    modes = ("on", "off") if args.metrics == "both" else (args.metrics,)
    tmp = Path(tempfile.mkdtemp(prefix="tserver-bench-"))
    results: dict = {}
    try:  # the work directory goes, whatever happens (hundreds of MB a run)
        total_batches = args.batches * (1 + args.writers)
        # Batches are encoded up front, for the server and the baseline alike.
        payloads = [ipc_bytes(batch(i * BATCH_ROWS)) for i in range(total_batches)]
        if args.curve:
            # Rounds of a fresh plaintext and a fresh CURVE server each, in alternating order
            # (the machine is shared: each figure is the median of the rounds).
            rounds: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for r in range(args.rounds):
                for curve in (False, True) if r % 2 == 0 else (True, False):
                    root = tmp / f"root-{'curve' if curve else 'plain'}-{r}"
                    rounds[curve].append(measure_server(root, args, payloads, modes[0], curve))
                    shutil.rmtree(root, ignore_errors=True)
            for curve, label in ((False, modes[0]), (True, "curve")):
                results[label] = {
                    k: statistics.median(x[k] for x in rounds[curve]) for k in rounds[curve][0]
                }
                results[f"{label}_range"] = {
                    k: (min(x[k] for x in rounds[curve]), max(x[k] for x in rounds[curve]))
                    for k in rounds[curve][0]
                }
        else:
            for mode in modes:
                results[mode] = measure_server(tmp / f"root-{mode}", args, payloads, mode)
        results.update(results[modes[0]])
        # Baseline: append the same IPC batches to a plain file, fdatasync before "acknowledging".
        for nw in (1, args.writers):
            path = tmp / f"plain-{nw}.bin"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            lock = threading.Lock()
            base = 0 if nw == 1 else args.batches

            def plain(k, j, fd=fd, lock=lock, base=base, nw=nw):
                with lock:
                    os.write(fd, payloads[base + j * nw + k])
                os.fdatasync(fd)

            elapsed = run_writers(nw, args.batches, plain)
            os.close(fd)
            results[f"plain_write_{nw}"] = nw * args.batches * BATCH_ROWS / elapsed
        # Baseline read: the same rows from Parquet with pyarrow.
        rows_8 = pa.concat_tables(
            [
                pa.ipc.open_stream(pa.py_buffer(payloads[args.batches + i])).read_all()
                for i in range(args.writers * args.batches)
            ]
        )
        pq.write_table(rows_8, tmp / "rows.parquet")
        t0 = time.perf_counter()
        n = pq.read_table(tmp / "rows.parquet").num_rows
        results["parquet_read"] = n / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    w = args.writers
    print(
        f"tablet server (durable WAL, plaintext: --insecure), batches of {BATCH_ROWS} rows, "
        f"6 columns ({len(payloads[0]):,} B a batch in Arrow IPC), "
        f"{args.batches} batches per writer"
    )
    print(
        f"  write, 1 writer:   {results['write_1']:>12,.0f} rows/s   "
        f"fsyncs/acked batch {results['syncs_per_batch_1']:.2f}"
    )
    print(
        f"  write, {w} writers:  {results[f'write_{w}']:>12,.0f} rows/s   "
        f"fsyncs/acked batch {results[f'syncs_per_batch_{w}']:.2f}"
    )
    print(f"  full scan:         {results['scan']:>12,.0f} rows/s")
    if args.reads:
        print(f"  point reads, {w} threads: {results['point_reads']:>7,.0f} reads/s")
    print("baseline (plain file, fdatasync per append; Parquet read with pyarrow)")
    print(f"  write, 1 writer:   {results['plain_write_1']:>12,.0f} rows/s")
    print(f"  write, {w} writers:  {results[f'plain_write_{w}']:>12,.0f} rows/s")
    print(f"  parquet read:      {results['parquet_read']:>12,.0f} rows/s")
    print("ratios (tablet server / baseline)")
    print(
        f"  write 1 writer {results['write_1'] / results['plain_write_1']:.2f}   "
        f"write {w} writers {results[f'write_{w}'] / results[f'plain_write_{w}']:.2f}   "
        f"scan {results['scan'] / results['parquet_read']:.3f}"
    )
    if args.metrics == "both":
        on, off = results["on"], results["off"]
        print("metrics on / off (target >= 0.95):")
        for key in ("write_1", f"write_{w}", "scan"):
            print(
                f"  {key:<10} {on[key]:>12,.0f} {off[key]:>12,.0f} rows/s  {on[key] / off[key]:.3f}"
            )
    if args.curve:
        plain, curve = results[modes[0]], results["curve"]
        p_rng, c_rng = results[f"{modes[0]}_range"], results["curve_range"]
        print(
            f"CURVE / plaintext (metrics {modes[0]}; target >= 0.8), median of {args.rounds} "
            f"rounds (range), load average {os.getloadavg()[0]:.1f}:"
        )
        keys_ = ["write_1", f"write_{w}", "scan"] + (["point_reads"] if args.reads else [])
        for key in keys_:
            unit = "reads/s" if key == "point_reads" else "rows/s"
            ratio = curve[key] / plain[key]
            spread = [f"({lo:,.0f}-{hi:,.0f})" for lo, hi in (p_rng[key], c_rng[key])]
            print(
                f"  {key:<12} plain {plain[key]:>10,.0f} {spread[0]:<21} curve "
                f"{curve[key]:>10,.0f} {spread[1]:<21} {unit:<7} {ratio:.2f} "
                f"{'met' if ratio >= 0.8 else 'NOT met'}"
            )
        print("CPU (server + client processes) per row / per point read, median of the rounds:")
        for key in keys_:
            cpu = f"cpu_{key}"
            print(
                f"  {key:<12} plain {plain[cpu]:>8.2f} us  curve {curve[cpu]:>8.2f} us  "
                f"plain/curve {plain[cpu] / curve[cpu]:.2f}"
            )
    target = 100_000
    print(
        f"target >= {target:,} rows/s with {w} writers: "
        f"{'met' if results[f'write_{w}'] >= target else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
