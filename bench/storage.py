"""Tablet storage at size against Parquet (issue 25): point reads, scans, inserts with
existence checks, the tablet server's RSS and restart time.

For a baseline size (10k rows) and each --rows N, in the same run and each in a fresh
tablet server process (durable WAL, flushes every --flush-rows rows, background
compaction), one tablet, replication 1, written through the tablet server rpc: load the rows
in batches of 10,000 INSERTs of keys in a random order over the whole key space (so every
batch is checked against every block: range, bloom filter, binary search where they say
maybe), then
- point reads (`id == k`, 10% misses), p50 and p99;
- a full scan through the client (rows/s), a 1% key range (`id >= a AND id < b`) and a
  selective predicate on a column that follows the load order (`t >= last batch`, the
  newest 10,000 rows), each timed against the full scan;
- the server's peak RSS (VmHWM, reset before each phase) while loading and while scanning;
- the restart time: SIGTERM, start on the same root, until a point read answers.
The full scan (and the Parquet read beside it) in two states of the tablet: "after the
load", its runs as the ingest left them (the scans start once the server's CPU is idle), and
"settled", after waiting (at most --settle-max s) until its block files have not changed for
--settle-quiet s (longer than the compaction scheduler's overlap term waits without a write,
`overlap_idle_s` = 10 s, before it merges overlapping runs: design/storage.md, "Compaction
of overlapping runs") and its CPU is idle; the blocks, sorted runs and height (the most runs
whose key ranges cover one key) printed for both.
Beside it, pyarrow reads the same rows from a Parquet file (sorted by key, row groups of
64k rows, in the page cache) in the same run: full read, point read, 1% range and the
selective predicate, through `pq.read_table(filters=...)`.

    .venv/bin/python bench/storage.py [--rows 1000000 [3000000 ...]] [--reads 200]

The same N may come more than once: `--rows 1000000 50000000 1000000` loads 1M rows before
and after 50M, and the insert rate of 50M is printed against the mean of the two 1M runs
(the same machine load, as far as a shared machine allows).

With --open-rows N it measures instead what an open tablet of N flushed rows costs in
memory: one process writes and flushes them (in-process tablet manager), a fresh one
opens the tablet, checks one key's existence (a write), and prints the heap (RssAnon) the
open added, per row. The same script runs against older code (a worktree) for "before".
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logcentric.tablets import TabletServerClient, column, ipc_bytes  # noqa: E402
from rpc.protocols.tserver_pb2 import OpType, WriteRequest, WriteResponse  # noqa: E402
from tservers.tablet.blockindex import run_of  # noqa: E402
from tservers.tablet.compaction import OVERLAP_IDLE_S_DEFAULT, height  # noqa: E402
from tservers.tablet.schema import block_name  # noqa: E402

BASE_ROWS = 10_000
BATCH_ROWS = 10_000
COLS = [
    column("id", "int64", key=True),
    column("v", "int64", nullable=True),
    column("s", "string", nullable=True),
    column("t", "int64", nullable=True),
]


def rows(ids: list[int], batch: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([i * 3 for i in ids], pa.int64()),
            "s": [f"row-{i:012d}" for i in ids],
            "t": pa.array([batch] * len(ids), pa.int64()),
        }
    )


# Extra `tserver start` flags (--server-args): the same bench against another setting of the
# server, side by side with its default.
SERVER_ARGS: list[str] = []


class MemoryCage:
    """A memory cgroup (v1 or v2, a child of this process's own) with a limit on what its
    processes are charged: their heap and the page cache of the files they write and read,
    as a container's memory limit counts them. The bench's tablet servers start in it
    (--memory-limit-mb): a load that needs more than the limit of memory the kernel cannot
    reclaim is killed (OOM), one whose extra RSS is page cache runs on, its clean pages
    reclaimed. Needs root (or a delegated cgroup)."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.v2 = False
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            own[ctrls] = path
        v1 = next((m[1] for m in mounts if m[2] == "cgroup" and "memory" in m[3].split(",")), None)
        v2 = next((m[1] for m in mounts if m[2] == "cgroup2"), None)
        name = f"storage-bench-{os.getpid()}-{time.monotonic_ns()}"
        if v1 is not None:
            memory_path = next(path for ctrls, path in own.items() if "memory" in ctrls.split(","))
            self.path = Path(v1) / memory_path.lstrip("/") / name
        elif v2 is not None:
            self.v2 = True
            self.path = Path(v2) / own.get("", "/").lstrip("/") / name
        else:
            raise SystemExit("--memory-limit-mb: no memory cgroup is mounted")
        try:
            self.path.mkdir()
            self._write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit_bytes))
        except OSError as e:
            raise SystemExit(f"--memory-limit-mb: cannot make a memory cgroup ({e})") from None

    def _write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def enter(self) -> None:
        """In the child before it runs the server (`preexec_fn`): move itself in."""
        self._write("cgroup.procs", str(os.getpid()))

    def peak(self) -> int:
        """The most bytes charged so far (memory.peak / max_usage_in_bytes)."""
        text = self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        return int(text) if text.strip().isdigit() else -1

    def oom_kills(self) -> int:
        """Processes of the cage the kernel's OOM killer killed."""
        text = self._read("memory.events" if self.v2 else "memory.oom_control")
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


