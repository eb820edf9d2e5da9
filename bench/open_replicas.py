"""The cost of opening N tablet replicas at start-up, in process (issue 28: restart of
10,000 replicas to serving in under 10 s).

One child process formats an fs root and creates N replicas through `TabletManager`
(in parallel): each a 3-voter config naming this server and two absent peers (what a tablet
server of a replication-3 cluster holds; they stay followers), except every
`--lone-every`-th, a lone voter (this server the only voter) that gets `--rows` rows and,
every second one of those, a flush (one data block). The child then leaves the root as
kill -9 does (`--restart kill`: os._exit, no WAL footer, nothing closed) or closes the
manager (`--restart clean`). A second child opens the root (`TabletManager.open`) and
prints: the open's wall time, the process CPU time it took (all threads), that CPU per
replica, and the manager's own start-up line (thread time: metadata, blocks and WAL, raft,
other). Nothing is dropped from the page cache: the files are warm, as on a server restarted
right after it died; the figures are CPU, not disk reads. `--cold` drops the page cache
before the open (as after a power cut or a reboot: every file read from the disk; needs
root, Linux's /proc/sys/vm/drop_caches).

    .venv/bin/python bench/open_replicas.py [--replicas 2000] [--restart kill|clean]
        [--threads 8] [--repeat 1] [--cold] [--profile FILE] [--json]

`--profile FILE` writes a cProfile of the open (the manager's `startup_profile`: the
threads that open tablets) and prints its top entries. The script only uses the manager's
public API, so the same file runs against older code (a worktree) for "before".
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CREATE_THREADS = 8
ROWS_DEFAULT = 3
LONE_EVERY_DEFAULT = 10
SEGMENT_BYTES = 1 << 20
CHILD_TIMEOUT_S = 3600


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by name (Linux /proc)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        name = t.name.rsplit("_", 1)[0] if t.name[-1:].isdigit() else t.name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def create_phase(root: Path, n: int, restart: str, rows: int, lone_every: int) -> None:
    import pyarrow as pa

    from rpc.protocols.tserver_pb2 import (
        ColumnSchemaPB,
        CreateTabletRequest,
        DataType,
        MemberType,
        OpType,
        RaftConfigPB,
        SchemaPB,
    )
    from tservers.fs import FsLayout
    from tservers.tablet.manager import TabletManager
    from tservers.wal.log import WalOptions

    schema = SchemaPB(
        columns=[
            ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
            ColumnSchemaPB(name="v", type=DataType.STRING, nullable=True),
        ]
    )
    fs = FsLayout.format(root)
    m = TabletManager(fs, WalOptions(segment_size_bytes_max=SEGMENT_BYTES), maintenance=False)
    m.open()

    def ipc(table: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        return sink.getvalue().to_pybytes()

    def one(i: int) -> None:
        cfg = RaftConfigPB()
        lone = lone_every > 0 and i % lone_every == 0
        peers = [(fs.uuid, 1)] if lone else [(fs.uuid, 1), ("peer-a", 2), ("peer-b", 3)]
        for uuid, port in peers:
            cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{port}")
        t = m.create_tablet(
            CreateTabletRequest(
                tablet_id=f"r{i:05d}", table_name=f"t{i}", schema=schema, config=cfg
            )
        )
        if lone and rows > 0:
            data = ipc(
                pa.table(
                    {
                        "id": pa.array(range(rows), pa.int64()),
                        "v": pa.array([f"v{j}" for j in range(rows)], pa.string()),
                    }
                )
            )
            t.write(1, [(OpType.INSERT, data)], time.monotonic() + 60)
            if (i // lone_every) % 2 == 0:
                t.flush()

    with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
        for f in [pool.submit(one, i) for i in range(n)]:
            f.result()
    if restart == "kill":
        os._exit(0)  # like kill -9: no WAL footer, nothing closed
    m.close(600)


def open_phase(root: Path, threads: int, profile: Path | None) -> dict:
    from tservers.fs import FsLayout
    from tservers.tablet.manager import TabletManager
    from tservers.wal.log import WalOptions

    lines: list[str] = []

    class _Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("start-up:"):
                lines.append(msg)

    mlog = logging.getLogger("tservers.tablet.manager")
    mlog.setLevel(logging.INFO)
    mlog.addHandler(_Grab())
    fs = FsLayout.open(root)
    kwargs = {"startup_threads": threads}
    if profile is not None:
        kwargs["startup_profile"] = profile
    m = TabletManager(
        fs, WalOptions(segment_size_bytes_max=SEGMENT_BYTES), maintenance=False, **kwargs
    )
    threads0 = _thread_cpu_s()
    cpu0, t0 = _cpu_s(), time.monotonic()
    m.open(wait=False)
    # Every replica opened (lone voters may still be electing); `starting` walks every
    # replica under the manager's lock, so not too often.
    while m.starting:
        time.sleep(0.1)
    listed_open_s = time.monotonic() - t0
    m.wait_open()
    wall = time.monotonic() - t0
    cpu = _cpu_s() - cpu0
    # The threads that outlive the open (the Raft driver, ...): what each took during it;
    # the rest of the CPU is the opening threads' (ended by now).
    live = {k: v - threads0.get(k, 0.0) for k, v in _thread_cpu_s().items()}
    live = {k: round(v, 2) for k, v in sorted(live.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    if m._startup_thread is not None:  # the profile is written after the open is done
        m._startup_thread.join(60)
    n = len(m.replicas)
    running = sum(1 for r in m.replicas.values() if r.status.value == "RUNNING")
    return {
        "replicas": n,
        "running": running,
        "open_s": round(wall, 3),
        "all_opened_s": round(listed_open_s, 3),
        "cpu_s": round(cpu, 3),
        "cpu_per_replica_ms": round(1000 * cpu / max(1, n), 3),
        "startup_line": lines[-1] if lines else "",
        "cpu_s_of_threads_still_running": live,
    }


def _drop_page_cache() -> None:
    """Write back and drop the page cache (root only), so the open reads from the disk."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise SystemExit(f"--cold: cannot drop the page cache ({e}); run as root on Linux") from e


