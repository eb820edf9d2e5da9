"""Tablet copy (seed 000, "Follower Tablet Copy"): source sessions and follower jobs.

Source (`CopySource`): `BeginCopySession` snapshots a running replica's superblock,
consensus metadata and file list (data blocks, WAL segments; the open segment up to what is
written) and anchors the replica (no WAL GC, no compaction) until `EndCopySession` or
`SESSION_IDLE_S` without a fetch. `FetchCopyChunk` serves a file range as a sidecar with its
CRC32C.

Follower (`CopyJobs`): `StartTabletCopy` runs the seed's checks in order (the rpc layer
checked the recipient; then ALREADY_IN_PROGRESS, expected data state, caller term), then
queues a job on one bounded worker thread: delete a running replica first; superblock
COPYING (fsynced); consensus metadata merged (highest term wins, own vote kept when the
remote term is not higher, remote config adopted) and written before any download; WAL
segments; data blocks (each chunk CRC-checked, files fsynced and renamed into place);
superblock READY; replica started. A failure deletes the replica again (tombstone keeping
its last op id); a crash leaves COPYING, which startup turns into DELETED.
"""

from __future__ import annotations

import enum
import logging
import os
import queue
import secrets
import shutil
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import crc32c

from rpc import errors
from rpc.client import RpcClient
from tservers.crash import crash_point
from tservers.metafile import fsync_dir
from tservers.tserver_pb2 import (
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    ConsensusMetaPB,
    CopyFilePB,
    CopyJobPB,
    DataState,
    EndCopySessionRequest,
    EndCopySessionResponse,
    FetchCopyChunkRequest,
    FetchCopyChunkResponse,
    StartTabletCopyRequest,
    SuperblockPB,
)

log = logging.getLogger(__name__)

SESSION_IDLE_S = 60.0
SESSIONS_MAX = 16
CHUNK_BYTES_MAX = 4 << 20
FETCHES_IN_FLIGHT = 2  # chunk fetches outstanding per file, overlapping the disk writes
JOBS_QUEUE_MAX = 8
JOBS_KEPT_MAX = 32  # finished jobs kept for reports
CALL_TIMEOUT_S = 30.0