CAGE: list[MemoryCage | None] = [None]  # one per size (--memory-limit-mb)


def start_server(
    root: Path, out_file: Path, flush_rows: int, *, fmt: bool = True
) -> tuple[subprocess.Popen, str]:
    if fmt:
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
            "--insecure",  # the baseline: this bench is not about security
            *SERVER_ARGS,
        ],
        stdout=out,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        preexec_fn=CAGE[0].enter if CAGE[0] is not None else None,  # noqa: PLW1509
    )
    deadline = time.monotonic() + 60
    while "serving on" not in out_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tablet server did not start")
        time.sleep(0.05)
    words = out_file.read_text().split()  # tserver UUID serving on ADDRESS ... INSECURE (...)
    return proc, words[words.index("on") + 1]


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon (the heap) and RssFile (mapped files) of a process, bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            found[name] = int(value.split()[0]) * 1024
    return found


class PeakSampler:
    """The peaks of RssAnon (heap) and RssFile (mapped block pages: page cache, reclaimable)
    apart, sampled every 0.2 s on a thread (VmHWM has only their peak sum)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.anon = self.file = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r = rss_bytes(self.pid)
            except OSError:
                return
            self.anon = max(self.anon, r["RssAnon"])
            self.file = max(self.file, r["RssFile"])
            self._stop.wait(0.2)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def reset_peak(pid: int) -> None:
    """Reset the process's VmHWM to its current RSS (Linux clear_refs 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quiesce(pid: int, limit_s: float = 300.0) -> float:
    """Wait (bounded) until the server is idle: under 5% of a core over 2 s (the flush of
    the last rows and background compactions finished). Returns the seconds waited."""
    t0 = time.monotonic()
    time.sleep(1.5)  # the maintenance thread's flush of the last rows, if due
    while time.monotonic() - t0 < limit_s:
        c0 = cpu_s(pid)
        time.sleep(2.0)
        if cpu_s(pid) - c0 < 0.1:
            break
    return time.monotonic() - t0


def block_files(root: Path) -> dict[str, int]:
    """The tablet's block files under `root` (data blocks, their filters and stats,
    temporary ones being written) and their sizes."""
    found = {}
    for p in root.rglob("block-*"):
        try:
            found[p.name] = p.stat().st_size
        except FileNotFoundError:  # unlinked by a compaction meanwhile
            pass
    return found


