"""Tablet copy (seed 000, "Follower Tablet Copy"): source sessions and follower jobs.

Source (`CopySource`): `BeginCopySession` snapshots a running replica's superblock,
consensus metadata and file list (data blocks, WAL segments; the open segment up to what is
written) and anchors the replica (no WAL GC, no compaction) until `EndCopySession` or
`SESSION_IDLE_S` without a fetch. `FetchCopyChunk` serves a file range as a sidecar with its
CRC32C: a slice of a read-only map of the file, sent without a copy.

Follower (`CopyJobs`): `StartTabletCopy` runs the seed's checks in order (the rpc layer
checked the recipient; then ALREADY_IN_PROGRESS, expected data state, caller term), then
queues a job on one bounded worker thread: delete a running replica first; superblock
COPYING (fsynced); consensus metadata merged (highest term wins, own vote kept when the
remote term is not higher, remote config adopted) and written before any download; WAL
segments then data blocks as one stream of CRC-checked chunks (`download_files`: a few
fetcher threads, each chunk written with its write-back started at once, each file fsynced
and renamed into place as soon as it is complete); superblock READY; replica started. A
failure deletes the replica again (tombstone keeping its last op id); a crash leaves
COPYING, which startup turns into DELETED.

The steps themselves are `copy_tablet`, shared by the jobs (a `_LiveTarget`: the running
server's manager) and `tserver copy-from-remote` (an `OfflineTarget`: a stopped server's fs
root, nothing started; seed 004's manual copy).
"""

from __future__ import annotations

import enum
import errno
import logging
import mmap
import os
import queue
import re
import secrets
import shutil
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import crc32c

from rpc import errors
from rpc.client import RETRYABLE, RpcClient
from rpc.keys import ClientCurve
from rpc.protocols.tserver_pb2 import (
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
    MemberType,
    OpIdPB,
    StartTabletCopyRequest,
    SuperblockPB,
)
from tservers.consensus.types import INDEX_MAX, TERM_JUMP_MAX, TERM_MAX
from tservers.consensus_wire import (
    WireError,
    check_address,
    check_config_pb,
    check_range,
    check_tablet_id,
    check_uuid,
)
from tservers.crash import crash_point
from tservers.fs import FsLayout
from tservers.metafile import MetaFileCorrupt, fsync_dir
from tservers.tablet.dedup import check_pb as dedup_problem

log = logging.getLogger(__name__)

SESSION_IDLE_S = 60.0
SESSIONS_MAX = 16
CHUNK_BYTES_MAX = 4 << 20  # the most a source serves in one FetchCopyChunk
SESSION_MAPS_MAX = 4  # files of one session kept mapped at the source (fetched in order)
# The follower fetches chunks of FETCH_CHUNK_BYTES on FETCH_WINDOW threads (the caller's
# and FETCH_WINDOW - 1 more), each with one chunk in flight, checked and written at its
# offset: memory stays within their product (8 MiB). Each rpc costs about 0.4-0.8 ms of
# Python on a busy 2-core machine, so chunks are large; past 2 MiB the buffers no longer
# fit the caches and copies slow down instead; 2 to 4 fetchers do about as well, more do
# worse (bench/replication.py).
FETCH_CHUNK_BYTES = 2 << 20
FETCH_WINDOW = 4
FETCH_ATTEMPTS_MAX = 5  # per chunk, for a lost connection or a busy source
FETCH_BACKOFF_S = 0.2  # doubling between attempts
THROTTLED_FETCH_S = 1.0  # a throttled copy fetches about this often (sessions stay alive)
THROTTLED_CHUNK_BYTES_MIN = 64 << 10
JOBS_QUEUE_MAX = 8
JOBS_KEPT_MAX = 32  # finished jobs kept for reports
CALL_TIMEOUT_S = 30.0

# Bounds of the copy messages (design/consensus.md, "Bounds"), checked where they are
# decoded: the source checks the requests, the follower the source's answers.
SESSION_ID_RE = re.compile(r"^[0-9a-f]{1,64}$")  # secrets.token_hex(8) here
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")  # wal-*, block-*.arrow
FILE_KINDS = ("wal", "data")
COPY_FILES_MAX = 100_000  # files of one session (blocks and WAL segments)
COPY_FILE_BYTES_MAX = 1 << 40  # one file
COPY_BYTES_MAX = 1 << 48  # one session, all files
BLOCK_ID_MAX = 1 << 62


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
    # The files being served, mapped read-only up to their snapshotted size (the last
    # SESSION_MAPS_MAX used). A chunk is a slice of a map, sent without a copy; a map
    # dropped from here stays alive until zmq has sent the last chunk taken from it.
    maps: OrderedDict[tuple[str, str], mmap.mmap] = field(default_factory=OrderedDict)
    maps_lock: threading.Lock = field(default_factory=threading.Lock)


