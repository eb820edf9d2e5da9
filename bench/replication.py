"""Write throughput with replication factor 3 next to replication factor 1, in one run.

Three tablet server processes on loopback, durable WALs. Tablet `rf1` has one replica (on
server 0), tablet `rf3` has three (servers 0, 1, 2; the bench writes at whichever leads).
The same batches of 1,000 rows (6 columns) are written to each by the same number of
concurrent writers, in rounds: each round writes rf1 and rf3 one after the other (in turn
first), with fresh keys; the medians and the ratio within each round are printed (the
machine drifts; a single pair of runs swings by half). A write to rf3 is acknowledged once
a majority has it durable and the leader applied it. Target: rf3 >= 50% of rf1.

Then tablet copy of rf3 from its leader, each variant once per round, several rounds, the
median printed (the machine is shared), side by side with a raw zmq transfer of the same
bytes on loopback (DEALER/ROUTER; the same chunk sizes, the same number of requests in
flight; no protobuf or CRC; the sender sends one in-memory buffer again and again, except
where it sends the tablet's files):
  - to disk: the follower's own data path (`tablet_copy.download_files`: a session, every
    file in CRC-checked chunks on FETCH_WINDOW fetcher threads, each chunk written with its
    write-back started at once (`tablet_copy.write_back`), each file fsynced once and
    renamed, directories fsynced), against raw zmq writing the same files with the same
    `write_back` and one fsync each;
  - to the page cache only: the same two with plain writes, nothing written back or
    fsynced;
  - raw zmq without any disk at the receiver, three times: sending one in-memory buffer
    again and again (the network alone), and sending the tablet's own files, mapped from
    the source server's fs root while a copy session anchors them (the same bytes, read as
    the copy's source reads them), from a thread of this process and from a process of
    its own (`raw_zmq_sender.py`: as a copy's two ends are, each end with its own zmq I/O
    thread and CPU caches; a sender in the receiving process shares both with the
    receiver). Target: copy to disk >= 0.50 of raw zmq moving the same bytes; all three
    ratios are printed;
  - raw zmq doing the copy's work between two processes (CRC32C computed by the sender and
    checked by the receiver, the files written as the copy writes them): what the copy's
    own machinery (rpc, sessions, fetcher threads) costs on top;
  - `copy_tablet` end to end onto a fresh fs root (what `tserver copy-from-remote` runs:
    also superblocks and consensus metadata, fsynced);
and finally a follower's replica deleted and copied back by the leader, until it runs again
with every entry applied (start-up and WAL replay included).

    .venv/bin/python bench/replication.py [--batches 100] [--rounds 5] [--writers 4]
        [--copy-repeats 7] [--copy-mb 64] [--writes-only]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import crc32c
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.raw_zmq_sender import serve  # noqa: E402
from bench.tserver import BATCH_ROWS, COLS, batch, run_writers  # noqa: E402
from logcentric.tablets import TabletServerClient, ipc_bytes  # noqa: E402
from rpc import errors  # noqa: E402
from rpc.addresses import free_port  # noqa: E402
from rpc.client import RpcClient  # noqa: E402
from rpc.protocols.tserver_pb2 import (  # noqa: E402
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
from tservers.fs import FsLayout  # noqa: E402
from tservers.tablet.tablet import TabletOptions  # noqa: E402
from tservers.tablet_copy import (  # noqa: E402
    FETCH_CHUNK_BYTES,
    FETCH_WINDOW,
    OfflineTarget,
    _Job,
    copy_tablet,
    download_files,
    write_back,
)

RAW_TIMEOUT_S = 60  # the raw transfer's deadline for any one step


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
            "--insecure",  # the baseline: this bench is not about security
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


def raw_zmq(
    sizes: list[int],
    dest: Path | None,
    *,
    fsync: bool,
    sources: list[Path] | None = None,
    two_processes: bool = False,
    crc: bool = False,
) -> float:
    """The same bytes over a zmq DEALER/ROUTER pair on loopback, in the copy's chunk plan
    (FETCH_CHUNK_BYTES, the last chunk of each file shorter) with FETCH_WINDOW requests in
    flight; no protobuf, no file read at the sender. The sender is a thread of this process
    or, with `two_processes`, a process of its own (`raw_zmq_sender.py`, started and bound
    before the clock starts), as a copy's two ends are. With `crc` each chunk carries its
    CRC32C, computed by the sender and checked here, as the copy's do. With `dest`, each
    file's chunks are written into a file of its own: with `fsync` as the copy writes them
    (`tablet_copy.write_back`: uncached writes whose write-back starts at once, or pwrite
    and write-back started per chunk), each file fsynced once; without, plain pwrite."""
    plan = [
        (k, off, min(FETCH_CHUNK_BYTES, size - off))
        for k, size in enumerate(sizes)
        for off in range(0, size, FETCH_CHUNK_BYTES)
    ]
    ctx = zmq.Context()
    sender = None
    th = None
    maps: list[mmap.mmap] = []
    views: list[memoryview] = []
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, RAW_TIMEOUT_S * 1000)  # a failed sender fails the bench
    try:
        if two_processes:
            spec = {"plan": plan, "sources": [str(p) for p in sources or ()], "crc": crc}
            sender = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("raw_zmq_sender.py")),
                 "--timeout-s", str(RAW_TIMEOUT_S)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            sender.stdin.write(json.dumps(spec))
            sender.stdin.close()
            ready, _, _ = select.select([sender.stdout], [], [], RAW_TIMEOUT_S)
            if not ready:
                raise SystemExit(f"the raw zmq sender was not ready within {RAW_TIMEOUT_S} s")
            port = int(sender.stdout.readline())
        else:
            router = ctx.socket(zmq.ROUTER)
            router.setsockopt(zmq.RCVTIMEO, RAW_TIMEOUT_S * 1000)
            port = router.bind_to_random_port("tcp://127.0.0.1")
            for src in sources or ():
                with open(src, "rb") as f:
                    maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
            views = [memoryview(m) for m in maps]
            th = threading.Thread(
                target=serve,
                args=(router, plan, views or [memoryview(os.urandom(FETCH_CHUNK_BYTES))]),
                kwargs={"crc": crc, "one_buffer": not views},
                name="raw-zmq-server",
            )
            th.start()
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
            frames = dealer.recv_multipart(copy=False)
            frame = frames[-1]
            assert len(frame.buffer) == n
            if crc and crc32c.crc32c(frame.buffer) != int.from_bytes(frames[0].bytes, "little"):
                raise AssertionError(f"bad CRC32C in chunk {k} at {off}")
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
            del frames, frame
        elapsed = time.perf_counter() - t0
    finally:
        if sender is not None and sender.poll() is None and sys.exc_info()[0] is not None:
            sender.kill()
    if th is not None:
        th.join()
        router.close(0)
    if sender is not None:
        assert sender.wait(RAW_TIMEOUT_S) == 0, "the raw zmq sender failed"
        sender.stdout.close()
    dealer.close(0)
    ctx.term()
    # The maps close once unreferenced: pyzmq drops its references to the slices it sent
    # from a thread of its own, possibly after term(), so closing them here could fail.
    views.clear()
    maps.clear()
    return sum(sizes) / elapsed


def cpu_times() -> tuple[float, float]:
    """(CPU seconds busy on the whole machine, all cores, every process; monotonic time)
    from /proc/stat: what a variant costs the machine, both ends and the kernel's work
    for them included (the machine is otherwise idle while the bench runs)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), time.monotonic()


