"""Write throughput with replication factor 3 next to replication factor 1, in one run.

Three tablet server processes on loopback, durable WALs. Tablet `rf1` has one replica (on
server 0), tablet `rf3` has three (servers 0, 1, 2; the bench writes at whichever leads).
The same batches of 1,000 rows (6 columns) are written to each by the same number of
concurrent writers, rf1 first, then rf3. A write to rf3 is acknowledged once a majority has
it durable and the leader applied it. Target: rf3 >= 50% of rf1.

    .venv/bin/python bench/replication.py [--batches 30] [--writers 4]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tserver import BATCH_ROWS, COLS, batch, run_writers  # noqa: E402
from coordinator.client.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc.addresses import free_port  # noqa: E402
from rpc.client import RpcClient  # noqa: E402
from tservers.tserver_pb2 import (  # noqa: E402
    CreateTabletRequest,
    CreateTabletResponse,
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
