"""Write throughput with replication factor 3 next to replication factor 1, in one run.

Three tablet server processes on loopback, durable WALs. Tablet `rf1` has one replica (on
server 0), tablet `rf3` has three (servers 0, 1, 2; the bench writes at whichever leads).
The same batches of 1,000 rows (6 columns) are written to each by the same number of
concurrent writers, rf1 first, then rf3. A write to rf3 is acknowledged once a majority has
it durable and the leader applied it. Target: rf3 >= 50% of rf1.

Then tablet copy: (a) the copy data path as a follower runs it (copy session at the rf3
leader, every file fetched in 4 MiB CRC-checked chunks, two in flight, written and
fsynced), next to a raw zmq transfer of the same bytes in the same chunks on loopback
(DEALER/ROUTER, no protobuf, no disk); (b) end to end: a follower's replica deleted, the
leader copies it back, until the replica runs again with every entry applied (includes
start-up and WAL replay).

    .venv/bin/python bench/replication.py [--batches 30] [--writers 4]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crc32c
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tserver import BATCH_ROWS, COLS, batch, run_writers  # noqa: E402
from coordinator.client.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc.addresses import free_port  # noqa: E402
from rpc.client import RpcClient  # noqa: E402
from tservers.tablet_copy import FETCHES_IN_FLIGHT  # noqa: E402
from tservers.tserver_pb2 import (  # noqa: E402
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    CreateTabletRequest,
    CreateTabletResponse,
    DeleteTabletRequest,
    DeleteTabletResponse,
    EndCopySessionRequest,
    EndCopySessionResponse,
    FetchCopyChunkRequest,
    FetchCopyChunkResponse,
    ListTabletsRequest,
    ListTabletsResponse,
    MemberType,
    OpType,
    RaftConfigPB,
    SchemaPB,
    WriteRequest,
    WriteResponse,
)


def start_server(root: Path, out_path: Path) -> tuple[subprocess.Popen, str, str]:
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    address = f"127.0.0.1:{free_port()}"
    out = open(out_path, "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tservers.cli",
            "start",
            "--fs-root",
            str(root),
            "--bind",
            address,
            "--log-level",
            "warning",
        ],
        stdout=out,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while "serving on" not in out_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tablet server did not start")
        time.sleep(0.05)
    uuid = out_path.read_text().split()[1]
    return proc, address, uuid


def create(servers: list[tuple[str, str]], tablet_id: str) -> None:
    config = RaftConfigPB(opid_index=-1)
    if len(servers) > 1:
        for address, uuid in servers:
            config.peers.add(uuid=uuid, address=address, member_type=MemberType.VOTER)
    for address, uuid in servers:
        with RpcClient(address, "bench") as rc:
            rc.call(
                uuid,
                "TServer.CreateTablet",
                CreateTabletRequest(
                    tablet_id=tablet_id,
                    table_name="bench",
                    schema=SchemaPB(columns=COLS),
                    config=config,
                ),
                CreateTabletResponse,
                timeout_s=30,
            )


def leader_of(servers: list[tuple[str, str]], tablet_id: str) -> tuple[str, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for address, uuid in servers:
            with RpcClient(address, "bench") as rc:
                resp = rc.call(
                    uuid, "TServer.ListTablets", ListTabletsRequest(), ListTabletsResponse
                )
            for r in resp.tablets:
                if r.tablet_id == tablet_id and r.role == "LEADER":
                    return address, uuid
        time.sleep(0.05)
    raise SystemExit(f"no leader for {tablet_id}")


CHUNK = 4 << 20


def copy_data_path(
    address: str, uuid: str, tablet_id: str, dest: Path, *, sync: bool = True
) -> tuple[int, float]:
    """What a follower's copy job does with the data (tservers/tablet_copy.py): a session,
    chunks fetched two at a time and CRC-checked, written, fsynced."""
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    t0 = time.perf_counter()
    with RpcClient(address, "bench") as rc:
        begin = rc.call(
            uuid,
            "TServer.BeginCopySession",
            BeginCopySessionRequest(tablet_id=tablet_id),
            BeginCopySessionResponse,
        )

        def fetch(f, offset: int) -> bytes:
            resp, sc = rc.call_with_sidecars(
                uuid,
                "TServer.FetchCopyChunk",
                FetchCopyChunkRequest(
                    session_id=begin.session_id,
                    kind=f.kind,
                    name=f.name,
                    offset=offset,
                    bytes_max=CHUNK,
                ),
                FetchCopyChunkResponse,
                timeout_s=30,
            )
            data = bytes(sc[0])
            assert crc32c.crc32c(data) == resp.crc32c
            return data

        with ThreadPoolExecutor(FETCHES_IN_FLIGHT, thread_name_prefix="bench-fetch") as pool:
            for f in begin.files:
                fd = os.open(dest / f"{f.kind}-{f.name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                pending: deque = deque()
                for off in range(0, f.size_bytes, CHUNK):
                    pending.append((off, pool.submit(fetch, f, off)))
                    if len(pending) >= FETCHES_IN_FLIGHT:
                        o, fut = pending.popleft()
                        os.pwrite(fd, fut.result(), o)
                while pending:
                    o, fut = pending.popleft()
                    os.pwrite(fd, fut.result(), o)
                if sync:
                    os.fsync(fd)
                os.close(fd)
                total += f.size_bytes
        rc.call(
            uuid,
            "TServer.EndCopySession",
            EndCopySessionRequest(session_id=begin.session_id),
            EndCopySessionResponse,
        )
    return total, time.perf_counter() - t0


def raw_zmq(total: int) -> float:
    """The same bytes in the same chunks over a zmq DEALER/ROUTER pair on loopback."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    payload = os.urandom(CHUNK)
    n = (total + CHUNK - 1) // CHUNK

    def serve() -> None:
        for _ in range(n):
            ident, _req = router.recv_multipart()
            router.send_multipart([ident, payload])

    th = threading.Thread(target=serve, name="raw-zmq-server")
    th.start()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    t0 = time.perf_counter()
    for _ in range(n):
        dealer.send(b"chunk")
        dealer.recv()
    elapsed = time.perf_counter() - t0
    th.join()
    dealer.close(0)
    router.close(0)
    ctx.term()
    return n * CHUNK / elapsed