def cpu_used(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, float]:
    return after[0] - before[0], after[1] - before[1]


def land_only(sources: list[Path], dest: Path) -> float:
    """The landing alone, no network: the tablet's files, mapped (in the page cache, as the
    source serves them), written into files of their own in the copy's chunk plan by
    FETCH_WINDOW threads taking the chunks in order, each chunk as the copy writes it
    (`tablet_copy.write_back`), each file fsynced once. What the disk and the page cache
    take of these bytes on this machine when nothing else runs: the ceiling of any copy to
    disk here, however cheap its transfer."""
    maps = []
    for src in sources:
        with open(src, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    sizes = [len(m) for m in maps]
    plan = deque(
        (k, off, min(FETCH_CHUNK_BYTES, size - off))
        for k, size in enumerate(sizes)
        for off in range(0, size, FETCH_CHUNK_BYTES)
    )
    dest.mkdir(parents=True)
    fds = [os.open(dest / f"f{k}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for k in range(len(maps))]
    left = list(sizes)
    lock = threading.Lock()
    errors_seen: list[BaseException] = []

    def writer() -> None:
        uncached = True
        try:
            while True:
                with lock:
                    if not plan or errors_seen:
                        return
                    k, off, n = plan.popleft()
                with memoryview(maps[k]) as view:
                    uncached = write_back(fds[k], view[off : off + n], off, uncached=uncached)
                with lock:
                    left[k] -= n
                    last = left[k] == 0
                if last:
                    os.fsync(fds[k])
        except BaseException as e:  # raised below, once every writer has ended
            with lock:
                errors_seen.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=writer, name=f"land-{i}") for i in range(FETCH_WINDOW)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    for m in maps:
        m.close()
    if errors_seen:
        raise errors_seen[0]
    return sum(sizes) / elapsed


def copy_runs(address: str, uuid: str, root: Path, tablet_id: str, tmp: Path, repeats: int) -> dict:
    """Every variant once per round, in a rotated order, each after os.sync() (no dirty
    pages of the one before being written back under it); medians of MB/s. `root` is the
    source server's fs root: raw zmq also sends the tablet's own files from there, mapped
    (the same bytes, read the way the source reads them), while a session of ours anchors
    them."""
    _, _, sizes = copy_data_path(address, uuid, tablet_id, tmp / "warm-up", fsync=False)
    shutil.rmtree(tmp / "warm-up")
    with RpcClient(address, "bench") as pin_rc:
        pin = _session(pin_rc, uuid, tablet_id)
        try:
            return _copy_rounds(address, uuid, root, tablet_id, tmp, repeats, sizes, pin)
        finally:
            pin_rc.call(
                uuid,
                "TServer.EndCopySession",
                EndCopySessionRequest(session_id=pin.session_id),
                EndCopySessionResponse,
            )


def _copy_rounds(address, uuid, root, tablet_id, tmp, repeats, sizes, pin) -> dict:
    assert [f.size_bytes for f in pin.files] == sizes, "the tablet changed under the bench"
    fs = FsLayout(root, uuid)
    sources = [
        (fs.wal_dir(tablet_id) if f.kind == "wal" else fs.data_dir(tablet_id)) / f.name
        for f in pin.files
    ]
    variants = {
        "copy_sync": lambda d: copy_data_path(address, uuid, tablet_id, d, fsync=True)[:2],
        "copy_nosync": lambda d: copy_data_path(address, uuid, tablet_id, d, fsync=False)[:2],
        "copy_e2e": lambda d: copy_end_to_end(address, uuid, tablet_id, d),
        "raw_net": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, None, fsync=False)),
        "raw_net_files": lambda d: (
            sum(sizes),
            sum(sizes) / raw_zmq(sizes, None, fsync=False, sources=sources),
        ),
        "raw_nosync": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, d, fsync=False)),
        "raw_sync": lambda d: (sum(sizes), sum(sizes) / raw_zmq(sizes, d, fsync=True)),
        "raw_net_2p": lambda d: (
            sum(sizes),
            sum(sizes) / raw_zmq(sizes, None, fsync=False, sources=sources, two_processes=True),
        ),
        "land_only": lambda d: (sum(sizes), sum(sizes) / land_only(sources, d)),
        "raw_work_2p": lambda d: (
            sum(sizes),
            sum(sizes)
            / raw_zmq(sizes, d, fsync=True, sources=sources, two_processes=True, crc=True),
        ),
    }
    names = list(variants)
    runs: dict[str, list[float]] = {name: [] for name in names}
    cpu_ms_per_mb: dict[str, list[float]] = {name: [] for name in names}
    busy: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            work = tmp / f"{name}-{r}"
            os.sync()
            before = cpu_times()
            total, elapsed = variants[name](work)
            used_s, wall_s = cpu_used(before, cpu_times())
            assert total == sum(sizes), (name, total, sum(sizes))
            runs[name].append(total / elapsed)
            cpu_ms_per_mb[name].append(used_s * 1e3 / (total / 1e6))
            busy[name].append(used_s / wall_s / (os.cpu_count() or 1))
            shutil.rmtree(work, ignore_errors=True)
    out: dict = {k: statistics.median(v) / 1e6 for k, v in runs.items()}
    out["cpu_ms_per_mb"] = {k: statistics.median(v) for k, v in cpu_ms_per_mb.items()}
    out["busy"] = {k: statistics.median(v) for k, v in busy.items()}
    out["copy_bytes"] = sum(sizes)
    out["copy_files"] = len(sizes)
    # The same ratio within each round (the two ran a few hundred ms apart), whose spread
    # shows how much the machine moved.
    pairs = zip(runs["copy_sync"], runs["raw_net"], strict=True)
    out["round_ratios"] = sorted(c / r for c, r in pairs)
    pairs = zip(runs["copy_sync"], runs["raw_net_files"], strict=True)
    out["round_ratios_files"] = sorted(c / r for c, r in pairs)
    pairs = zip(runs["copy_sync"], runs["raw_net_2p"], strict=True)
    out["round_ratios_2p"] = sorted(c / r for c, r in pairs)
    pairs = zip(runs["land_only"], runs["raw_net_2p"], strict=True)
    out["round_ratios_land"] = sorted(c / r for c, r in pairs)
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


