"""Write throughput with replication factor 3 next to replication factor 1, in one run.

Three tablet server processes on loopback, durable WALs. Tablet `rf1` has one replica (on
server 0), tablet `rf3` has three (servers 0, 1, 2; the bench writes at whichever leads).
The same batches of 1,000 rows (6 columns) are written to each by the same number of
concurrent writers, rf1 first, then rf3. A write to rf3 is acknowledged once a majority has
it durable and the leader applied it. Target: rf3 >= 50% of rf1.

Then tablet copy of rf3 from its leader, each variant once per round, several rounds, the
median printed (the machine is shared), side by side with a raw zmq transfer of the same
bytes on loopback (DEALER/ROUTER; the same chunk sizes, the same number of requests in
flight; no protobuf, CRC or file read):
  - to disk: the follower's own data path (`tablet_copy.download_files`: a session, every
    file in CRC-checked chunks on FETCH_WINDOW fetcher threads, each chunk written with its
    write-back started at once (`tablet_copy.write_back`), each file fsynced once and
    renamed, directories fsynced), against raw zmq writing the same files with the same
    `write_back` and one fsync each;
  - to the page cache only: the same two with plain writes, nothing written back or
    fsynced;
  - raw zmq without any disk: the target compares the copy to disk with this one
    (copy to disk >= 0.50 of the network alone);
  - `copy_tablet` end to end onto a fresh fs root (what `tserver copy-from-remote` runs:
    also superblocks and consensus metadata, fsynced);
and finally a follower's replica deleted and copied back by the leader, until it runs again
with every entry applied (start-up and WAL replay included).

    .venv/bin/python bench/replication.py [--batches 30] [--writers 4] [--copy-repeats 7]
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

import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tserver import BATCH_ROWS, COLS, batch, run_writers  # noqa: E402
from coordinator.client.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc.addresses import free_port  # noqa: E402
from rpc.client import RpcClient  # noqa: E402
from tservers.fs import FsLayout  # noqa: E402
from tservers.tablet_copy import (  # noqa: E402
    FETCH_CHUNK_BYTES,
    FETCH_WINDOW,
    OfflineTarget,
    _Job,
    copy_tablet,
    download_files,
    write_back,
)
from tservers.tserver_pb2 import (  # noqa: E402
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    CreateTabletRequest,
    CreateTabletResponse,
    DeleteTabletRequest,
    DeleteTabletResponse,
    EndCopySessionRequest,
    EndCopySessionResponse,
    ListTabletsRequest,
    ListTabletsResponse,
    MemberType,
    OpType,
    RaftConfigPB,
    SchemaPB,
    StartTabletCopyRequest,
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


def _session(rc: RpcClient, uuid: str, tablet_id: str) -> BeginCopySessionResponse:
    return rc.call(
        uuid,
        "TServer.BeginCopySession",
        BeginCopySessionRequest(tablet_id=tablet_id),
        BeginCopySessionResponse,
        timeout_s=30,
    )


def copy_data_path(
    address: str, uuid: str, tablet_id: str, dest: Path, *, fsync: bool
) -> tuple[int, float, list]:
    """The follower's data path, its own code (`tablet_copy.download_files`, as
    `copy_tablet` calls it): a session, WAL segments then data blocks as one stream of
    CRC-checked chunks, written, fsynced (or not), renamed."""
    for kind in ("wal", "data"):
        (dest / kind).mkdir(parents=True)
    with RpcClient(address, "bench") as rc:
        t0 = time.perf_counter()
        begin = _session(rc, uuid, tablet_id)
        job = _Job(StartTabletCopyRequest(tablet_id=tablet_id, source_uuid=uuid))
        job.started = time.monotonic()
        files = [(f, dest / k) for k in ("wal", "data") for f in begin.files if f.kind == k]
        total = download_files(rc, job, begin.session_id, files, fsync=fsync)
        rc.call(
            uuid,
            "TServer.EndCopySession",
            EndCopySessionRequest(session_id=begin.session_id),
            EndCopySessionResponse,
        )
        elapsed = time.perf_counter() - t0
    return total, elapsed, [f.size_bytes for f in begin.files]


def copy_end_to_end(address: str, uuid: str, tablet_id: str, root: Path) -> tuple[int, float]:
    """`copy_tablet` onto a fresh fs root (what `tserver copy-from-remote` runs): the data
    path plus superblocks COPYING and READY and the merged consensus metadata, fsynced."""
    fs = FsLayout.format(root)
    job = _Job(
        StartTabletCopyRequest(tablet_id=tablet_id, source_uuid=uuid, source_address=address)
    )
    job.started = time.monotonic()
    t0 = time.perf_counter()
    total = copy_tablet(OfflineTarget(fs), job, caller_uuid=fs.uuid)
    return total, time.perf_counter() - t0


def raw_zmq(sizes: list[int], dest: Path | None, *, fsync: bool) -> float:
    """The same bytes over a zmq DEALER/ROUTER pair on loopback, in the copy's chunk plan
    (FETCH_CHUNK_BYTES, the last chunk of each file shorter) with FETCH_WINDOW requests in
    flight; no protobuf, no CRC, no file read at the sender. With `dest`, each file's
    chunks are written into a file of its own: with `fsync` as the copy writes them
    (`tablet_copy.write_back`: uncached writes whose write-back starts at once, or pwrite
    and write-back started per chunk), each file fsynced once; without, plain pwrite."""
    plan = [
        (k, off, min(FETCH_CHUNK_BYTES, size - off))
        for k, size in enumerate(sizes)
        for off in range(0, size, FETCH_CHUNK_BYTES)
    ]
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    payload = os.urandom(FETCH_CHUNK_BYTES)

    def serve() -> None:
        for _ in plan:
            ident, n = router.recv_multipart()
            router.send_multipart([ident, memoryview(payload)[: int(n)]], copy=False)

    th = threading.Thread(target=serve, name="raw-zmq-server")
    th.start()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    if dest is not None:
        dest.mkdir(parents=True)
    fds: dict[int, int] = {}
    uncached = True
    t0 = time.perf_counter()
    sent = 0
    for got, (k, off, n) in enumerate(plan):
        while sent < len(plan) and sent - got < FETCH_WINDOW:
            dealer.send(str(plan[sent][2]).encode())
            sent += 1
        frame = dealer.recv(copy=False)
        assert len(frame.buffer) == n
        if dest is not None:
            fd = fds.get(k)
            if fd is None:
                fd = fds[k] = os.open(dest / f"f{k}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            if fsync:
                uncached = write_back(fd, frame.buffer, off, uncached=uncached)
            else:
                os.pwrite(fd, frame.buffer, off)
            if off + n == sizes[k]:
                if fsync:
                    os.fsync(fd)
                os.close(fds.pop(k))
    elapsed = time.perf_counter() - t0
    th.join()
    dealer.close(0)
    router.close(0)
    ctx.term()
    return sum(sizes) / elapsed


def copy_runs(address: str, uuid: str, tablet_id: str, tmp: Path, repeats: int) -> dict:
    """Every variant once per round, in a rotated order, each after os.sync() (no dirty
    pages of the one before being written back under it); medians of MB/s."""
    _, _, sizes = copy_data_path(address, uuid, tablet_id, tmp / "warm-up", fsync=False)
    shutil.rmtree(tmp / "warm-up")
    variants = {
        "copy_sync": lambda d: copy_data_path(address, uuid, tablet_id, d, fsync=True)[:2],
        "copy_nosync": lambda d: copy_data_path(address, uuid, tablet_id, d, fsync=False)[:2],
        "copy_e2e": lambda d: copy_end_to_end(address, uuid, tablet_id, d),
        "raw_net": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, None, fsync=False)),
        "raw_nosync": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, d, fsync=False)),
        "raw_sync": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, d, fsync=True)),
    }
    names = list(variants)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            work = tmp / f"{name}-{r}"
            os.sync()
            total, elapsed = variants[name](work)
            assert total == sum(sizes), (name, total, sum(sizes))
            runs[name].append(total / elapsed)
            shutil.rmtree(work, ignore_errors=True)
    out: dict = {k: statistics.median(v) / 1e6 for k, v in runs.items()}
    out["copy_bytes"] = sum(sizes)
    out["copy_files"] = len(sizes)
    # The same ratio within each round (the two ran a few hundred ms apart), whose spread
    # shows how much the machine moved.
    pairs = zip(runs["copy_sync"], runs["raw_net"], strict=True)
    out["round_ratios"] = sorted(c / r for c, r in pairs)
    return out


def tablet_bytes(address: str, uuid: str, tablet_id: str) -> int:
    """What a copy of the tablet would move now: the files of a fresh copy session."""
    with RpcClient(address, "bench") as rc:
        begin = _session(rc, uuid, tablet_id)
        rc.call(
            uuid,
            "TServer.EndCopySession",
            EndCopySessionRequest(session_id=begin.session_id),
            EndCopySessionResponse,
        )
    return sum(f.size_bytes for f in begin.files)


def fill(address: str, uuid: str, tablet_id: str, first_key: int, target_bytes: int) -> int:
    """Write more batches (keys from `first_key`, untimed) until a copy of the tablet would
    move at least `target_bytes`; returns the next free key."""
    key = first_key
    with TabletServerClient(address, uuid, timeout_s=60) as client:
        while tablet_bytes(address, uuid, tablet_id) < target_bytes:
            for _ in range(20):
                req = WriteRequest(tablet_id=tablet_id, schema_version=1, ops=[OpType.INSERT])
                client._call("Write", req, WriteResponse, sidecars=[ipc_bytes(batch(key))])
                key += BATCH_ROWS
    return key


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
    ap.add_argument(
        "--copy-repeats", type=int, default=7, help="rounds of the copy and raw variants"
    )
    ap.add_argument(
        "--copy-mb",
        type=int,
        default=64,
        help="grow the copied tablet (rf3) to at least this many MB first (untimed writes)",
    )
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
        fill(address, uuid, "rf3", per_tablet * BATCH_ROWS, args.copy_mb * 1_000_000)
        copy = copy_runs(address, uuid, "rf3", tmp / "copy", args.copy_repeats)
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
    mb = copy["copy_bytes"] / 1e6
    print(
        f"tablet copy of rf3 ({mb:.1f} MB in {copy['copy_files']} files: WAL segments and data "
        f"blocks), {FETCH_CHUNK_BYTES >> 20} MiB CRC-checked chunks, {FETCH_WINDOW} in flight "
        f"(copy: {FETCH_WINDOW} fetcher threads; raw: one socket); median MB/s of "
        f"{args.copy_repeats} rounds, variants side by side"
    )
    print("                         tablet copy     raw zmq    copy/raw")
    for label, c, r in (
        ("to disk, fsync per file", "copy_sync", "raw_sync"),
        ("to the page cache only", "copy_nosync", "raw_nosync"),
    ):
        print(f"  {label:<23}{copy[c]:>9.1f}   {copy[r]:>9.1f}      {copy[c] / copy[r]:.2f}")
    print(f"  network only, no disk      -         {copy['raw_net']:>9.1f}")
    rr = copy["round_ratios"]
    print(
        f"  copy to disk / raw network only: {copy['copy_sync'] / copy['raw_net']:.2f}   "
        f"(target >= 0.50; within each round: median {statistics.median(rr):.2f}, "
        f"{rr[0]:.2f} to {rr[-1]:.2f})"
    )
    print(
        f"  copy_tablet end to end (onto a stopped server's fs root: superblocks, consensus "
        f"metadata, fsynced): {copy['copy_e2e']:.1f} MB/s"
    )
    print(
        f"  deleted replica copied back and running: {results['recopy_s']:.2f} s "
        f"({mb / results['recopy_s']:.1f} MB/s end to end, start-up and replay included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