class CopySource:
    """Copy sessions served by this server (any running replica can be a source).

    A session unused for `session_idle_s` (its follower died, or gave up) expires: a reaper
    thread, running while any session is open, releases its anchor."""

    def __init__(self, manager, session_idle_s: float = SESSION_IDLE_S) -> None:
        assert session_idle_s > 0
        self.manager = manager
        self.session_idle_s = session_idle_s
        self._sessions: dict[str, _Session] = {}
        self._opening = 0  # begins past the cap check, not yet in _sessions
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self._closed = threading.Event()

    def sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def begin(self, req: BeginCopySessionRequest) -> BeginCopySessionResponse:
        self.expire()
        t = self.manager.tablet(req.tablet_id)
        with self._lock:
            # Sessions being opened count too: concurrent begins cannot pass the cap.
            if len(self._sessions) + self._opening >= SESSIONS_MAX:
                raise errors.Throttled(f"{SESSIONS_MAX} copy sessions open", retry_after_ms=1000)
            self._opening += 1
        anchored = False
        try:
            with t.flush_lock:  # no flush or compaction changes the file set meanwhile
                with t.lock:
                    sb = SuperblockPB()
                    sb.CopyFrom(t.sb)
                    cm = ConsensusMetaPB()
                    cm.CopyFrom(t.cmeta)
                    t.copy_anchors += 1
                    anchored = True
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
        except BaseException:
            with self._lock:
                self._opening -= 1
            if anchored:
                with t.lock:
                    t.copy_anchors -= 1
            raise
        sid = secrets.token_hex(8)
        with self._lock:
            self._opening -= 1
            self._sessions[sid] = _Session(sid, t, files, time.monotonic())
            if self._reaper is None or not self._reaper.is_alive():
                self._reaper = threading.Thread(
                    target=self._reap, name="copy-session-reaper", daemon=True
                )
                self._reaper.start()
        log.info("tablet %s: copy session %s (%d files)", t.tablet_id, sid, len(files))
        return BeginCopySessionResponse(
            session_id=sid,
            superblock=sb,
            cmeta=cm,
            files=[CopyFilePB(kind=k, name=n, size_bytes=sz) for (k, n), (_, sz) in files.items()],
        )

    def fetch(self, req: FetchCopyChunkRequest) -> tuple[FetchCopyChunkResponse, memoryview]:
        """A file range of the session and its CRC32C. The bytes are a view of the file's
        map (no read into a buffer of our own), sent as is by the rpc layer."""
        check_session_id(req.session_id)
        if req.kind not in FILE_KINDS or not FILE_NAME_RE.match(req.name):
            raise errors.BadRequest(
                f"no file {req.kind[:16]!r} {req.name[:129]!r} (kind wal or data, a plain name)"
            )
        with self._lock:
            s = self._sessions.get(req.session_id)
            if s is not None:
                s.last_used = time.monotonic()
        if s is None:
            raise errors.NotFound(f"copy session {req.session_id} not found (expired?)")
        key = (req.kind, req.name)
        f = s.files.get(key)
        if f is None:
            raise errors.NotFound(f"copy session {req.session_id} has no {req.kind} {req.name}")
        path, size = f
        if req.offset > size:
            raise errors.BadRequest(f"offset {req.offset} past the end of {req.name} ({size})")
        n = min(req.bytes_max or CHUNK_BYTES_MAX, CHUNK_BYTES_MAX, size - req.offset)
        if n == 0:
            return FetchCopyChunkResponse(crc32c=crc32c.crc32c(b"")), memoryview(b"")
        data = memoryview(self._map(s, key, path, size))[req.offset : req.offset + n]
        return FetchCopyChunkResponse(crc32c=crc32c.crc32c(data)), data

    @staticmethod
    def _map(s: _Session, key: tuple[str, str], path: Path, size: int) -> mmap.mmap:
        """The session's read-only map of one of its files, `size` bytes long.

        Safe because no file of a session shrinks below its snapshotted size while the
        session anchors the replica: data blocks and closed WAL segments never change, the
        open segment only grows (it is cut at close to its written offset, which is past
        the snapshot), and a deleted file stays readable through its map. A map is never
        closed here (chunks of it may still wait in zmq's queues): it goes when its last
        reference does."""
        with s.maps_lock:
            m = s.maps.get(key)
            if m is not None:
                s.maps.move_to_end(key)
                return m
            with open(path, "rb") as fh:
                have = os.fstat(fh.fileno()).st_size
                if have < size:  # a map past the end would fault (SIGBUS) when read
                    raise errors.Internal(f"{path.name}: {have} bytes, the session saw {size}")
                m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
            s.maps[key] = m
            while len(s.maps) > SESSION_MAPS_MAX:
                s.maps.popitem(last=False)
            return m

    def end(self, req: EndCopySessionRequest) -> EndCopySessionResponse:
        check_session_id(req.session_id)
        with self._lock:
            s = self._sessions.pop(req.session_id, None)
        if s is not None:
            self._release(s)
        return EndCopySessionResponse()

    def expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            dead = [s for s in self._sessions.values() if now - s.last_used > self.session_idle_s]
            for s in dead:
                del self._sessions[s.session_id]
        for s in dead:
            log.warning(
                "tablet %s: copy session %s expired (no fetch for %.0f s; its follower "
                "went away); anchor released",
                s.tablet.tablet_id,
                s.session_id,
                self.session_idle_s,
            )
            self._release(s)

    def _reap(self) -> None:
        """Expire idle sessions while any is open; the thread ends with the last one."""
        step_s = min(1.0, self.session_idle_s / 4)
        while not self._closed.wait(step_s):
            self.expire()
            with self._lock:
                if not self._sessions:
                    self._reaper = None
                    return

    def close(self) -> None:
        """Stop the reaper and release every session (the server is going away)."""
        self._closed.set()
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
            reaper = self._reaper
        if reaper is not None:
            reaper.join(5.0)
        for s in sessions:
            self._release(s)

    def _release(self, s: _Session) -> None:
        with s.maps_lock:
            s.maps.clear()  # unmapped once no chunk of theirs waits to be sent
        t = s.tablet
        with t.lock:
            t.copy_anchors -= 1