def fill(servers, tablet_id: str, first_key: int, target_bytes: int) -> tuple[str, str]:
    """Write more batches (keys from `first_key`, untimed) until a copy of the tablet would
    move at least `target_bytes`; returns its leader then (a write lost to an election on
    this loaded machine is written again at the new leader)."""
    key = first_key
    while True:
        address, uuid = leader_of(servers, tablet_id)
        try:
            with TabletServerClient(address, uuid, timeout_s=60) as client:
                while tablet_bytes(address, uuid, tablet_id) < target_bytes:
                    for _ in range(20):
                        req = WriteRequest(
                            tablet_id=tablet_id, schema_version=1, ops=[OpType.INSERT]
                        )
                        client._call("Write", req, WriteResponse, sidecars=[ipc_bytes(batch(key))])
                        key += BATCH_ROWS
            return address, uuid
        except errors.NotLeader as e:
            print(f"  (fill: {e}; again at the new leader)", file=sys.stderr)


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


def settle(servers: list[tuple[str, str]], *, flushed: bool) -> None:
    """Wait until every replica on the servers has applied its tablet's last entry and,
    with `flushed`, none has a memstore flush due or running (writes of one phase must not
    be paid for by the next)."""
    threshold = TabletOptions().flush_rows_threshold
    deadline = time.monotonic() + 120
    while True:
        reports = []
        for address, uuid in servers:
            with RpcClient(address, "bench") as rc:
                resp = rc.call(
                    uuid, "TServer.ListTablets", ListTabletsRequest(), ListTabletsResponse
                )
            reports.extend(resp.tablets)
        last: dict[str, int] = {}
        for r in reports:
            last[r.tablet_id] = max(last.get(r.tablet_id, 0), r.last_op_id.index)
        if all(
            r.applied_index >= last[r.tablet_id] and (not flushed or r.memstore_rows < threshold)
            for r in reports
        ):
            return
        if time.monotonic() > deadline:
            raise SystemExit("replicas did not settle in time")
        time.sleep(0.005)