def _child(args: list[str]) -> str:
    out = subprocess.run(
        [sys.executable, __file__, *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        cwd=ROOT,
    )
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=2000)
    p.add_argument("--restart", choices=("kill", "clean"), default="kill")
    p.add_argument("--threads", type=int, default=8, help="the manager's start-up threads")
    p.add_argument("--rows", type=int, default=ROWS_DEFAULT, help="rows of each lone voter")
    p.add_argument("--lone-every", type=int, default=LONE_EVERY_DEFAULT)
    p.add_argument("--repeat", type=int, default=1, help="fresh roots, one after another")
    p.add_argument("--cold", action="store_true", help="drop the page cache before the open")
    p.add_argument("--profile", type=Path, help="cProfile of the open to this file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--phase", choices=("create", "open"), help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.phase == "create":
        create_phase(a.root, a.replicas, a.restart, a.rows, a.lone_every)
        return
    if a.phase == "open":
        res = open_phase(a.root, a.threads, a.profile)
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()
        os._exit(0)  # no close: the figures are the open's
    results = []
    for _ in range(a.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="open-replicas-"))
        root = tmp / "fs"
        try:
            t0 = time.monotonic()
            common = ["--replicas", str(a.replicas), "--root", str(root)]
            _child(
                [
                    "--phase", "create", *common, "--restart", a.restart,
                    "--rows", str(a.rows), "--lone-every", str(a.lone_every),
                ]
            )  # fmt: skip
            created_s = time.monotonic() - t0
            extra = ["--profile", str(a.profile)] if a.profile else []
            if a.cold:
                _drop_page_cache()
            out = _child(["--phase", "open", *common, "--threads", str(a.threads), *extra])
            res = json.loads(out.strip().splitlines()[-1])
            res["create_s"] = round(created_s, 1)
            res["restart"] = a.restart
            res["threads"] = a.threads
            res["cache"] = "cold" if a.cold else "warm"
            res["load"] = [round(x, 2) for x in os.getloadavg()]
            results.append(res)
            if not a.json:
                print(
                    f"{res['replicas']} replicas ({res['running']} RUNNING, {a.restart} restart, "
                    f"{a.threads} threads, {res['cache']} cache): open {res['open_s']:.2f} s wall "
                    f"(every replica out of starting at {res['all_opened_s']:.2f} s), "
                    f"{res['cpu_s']:.2f} s CPU, {res['cpu_per_replica_ms']:.3f} ms CPU/replica "
                    f"(created in {created_s:.0f} s; load {res['load']})\n  {res['startup_line']}\n"
                    f"  CPU s of threads still running: {res['cpu_s_of_threads_still_running']}"
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(results))
    if a.profile and not a.json:
        pstats.Stats(str(a.profile)).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