# ==================================================================== the edge
def check_session_id(session_id: str) -> None:
    if not SESSION_ID_RE.match(session_id):
        raise errors.BadRequest(f"{session_id[:65]!r} is not a copy session id")


def _op_id_in_range(what: str, op: OpIdPB) -> None:
    check_range(f"{what} term", op.term, 0, TERM_MAX)
    check_range(f"{what} index", op.index, 0, INDEX_MAX)


def check_start_request(req: StartTabletCopyRequest, own_uuid: str) -> None:
    """Every field of a StartTabletCopy in range, before any check against local state:
    ids and the source address shaped, the caller term and op id within the bounds, a
    known expected state. Raises BadRequest."""
    try:
        check_tablet_id(req.tablet_id)
        check_uuid("source_uuid", req.source_uuid)
        if req.source_uuid == own_uuid:
            raise WireError("a tablet copy from this server itself")
        check_address("source_address", req.source_address)
        check_range("caller_term", req.caller_term, 1, TERM_MAX)
        if req.expected_state not in DataState.values():
            raise WireError(f"expected_state {req.expected_state} is no data state")
        if req.HasField("last_op_id"):
            _op_id_in_range("last_op_id", req.last_op_id)
    except WireError as e:
        raise errors.BadRequest(f"bad StartTabletCopy: {e}") from None


def check_begin_response(resp: BeginCopySessionResponse, tablet_id: str) -> None:
    """The source's answer to BeginCopySession, before anything is written here: the
    session id, the superblock's ids, op ids, block names and counters, the consensus
    metadata's term, vote and config, and every file's kind, name (a plain name: it is
    joined to a directory) and size, all within bounds. Raises Corruption (the copy fails,
    the replica is deleted again)."""
    try:
        if not SESSION_ID_RE.match(resp.session_id):
            raise WireError(f"session id {resp.session_id[:65]!r}")
        sb, cm = resp.superblock, resp.cmeta
        if sb.tablet_id != tablet_id or cm.tablet_id not in ("", tablet_id):
            raise WireError(f"metadata of tablet {sb.tablet_id[:65]!r}, not {tablet_id}")
        check_range("flushed_index", sb.flushed_index, 0, INDEX_MAX)
        check_range("flushed_term", sb.flushed_term, 0, TERM_MAX)
        _op_id_in_range("last_op_id", sb.last_op_id)
        check_range("next_block_id", sb.next_block_id, 0, BLOCK_ID_MAX)
        check_range("current_term", cm.current_term, 0, TERM_MAX)
        if cm.current_term < sb.flushed_term:
            raise WireError(f"term {cm.current_term} below the flushed term {sb.flushed_term}")
        if cm.voted_for:
            check_uuid("voted_for", cm.voted_for)
        check_config_pb(cm.committed_config, "committed config")
        if len(resp.files) > COPY_FILES_MAX or len(sb.blocks) > COPY_FILES_MAX:
            raise WireError(f"{len(resp.files)} files, {len(sb.blocks)} blocks")
        seen: set[tuple[str, str]] = set()
        total = 0
        for f in resp.files:
            if f.kind not in FILE_KINDS or not FILE_NAME_RE.match(f.name):
                raise WireError(f"file {f.kind[:16]!r} {f.name[:129]!r}")
            if (f.kind, f.name) in seen:
                raise WireError(f"file {f.kind} {f.name} listed twice")
            seen.add((f.kind, f.name))
            check_range(f"size of {f.name}", f.size_bytes, 0, COPY_FILE_BYTES_MAX)
            total += f.size_bytes
        check_range("bytes of the session", total, 0, COPY_BYTES_MAX)
        for name in sb.blocks:
            if ("data", name) not in seen:
                raise WireError(f"block {name[:129]!r} of the superblock is not in the files")
        # The write dedup table travels in the superblock (a copied replica must not apply
        # a resend again); bounded like the one the tablet keeps.
        problem = dedup_problem(sb.dedup)
        if problem:
            raise WireError(f"write dedup table: {problem}")
    except WireError as e:
        raise errors.Corruption(
            f"tablet {tablet_id}: the copy source's BeginCopySession answer is bad: {e}"
        ) from None


# ==================================================================== the copy steps
class CopyTarget(Protocol):
    """Where a copy lands: the running server (`_LiveTarget`) or a stopped one's fs root."""

    fs: FsLayout

    def prepare(self, req: StartTabletCopyRequest) -> None:
        """Before step 1: the checks again, then make way (a READY replica is deleted, or
        the copy refused)."""

    def begin_copy(self, req: StartTabletCopyRequest) -> None:
        """Step 1: superblock COPYING, fsynced (the last op id of a tombstone kept); refused
        if the replica logged an entry of a term above the caller's."""

    def finish_copy(self, tablet_id: str, remote_sb: SuperblockPB) -> None:
        """Steps 5 (superblock READY, fsynced) and 6 (start the replica, if running)."""


def merge_cmeta(
    tablet_id: str, local: ConsensusMetaPB | None, remote: ConsensusMetaPB
) -> ConsensusMetaPB:
    """Seed 000's merge: the highest term wins; our own vote is kept when the remote term is
    not higher; the remote config is adopted."""
    cm = ConsensusMetaPB(tablet_id=tablet_id)
    if local is not None and remote.current_term <= local.current_term:
        cm.current_term = local.current_term
        cm.voted_for = local.voted_for  # our own vote in our term is kept
    else:
        cm.current_term = remote.current_term  # a higher term: no vote of ours in it
    cm.committed_config.CopyFrom(remote.committed_config)
    return cm


