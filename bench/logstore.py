"""Benchmark of logstore: 3 durable replicas as processes vs plain pysyncobj.

Starts 3 `logstore serve` replicas on loopback (durable journal: fdatasync per group) and
measures from this process, through the zmq API at the leader:
- latency of one-at-a-time conditional appends (p50, p99);
- appends/s with 1, 8 and 64 concurrent callers (unconditional, 64-byte entries);
then runs the same workload against 3 replicas of plain pysyncobj 0.3.17 (its own
non-durable file journal, the same state machine and zmq API), with its default settings
and with appendEntriesUseBatch=False, and prints the ratios. Optionally (--leases N) it
appends N lease entries, each invalidating the one before, to one durable replica and
reports disk size and restart time.

    python bench/logstore.py [--seconds 3] [--latency-samples 300] [--leases 1000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logstore.api import Entry  # noqa: E402
from logstore.remote import RemoteLogStore  # noqa: E402
from rpc.errors import RpcError  # noqa: E402
from tests.logstore.procs import ReplicaProcess, make_replicas  # noqa: E402

PAYLOAD = b"x" * 64


# --- plain pysyncobj replica (subprocess mode) ------------------------------------------------


def plain_serve(argv: list[str]) -> int:
    """A replica of plain pysyncobj behind the same zmq API as `logstore serve`."""
    import signal

    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    from logstore.service import LogStoreService, load_or_create_uuid
    from logstore.state import LogState
    from rpc.errors import TimedOut, Unavailable
    from rpc.server import RpcServer

    p = argparse.ArgumentParser(prog="bench/logstore.py plain-serve")
    p.add_argument("--raft-address", required=True)
    p.add_argument("--peers", default="")
    p.add_argument("--rpc-bind", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--no-batch", action="store_true")
    args = p.parse_args(argv)

    class PlainNode(SyncObj):
        def __init__(self, addr, peers, conf, state, lock):
            self._state = state
            self._lock = lock
            super().__init__(addr, peers, conf)

        @replicated
        def _ls_append(self, log, data, expected_id, invalidates):
            with self._lock:
                return self._state.apply_append(log, data, expected_id, invalidates)

        @replicated
        def _ls_barrier(self):
            return None

    class PlainStore:
        def __init__(self) -> None:
            os.makedirs(args.data_dir, exist_ok=True)
            self.state = LogState()
            self.lock = threading.Lock()
            conf = SyncObjConf(
                journalFile=os.path.join(args.data_dir, "journal"),
                appendEntriesUseBatch=not args.no_batch,
            )
            peers = [x for x in args.peers.split(",") if x]
            self.node = PlainNode(args.raft_address, peers, conf, self.state, self.lock)

        def _submit(self, fn, fargs, timeout_s):
            deadline = time.monotonic() + timeout_s
            while True:
                ev = threading.Event()
                box: list = []

                def done(r, e, box=box, ev=ev):
                    box.append((r, e))
                    ev.set()

                fn(*fargs, callback=done)
                if not ev.wait(max(0.0, deadline - time.monotonic())):
                    raise TimedOut("no outcome")
                res, err = box[0]
                if err == FAIL_REASON.SUCCESS:
                    return res
                if time.monotonic() > deadline or err not in (
                    FAIL_REASON.MISSING_LEADER,
                    FAIL_REASON.NOT_LEADER,
                    FAIL_REASON.QUEUE_FULL,
                    FAIL_REASON.DISCARDED,
                ):
                    raise Unavailable(f"pysyncobj reason {err}")
                time.sleep(0.005)

        def append(self, log, data, expected_id=None, invalidates=(), timeout_s=5.0):
            out = self._submit(
                self.node._ls_append, (log, bytes(data), expected_id, tuple(invalidates)), timeout_s
            )
            return out.raise_if_error()

        def read(self, log, from_id=1, limit=1000, timeout_s=5.0) -> list[Entry]:
            with self.lock:
                return self.state.read(log, from_id, limit)

        def last_id(self, log, timeout_s=5.0) -> int:
            with self.lock:
                return self.state.last_id(log)

        def barrier(self, timeout_s=5.0) -> None:
            self._submit(self.node._ls_barrier, (), timeout_s)

        def status(self) -> dict:
            raw = self.node.getStatus()
            leader = self.node._getLeader()
            return {
                "address": args.raft_address,
                "role": {0: "follower", 1: "candidate", 2: "leader"}.get(raw["state"], "?"),
                "leader": None if leader is None else leader.id,
                "term": raw["raft_term"],
                "commit_index": raw["commit_idx"],
                "applied_index": raw["last_applied"],
                "members": [args.raft_address],
                "connected": [],
                "last_log_index": 0,
                "last_log_term": 0,
                "journal_entries": raw["log_len"],
                "journal_first_index": 0,
                "journal_bytes": 0,
                "journal_syncs": 0,
                "snapshot_bytes": 0,
                "snapshots_loaded": 0,
                "live_entries": self.state.live_entries,
                "live_bytes": self.state.live_bytes,
                "logs": {},
            }

        def add_member(self, address, timeout_s=10.0):
            raise Unavailable("membership is not part of this bench")

        remove_member = add_member

        def close(self) -> None:
            self.node.destroy_synchronous()

    store = PlainStore()
    uuid = load_or_create_uuid(args.data_dir)
    service = LogStoreService(store, uuid)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = RpcServer(uuid, bind=args.rpc_bind, service="bench-plain", workers=64, queue_max=1024)
    service.register(server)
    server.start()
    print(f"logstore serving uuid={uuid} rpc={server.address} raft={args.raft_address}", flush=True)
    while not stop.wait(1.0):
        pass
    server.close()
    store.close()
    return 0


# --- measurement -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def find_leader(replicas: list[ReplicaProcess], timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in replicas:
            with RemoteLogStore([r.rpc_address], connect_timeout_s=2.0) as s:
                try:
                    s.barrier(timeout_s=5.0)
                    if s.status(timeout_s=2.0).role == "leader":
                        return r.rpc_address
                except RpcError:
                    continue
        time.sleep(0.1)
    raise RuntimeError("no leader")


def measure_latency(address: str, samples: int) -> tuple[float, float]:
    with RemoteLogStore([address]) as s:
        last = s.last_id("lat")
        lat = []
        for _ in range(samples):
            t = time.perf_counter()
            last = s.append("lat", PAYLOAD, expected_id=last + 1, timeout_s=10.0)
            lat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1000, percentile(lat, 0.99) * 1000


def measure_throughput(address: str, callers: int, seconds: float) -> float:
    """`callers` appends kept in flight at all times (pipelined from one thread with the rpc
    layer's call_async, so the bench client's own Python overhead stays small); each
    completion immediately starts the next append."""
    from collections import deque

    from logstore import logstore_pb2 as pb
    from rpc.client import RpcClient

    done = errors = 0
    with RpcClient(address, "bench-logstore") as client:
        uuid = client.ping().uuid
        req = pb.AppendRequest(log=f"tp{callers}", data=PAYLOAD)
        inflight: deque = deque()
        t0 = time.monotonic()
        end = t0 + seconds
        while True:
            now = time.monotonic()
            while now < end and len(inflight) < callers:
                inflight.append(
                    client.call_async(uuid, "LogStore.Append", req, pb.AppendResponse, timeout_s=10)
                )
            if not inflight:
                break
            try:
                inflight.popleft().result()
                done += 1
            except RpcError:
                errors += 1
        elapsed = time.monotonic() - t0
    if errors:
        print(f"    ({errors} failed appends with {callers} callers)")
    return done / elapsed


def run_variant(name, tmp: Path, argv_prefix, extra, args) -> dict:
    replicas = make_replicas(tmp / name, 3, extra)
    for r in replicas:
        if argv_prefix:
            r.argv_prefix = argv_prefix
    try:
        for r in replicas:
            r.start()
        leader = find_leader(replicas)
        samples = args.latency_samples if "default" not in name else args.slow_samples
        p50, p99 = measure_latency(leader, samples)
        print(f"  {name}: latency p50 {p50:.2f} ms, p99 {p99:.2f} ms ({samples} appends)")
        tput = {}
        for c in args.callers:
            tput[c] = measure_throughput(leader, c, args.seconds)
            print(f"  {name}: {c} callers: {tput[c]:.0f} appends/s")
        return {"p50": p50, "p99": p99, "tput": tput}
    finally:
        for r in replicas:
            r.stop()


def bench_leases(n: int, tmp: Path) -> None:
    from logstore.replicated import ReplicaConfig, ReplicatedLogStore
    from tests.logstore.helpers import PASSWORD, free_addresses

    (addr,) = free_addresses(1)
    data = str(tmp / "leases")
    payload = b"L" * 100
    cfg = ReplicaConfig()
    with ReplicatedLogStore(addr, [], data, PASSWORD, config=cfg) as store:
        prev = store.append("lease", payload)
        t = time.monotonic()
        pending = []
        for _ in range(n - 1):
            pending.append(
                store.append_async("lease", payload, expected_id=prev + 1, invalidates=[prev])
            )
            prev += 1
            if len(pending) >= 2000:
                for f in pending[:1000]:
                    f.result(60)
                del pending[:1000]
        for f in pending:
            f.result(60)
        elapsed = time.monotonic() - t
        store.barrier()
        st = store.status()
    disk = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    print(
        f"  leases: {n} entries each invalidating the previous in {elapsed:.1f}s "
        f"({n / elapsed:.0f}/s, one replica, pipelined); live entries {st['live_entries']}, "
        f"snapshots {st['snapshots_written']}; on disk {disk} bytes "
        f"(history {n * len(payload)} bytes of payload)"
    )
    t = time.monotonic()
    with ReplicatedLogStore(addr, [], data, PASSWORD, config=cfg) as store:
        opened = time.monotonic() - t
        store.barrier(timeout_s=60.0)
        ready = time.monotonic() - t
        assert store.last_id("lease") == n and len(store.read("lease")) == 1
    print(
        f"  leases: restart: state loaded in {opened * 1000:.0f} ms, first barrier (Raft "
        f"election of the lone replica included) after {ready * 1000:.0f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "plain-serve":
        return plain_serve(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--latency-samples", type=int, default=300)
    p.add_argument("--slow-samples", type=int, default=30, help="for pysyncobj defaults")
    p.add_argument("--callers", default="1,8,64")
    p.add_argument("--leases", type=int, default=0, help="also run the lease test with N")
    p.add_argument("--skip-plain", action="store_true")
    args = p.parse_args(argv)
    args.callers = [int(c) for c in args.callers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-logstore-"))
    plain = [sys.executable, str(Path(__file__).resolve()), "plain-serve"]
    try:
        print(f"bench/logstore.py on {os.cpu_count()} cores; data in {tmp}")
        results = {"logstore (durable)": run_variant("logstore", tmp, None, [], args)}
        if not args.skip_plain:
            results["pysyncobj default (no fsync)"] = run_variant(
                "pysyncobj-default", tmp, plain, [], args
            )
            results["pysyncobj no-batch (no fsync)"] = run_variant(
                "pysyncobj-nobatch", tmp, plain, ["--no-batch"], args
            )
        print()
        head = f"{'variant':34} {'p50 ms':>8} {'p99 ms':>8}" + "".join(
            f" {str(c) + ' callers/s':>14}" for c in args.callers
        )
        print(head)
        for name, r in results.items():
            row = f"{name:34} {r['p50']:8.2f} {r['p99']:8.2f}"
            row += "".join(f" {r['tput'][c]:14.0f}" for c in args.callers)
            print(row)
        ours = results["logstore (durable)"]
        for name, r in results.items():
            if r is ours:
                continue
            ratio = f"logstore / {name}: latency p50 x{ours['p50'] / r['p50']:.2f}"
            ratio += "".join(
                f", {c} callers x{ours['tput'][c] / max(r['tput'][c], 1e-9):.2f}"
                for c in args.callers
            )
            print(ratio)
        if args.leases:
            print()
            bench_leases(args.leases, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
