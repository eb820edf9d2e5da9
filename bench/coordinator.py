"""Coordinator failover time, create-table latency and tablet-location lookups per second.

Three coordinator processes (embedded logstore, durable journal, cluster password) and three
tablet servers (durable WAL, heartbeating to every coordinator node) on loopback, all
plaintext (`--insecure`): the baseline, this bench is not about security (CURVE's cost is
bench/rpc.py --curve and bench/tserver.py --curve).

- create-table latency: sequential creates (4 tablets, replication 1), p50 / p99;
- lookups: GetTabletLocations from 8 client threads (one CoordinatorClient each), a few
  rounds of a few seconds (the machine is shared: the rounds show the spread); baseline: the
  rpc layer's GetLeader call to the same leader from the same 8 threads (ratio = lookups /
  GetLeader calls), measured in the same rounds;
- failover: `--kills` times, kill -9 the leader and time until a client's next create-table
  succeeds (the client follows hints and retries); the killed node is restarted before the
  next round. p50, p99, max.

    .venv/bin/python bench/coordinator.py [--kills 20] [--creates 30] [--lookup-s 3]
        [--lookup-rounds 3]          (--kills 0 skips the failover part)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logcentric.meta import CoordinatorClient  # noqa: E402
from rpc.addresses import free_port  # noqa: E402
from rpc.client import RpcClient  # noqa: E402
from rpc.errors import RpcError  # noqa: E402
from rpc.protocols import coordinator_pb2 as pb  # noqa: E402

SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)


def wait_for(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"bench: {what} not met within {timeout_s} s")


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = open(log, "ab")  # noqa: SIM115 - closed with the process at exit
    return subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env)


class Group:
    def __init__(self, root: Path, lease_timeout_s: float) -> None:
        self.root = root
        self.lease_timeout_s = lease_timeout_s
        (root / "password").write_text("bench-password\n")
        self.raft = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        self.rpc = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        self.procs: list[subprocess.Popen | None] = [None] * 3

    def start(self, i: int) -> None:
        peers = ",".join(a for j, a in enumerate(self.raft) if j != i)
        self.procs[i] = spawn(
            [
                "-m", "optools.coordinator_cli", "start", "--id", f"c{i}",
                "--data-dir", str(self.root / f"c{i}"), "--bind", self.rpc[i],
                "--raft", self.raft[i], "--peers", peers,
                "--password-file", str(self.root / "password"),
                "--lease-timeout-s", str(self.lease_timeout_s), "--insecure",
            ],
            self.root / f"c{i}.log",
        )  # fmt: skip

    def leader(self, client: CoordinatorClient) -> int:
        def find():
            for i, address in enumerate(self.rpc):
                p = self.procs[i]
                if p is None or p.poll() is not None:
                    continue
                try:
                    if client.status(address, timeout_s=0.5).role == "LEADER":
                        return i + 1
                except RpcError:
                    pass
            return 0

        return wait_for(find, 60, "a leader") - 1

    def close(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


def start_tserver(
    root: Path, name: str, coordinators: list[str]
) -> tuple[subprocess.Popen, str, str]:
    fs = root / name
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(fs)],
        check=True,
        capture_output=True,
    )
    log = root / f"{name}.log"
    proc = spawn(
        [
            "-m", "tservers.cli", "start", "--fs-root", str(fs), "--bind", "127.0.0.1:0",
            "--coordinators", ",".join(coordinators), "--insecure",
        ],
        log,
    )  # fmt: skip

    def line():
        return next((ln for ln in log.read_text().splitlines() if " serving on " in ln), None)

    parts = wait_for(line, 60, f"{name} start").split()
    return proc, parts[parts.index("tserver") + 1], parts[-1]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def rate(threads: int, seconds: float, fn) -> float:
    """Calls per second of fn(k) from `threads` threads (thread k calls fn(k))."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def run(k: int) -> None:
        while time.monotonic() < stop:
            fn(k)
            counts[k] += 1

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    start = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20, help="leader kills (0: no failover part)")
    ap.add_argument("--creates", type=int, default=30, help="create-table latency samples")
    ap.add_argument("--lookup-s", type=float, default=3.0, help="seconds per lookup round")
    ap.add_argument("--lookup-rounds", type=int, default=3, help="lookup rounds")
    ap.add_argument("--threads", type=int, default=8, help="lookup client threads")
    ap.add_argument("--lease-timeout-s", type=float, default=1.0)
    args = ap.parse_args()
    assert args.creates >= 1 and args.lookup_rounds >= 1 and args.kills >= 0

    print("coordinators and tablet servers plaintext (--insecure): the baseline", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-coordinator-") as tmp:
        root = Path(tmp)
        group = Group(root, args.lease_timeout_s)
        tservers = []
        try:
            for i in range(3):
                group.start(i)
            for i in range(3):  # ports bound before tablet servers pick theirs
                wait_for(
                    lambda i=i: " rpc=" in (root / f"c{i}.log").read_text(), 60, "coordinator start"
                )
            # The tablet servers enlist and heartbeat to every node by themselves.
            tservers = [start_tserver(root, f"ts{i}", group.rpc) for i in range(3)]
            client = CoordinatorClient(group.rpc, timeout_s=60.0, call_timeout_s=2.0)
            wait_for(lambda: len(client.list_servers()) == 3, 60, "tablet servers enlisted")

            latencies = []
            for k in range(args.creates):
                t0 = time.monotonic()
                client.create_table(f"lat{k}", SCHEMA, 4, 1)
                latencies.append(time.monotonic() - t0)

            leader = group.leader(client)
            uuid = client.status(group.rpc[leader]).uuid
            clients = [CoordinatorClient(group.rpc, timeout_s=10.0) for _ in range(args.threads)]
            pingers = [RpcClient(group.rpc[leader], "bench") for _ in range(args.threads)]

            def lookup(k: int) -> None:
                clients[k].get_tablet_locations("lat0")

            def ping(k: int) -> None:
                pingers[k].call(
                    uuid, "Coordinator.GetLeader", pb.GetLeaderRequest(), pb.GetLeaderResponse
                )

            lookups, pings = [], []
            for r in range(args.lookup_rounds):
                lookups.append(rate(args.threads, args.lookup_s, lookup))
                pings.append(rate(args.threads, args.lookup_s, ping))
                print(
                    f"  lookup round {r + 1}: {lookups[-1]:,.0f} lookups/s, "
                    f"{pings[-1]:,.0f} GetLeader/s  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            for c in clients:
                c.close()
            for p in pingers:
                p.close()

            failovers: list[float] = []
            for k in range(args.kills):
                leader = group.leader(client)
                group.procs[leader].send_signal(signal.SIGKILL)
                group.procs[leader].wait(10)
                t0 = time.monotonic()
                client.create_table(f"fo{k}", SCHEMA, 1, 1)
                failovers.append(time.monotonic() - t0)
                group.start(leader)
                wait_for(
                    lambda i=leader: _answers(client, group.rpc[i]), 60, "restarted node answers"
                )
                print(f"  kill {k + 1}: failover {failovers[-1]:.3f} s", flush=True)
        finally:
            group.close()
            for p, _, _ in tservers:
                p.send_signal(signal.SIGTERM)
                p.wait(10)

    print(f"create-table latency ({args.creates} tables, 4 tablets, replication 1)")
    print(f"  p50 {pct(latencies, 50) * 1000:8.1f} ms   p99 {pct(latencies, 99) * 1000:8.1f} ms")
    print(f"tablet-location lookups, {args.threads} threads, {args.lookup_rounds} rounds")
    med_l, med_p = statistics.median(lookups), statistics.median(pings)
    print(f"  lookups:                 median {med_l:8,.0f} /s   best {max(lookups):8,.0f} /s")
    print(
        f"  baseline GetLeader rpc:  median {med_p:8,.0f} /s   best {max(pings):8,.0f} /s"
        f"   ratio {med_l / med_p:.2f}"
    )
    if failovers:
        print(
            f"failover over {len(failovers)} kill -9 of the leader (lease {args.lease_timeout_s} s)"
        )
        print(
            f"  p50 {pct(failovers, 50):.3f} s   p99 {pct(failovers, 99):.3f} s   "
            f"max {max(failovers):.3f} s   mean {statistics.mean(failovers):.3f} s"
        )
    return 0


def _answers(client: CoordinatorClient, address: str) -> bool:
    try:
        return client.status(address, timeout_s=0.5).role in ("FOLLOWER", "LEADER")
    except RpcError:
        return False


if __name__ == "__main__":
    sys.exit(main())