def copy_tablet(
    target: CopyTarget,
    job: _Job,
    *,
    caller_uuid: str,
    rate_limit_bytes_s: int = 0,
    curve: ClientCurve | None = None,
) -> int:
    """Copy `job.req.tablet_id` from `job.req.source_*` onto `target`, step by step.

    The source session is opened first (an unknown tablet or a dead source changes nothing
    here); then steps 1-6. Progress, cancel and throttle go through `job`. Returns the bytes
    copied; raises on any failure, leaving the replica COPYING (the caller cleans up, or a
    restart deletes it). `curve`: the source is called as a CURVE client (its key by
    `job.req.source_uuid`)."""
    req = job.req
    tid = req.tablet_id
    fs = target.fs
    started = time.monotonic()
    with RpcClient(req.source_address, caller_uuid, curve=curve) as rc:
        begin = rc.call(
            req.source_uuid,
            "TServer.BeginCopySession",
            BeginCopySessionRequest(tablet_id=tid),
            BeginCopySessionResponse,
            timeout_s=CALL_TIMEOUT_S,
        )
        try:
            check_begin_response(begin, tid)
            job.files_total = len(begin.files)
            job.bytes_total = sum(f.size_bytes for f in begin.files)
            # Refused (NO_SPACE) before anything is written when the announced size does
            # not fit above the reserve: a copy must not fill the disk.
            require_space = getattr(target, "require_space", None)
            if require_space is not None:
                require_space(tid, job.bytes_total)
            target.prepare(req)
            target.begin_copy(req)  # 1. superblock COPYING, fsynced
            # 2. consensus metadata merged and written before anything is downloaded.
            try:
                local = fs.read_cmeta(tid)
            except FileNotFoundError:
                local = None  # never hosted here: the source's is adopted
            except MetaFileCorrupt as e:  # adopting the source's would forget our vote
                raise errors.TabletFailed(
                    f"tablet {tid}: consensus metadata unreadable ({e}); repair it first"
                ) from None
            fs.write_cmeta(merge_cmeta(tid, local, begin.cmeta))
            crash_point("copy.after_cmeta")
            # 3, 4: WAL segments, then data blocks, into emptied directories, as one
            # stream of chunks; each kind's crash point once all of it is in place.
            wal_dir, data_dir = fs.wal_dir(tid), fs.data_dir(tid)
            for d in (wal_dir, data_dir):
                if d.exists():
                    shutil.rmtree(d)
                d.mkdir(parents=True)
            fsync_dir(wal_dir.parent)
            fsync_dir(data_dir.parent)
            dests = {"wal": wal_dir, "data": data_dir}
            total = download_files(
                rc,
                job,
                begin.session_id,
                [(f, dests[k]) for k in dests for f in begin.files if f.kind == k],
                rate_limit_bytes_s=rate_limit_bytes_s,
                kinds=list(dests),
                on_kind_done=lambda kind: crash_point(f"copy.after_{kind}"),
            )
        finally:
            try:
                rc.call(
                    req.source_uuid,
                    "TServer.EndCopySession",
                    EndCopySessionRequest(session_id=begin.session_id),
                    EndCopySessionResponse,
                    timeout_s=5.0,
                )
            except errors.RpcError as e:  # the session expires on its own
                log.debug("ending copy session: %s", e)
    # 5. superblock READY; 6. start the replica.
    target.finish_copy(tid, begin.superblock)
    elapsed = time.monotonic() - started
    log.info(
        "tablet %s: copied %d files, %d bytes in %.2f s (%.1f MB/s)",
        tid,
        len(begin.files),
        total,
        elapsed,
        total / max(elapsed, 1e-6) / 1e6,
    )
    return total


@dataclass(slots=True)
class _OutFile:
    f: CopyFilePB
    dest: Path
    fd: int | None = None  # opened by the first chunk written (under _Download.lock)
    written: int = 0  # bytes written (under _Download.lock)
    # One write at a time into the file: writers of one file serialize on its inode lock
    # anyway, and the kernel spins (burning a CPU) while another holds it.
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tmp(self) -> Path:
        return self.dest / (self.f.name + ".tmp")


def download_files(
    rc: RpcClient,
    job: _Job,
    session_id: str,
    files: Iterable[tuple[CopyFilePB, Path]],
    *,
    rate_limit_bytes_s: int = 0,
    fsync: bool = True,
    kinds: Sequence[str] = (),
    on_kind_done: Callable[[str], None] | None = None,
) -> int:
    """Fetch files of a copy session into their directories as CRC-checked chunks, and
    return the bytes written.

    FETCH_WINDOW fetcher threads (`_Download`) take the chunks in order, each fetching one
    with a synchronous call on a socket of its own (no thread hand-off on this side),
    checking it and writing it at its offset, so that fetches, checks and writes overlap
    (one write at a time per file). Each chunk's write-back to the disk starts at once
    (`write_back`: uncached writes where the kernel has them), so that a file's fsync finds
    little left to do. Each file is written as `<name>.tmp`; the thread that writes its
    last byte fsyncs and renames it, while the others go on with the next file; each
    directory is fsynced once at the end. `job.cancel` is checked after every chunk; a
    throttled job fetches one small chunk at a time. A failure or cancel stops every
    fetcher (each after its chunk in progress, whose call has a deadline) before this
    raises; partial `.tmp` files stay (the next copy empties the directory).
    `on_kind_done(kind)` is called once all files of a kind (`CopyFilePB.kind`) are in
    place, for each of `kinds` (default: those of `files`) in that order, even one without
    files; the last one after the directories are fsynced.
    `fsync=False` (nothing fsynced or written back early) is for the bench's page-cache
    figure only."""
    outs = [_OutFile(f, dest) for f, dest in files]
    chunk_bytes, fetchers = FETCH_CHUNK_BYTES, FETCH_WINDOW
    if rate_limit_bytes_s > 0:
        # One fetch at a time, each sent only when the throttle allows it (nothing waits
        # unread past its deadline), small enough to keep the source's session alive.
        chunk_bytes = int(rate_limit_bytes_s * THROTTLED_FETCH_S)
        chunk_bytes = max(THROTTLED_CHUNK_BYTES_MIN, min(FETCH_CHUNK_BYTES, chunk_bytes))
        fetchers = 1
    d = _Download(
        rc,
        job,
        session_id,
        outs,
        chunk_bytes=chunk_bytes,
        durable=fsync,
        rate_limit_bytes_s=rate_limit_bytes_s,
        kinds=kinds,
        on_kind_done=on_kind_done,
    )
    return d.run(fetchers)