def layout(root: Path) -> dict:
    """The tablet's data blocks (`block-*.arrow` under `root`), the sorted runs they form
    (`blockindex.run_of`: `block-<id>-r<run>.arrow`, any other block a run of its own),
    each run's rows (in the order of their first block's id; rows in the memstore are in
    none) and their height: the most runs whose key ranges (a run's smallest to its largest
    key; a block's rows are in key order) cover one key."""
    for _ in range(10):  # a compaction may unlink a block while it is read: again
        try:
            runs: dict[str, list] = {}
            for p in sorted(root.rglob("block-*.arrow")):
                with pa.memory_map(str(p)) as src:
                    f = pa.ipc.open_file(src)
                    batches = [f.get_batch(i) for i in range(f.num_record_batches)]
                    batches = [b for b in batches if b.num_rows]
                    r = runs.setdefault(run_of(p.name), [0, None, None])
                    r[0] += sum(b.num_rows for b in batches)
                    if batches:
                        key = block_name(0)  # `id`, the table's first column
                        lo, hi = batches[0][key][0].as_py(), batches[-1][key][-1].as_py()
                        r[1] = lo if r[1] is None else min(r[1], lo)
                        r[2] = hi if r[2] is None else max(r[2], hi)
            nblocks = sum(1 for _ in root.rglob("block-*.arrow"))
            break
        except (FileNotFoundError, pa.ArrowInvalid):
            time.sleep(0.5)
    ranges = [(lo, hi) if lo is not None else None for _, lo, hi in runs.values()]
    return {
        "blocks": nblocks,
        "runs": len(runs),
        "height": height(ranges),
        "run_rows": [r[0] for r in runs.values()],
    }