def write_rounds(servers, nw: int, batches: int, rounds: int) -> dict[str, list[float]]:
    """Rows/s of rf1 and rf3 in `rounds` rounds, the two side by side in each (in turn
    first), every round with fresh keys: the machine's drift moves both alike, and the
    ratio is taken within each round."""
    per_round = nw * batches
    out: dict[str, list[float]] = {k: [] for k in ("rf1", "rf3", "rf1_applied", "rf3_applied")}
    clients: dict[str, list[TabletServerClient]] = {}
    for tid, members in (("rf1", servers[:1]), ("rf3", servers)):
        create(members, tid)
        address, uuid = leader_of(members, tid)
        clients[tid] = [TabletServerClient(address, uuid, timeout_s=60) for _ in range(nw)]
    try:
        for r in range(rounds):
            first = r * per_round
            payloads = [ipc_bytes(batch((first + i) * BATCH_ROWS)) for i in range(per_round)]
            for tid in ("rf1", "rf3") if r % 2 == 0 else ("rf3", "rf1"):
                cs = clients[tid]

                def write(k, j, tid=tid, cs=cs, payloads=payloads):
                    req = WriteRequest(tablet_id=tid, schema_version=1, ops=[OpType.INSERT])
                    cs[k]._call("Write", req, WriteResponse, sidecars=[payloads[j * nw + k]])

                settle(servers, flushed=True)  # nothing of the phase before left to do
                t0 = time.perf_counter()
                acked = run_writers(nw, batches, write)
                settle(servers, flushed=False)
                applied = time.perf_counter() - t0
                out[tid].append(per_round * BATCH_ROWS / acked)
                out[tid + "_applied"].append(per_round * BATCH_ROWS / applied)
        for tid, cs in clients.items():
            n = sum(b.num_rows for b in cs[0].scan(tid, batch_rows_max=65536))
            assert n == rounds * per_round * BATCH_ROWS, (tid, n)
    finally:
        for cs in clients.values():
            for c in cs:
                c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--batches",
        type=int,
        default=100,
        help="batches per writer per round (400,000 rows a phase with 4 writers: every phase "
        "holds memstore flushes, at 200,000 rows)",
    )
    ap.add_argument(
        "--rounds", type=int, default=5, help="rounds of rf1 and rf3 writes, side by side"
    )
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
    ap.add_argument("--writes-only", action="store_true", help="skip the tablet copy part")
    ap.add_argument(
        "--copy-dir",
        type=Path,
        help="where the copies and raw transfers land (default: beside the servers' fs "
        "roots, on the same file system); e.g. a tmpfs to see the copy without the disk",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="replication-bench-"))
    copy_dir = tmp / "copy"
    if args.copy_dir is not None:
        copy_dir = Path(tempfile.mkdtemp(prefix="replication-bench-copy-", dir=args.copy_dir))
    procs = []
    try:
        servers = []
        for i in range(3):
            proc, address, uuid = start_server(tmp / f"ts{i}", tmp / f"ts{i}.out")
            procs.append(proc)
            servers.append((address, uuid))
        nw = args.writers
        per_round = nw * args.batches  # batches per tablet per round
        writes = write_rounds(servers, nw, args.batches, args.rounds)
        results = {}
        next_key = args.rounds * per_round * BATCH_ROWS
        copy = {}
        if not args.writes_only:
            address, uuid = fill(servers, "rf3", next_key, args.copy_mb * 1_000_000)
            settle(servers, flushed=True)  # no flush due: the tablet's files stay as they are
            root = tmp / f"ts{[u for _, u in servers].index(uuid)}"
            copy = copy_runs(address, uuid, root, "rf3", copy_dir, args.copy_repeats)
            results["recopy_s"] = recopy(servers, "rf3", uuid)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)  # hundreds of MB a run
        shutil.rmtree(copy_dir, ignore_errors=True)
    rf1, rf3 = writes["rf1"], writes["rf3"]
    ratios = sorted(b / a for a, b in zip(rf1, rf3, strict=True))
    print(
        f"durable WALs, plaintext (--insecure), batches of {BATCH_ROWS} rows, 6 columns, "
        f"{nw} writers, {args.batches} batches each per round; "
        f"median of {args.rounds} rounds (range)"
    )
    print(
        f"  replication 1: {statistics.median(rf1):>12,.0f} rows/s "
        f"({min(rf1):,.0f} to {max(rf1):,.0f})"
    )
    print(
        f"  replication 3: {statistics.median(rf3):>12,.0f} rows/s "
        f"({min(rf3):,.0f} to {max(rf3):,.0f})"
    )
    print(
        f"  ratio rf3/rf1: {statistics.median(rf3) / statistics.median(rf1):.2f}   "
        f"(target >= 0.50; within each round: median {statistics.median(ratios):.2f}, "
        f"{ratios[0]:.2f} to {ratios[-1]:.2f})"
    )
    if not copy:
        return 0
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
    print(
        f"  network only, no disk      -         {copy['raw_net']:>9.1f}   (one buffer, sent again)"
    )
    print(
        f"  network only, no disk      -         {copy['raw_net_files']:>9.1f}   "
        "(the tablet's files)"
    )
    print(
        f"  network only, no disk      -         {copy['raw_net_2p']:>9.1f}   "
        "(the tablet's files, the sender a process of its own)"
    )
    print(
        f"  the copy's work, two processes: {copy['raw_work_2p']:.1f} MB/s (raw zmq, the sender "
        "a process of its own, CRC32C at both ends, to disk as the copy writes); "
        f"copy/raw {copy['copy_sync'] / copy['raw_work_2p']:.2f}"
    )
    for label, key, rk in (
        ("one buffer", "raw_net", "round_ratios"),
        ("the tablet's files", "raw_net_files", "round_ratios_files"),
        ("the tablet's files, two processes", "raw_net_2p", "round_ratios_2p"),
    ):
        rr = copy[rk]
        print(
            f"  copy to disk / raw network only ({label}): "
            f"{copy['copy_sync'] / copy[key]:.2f}   (target >= 0.50; within each round: "
            f"median {statistics.median(rr):.2f}, {rr[0]:.2f} to {rr[-1]:.2f})"
        )
    rr = copy["round_ratios_land"]
    print(
        f"  the landing alone, no network ({FETCH_WINDOW} threads writing the tablet's files "
        f"from memory as the copy writes them, fsync per file): {copy['land_only']:.1f} MB/s; "
        f"copy/that {copy['copy_sync'] / copy['land_only']:.2f}; that / raw network only "
        f"(two processes) {copy['land_only'] / copy['raw_net_2p']:.2f} (within each round: "
        f"median {statistics.median(rr):.2f}, {rr[0]:.2f} to {rr[-1]:.2f}): the most the "
        "target ratio can be here with a transfer that costs nothing"
    )
    cpu, busy = copy["cpu_ms_per_mb"], copy["busy"]
    print(
        f"  CPU per MB, the whole machine ({os.cpu_count()} cores; medians; how busy the cores "
        "were meanwhile): "
        + ", ".join(
            f"{label} {cpu[k]:.2f} ms ({busy[k]:.0%})"
            for label, k in (
                ("copy to disk", "copy_sync"),
                ("raw network only (the tablet's files, one process)", "raw_net_files"),
                ("the landing alone", "land_only"),
                ("raw zmq to disk", "raw_sync"),
            )
        )
        + " (the two-process variants also count the sender's start-up)"
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