class _Download:
    """One `download_files`: its plan of chunks, its files and its fetcher threads.

    The plan, the files' descriptors and counters are shared under `lock`; a chunk is
    fetched and written outside it (positional writes to a shared descriptor). The first
    error sets `stop` and is raised by `run` once every fetcher has ended."""

    def __init__(
        self,
        rc: RpcClient,
        job: _Job,
        session_id: str,
        outs: list[_OutFile],
        *,
        chunk_bytes: int,
        durable: bool,
        rate_limit_bytes_s: int,
        kinds: Sequence[str],
        on_kind_done: Callable[[str], None] | None,
    ) -> None:
        assert chunk_bytes > 0, chunk_bytes
        self.rc = rc
        self.job = job
        self.session_id = session_id
        self.outs = outs
        self.chunk_bytes = chunk_bytes
        self.durable = durable
        self.uncached = durable  # until the file system refuses one (`write_back`)
        self.rate_limit_bytes_s = rate_limit_bytes_s
        self.plan: deque[tuple[_OutFile, int]] = deque(
            (out, off) for out in outs for off in range(0, out.f.size_bytes, chunk_bytes)
        )
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.paced_from = job.bytes_done  # the throttle counts from the job's start
        self.received = 0
        self.written = 0
        self.dirs: dict[Path, None] = {}
        self.on_kind_done = on_kind_done
        # Files not in place, by kind, in the order the kinds are announced.
        self.kinds_left: dict[str, int] = dict.fromkeys(kinds, 0)
        for out in outs:
            self.kinds_left[out.f.kind] = self.kinds_left.get(out.f.kind, 0) + 1
        self.kinds_announced: list[str] = []
        self.announce_lock = threading.Lock()

    def run(self, fetchers: int) -> int:
        """Fetch with `fetchers` threads: this one (its socket is connected already) and
        `fetchers - 1` more."""
        threads = [
            threading.Thread(target=self._fetcher, name=f"tablet-copy-fetch-{i}", daemon=True)
            for i in range(1, min(fetchers, len(self.plan)))
        ]
        try:
            for t in threads:
                t.start()
            self._fetcher()
        finally:
            for t in threads:
                if t.ident is not None:
                    # Each fetch has a deadline (CALL_TIMEOUT_S) and bounded attempts; only
                    # a disk stuck in a write or fsync holds a fetcher longer.
                    t.join()
            for out in self.outs:
                if out.fd is not None:  # a failure left it open
                    os.close(out.fd)
                    out.fd = None
        if self.error is not None:
            raise self.error
        for out in self.outs:  # the empty files; every other one is in place
            if out.f.size_bytes == 0:
                self._open(out)
                self._complete(out)
        if self.durable:
            for d in self.dirs:
                fsync_dir(d)
        assert self.written == self.received == sum(o.f.size_bytes for o in self.outs)
        self._announce(final=True)
        return self.written

    def _fetcher(self) -> None:
        try:
            while not self.stop.is_set():
                with self.lock:
                    if not self.plan:
                        return
                    out, off = self.plan.popleft()
                data = self._fetch(out, off)
                n = len(data)
                self._write(out, off, data)
                del data  # the answer's buffer goes back before the next fetch
                with self.lock:
                    self.received += n
                    received = self.paced_from + self.received
                _pace(self.job, self.rate_limit_bytes_s, received)
        except BaseException as e:  # the first error stops every fetcher; run() raises it
            with self.lock:
                if self.error is None:
                    self.error = e
            self.stop.set()

    def _fetch(self, out: _OutFile, offset: int) -> memoryview:
        """One chunk, length and CRC checked; a lost connection or a busy source is retried
        (FETCH_ATTEMPTS_MAX, backoff): fetches are idempotent."""
        want = min(self.chunk_bytes, out.f.size_bytes - offset)
        request = FetchCopyChunkRequest(
            session_id=self.session_id,
            kind=out.f.kind,
            name=out.f.name,
            offset=offset,
            bytes_max=self.chunk_bytes,
        )
        backoff_s = FETCH_BACKOFF_S
        for attempt in range(1, FETCH_ATTEMPTS_MAX + 1):
            try:
                resp, sidecars = self.rc.call_with_sidecars(
                    self.job.req.source_uuid,
                    "TServer.FetchCopyChunk",
                    request,
                    FetchCopyChunkResponse,
                    timeout_s=CALL_TIMEOUT_S,
                )
                break
            except RETRYABLE as e:
                if attempt == FETCH_ATTEMPTS_MAX or self.stop.is_set():
                    raise
                log.info("chunk of %s at %d: %s; fetching it again", out.f.name, offset, e)
                if self.stop.wait(max(backoff_s, e.retry_after_ms / 1000.0)):
                    raise
                backoff_s *= 2
        data = sidecars[0] if sidecars else memoryview(b"")
        if len(data) != want:
            raise errors.Corruption(
                f"chunk of {out.f.name} at {offset}: {len(data)} bytes, expected {want}"
            )
        if crc32c.crc32c(data) != resp.crc32c:
            raise errors.Corruption(f"chunk of {out.f.name} at {offset}: bad CRC32C")
        return data

    def _open(self, out: _OutFile) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        out.fd = os.open(out.tmp, flags, 0o644)

    def _write(self, out: _OutFile, offset: int, data: memoryview) -> None:
        with self.lock:
            if out.fd is None:
                self._open(out)
            fd = out.fd
        with out.write_lock:
            if not self.durable:
                _pwrite_all(fd, data, offset)
            elif not write_back(fd, data, offset, uncached=self.uncached) and self.uncached:
                self.uncached = False
                log.info("%s: no uncached writes here; write-back started per chunk", out.dest)
        with self.lock:
            out.written += len(data)
            self.written += len(data)
            self.job.bytes_done += len(data)
            last = out.written == out.f.size_bytes
        if last:  # every other chunk of the file is written: no fetcher uses its fd now
            self._complete(out)

    def _complete(self, out: _OutFile) -> None:
        assert out.fd is not None and out.written == out.f.size_bytes, out.f.name
        if self.durable:
            os.fsync(out.fd)
        with self.lock:
            fd, out.fd = out.fd, None
        os.close(fd)
        os.replace(out.tmp, out.dest / out.f.name)
        with self.lock:
            self.dirs[out.dest] = None
            self.job.files_done += 1
            self.kinds_left[out.f.kind] -= 1
        self._announce()

    def _announce(self, *, final: bool = False) -> None:
        """Call `on_kind_done` for each kind, in plan order, whose files are all in place;
        the last kind only once the whole download is done (`final`)."""
        with self.announce_lock:
            kinds = list(self.kinds_left)
            for kind in kinds[len(self.kinds_announced) :]:
                if self.kinds_left[kind] or (kind == kinds[-1] and not final):
                    return
                self.kinds_announced.append(kind)
                if self.on_kind_done is not None:
                    self.on_kind_done(kind)