def settle(pid: int, root: Path, quiet_s: float, limit_s: float) -> float:
    """Wait (at most `limit_s`) until the tablet's block files under `root` have not
    changed for `quiet_s` and the server is idle (under 5% of a core over 2 s). Returns the
    seconds waited."""
    t0 = time.monotonic()
    last, changed_at = block_files(root), t0
    while time.monotonic() - t0 < limit_s:
        c0 = cpu_s(pid)
        time.sleep(2.0)
        idle = cpu_s(pid) - c0 < 0.1
        now = block_files(root)
        if now != last:
            last, changed_at = now, time.monotonic()
        elif idle and time.monotonic() - changed_at >= quiet_s:
            break
    return time.monotonic() - t0


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    """The best wall time of `repeat` runs of fn() and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(
    client: TabletServerClient, proc, root: Path, tid: str, n: int, args: argparse.Namespace
) -> dict:
    pid, reads = proc.pid, args.reads
    client.create_tablet(tid, COLS)
    version = client.schema(tid).version
    rng = random.Random(n)
    ids = list(range(0, 2 * n, 2))  # odd keys are never written: misses
    rng.shuffle(ids)
    reset_peak(pid)
    load_sampler = PeakSampler(pid).__enter__()
    cpu0 = cpu_s(pid)
    t0 = time.perf_counter()
    nbatches = 0
    tenth = max(BATCH_ROWS, n // 10 // BATCH_ROWS * BATCH_ROWS)
    for start in range(0, n, BATCH_ROWS):
        if start and start % tenth == 0 and n >= 1_000_000:  # how a long load goes
            rate = start / (time.perf_counter() - t0)
            print(f"  {start:,} of {n:,} rows loaded, {rate:,.0f} rows/s", file=sys.stderr)
        req = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
        payload = ipc_bytes(rows(ids[start : start + BATCH_ROWS], nbatches))
        client._call("Write", req, WriteResponse, sidecars=[payload])
        nbatches += 1
    load_s = time.perf_counter() - t0
    load_peak = rss_bytes(pid)["VmHWM"]
    # A key that exists: refused (the existence check through the blocks).
    dup = WriteRequest(tablet_id=tid, schema_version=version, ops=[OpType.INSERT])
    try:
        client._call("Write", dup, WriteResponse, sidecars=[ipc_bytes(rows([ids[0]]))])
        raise SystemExit("an insert of an existing key was accepted")
    except Exception as e:  # the AlreadyExists error class of the client
        if "already exists" not in str(e):
            raise
    quiet_s = quiesce(pid)  # the last flush and the background compactions done
    # The server's CPU for the rows: the writes, their flushes and the compactions they
    # set off, to the idle after the load (a 1M load ends in ~2 s and most of its
    # compactions run after it; a 50M load's run during it, on the same two cores).
    load_cpu_s = cpu_s(pid) - cpu0
    load_sampler.__exit__()
    after_load = rss_bytes(pid)
    # The peak through the load and the compactions that went on after it (not reset).
    settle_peak = after_load["VmHWM"]
    load_layout = layout(root)  # as the ingest left it
    probes = [
        rng.choice(ids) if rng.random() < 0.9 else rng.randrange(n) * 2 + 1 for _ in range(reads)
    ]
    lat = []
    for k in probes:
        t1 = time.perf_counter()
        got = client.scan_table(tid, predicates=[("id", "==", k)])
        lat.append(time.perf_counter() - t1)
        if got.num_rows != (1 if k % 2 == 0 else 0):
            raise SystemExit(f"point read of {k} returned {got.num_rows} rows")
    reset_peak(pid)
    scan_sampler = PeakSampler(pid).__enter__()
    full_s, full = timed(lambda: client.scan_table(tid), 2)
    if full.num_rows != n:
        raise SystemExit(f"full scan returned {full.num_rows} rows, not {n}")
    del full
    # Unordered (Kudu's UNORDERED read mode, what the Spark source asks for): the newest
    # runs that hide no older row are not merged (design/storage.md, "Unordered scans").
    id_sum = sum(ids)
    un_s, got = timed(lambda: client.scan_table(tid, ordered=False), 2)
    check_unordered(got, n, id_sum)
    del got
    # The same with the largest batches the server sends (the default before 42d8335 was
    # 4,096 rows; 65,536 since).
    big_s, got = timed(lambda: client.scan_table(tid, batch_rows_max=65_536), 2)
    if got.num_rows != n:
        raise SystemExit(f"full scan returned {got.num_rows} rows, not {n}")
    del got
    a = rng.randrange(0, 2 * n - 2 * n // 100)
    b = a + 2 * n // 100  # 1% of the key space: n / 100 keys
    rng_preds = [("id", ">=", a), ("id", "<", b)]
    range_s, got = timed(lambda: client.scan_table(tid, predicates=rng_preds), 3)
    if got.num_rows != (b - a) // 2:
        raise SystemExit(f"range scan returned {got.num_rows} rows")
    last = nbatches - 1
    sel_preds = [("t", ">=", last)]
    sel_s, got = timed(lambda: client.scan_table(tid, predicates=sel_preds), 3)
    if got.num_rows != n - last * BATCH_ROWS:
        raise SystemExit(f"predicate scan returned {got.num_rows} rows")
    scan_peak = rss_bytes(pid)["VmHWM"]
    scan_sampler.__exit__()
    scanned_layout = layout(root)  # a compaction may have run during the scans
    # Parquet: the same rows sorted by key, row groups of 64k rows, read back by pyarrow.
    pq_path = Path(tempfile.mkdtemp(prefix="storage-pq-")) / "rows.parquet"
    try:
        order = sorted(range(n), key=ids.__getitem__)
        table = pa.concat_tables(
            rows(ids[s : s + BATCH_ROWS], s // BATCH_ROWS) for s in range(0, n, BATCH_ROWS)
        )
        table = table.take(pa.array(order))
        pq.write_table(table, pq_path, row_group_size=64 * 1024)
        del table
        pq_full_s, got = timed(lambda: pq.read_table(pq_path), 2)
        assert got.num_rows == n
        pq_lat = []
        for k in probes[: max(20, reads // 4)]:
            t1 = time.perf_counter()
            pq.read_table(pq_path, filters=[("id", "==", k)])
            pq_lat.append(time.perf_counter() - t1)
        pq_range_s, _ = timed(
            lambda: pq.read_table(pq_path, filters=[("id", ">=", a), ("id", "<", b)]), 3
        )
        pq_sel_s, _ = timed(lambda: pq.read_table(pq_path, filters=[("t", ">=", last)]), 3)
        # Settled: the compactions the tablet runs once ingest stops (the overlap term),
        # then the full scan and the Parquet read again.
        settle_s = settle(pid, root, args.settle_quiet, args.settle_max)
        settled_layout = layout(root)
        settled_s, got = timed(lambda: client.scan_table(tid), 2)
        if got.num_rows != n:
            raise SystemExit(f"full scan returned {got.num_rows} rows, not {n}")
        del got
        settled_un_s, got = timed(lambda: client.scan_table(tid, ordered=False), 2)
        check_unordered(got, n, id_sum)
        del got
        pq_settled_s, _ = timed(lambda: pq.read_table(pq_path), 2)
    finally:
        shutil.rmtree(pq_path.parent, ignore_errors=True)
    return {
        "insert": n / load_s,
        "load_cpu_us": 1e6 * load_cpu_s / n,
        "caught_up": n / (load_s + quiet_s),
        "p50": pct(lat, 0.5) * 1000,
        "p99": pct(lat, 0.99) * 1000,
        "full_rps": n / full_s,
        "range_s": range_s,
        "sel_s": sel_s,
        "full_s": full_s,
        "big_rps": n / big_s,
        "load_peak": load_peak,
        "settle_peak": settle_peak,
        "load_s": load_s,
        "scan_peak": scan_peak,
        "pq_full_rps": n / pq_full_s,
        "pq_full_s": pq_full_s,
        "pq_p50": pct(pq_lat, 0.5) * 1000,
        "pq_p99": pct(pq_lat, 0.99) * 1000,
        "pq_range_s": pq_range_s,
        "pq_sel_s": pq_sel_s,
        "probe": ids[0],
        "quiet_s": quiet_s,
        "load_anon_pk": load_sampler.anon,
        "load_file_pk": load_sampler.file,
        "scan_anon_pk": scan_sampler.anon,
        "scan_file_pk": scan_sampler.file,
        "load_layout": load_layout,
        "scanned_layout": scanned_layout,
        "settle_s": settle_s,
        "settled_layout": settled_layout,
        "settled_rps": n / settled_s,
        "un_rps": n / un_s,
        "settled_un_rps": n / settled_un_s,
        "pq_settled_rps": n / pq_settled_s,
        **after_load,
    }


def check_unordered(got: pa.Table, n: int, id_sum: int) -> None:
    """An unordered full scan's rows: n of them, their keys adding up to those written (each
    key once); outside the timed scan."""
    if got.num_rows != n:
        raise SystemExit(f"unordered scan returned {got.num_rows} rows, not {n}")
    total = pc.sum(got.column("id")).as_py()
    if total != id_sum:
        raise SystemExit(f"unordered scan's keys add up to {total}, not {id_sum}")


def restart(proc, root: Path, out: Path, flush_rows: int, tid: str, key: int) -> tuple:
    """Stop the server (SIGTERM), start it on the same root; seconds until it serves and
    until a point read of `key` answers (bounded)."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    t0 = time.perf_counter()
    proc, address = start_server(root, out, flush_rows, fmt=False)
    serving = time.perf_counter() - t0
    client = TabletServerClient(address, timeout_s=30)
    deadline = time.monotonic() + 300
    while True:
        try:
            if client.scan_table(tid, predicates=[("id", "==", key)]).num_rows == 1:
                break
        except Exception:  # the tablet bootstrapping: UNAVAILABLE, NOT_LEADER
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)
    answered = time.perf_counter() - t0
    client.close()
    return proc, serving, answered


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
    ap.add_argument("--rows", type=int, nargs="+", default=[50_000])
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--flush-rows", type=int, default=50_000)
    ap.add_argument("--open-rows", type=int, default=0, help="measure an open tablet's heap")
    ap.add_argument(
        "--settle-quiet",
        type=float,
        default=OVERLAP_IDLE_S_DEFAULT + 15,
        help="settled: s without a change of the block files (the overlap term's idle "
        "wait, 10 s, plus up to two idle rounds of the scheduler, 5 s each, and a margin)",
    )
    ap.add_argument("--settle-max", type=float, default=600.0, help="settled: s at most")
    ap.add_argument(
        "--server-args",
        default="",
        help="extra flags for every `tserver start` (one string, split on spaces), e.g. "
        "'--compaction-rate-mb 0'",
    )
    ap.add_argument(
        "--memory-limit-mb",
        type=int,
        default=0,
        help="run each tablet server in a memory cgroup of this limit (heap and page cache "
        "charged, as in a container; needs root): does the load fit, at what rate",
    )
    args = ap.parse_args()
    SERVER_ARGS[:] = args.server_args.split()
    if args.open_rows:
        open_cost(args.open_rows)
        return 0
    results: list[tuple[int, dict]] = []  # an N may come more than once
    for n in (BASE_ROWS, *args.rows):
        tmp = Path(tempfile.mkdtemp(prefix="storage-bench-"))
        if args.memory_limit_mb:
            CAGE[0] = MemoryCage(args.memory_limit_mb << 20)
        try:
            root, out = tmp / "root", tmp / "server.out"
            proc, address = start_server(root, out, args.flush_rows)
            try:
                idle = rss_bytes(proc.pid)["VmRSS"]
                client = TabletServerClient(address, timeout_s=300)
                r = measure(client, proc, root, f"bench{n}", n, args)
                client.close()
                r["disk"] = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
                # Data blocks and the sorted runs they form (design/storage.md, "Key-disjoint
                # runs": `block-<id>-r<run>.arrow`, any other block a run of its own).
                blocks = [p.name for p in root.rglob("block-*.arrow")]
                r["blocks"] = len(blocks)
                r["runs"] = len({run_of(b) for b in blocks})
                proc, r["serving_s"], r["restart_s"] = restart(
                    proc, root, out, args.flush_rows, f"bench{n}", r["probe"]
                )
                r["idle"] = idle
                r["loadavg"] = os.getloadavg()
                if CAGE[0] is not None:
                    r["cage_peak"], r["cage_ooms"] = CAGE[0].peak(), CAGE[0].oom_kills()
                results.append((n, r))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if CAGE[0] is not None:
                if CAGE[0].oom_kills():
                    print(f"{n:,} rows: the tablet server was OOM-killed", file=sys.stderr)
                CAGE[0].close()
        done = results[-1][1] if results and results[-1][0] == n else None
        # A line as each size ends (the tables come at the end: a run stopped part way
        # keeps these).
        print(
            f"done {n:,} rows"
            + (
                f": {done['insert']:,.0f} inserts/s, point read p50 {done['p50']:.2f} ms, "
                f"full scan {done['full_rps']:,.0f} rows/s ({done['un_rps']:,.0f} unordered), "
                f"peak RSS loading {done['load_peak'] / 2**20:,.0f} MiB"
                + (
                    f", cgroup peak {done['cage_peak'] / 2**20:,.0f} MiB"
                    if "cage_peak" in done
                    else ""
                )
                if done
                else ""
            ),
            file=sys.stderr,
            flush=True,
        )
    mib = 2**20
    print(
        f"one tablet, 4 columns (id int64 key, v int64, s string, t int64 = load batch), "
        f"durable WAL, plaintext (--insecure), flush every {args.flush_rows:,} rows, "
        f"a fresh server per size; server flags: {' '.join(SERVER_ARGS) or 'default'}; "
        f"{args.reads} point reads (10% misses); Parquet: the same rows sorted by key, "
        f"row groups of 64k, pyarrow {pa.__version__}"
        + (
            f"; each server in a memory cgroup of {args.memory_limit_mb:,} MiB"
            if args.memory_limit_mb
            else ""
        )
    )
    print(
        f"{'rows':>10} {'p50 ms':>7} {'p99 ms':>7} {'pq p50':>7} {'pq p99':>7} "
        f"{'scan rows/s':>12} {'pq rows/s':>11} {'ratio':>6} {'1% rng':>7} {'pq 1%':>7} "
        f"{'pred':>7} {'pq pred':>7} {'insert/s':>9} {'load pk':>8} {'scan pk':>8} "
        f"{'RSS':>6} {'restart':>8}"
    )
    for n, r in results:
        print(
            f"{n:>10,} {r['p50']:>7.2f} {r['p99']:>7.2f} {r['pq_p50']:>7.2f} "
            f"{r['pq_p99']:>7.2f} {r['full_rps']:>12,.0f} {r['pq_full_rps']:>11,.0f} "
            f"{r['full_rps'] / r['pq_full_rps']:>6.2f} "
            f"{r['range_s'] / r['full_s']:>7.3f} {r['pq_range_s'] / r['pq_full_s']:>7.3f} "
            f"{r['sel_s'] / r['full_s']:>7.3f} {r['pq_sel_s'] / r['pq_full_s']:>7.3f} "
            f"{r['insert']:>9,.0f} {r['load_peak'] / mib:>8.0f} {r['scan_peak'] / mib:>8.0f} "
            f"{r['VmRSS'] / mib:>6.0f} {r['restart_s']:>8.2f}"
        )
    print(
        "p50/p99/pq: point read ms (tablet server through the client / pyarrow Parquet); "
        "scan rows/s: full scan through the client after the load (the runs as the ingest "
        "left them), ratio = against the Parquet read; "
        "1% rng, pred: range and selective-predicate scan time / full scan time (pq: the "
        "same for Parquet); load pk / scan pk: the server's peak RSS MiB while loading / "
        "scanning; RSS: after the load; restart: s from SIGTERM'd server to a point read "
        "answered after start"
    )
    for n, r in results:
        print(
            f"{n:>10,}: full scan {r['full_s']:.2f} s ({r['big_rps']:,.0f} rows/s in 64k-row "
            f"batches), 1% range {r['range_s'] * 1000:.0f} ms, "
            f"predicate {r['sel_s'] * 1000:.0f} ms; Parquet full {r['pq_full_s']:.2f} s, "
            f"1% {r['pq_range_s'] * 1000:.0f} ms, predicate {r['pq_sel_s'] * 1000:.0f} ms; "
            f"serving after {r['serving_s']:.2f} s; idle RSS {r['idle'] / mib:.0f} MiB; "
            f"{r['quiet_s']:.0f} s to quiesce after the load; load {r['load_s']:.0f} s; "
            f"peak RSS through load and compactions {r['settle_peak'] / mib:.0f} MiB; "
            f"disk {r['disk'] / mib:,.0f} MiB in {r['blocks']} blocks, {r['runs']} runs "
            "(settled); sampled peaks (0.2 s) heap/mapped files "
            f"loading {r['load_anon_pk'] / mib:.0f}/{r['load_file_pk'] / mib:.0f} MiB, "
            f"scanning {r['scan_anon_pk'] / mib:.0f}/{r['scan_file_pk'] / mib:.0f} MiB; "
            f"after the load heap {r['RssAnon'] / mib:.0f} MiB, mapped files "
            f"{r['RssFile'] / mib:.0f} MiB; load average at the end "
            + "/".join(f"{x:.1f}" for x in r["loadavg"])
        )

    for n, r in results:
        if "cage_peak" in r:
            print(
                f"{n:>10,}: memory cgroup of {args.memory_limit_mb:,} MiB (heap and page cache "
                f"charged): peak charge {r['cage_peak'] / mib:,.0f} MiB, OOM kills "
                f"{r['cage_ooms']}"
            )

    def lay(x: dict) -> str:
        return f"{x['blocks']}/{x['runs']}/{x['height']}"

    print(
        "full scans after the load and settled (best of 2 scans, default batches, in key "
        "order and unordered, as the Spark source reads; Parquet read best of 2 just after; "
        "ratios against it; blocks/runs/height of the tablet's blocks on disk: "
        "height = the most runs whose key ranges cover one key); settled = the block files "
        f"unchanged for {args.settle_quiet:.0f} s and the server idle, waited at most "
        f"{args.settle_max:.0f} s"
    )
    print(
        f"{'rows':>10} | {'after the load: b/r/h':>21} {'scan rows/s':>12} {'pq rows/s':>11} "
        f"{'ratio':>6} {'unordered':>12} {'ratio':>6} | {'waited s':>8} {'settled: b/r/h':>14} "
        f"{'scan rows/s':>12} {'pq rows/s':>11} {'ratio':>6} {'unordered':>12} {'ratio':>6} | "
        "settled: rows of the runs (first 8)"
    )
    for n, r in results:
        lo, sc, st = r["load_layout"], r["scanned_layout"], r["settled_layout"]
        moved = "" if lay(sc) == lay(lo) else f" (end of scans {lay(sc)})"
        print(
            f"{n:>10,} | {lay(lo) + moved:>21} {r['full_rps']:>12,.0f} "
            f"{r['pq_full_rps']:>11,.0f} {r['full_rps'] / r['pq_full_rps']:>6.2f} "
            f"{r['un_rps']:>12,.0f} {r['un_rps'] / r['pq_full_rps']:>6.2f} | "
            f"{r['settle_s']:>8.0f} {lay(st):>14} {r['settled_rps']:>12,.0f} "
            f"{r['pq_settled_rps']:>11,.0f} {r['settled_rps'] / r['pq_settled_rps']:>6.2f} "
            f"{r['settled_un_rps']:>12,.0f} {r['settled_un_rps'] / r['pq_settled_rps']:>6.2f} | "
            + " / ".join(f"{x:,}" for x in st["run_rows"][:8])
            + (f" / ... ({len(st['run_rows']) - 8} more)" if len(st["run_rows"]) > 8 else "")
        )
    # Inserts at a big N against the smallest N loaded before and after it (same machine
    # load): the target is >= 0.7 at 50M of the rate at 1M.
    small = min(args.rows)
    for i, (n, r) in enumerate(results):
        if n in (small, BASE_ROWS):
            continue
        near = []
        before = [x["insert"] for m, x in results[:i] if m == small][-1:]
        after = [x["insert"] for m, x in results[i + 1 :] if m == small][:1]
        if before:
            near.append(f"before {before[0]:,.0f}")
        if after:
            near.append(f"after {after[0]:,.0f}")
        if not near:
            continue
        mean = sum(before + after) / len(before + after)
        print(
            f"insert rows/s at {n:,}: {r['insert']:,.0f}; at {small:,} {', '.join(near)}, "
            f"mean {mean:,.0f}; ratio {r['insert'] / mean:.2f} (target at 50M: >= 0.7)"
        )
        # The same with the compactions the load set off: rows over the load and the wait
        # until the server was idle again (`quiesce`: 3.5 s at least, which weighs on 1M),
        # and the server's CPU a row over that time.
        smalls = [x for m, x in results if m == small]
        caught = sum(x["caught_up"] for x in smalls) / len(smalls)
        cpu = sum(x["load_cpu_us"] for x in smalls) / len(smalls)
        print(
            f"  to idle (load, flushes, compactions): rows/s at {n:,} {r['caught_up']:,.0f}, "
            f"at {small:,} {caught:,.0f} (mean), ratio {r['caught_up'] / caught:.2f}; server "
            f"CPU us a row {r['load_cpu_us']:.2f} against {cpu:.2f}, "
            f"ratio {r['load_cpu_us'] / cpu:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