class JobState(enum.Enum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class CopyCancelled(Exception):
    """The operator cancelled the copy (TServer.CancelTabletCopy)."""


@dataclass(slots=True)
class _Job:
    """Progress of one copy (mutable; read under CopyJobs._lock for reports)."""

    req: StartTabletCopyRequest
    state: JobState = JobState.QUEUED
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    started: float = 0.0
    ended: float = 0.0
    error: str = ""
    cancel: bool = False

    def to_pb(self, rate_limit_bytes_s: int) -> CopyJobPB:
        end = self.ended or time.monotonic()
        elapsed = end - self.started if self.started else 0.0
        return CopyJobPB(
            tablet_id=self.req.tablet_id,
            source_uuid=self.req.source_uuid,
            state=self.state.value,
            files_done=self.files_done,
            files_total=self.files_total,
            bytes_done=self.bytes_done,
            bytes_total=self.bytes_total,
            rate_bytes_s=self.bytes_done / elapsed if elapsed > 0 else 0.0,
            error=self.error,
            rate_limit_bytes_s=rate_limit_bytes_s,
        )


@dataclass(slots=True)
class _Session:
    session_id: str
    tablet: object
    files: dict[tuple[str, str], tuple[Path, int]]
    last_used: float


class CopySource:
    """Copy sessions served by this server (any running replica can be a source)."""

    def __init__(self, manager) -> None:
        self.manager = manager
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def begin(self, req: BeginCopySessionRequest) -> BeginCopySessionResponse:
        self.expire()
        t = self.manager.tablet(req.tablet_id)
        with self._lock:
            if len(self._sessions) >= SESSIONS_MAX:
                raise errors.Throttled(f"{SESSIONS_MAX} copy sessions open", retry_after_ms=1000)
        with t.flush_lock:  # no flush or compaction changes the file set meanwhile
            with t.lock:
                sb = SuperblockPB()
                sb.CopyFrom(t.sb)
                cm = ConsensusMetaPB()
                cm.CopyFrom(t.cmeta)
                t.copy_anchors += 1
            wal = t.wal
            with wal.lock:
                closed = [s.path for s in wal.segments]
                current = (wal.writer.path, wal.writer.offset) if wal.writer else None
        files: dict[tuple[str, str], tuple[Path, int]] = {}
        data_dir = self.manager.fs.data_dir(t.tablet_id)
        for name in sb.blocks:
            path = data_dir / name
            files[("data", name)] = (path, path.stat().st_size)
        for path in closed:
            if path.exists():
                files[("wal", path.name)] = (path, path.stat().st_size)
        if current is not None:
            files[("wal", current[0].name)] = current
        sid = secrets.token_hex(8)
        with self._lock:
            self._sessions[sid] = _Session(sid, t, files, time.monotonic())
        log.info("tablet %s: copy session %s (%d files)", t.tablet_id, sid, len(files))
        return BeginCopySessionResponse(
            session_id=sid,
            superblock=sb,
            cmeta=cm,
            files=[CopyFilePB(kind=k, name=n, size_bytes=sz) for (k, n), (_, sz) in files.items()],
        )

    def fetch(self, req: FetchCopyChunkRequest) -> tuple[FetchCopyChunkResponse, bytes]:
        with self._lock:
            s = self._sessions.get(req.session_id)
            if s is not None:
                s.last_used = time.monotonic()
        if s is None:
            raise errors.NotFound(f"copy session {req.session_id} not found (expired?)")
        f = s.files.get((req.kind, req.name))
        if f is None:
            raise errors.NotFound(f"copy session {req.session_id} has no {req.kind} {req.name}")
        path, size = f
        if req.offset > size:
            raise errors.BadRequest(f"offset {req.offset} past the end of {req.name} ({size})")
        n = min(req.bytes_max or CHUNK_BYTES_MAX, CHUNK_BYTES_MAX, size - req.offset)
        with open(path, "rb") as fh:
            data = os.pread(fh.fileno(), n, req.offset)
        if len(data) != n:
            raise errors.Internal(f"{req.name}: read {len(data)} of {n} bytes")
        return FetchCopyChunkResponse(crc32c=crc32c.crc32c(data)), data

    def end(self, req: EndCopySessionRequest) -> EndCopySessionResponse:
        with self._lock:
            s = self._sessions.pop(req.session_id, None)
        if s is not None:
            self._release(s)
        return EndCopySessionResponse()

    def expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            dead = [s for s in self._sessions.values() if now - s.last_used > SESSION_IDLE_S]
            for s in dead:
                del self._sessions[s.session_id]
        for s in dead:
            log.info("copy session %s expired", s.session_id)
            self._release(s)

    def _release(self, s: _Session) -> None:
        t = s.tablet
        with t.lock:
            t.copy_anchors -= 1


class CopyJobs:
    """Follower side: checks, then jobs on one bounded worker thread."""

    def __init__(self, manager, rate_limit_bytes_s: int = 0) -> None:
        self.manager = manager
        self.rate_limit_bytes_s = rate_limit_bytes_s  # per job; 0: unthrottled
        self._q: queue.Queue = queue.Queue(maxsize=JOBS_QUEUE_MAX)
        self._running: set[str] = set()
        self._jobs: dict[str, _Job] = {}  # queued and running, by tablet
        self._finished: deque[_Job] = deque(maxlen=JOBS_KEPT_MAX)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tablet-copy", daemon=True)
        self._thread.start()
        self.done = 0
        self.failed = 0

    def start(self, req: StartTabletCopyRequest) -> None:
        from tservers.tablet.manager import TabletDataState, check_tablet_id

        m = self.manager
        check_tablet_id(req.tablet_id)
        tid = req.tablet_id
        with self._lock:
            if tid in self._running:
                raise errors.AlreadyInProgress(f"tablet {tid} is already being copied")
            state = m.data_state(tid)
            if state is TabletDataState.COPYING:
                raise errors.AlreadyInProgress(f"tablet {tid} is already being copied")
            expected = {
                DataState.DATA_STATE_UNKNOWN: TabletDataState.DOES_NOT_EXIST,
                DataState.DELETED: TabletDataState.DELETED,
                DataState.READY: TabletDataState.READY,
            }.get(req.expected_state)
            if expected is not None and state is not expected:
                raise errors.IllegalState(f"tablet {tid} is {state.name}, not {expected.name}")
            if state is not TabletDataState.DOES_NOT_EXIST:
                try:
                    term = m.fs.read_cmeta(tid).current_term
                except Exception:  # unreadable: the copy rewrites it
                    term = 0
                if req.caller_term < term:
                    raise errors.InvalidTerm(
                        f"caller term {req.caller_term} is below this replica's term {term}"
                    )
            job = _Job(req)
            try:
                self._q.put_nowait(job)
            except queue.Full:
                raise errors.Throttled(
                    "too many tablet copies queued", retry_after_ms=1000
                ) from None
            self._running.add(tid)
            self._jobs[tid] = job
        log.info("tablet %s: copy from %s queued", tid, req.source_uuid)

    def jobs(self) -> list[CopyJobPB]:
        with self._lock:
            jobs = list(self._jobs.values()) + list(self._finished)
            return [j.to_pb(self.rate_limit_bytes_s) for j in jobs]

    def cancel(self, tablet_id: str) -> None:
        with self._lock:
            job = self._jobs.get(tablet_id)
            if job is None:
                raise errors.NotFound(f"no tablet copy of {tablet_id} queued or running")
            job.cancel = True

    def _run(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            req = job.req
            job.started = time.monotonic()
            job.state = JobState.RUNNING
            try:
                if job.cancel:
                    raise CopyCancelled("cancelled before it started")
                self._copy(job)
                self.done += 1
                job.state = JobState.DONE
            except Exception as e:  # an operating error of one copy: the replica goes back
                self.failed += 1
                job.state = JobState.CANCELLED if isinstance(e, CopyCancelled) else JobState.FAILED
                job.error = f"{type(e).__name__}: {e}"
                log.warning("tablet %s: copy from %s failed: %s", req.tablet_id, req.source_uuid, e)
                try:
                    self.manager.abort_copy(req.tablet_id)
                except Exception:
                    log.exception("tablet %s: cleaning up a failed copy failed", req.tablet_id)
            finally:
                job.ended = time.monotonic()
                with self._lock:
                    self._running.discard(req.tablet_id)
                    self._jobs.pop(req.tablet_id, None)
                    self._finished.append(job)

    def _copy(self, job: _Job) -> None:
        from tservers.tablet.manager import TabletDataState

        req = job.req
        m = self.manager
        tid = req.tablet_id
        if m.data_state(tid) is TabletDataState.READY:
            m.delete_tablet(tid)
        m.begin_copy(tid)  # 1. superblock COPYING, fsynced
        started = time.monotonic()
        with RpcClient(req.source_address, m.fs.uuid) as rc:
            begin = rc.call(
                req.source_uuid,
                "TServer.BeginCopySession",
                BeginCopySessionRequest(tablet_id=tid),
                BeginCopySessionResponse,
                timeout_s=CALL_TIMEOUT_S,
            )
            try:
                # 2. consensus metadata merged and written before anything is downloaded.
                remote = begin.cmeta
                cm = ConsensusMetaPB(tablet_id=tid)
                try:
                    local = m.fs.read_cmeta(tid)
                except Exception:
                    local = None
                if local is not None and remote.current_term <= local.current_term:
                    cm.current_term = local.current_term
                    cm.voted_for = local.voted_for  # our own vote in our term is kept
                else:
                    cm.current_term = remote.current_term  # a higher term: no vote of ours in it
                cm.committed_config.CopyFrom(remote.committed_config)
                m.fs.write_cmeta(cm)
                crash_point("copy.after_cmeta")
                # 3, 4: WAL segments, then data blocks.
                wal_dir, data_dir = m.fs.wal_dir(tid), m.fs.data_dir(tid)
                for d in (wal_dir, data_dir):
                    if d.exists():
                        shutil.rmtree(d)
                    d.mkdir(parents=True)
                fsync_dir(wal_dir.parent)
                fsync_dir(data_dir.parent)
                total = 0
                job.files_total = len(begin.files)
                job.bytes_total = sum(f.size_bytes for f in begin.files)
                for kind, dest in (("wal", wal_dir), ("data", data_dir)):
                    for f in begin.files:
                        if f.kind == kind:
                            total += self._download(rc, job, begin.session_id, f, dest)
                            job.files_done += 1
                    crash_point(f"copy.after_{kind}")
            finally:
                try:
                    rc.call(
                        req.source_uuid,
                        "TServer.EndCopySession",
                        EndCopySessionRequest(session_id=begin.session_id),
                        EndCopySessionResponse,
                        timeout_s=5.0,
                    )
                except errors.RpcError as e:
                    log.debug("ending copy session: %s", e)
        # 5. superblock READY; 6. start the replica.
        m.finish_copy(tid, begin.superblock)
        elapsed = time.monotonic() - started
        log.info(
            "tablet %s: copied %d files, %d bytes in %.2f s (%.1f MB/s)",
            tid,
            len(begin.files),
            total,
            elapsed,
            total / max(elapsed, 1e-6) / 1e6,
        )

    def _download(
        self, rc: RpcClient, job: _Job, session_id: str, f: CopyFilePB, dest: Path
    ) -> int:
        """Fetch a file in CRC-checked chunks, FETCHES_IN_FLIGHT at a time (so the transfer
        overlaps the disk writes), write it to `.tmp`, fsync, rename into place."""

        req = job.req

        def fetch(offset: int) -> bytes:
            resp, sidecars = rc.call_with_sidecars(
                req.source_uuid,
                "TServer.FetchCopyChunk",
                FetchCopyChunkRequest(
                    session_id=session_id,
                    kind=f.kind,
                    name=f.name,
                    offset=offset,
                    bytes_max=CHUNK_BYTES_MAX,
                ),
                FetchCopyChunkResponse,
                timeout_s=CALL_TIMEOUT_S,
                idempotent=True,
            )
            data = bytes(sidecars[0]) if sidecars else b""
            want = min(CHUNK_BYTES_MAX, f.size_bytes - offset)
            if len(data) != want or crc32c.crc32c(data) != resp.crc32c:
                raise errors.Corruption(f"chunk of {f.name} at {offset}: bad CRC or length")
            return data

        tmp = dest / (f.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            offsets = list(range(0, f.size_bytes, CHUNK_BYTES_MAX))
            with ThreadPoolExecutor(FETCHES_IN_FLIGHT, thread_name_prefix="copy-fetch") as pool:
                pending: deque = deque()
                for off in offsets:
                    pending.append((off, pool.submit(fetch, off)))
                    if len(pending) >= FETCHES_IN_FLIGHT:
                        self._write_chunk(fd, job, *pending.popleft())
                while pending:
                    self._write_chunk(fd, job, *pending.popleft())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest / f.name)
        fsync_dir(dest)
        return f.size_bytes

    def _write_chunk(self, fd: int, job: _Job, offset: int, fut) -> None:
        data = fut.result()
        os.pwrite(fd, data, offset)
        job.bytes_done += len(data)
        if job.cancel:
            raise CopyCancelled("cancelled by the operator")
        limit = self.rate_limit_bytes_s
        if limit > 0:
            # Throttle: never ahead of `limit` bytes/s since the job started; the wait is
            # cut in short steps so that a cancel is seen at once.
            until = job.started + job.bytes_done / limit
            while (remaining := until - time.monotonic()) > 0:
                time.sleep(min(remaining, 0.1))
                if job.cancel:
                    raise CopyCancelled("cancelled by the operator")

    def close(self, timeout_s: float = 5.0) -> None:
        try:
            self._q.put(None, timeout=timeout_s)
        except queue.Full:
            log.warning("tablet copy queue full at close")
        self._thread.join(timeout_s)