def write_back(fd: int, data: memoryview, offset: int, *, uncached: bool = True) -> bool:
    """Write a chunk and start writing it back to the disk at once, without waiting, so
    that the file's fsync finds little left to do.

    With `uncached` (Linux 6.14+, RWF_DONTCACHE) the write goes through the page cache
    without staying there: write-back starts at once and the pages are freed once written,
    so that the next chunks reuse them instead of fresh memory (costly on a VM whose free
    memory goes back to the host) and the copy does not push the server's working set
    out. Returns False if the kernel or file system refused it (nothing is kept from the
    attempt: the chunk is then written the ordinary way, the same bytes at the same
    offsets; callers stop asking). Otherwise, or without `uncached`: pwrite, then
    sync_file_range to start the write-back (advice: where missing or failing, the fsync
    does it all and reports any error). Measured against O_DIRECT writes from writer
    threads (no page cache at all): this disk takes the kernel's write-back faster, and
    the copy was about 15% faster this way (bench/replication.py)."""
    if uncached and _RWF_DONTCACHE:
        try:
            _pwrite_all(fd, data, offset, _RWF_DONTCACHE)
            return True
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
        uncached = False
    _pwrite_all(fd, data, offset)
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, len(data), _SYNC_FILE_RANGE_WRITE)
    return uncached


def _load_sync_file_range():
    """libc's sync_file_range (Linux), which Python's os module lacks; None elsewhere."""
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writing dirty pages back; do not wait
# A buffered write whose pages are dropped once written back (Linux 6.14+); older kernels
# refuse the unknown flag (EOPNOTSUPP) without writing anything.
_RWF_DONTCACHE = getattr(os, "RWF_DONTCACHE", 0x80) if sys.platform == "linux" else 0


def _pwrite_all(fd: int, data: memoryview, offset: int, flags: int = 0) -> None:
    view = memoryview(data)
    while view:
        n = os.pwritev(fd, [view], offset, flags) if flags else os.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError(errno.EIO, f"pwrite wrote {n} bytes")
        view, offset = view[n:], offset + n


def _pace(job: _Job, rate_limit_bytes_s: int, received: int) -> None:
    """Cancel check, then the throttle: `received` bytes since the job started never ahead
    of `rate_limit_bytes_s`; the wait is cut in short steps so that a cancel is seen at
    once."""
    if job.cancel:
        raise CopyCancelled("cancelled by the operator")
    if rate_limit_bytes_s > 0:
        until = job.started + received / rate_limit_bytes_s
        while (remaining := until - time.monotonic()) > 0:
            time.sleep(min(remaining, 0.1))
            if job.cancel:
                raise CopyCancelled("cancelled by the operator")


class _LiveTarget:
    """The running server: its manager deletes, marks and starts replicas."""

    def __init__(self, manager) -> None:
        self.manager = manager
        self.fs = manager.fs

    def prepare(self, req: StartTabletCopyRequest) -> None:
        from tservers.tablet.replica_files import TabletDataState

        check_copy_start(self.manager, req)  # the job may have waited in the queue
        if self.manager.data_state(req.tablet_id) is TabletDataState.READY:
            self.manager.delete_tablet(req.tablet_id)

    def require_space(self, tablet_id: str, size_bytes: int) -> None:
        self.manager.require_copy_space(tablet_id, size_bytes)

    def begin_copy(self, req: StartTabletCopyRequest) -> None:
        self.manager.begin_copy(req.tablet_id, caller_term=req.caller_term)

    def finish_copy(self, tablet_id: str, remote_sb: SuperblockPB) -> None:
        self.manager.finish_copy(tablet_id, remote_sb)