def recopy(servers, tablet_id: str, leader_uuid: str) -> float:
    """Delete a follower's replica; time until the leader has copied it back and it runs."""
    address, uuid = next(s for s in servers if s[1] != leader_uuid)
    with RpcClient(address, "bench") as rc:

        def report():
            resp = rc.call(uuid, "TServer.ListTablets", ListTabletsRequest(), ListTabletsResponse)
            return next((r for r in resp.tablets if r.tablet_id == tablet_id), None)

        target = report().applied_index
        t0 = time.perf_counter()
        rc.call(
            uuid,
            "TServer.DeleteTablet",
            DeleteTabletRequest(tablet_id=tablet_id),
            DeleteTabletResponse,
        )
        deadline = time.monotonic() + 120
        while True:
            r = report()
            if r is not None and r.status == "RUNNING" and r.applied_index >= target:
                return time.perf_counter() - t0
            if time.monotonic() > deadline:
                raise SystemExit("the deleted replica was not copied back in time")
            time.sleep(0.02)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=30, help="batches per writer")
    ap.add_argument("--writers", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="replication-bench-"))
    procs = []
    try:
        servers = []
        for i in range(3):
            proc, address, uuid = start_server(tmp / f"ts{i}", tmp / f"ts{i}.out")
            procs.append(proc)
            servers.append((address, uuid))
        nw = args.writers
        per_tablet = nw * args.batches
        payloads = [ipc_bytes(batch(i * BATCH_ROWS)) for i in range(per_tablet)]
        results = {}
        for tid, members in (("rf1", servers[:1]), ("rf3", servers)):
            create(members, tid)
            address, uuid = leader_of(members, tid)
            clients = [TabletServerClient(address, uuid, timeout_s=60) for _ in range(nw)]

            def write(k, j, tid=tid, clients=clients):
                req = WriteRequest(tablet_id=tid, schema_version=1, ops=[OpType.INSERT])
                clients[k]._call("Write", req, WriteResponse, sidecars=[payloads[j * nw + k]])

            elapsed = run_writers(nw, args.batches, write)
            results[tid] = per_tablet * BATCH_ROWS / elapsed
            n = sum(b.num_rows for b in clients[0].scan(tid, batch_rows_max=65536))
            assert n == per_tablet * BATCH_ROWS, n
            for c in clients:
                c.close()
        address, uuid = leader_of(servers, "rf3")
        copied, elapsed = copy_data_path(address, uuid, "rf3", tmp / "copy")
        results["copy_mb_s"] = copied / elapsed / 1e6
        _, elapsed_nosync = copy_data_path(address, uuid, "rf3", tmp / "copy2", sync=False)
        results["copy_nosync_mb_s"] = copied / elapsed_nosync / 1e6
        results["copy_bytes"] = copied
        results["raw_mb_s"] = raw_zmq(copied) / 1e6
        results["recopy_s"] = recopy(servers, "rf3", uuid)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    print(
        f"durable WALs, batches of {BATCH_ROWS} rows, 6 columns, {nw} writers, "
        f"{args.batches} batches each"
    )
    print(f"  replication 1: {results['rf1']:>12,.0f} rows/s")
    print(f"  replication 3: {results['rf3']:>12,.0f} rows/s")
    print(f"  ratio rf3/rf1: {results['rf3'] / results['rf1']:.2f}   (target >= 0.50)")
    mb = results["copy_bytes"] / 1e6
    print(f"tablet copy of rf3 ({mb:.1f} MB: WAL segments and data blocks)")
    print(
        f"  copy data path: {results['copy_mb_s']:>8.1f} MB/s   "
        "(session, 4 MiB CRC chunks, 2 in flight, fsync)"
    )
    print(
        f"  without fsync:  {results['copy_nosync_mb_s']:>8.1f} MB/s   (the same, page cache only)"
    )
    print(f"  raw zmq:        {results['raw_mb_s']:>8.1f} MB/s   (same bytes and chunks, loopback)")
    print(f"  ratio copy/raw: {results['copy_mb_s'] / results['raw_mb_s']:.2f}   (target >= 0.50)")
    print(
        f"  deleted replica copied back and running: {results['recopy_s']:.2f} s "
        f"({mb / results['recopy_s']:.1f} MB/s end to end, start-up and replay included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