class OfflineTarget:
    """A stopped server's fs root (`tserver copy-from-remote`): the same superblock states
    as a live copy, nothing started. An interrupted copy leaves COPYING, which the server
    deletes at startup or a re-run redoes. A READY replica is replaced only with `force`
    (it is tombstoned first, its last op id read from its WAL)."""

    def __init__(self, fs: FsLayout, *, force: bool = False) -> None:
        self.fs = fs
        self.force = force

    def local_superblock(self, tablet_id: str) -> SuperblockPB | None:
        try:
            return self.fs.read_superblock(tablet_id)
        except FileNotFoundError:
            return None
        except MetaFileCorrupt as e:
            raise errors.IllegalState(
                f"tablet {tablet_id} has an unreadable superblock here ({e}); repair it first"
            ) from e

    def prepare(self, req: StartTabletCopyRequest) -> None:
        tablet_id = req.tablet_id
        sb = self.local_superblock(tablet_id)
        if sb is None or sb.data_state != DataState.READY:
            return  # DOES_NOT_EXIST, DELETED, or COPYING from an interrupted copy: redone
        if not self.force:
            raise errors.IllegalState(
                f"tablet {tablet_id} is already READY on this server; "
                "--force replaces it (the local replica is tombstoned and quarantined first)"
            )
        last = tombstone_offline(self.fs, sb)
        log.info("tablet %s: local replica tombstoned at %d.%d", tablet_id, last.term, last.index)

    def begin_copy(self, req: StartTabletCopyRequest) -> None:
        tablet_id = req.tablet_id
        old = self.local_superblock(tablet_id)
        sb = SuperblockPB()
        if old is not None:
            assert old.data_state != DataState.READY, "prepare() tombstones a READY replica"
            sb.CopyFrom(old)  # the tombstone's last op id is kept (it votes with it)
        sb.tablet_id = tablet_id
        sb.data_state = DataState.COPYING
        sb.quarantine_path = ""
        self.fs.write_superblock(sb)
        crash_point("copy.after_copying_superblock")

    def finish_copy(self, tablet_id: str, remote_sb: SuperblockPB) -> None:
        from tservers.tablet.replica_files import ready_superblock

        self.fs.write_superblock(ready_superblock(tablet_id, remote_sb))
        crash_point("copy.after_ready_superblock")


def last_op_id_offline(fs: FsLayout, sb: SuperblockPB) -> OpIdPB:
    """A stopped READY replica's last op id: its WAL's last entry, else its flushed point.
    Raises WalCorruption for a WAL that cannot be read."""
    from tservers.wal import segment as seg

    last = OpIdPB(term=sb.flushed_term, index=sb.flushed_index)
    wal_dir = fs.wal_dir(sb.tablet_id)
    if wal_dir.is_dir():
        segs = seg.list_segments(wal_dir)
        for i, (_, path) in enumerate(segs):
            c = seg.read_segment(path, is_last=i == len(segs) - 1)
            if c.entries:  # a later entry replaces what followed its index: the last one wins
                last = OpIdPB(term=c.entries[-1].term, index=c.entries[-1].index)
    return last


def tombstone_offline(fs: FsLayout, sb: SuperblockPB) -> OpIdPB:
    """Delete a stopped server's READY replica with the deletion steps of a running one
    (quarantine, tombstone with the last op id). Returns that op id."""
    from tservers.tablet.replica_files import tombstone_files

    last = last_op_id_offline(fs, sb)
    tombstone_files(fs, sb, last)
    return last


# ==================================================================== follower jobs
_EXPECTED_STATES = {
    DataState.DATA_STATE_UNKNOWN: "DOES_NOT_EXIST",
    DataState.DELETED: "DELETED",
    DataState.READY: "READY",
}


def check_copy_start(manager, req: StartTabletCopyRequest) -> None:
    """The seed's follower checks after the recipient's (the rpc layer's), in its order:
    ALREADY_IN_PROGRESS, the expected current state, the caller's term, the last op id.
    Run when the copy is asked for, and again when its job starts: a queued job may run
    minutes later, after the replica was created, caught up or voted in a newer term.

    Consensus metadata that an existing replica cannot read is refused (TABLET_FAILED):
    adopting the source's would forget this replica's vote (seed 000, "amnesia"); the
    operator repairs it (`tserver cmeta`)."""
    from tservers.tablet.replica_files import TabletDataState

    tid = req.tablet_id
    state = manager.data_state(tid)
    if state is TabletDataState.COPYING:
        raise errors.AlreadyInProgress(f"tablet {tid} is already being copied")
    expected = _EXPECTED_STATES.get(req.expected_state)
    if expected is None:
        raise errors.IllegalState(
            f"tablet {tid}: a copy cannot start from state {req.expected_state}"
        )
    if state.name != expected:
        raise errors.IllegalState(f"tablet {tid} is {state.name}, not {expected}")
    if state is TabletDataState.DOES_NOT_EXIST:
        if req.HasField("last_op_id") and (req.last_op_id.term, req.last_op_id.index) != (0, 0):
            raise errors.IllegalState(f"tablet {tid} does not exist here: it has no last op id")
        return
    try:
        term = manager.fs.read_cmeta(tid).current_term
    except FileNotFoundError as e:
        last = manager.last_op_id(tid)
        if (last.term, last.index) != (0, 0):
            raise errors.TabletFailed(
                f"tablet {tid}: consensus metadata missing ({e}) though it logged up to "
                f"{last.term}.{last.index}; a copy would forget this replica's vote: repair it"
            ) from None
        term = 0  # a first copy that crashed before its metadata was written: never voted
    except (OSError, MetaFileCorrupt) as e:
        raise errors.TabletFailed(
            f"tablet {tid}: consensus metadata unreadable ({e}); a copy would forget this "
            "replica's vote: repair it first"
        ) from None
    if req.caller_term < term:
        raise errors.InvalidTerm(
            f"caller term {req.caller_term} is below this replica's term {term}"
        )
    if req.caller_term - term > TERM_JUMP_MAX:
        # No plausible leader is that far ahead (design/consensus.md, "Bounds").
        raise errors.InvalidTerm(
            f"caller term {req.caller_term} is more than {TERM_JUMP_MAX} above this "
            f"replica's term {term}"
        )
    if state is TabletDataState.READY and not _knows_voter(manager, tid, req.source_uuid):
        # A running replica is replaced only on the word of a voter it knows (its leader
        # when its log was collected past it), as a term is adopted only from one.
        raise errors.IllegalState(
            f"tablet {tid}: {req.source_uuid} is not a voter of any config this replica "
            "knows; it does not replace it"
        )
    if req.HasField("last_op_id"):
        last = manager.last_op_id(tid)
        if (last.term, last.index) != (req.last_op_id.term, req.last_op_id.index):
            raise errors.IllegalState(
                f"tablet {tid}: last op id here is {last.term}.{last.index}, "
                f"not {req.last_op_id.term}.{req.last_op_id.index}"
            )


def _knows_voter(manager, tablet_id: str, uuid: str) -> bool:
    """`uuid` is a voter of a config the replica knows: its core's (committed or in its
    log) when it runs, else its consensus metadata's committed config."""
    r = manager.replicas.get(tablet_id)
    group = getattr(getattr(r, "tablet", None), "group", None)
    if group is not None:
        return group.knows_voter(uuid)
    try:
        cfg = manager.fs.read_cmeta(tablet_id).committed_config
    except (OSError, MetaFileCorrupt):
        return False
    return any(p.uuid == uuid and p.member_type == MemberType.VOTER for p in cfg.peers)


class CopyJobs:
    """Follower side: checks, then jobs on one bounded worker thread."""

    def __init__(self, manager, rate_limit_bytes_s: int = 0) -> None:
        self.manager = manager
        self.rate_limit_bytes_s = rate_limit_bytes_s  # per job; 0: unthrottled
        self.curve: ClientCurve | None = None  # set by a CURVE tablet server before it serves
        self._q: queue.Queue = queue.Queue(maxsize=JOBS_QUEUE_MAX)
        self._running: set[str] = set()
        self._jobs: dict[str, _Job] = {}  # queued and running, by tablet
        self._finished: deque[_Job] = deque(maxlen=JOBS_KEPT_MAX)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tablet-copy", daemon=True)
        self._thread.start()
        self.done = 0
        self.failed = 0
        self.bytes_finished = 0  # bytes received by copies that ended (metrics)

    def start(self, req: StartTabletCopyRequest) -> None:
        from tservers.tablet.replica_files import check_tablet_id

        check_tablet_id(req.tablet_id)
        check_start_request(req, self.manager.fs.uuid)
        tid = req.tablet_id
        with self._lock:
            if tid in self._running:
                raise errors.AlreadyInProgress(f"tablet {tid} is already being copied")
            check_copy_start(self.manager, req)
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

    def pending(self, tablet_id: str) -> bool:
        """A copy of the tablet is queued or running."""
        with self._lock:
            return tablet_id in self._running

    def jobs(self) -> list[CopyJobPB]:
        with self._lock:
            jobs = list(self._jobs.values()) + list(self._finished)
            return [j.to_pb(self.rate_limit_bytes_s) for j in jobs]

    def progress(self) -> tuple[int, list[CopyJobPB]]:
        """Bytes received by ended copies, and the queued and running jobs, read together
        (their sum only grows: a job's bytes move to the first under the same lock)."""
        with self._lock:
            return self.bytes_finished, [
                j.to_pb(self.rate_limit_bytes_s) for j in self._jobs.values()
            ]

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
                    self.manager.abort_copy(req.tablet_id, job.error)
                except Exception:
                    log.exception("tablet %s: cleaning up a failed copy failed", req.tablet_id)
            finally:
                job.ended = time.monotonic()
                with self._lock:
                    self.bytes_finished += job.bytes_done
                    self._running.discard(req.tablet_id)
                    self._jobs.pop(req.tablet_id, None)
                    self._finished.append(job)

    def _copy(self, job: _Job) -> None:
        copy_tablet(
            _LiveTarget(self.manager),
            job,
            caller_uuid=self.manager.fs.uuid,
            rate_limit_bytes_s=self.rate_limit_bytes_s,
            curve=self.curve,
        )

    def close(self, timeout_s: float = 5.0) -> None:
        """Cancel the queued and running jobs (a running one stops at its next chunk or
        throttle step, its replica deleted), then stop the worker."""
        with self._lock:
            for job in self._jobs.values():
                job.cancel = True
        try:
            self._q.put(None, timeout=timeout_s)
        except queue.Full:
            log.warning("tablet copy queue full at close")
        self._thread.join(timeout_s)
