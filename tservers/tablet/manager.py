"""Tablet lifecycle on one server (seed 000, "Tablet deletion" and "Tablet startup").

Data states: DOES_NOT_EXIST (no superblock), DELETED (tombstone: superblock and consensus
metadata kept forever, with the last op id), COPYING, READY.

Deletion, in this order:
  1. shut the tablet down (writes drained, WAL closed);
  2. create the quarantine directory quarantine/<tablet_id>.<n>;
  3. copy the superblock into it;
  4. write the superblock as DELETED with the last op id and the quarantine path (fsynced):
     from here on the deletion is always rolled forward;
  5. copy the consensus metadata into the quarantine directory;
  6. move the data directory and then the WAL directory into it (atomic renames).
  The quarantine directory is then touched: its mtime is the time of the deletion, from
  which the quarantine reaper (tservers/quarantine.py, a thread of this manager) counts
  the retention; it never removes the directory of a deletion in progress.
Startup: DELETED with a WAL (or data) directory -> redo steps 5 and 6; COPYING -> delete self
(steps 2-6, keeping consensus metadata and the last op id); READY -> bootstrap; a failed
bootstrap leaves that tablet FAILED (offline, reported) while the others run.
`open(wait=False)` lists the tablets as *starting* and opens them on a bounded pool of
threads in the background (the server answers meanwhile): each serves as soon as it is open,
and a call to one still starting gets UNAVAILABLE with a retry hint, never TABLET_NOT_FOUND.
"""

from __future__ import annotations

import collections
import contextlib
import cProfile
import gc
import logging
import pstats
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rpc import heap
from rpc.errors import (
    AlreadyExists,
    BadRequest,
    CasFailed,
    IllegalState,
    NoSpace,
    TabletDeleted,
    TabletFailed,
    TabletNotFound,
    Unavailable,
)
from rpc.protocols.tserver_pb2 import (
    ConsensusMetaPB,
    CreateTabletRequest,
    DataState,
    MemberType,
    OpIdPB,
    RaftConfigPB,
    SchemaPB,
    SuperblockPB,
    TabletReportPB,
)
from tservers.consensus.types import OpId, ReplicaStatus
from tservers.consensus_wire import WireError, config_from_pb
from tservers.crash import crash_point, pause_point
from tservers.fs import DiskSpace, FsLayout
from tservers.metafile import MetaFileCorrupt, fsync_dir
from tservers.quarantine import Policy as QuarantinePolicy
from tservers.quarantine import QuarantineReaper
from tservers.raft_driver import DriverOptions, RaftDriver
from tservers.tablet import schema as schemamod
from tservers.tablet.budgets import MEMSTORE_BYTES_MAX_DEFAULT
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler
from tservers.tablet.pages import MAPPED_BYTES_MAX_DEFAULT, mapped_file_bytes, release_blocks
from tservers.tablet.replica_files import (  # noqa: F401 (names the manager re-exports)
    TABLET_ID_RE,
    TabletDataState,
    check_tablet_id,
    quarantine_dirs,
    ready_superblock,
    roll_forward_deletion,
    tombstone_files,
)
from tservers.tablet.tablet import Tablet, TabletOptions, TabletStatus
from tservers.tablet_copy import SESSION_IDLE_S, CopyJobs, CopySource
from tservers.wal import syncfs
from tservers.wal.log import Appender, WalOptions

log = logging.getLogger(__name__)

# Tablet replicas one server hosts (tombstones included). Issue 28's target is 10,000 per
# server (about 31 KB of resident memory each, measured at 10,000); twice that is allowed.
TABLETS_MAX = 20_000
# A tablet whose only voter is this server leads at once; create and startup wait for that.
LONE_VOTER_READY_S = 10.0
# Threads opening tablets at start-up. An open is mostly Python (decoding, building the
# tablet and its Raft core) under the GIL; a second thread overlaps one tablet's disk reads
# with another's decoding, more only trade the GIL back and forth. `bench/open_replicas.py
# --replicas 10000` (2-core VM, collector paused): warm page cache 1 / 2 / 8 threads 3.0 /
# 3.5 / 4.3 s; cold (--cold) 1 / 2 / 4 threads 6.8 / 5.6 / 5.4 s (issue 28, session 21).
STARTUP_THREADS_DEFAULT = 2
# Maintenance (flush checks) looks every MAINTENANCE_INTERVAL_S at the tablets written since
# its last look, and at every tablet every MAINTENANCE_FULL_PASS_S (WAL segments of config
# entries, a flush that failed): an idle server with thousands of replicas does not look at
# each one five times a second (issue 28: that loop was 30% of an idle server's samples).
# The full pass is rare: at 3,000 idle replicas one took some 15 ms of CPU (0.15% of a core
# every 10 s), and what only it finds (a WAL of config entries, a flush to retry) can wait.
MAINTENANCE_INTERVAL_S = 0.2
MAINTENANCE_FULL_PASS_S = 60.0
# Growth of RssFile past what the last trim left that makes a bound under it trim again.
MAPPED_GROWTH_MIN = 16 << 20
STARTUP_RETRY_AFTER_MS = 200  # the retry hint of a call to a tablet still starting


@dataclass(slots=True)
class Replica:
    """What the server knows about one tablet id, whatever its state."""

    tablet_id: str
    sb: SuperblockPB | None
    status: TabletStatus
    error: str = ""
    tablet: Tablet | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Listed at start-up and not opened yet: calls to it answer UNAVAILABLE (retry), and
    # Raft messages for it get no answer (as from a server not up yet).
    starting: bool = False


COPY_FAILED = "COPY_FAILED"  # the reported status of a tombstone whose copy just failed
COPY_FAILED_REPORT_S = 60.0  # how long after the failure reports say so
COPY_FAILURES_MAX = 1000


def _starting(tablet_id: str) -> Unavailable:
    return Unavailable(
        f"tablet {tablet_id} is starting (being opened at server start-up); retry",
        retry_after_ms=STARTUP_RETRY_AFTER_MS,
    )


_gc_pause_lock = threading.Lock()
_gc_pauses = 0  # opens in this process holding the collector off (under the lock)
_gc_was_enabled = False
# The open's frozen objects are handed back to the collector this long after the pause
# ends (`gc_paused`): off the restart's path, and a cycle among them that became garbage
# since (a tablet deleted, a replica closed) is collected from then on.
GC_THAW_AFTER_S = 60.0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a start-up opens its tablets, back as it
    was once the last such open in this process ends (nested and concurrent opens count).

    An open of 10,000 replicas makes some 300 live objects a tablet and no garbage worth
    collecting; every collection on the way walks the live heap, which only grows: 1,396
    collections took 1.29 s of a 4.2 s open (issue 28, `bench/open_replicas.py`).

    When the last pause ends, everything alive is frozen (`gc.freeze`: moved to the
    permanent generation, which no collection walks) before the collector is back on.
    Otherwise the first allocation after it walks every object made meanwhile as one young
    generation: about 1.3 s of CPU, holding the GIL, for 10,000 replicas, while the
    restarted server's peers wait for its answers. GC_THAW_AFTER_S later they are handed
    back and walked once, at once (`_thaw`): until then a cycle among them that became
    garbage stays in memory (refcounting frees everything else; a tablet and its Raft group
    refer to each other).

    That one walk still holds the GIL ~1 s at 10,000 replicas (1.0-1.1 s measured for a
    full collection of a server's 1.06M objects): as long as the liveness silence (one
    election timeout, 1.0 s), so its peers may declare the server dead meanwhile. Before,
    the open's objects were walked three times, by the young, middle and old generations'
    collections, the first of them on the restart's path."""
    global _gc_pauses, _gc_was_enabled
    with _gc_pause_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.freeze()
                gc.enable()
                thaw = threading.Timer(GC_THAW_AFTER_S, _thaw)
                thaw.name = "gc-thaw"
                thaw.daemon = True
                thaw.start()


def _thaw() -> None:
    """The open's frozen objects back to the collector, walked once now: the old
    generation's size is then known to the collector (`long_lived_total`), and its next
    full collection waits until a quarter as many new objects have lived long. Left to
    itself, it would walk them at the next old-generation collection, at any moment.
    Not while another open holds the collector off: its end freezes and schedules again."""
    with _gc_pause_lock:
        if _gc_pauses:
            return
        gc.unfreeze()
    t0 = time.monotonic()
    gc.collect()
    log.info("start-up's objects back to the collector: one full collection took %.2f s",
             time.monotonic() - t0)  # fmt: skip


def _on_threads(workers: int, fn: Callable[[str], None], items: list[str], name: str) -> None:
    """`fn(item)` for every item, on `workers` threads that each take the next item in
    order until none is left; returns when every call has returned. No future, no queue
    hand-off per item (a start-up calls this for 10,000 tablets, twice: issue 28). An
    exception of one call is logged, and the thread goes on with the next item."""
    todo = collections.deque(items)

    def work() -> None:
        while True:
            try:
                item = todo.popleft()  # atomic: each item is taken by one thread
            except IndexError:
                return
            try:
                fn(item)
            except Exception:  # a bug opening one tablet: the others go on
                log.exception("start-up: %s failed for %s", getattr(fn, "__name__", fn), item)

    threads = [
        threading.Thread(target=work, name=f"{name}_{i}", daemon=True)
        for i in range(max(1, min(workers, len(items))))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@dataclass(slots=True)
class _StartupStats:
    """Where a start-up's time went, summed over the tablets (seconds of thread time)."""

    sync_s: float = 0.0  # the one syncfs of the WALs' file system
    metadata_s: float = 0.0  # superblock and consensus metadata reads
    bootstrap_s: float = 0.0  # data blocks and the WAL (read, replay decode, reopen, sync)
    raft_s: float = 0.0  # the Raft core built and registered
    other_s: float = 0.0  # tombstones, roll-forwards, failures
    opened: int = 0
    failed: int = 0


class TabletManager:
    """Owns every replica of the server, the WAL appender, the maintenance thread and the
    quarantine reaper."""

    def __init__(
        self,
        fs: FsLayout,
        wal_opts: WalOptions | None = None,
        tablet_opts: TabletOptions | None = None,
        *,
        maintenance: bool = True,
        driver_opts: DriverOptions | None = None,
        copy_rate_limit_bytes_s: int = 0,
        copy_session_idle_s: float = SESSION_IDLE_S,
        quarantine_policy: QuarantinePolicy | None = None,
        startup_threads: int = STARTUP_THREADS_DEFAULT,
        startup_profile: Path | None = None,
        disk: DiskSpace | None = None,
        compaction: CompactionOptions | None = None,
        mapped_bytes_max: int = MAPPED_BYTES_MAX_DEFAULT,
        memstore_bytes_max: int = MEMSTORE_BYTES_MAX_DEFAULT,
    ) -> None:
        assert 1 <= startup_threads <= 64, startup_threads
        assert mapped_bytes_max >= 0, mapped_bytes_max
        self.mapped_bytes_max = mapped_bytes_max
        self.mapped_trims = 0  # times every block's pages were handed back (`trim_mapped`)
        self.mapped_trimmed_bytes = 0  # RssFile those trims took down, in all
        # RssFile right after the last trim: what a trim could not take down (shared
        # libraries, pages in use). A bound below it is not trimmed towards again every
        # round (a walk of every tablet's blocks), only once RssFile grew past it.
        self._mapped_floor = 0
        # Tablets written since their last idle flush -> when the maintenance round last saw
        # them written (`_flush_idle`); only these are looked at, not every tablet.
        self._idle_since: dict[Tablet, float] = {}
        self.idle_flushes = 0  # memstores flushed for having taken no write (flush_idle_s)
        # The memstores' heap over all tablets, estimated (Tablet.memstore_bytes), above
        # which the biggest are flushed (`_flush_for_memory`; Kudu's memory-pressure flush);
        # 0: no bound.
        assert memstore_bytes_max >= 0, memstore_bytes_max
        self.memstore_bytes_max = memstore_bytes_max
        self.memory_flushes = 0  # memstores flushed to keep under memstore_bytes_max
        # The memstores' estimated bytes as the last round with writes added them up (after
        # its flushes; `_flush_for_memory`); 0 with no budget.
        self.memstore_bytes_last = 0
        self.fs = fs
        self.wal_opts = wal_opts or WalOptions()
        self.tablet_opts = tablet_opts or TabletOptions()
        self.appender = Appender(self.wal_opts)
        self.driver = RaftDriver(
            fs.uuid, self.appender, driver_opts, missing_status=self._missing_status
        )
        self.copy_source = CopySource(self, copy_session_idle_s)
        self.copy_jobs: CopyJobs | None = None  # started by open()
        self._copy_rate_limit_bytes_s = copy_rate_limit_bytes_s
        self._lock = threading.Lock()
        self.replicas: dict[str, Replica] = {}
        self._stop = threading.Event()
        self._maint: threading.Thread | None = None
        self._written: set[Tablet] = set()  # written since maintenance last looked
        self._written_lock = threading.Lock()
        self._maintenance = maintenance
        self.quarantine = QuarantineReaper(fs.quarantine_root, quarantine_policy)
        self._startup_threads = startup_threads
        self._startup_profile = startup_profile
        self._startup_thread: threading.Thread | None = None
        self._listed: list[str] = []
        self._opened = threading.Event()  # every tablet listed at start-up is open (or failed)
        self._opened_at: float | None = None  # time.monotonic() when it was
        self.startup_s = 0.0  # how long opening every tablet took (set once opened)
        # The reserved free space (tservers/fs.py): None, no check (in-process tests).
        self.disk = disk
        if disk is not None:  # the metadata it writes: counted again in root_bytes
            fs.changed = disk.files_changed
        self.quarantine.space = self._quarantine_space  # a full server reaps it oldest first
        # tablet id -> (monotonic time, why) of a tablet copy onto this server that failed
        # (refused with NO_SPACE before it wrote anything, or cleaned up after an error):
        # for COPY_FAILED_REPORT_S the tablet's report says COPY_FAILED (with no replica
        # here, a report of its own), so the coordinator gives up a move onto this server
        # and does not pick it again for that tablet meanwhile.
        self._copy_failures: dict[str, tuple[float, str]] = {}
        self.compaction = CompactionScheduler(
            self.running_tablets,
            compaction or CompactionOptions(blocks_min=self.tablet_opts.compaction_blocks_min),
            space=self._quarantine_space if disk is not None else None,
        )

    # ================================================================ startup
    def open(self, *, wait: bool = True) -> None:
        """`list_tablets` then `start_opening`; with `wait`, return once every tablet is
        open (`wait_open`)."""
        self.list_tablets()
        self.start_opening()
        if wait:
            self.wait_open()

    def list_tablets(self) -> None:
        """Start the driver and list every tablet of the fs root as starting (calls to them
        answer UNAVAILABLE until each is open), without opening any. Terms and votes go to
        the hard-state journal from here on (`FsLayout.use_journal`)."""
        self.fs.use_journal()
        self.driver.start()
        self.copy_jobs = CopyJobs(self, self._copy_rate_limit_bytes_s)
        tablet_ids = self.fs.tablet_ids()
        with self._lock:
            for tablet_id in tablet_ids:
                self.replicas[tablet_id] = Replica(
                    tablet_id, None, TabletStatus.BOOTSTRAPPING, starting=True
                )
        self._listed = tablet_ids

    def start_opening(self) -> None:
        """Open the listed tablets in the background (`_startup_all`); maintenance starts."""
        assert self._startup_thread is None, "start_opening twice"
        if self._maintenance:  # it looks at RUNNING tablets only
            self._maint = threading.Thread(
                target=self._maintenance_loop, name="tablet-maintenance", daemon=True
            )
            self._maint.start()
            self.compaction.start()
        self._startup_thread = threading.Thread(
            target=self._startup_all, args=(self._listed,), name="tablet-startup", daemon=True
        )
        self._startup_thread.start()

    def open_for_s(self) -> float:
        """Seconds since every tablet listed at start-up was open; 0 while some are not."""
        at = self._opened_at
        return 0.0 if at is None else time.monotonic() - at

    def wait_open(self, timeout_s: float | None = None) -> bool:
        """Whether every tablet listed at start-up is open (RUNNING, a tombstone or FAILED),
        waiting at most `timeout_s` (None: until it is)."""
        return self._opened.wait(timeout_s)

    @property
    def starting(self) -> int:
        """Tablets listed at start-up and not open yet."""
        with self._lock:
            return sum(1 for r in self.replicas.values() if r.starting)

    def _sync_wals(self, stats: _StartupStats) -> bool:
        """One syncfs of the file system holding the WALs, before any tablet opens: what a
        crashed process wrote may be only in the page cache, and Raft is about to count on
        it. It stands for one fdatasync per tablet (tservers/wal/syncfs.py). False (each
        tablet's WAL open syncs its segment then) without syncfs, or when it fails: it
        reports a write-back error of any file of the file system, which a per-segment
        fdatasync then confines to the segments concerned (or to none of them)."""
        if not self.wal_opts.sync:
            return False
        t0 = time.monotonic()
        try:
            return syncfs.sync_file_system(self.fs.root / "wals")
        except OSError as e:
            log.warning("start-up: %s; syncing each tablet's WAL instead", e)
            return False
        finally:
            stats.sync_s += time.monotonic() - t0

    def _startup_all(self, tablet_ids: list[str]) -> None:
        """Open every tablet on a bounded pool; each replaces its placeholder (and serves)
        as soon as it is open. Tablets this replica last voted for itself in (it was the
        leader, or running for it: its peers wait for it) go first.

        Per tablet (issue 28: 10,000 replicas): the consensus metadata is read once (here,
        for the order, and handed to the opening), the WALs are made durable by one syncfs
        for all, and no thread waits on a tablet: lone voters (the only voter is this
        server) are waited for together once every tablet is open."""
        started = time.monotonic()
        stats = _StartupStats()
        stats_lock = threading.Lock()
        profiles: list[cProfile.Profile] = []
        local = threading.local()
        workers = max(1, min(self._startup_threads, len(tablet_ids)))
        lone: list[Tablet] = []
        first: list[str] = []
        rest: list[str] = []
        cmetas: dict[str, ConsensusMetaPB] = {}
        wal_synced = False

        def read_cmeta(tablet_id: str) -> ConsensusMetaPB | None:
            try:
                return self.fs.read_cmeta(tablet_id)
            except (MetaFileCorrupt, OSError):
                return None  # read again when the tablet opens, and reported

        def read_cmeta_into(tablet_id: str) -> None:
            cm = read_cmeta(tablet_id)
            if cm is not None:
                cmetas[tablet_id] = cm  # (each key by one thread; a dict store is atomic)

        sync_result: list[bool] = []
        syncer: threading.Thread | None = None
        if tablet_ids:
            # No replica opened from here starts an election until all are open (and the
            # peers' leaders were told so by this server's pings): RaftDriver.opened below.
            self.driver.hold_elections_while_opening()
        gc_pause = contextlib.ExitStack()
        try:
            gc_pause.enter_context(gc_paused())
            # The sync and the metadata reads overlap; no tablet opens before the sync.
            if tablet_ids:
                syncer = threading.Thread(
                    target=lambda: sync_result.append(self._sync_wals(stats)),
                    name="tablet-open-sync",
                    daemon=True,
                )
                syncer.start()
            t0 = time.monotonic()
            _on_threads(workers, read_cmeta_into, tablet_ids, "tablet-open")
            for tablet_id in tablet_ids:
                cm = cmetas.get(tablet_id)
                (first if cm is not None and cm.voted_for == self.fs.uuid else rest).append(
                    tablet_id
                )
            stats.metadata_s += time.monotonic() - t0
            # Pinged from now on, saying this server is opening (RaftDriver.watch_configs).
            self.driver.watch_configs([cm.committed_config for cm in cmetas.values()])
            if syncer is not None:
                syncer.join()
            wal_synced = bool(sync_result) and sync_result[0]

            def open_one(tablet_id: str) -> None:
                if self._stop.is_set():
                    return
                profile = getattr(local, "profile", None)
                if self._startup_profile is not None and profile is None:
                    profile = local.profile = cProfile.Profile()
                    with stats_lock:
                        profiles.append(profile)
                pause_point("startup.before_open_tablet", tablet_id)
                mine = _StartupStats()
                if profile is not None:
                    profile.enable()
                try:
                    replica = self._startup_one(
                        tablet_id, mine, cmeta=cmetas.pop(tablet_id, None), wal_synced=wal_synced
                    )
                except Exception as e:  # a bug: this tablet stays offline, the others open
                    log.exception("tablet %s: opening it failed", tablet_id)
                    replica = Replica(tablet_id, None, TabletStatus.FAILED, f"start-up: {e}")
                finally:
                    if profile is not None:
                        profile.disable()
                with self._lock:
                    self.replicas[tablet_id] = replica  # serves from here on
                self._report_changed(tablet_id)  # (its report: the heartbeat's from now)
                with stats_lock:
                    for f in ("metadata_s", "bootstrap_s", "raft_s", "other_s"):
                        setattr(stats, f, getattr(stats, f) + getattr(mine, f))
                    stats.opened += 1
                    stats.failed += replica.status is TabletStatus.FAILED
                    if (
                        replica.tablet is not None
                        and replica.status is TabletStatus.RUNNING
                        and self._lone_voter(replica.tablet)
                    ):
                        lone.append(replica.tablet)

            _on_threads(workers, open_one, first + rest, "tablet-open")
            gc_pause.close()  # (the lone voters' wait below makes no heap to speak of)
            self.driver.opened()
            # Each lone voter elected itself when its core was built; its first entry is
            # being made durable and applied meanwhile (one group commit for many).
            deadline = time.monotonic() + LONE_VOTER_READY_S
            for tablet in lone:
                if self._stop.is_set():
                    break
                self._wait_lone_voter(tablet, deadline)
        finally:
            gc_pause.close()
            self.driver.opened()
            self.startup_s = time.monotonic() - started
            self._opened_at = time.monotonic()
            self._opened.set()
        log.info(
            "start-up: %d of %d tablets opened (%d FAILED) in %.2f s on %d threads; "
            "syncfs %.2f s; thread time: metadata %.2f s, blocks and WAL %.2f s, raft %.2f s, "
            "other %.2f s",
            stats.opened,
            len(tablet_ids),
            stats.failed,
            self.startup_s,
            workers,
            stats.sync_s,
            stats.metadata_s,
            stats.bootstrap_s,
            stats.raft_s,
            stats.other_s,
        )
        if profiles and self._startup_profile is not None:
            merged = pstats.Stats(profiles[0])
            for p in profiles[1:]:
                merged.add(p)
            merged.dump_stats(str(self._startup_profile))
        if not self._stop.is_set():
            # After the roll-forwards above: its first pass is the startup one.
            self.quarantine.start()

    def _startup_one(
        self,
        tablet_id: str,
        stats: _StartupStats | None = None,
        *,
        cmeta: ConsensusMetaPB | None = None,
        wal_synced: bool = False,
    ) -> Replica:
        """Open one listed tablet. `cmeta`: its consensus metadata, already read; `wal_synced`:
        the WALs' file system was synced since the crash (`_sync_wals`)."""
        stats = stats if stats is not None else _StartupStats()
        t0 = time.monotonic()
        try:
            sb = self.fs.read_superblock(tablet_id)
        except (MetaFileCorrupt, OSError) as e:
            log.error("tablet %s: unreadable superblock, staying offline: %s", tablet_id, e)
            stats.other_s += time.monotonic() - t0
            return Replica(tablet_id, None, TabletStatus.FAILED, f"superblock: {e}")
        stats.metadata_s += time.monotonic() - t0
        t0 = time.monotonic()
        try:
            if sb.data_state == DataState.DELETED:
                if self.fs.wal_dir(tablet_id).exists() or self.fs.data_dir(tablet_id).exists():
                    log.info("tablet %s: rolling an interrupted deletion forward", tablet_id)
                    with self.quarantine.filling(tablet_id):
                        roll_forward_deletion(self.fs, sb)
                    crash_point("startup.after_roll_forward")
                self._start_tombstone(sb)
                return Replica(tablet_id, sb, TabletStatus.TOMBSTONED)
            if sb.data_state == DataState.COPYING:
                log.info("tablet %s: found COPYING at startup, deleting self", tablet_id)
                sb = self._delete_from_step2(sb, sb.last_op_id)
                self._start_tombstone(sb)
                return Replica(tablet_id, sb, TabletStatus.TOMBSTONED)
            if sb.data_state != DataState.READY:
                raise MetaFileCorrupt(f"unknown data state {sb.data_state}")
        except (MetaFileCorrupt, OSError) as e:
            log.error("tablet %s: startup failed, staying offline: %s", tablet_id, e)
            return Replica(tablet_id, sb, TabletStatus.FAILED, str(e))
        finally:
            if sb.data_state != DataState.READY:
                stats.other_s += time.monotonic() - t0
        return self._start_ready(sb, stats, cmeta=cmeta, wal_synced=wal_synced, hold=True)

    def _start_ready(
        self,
        sb: SuperblockPB,
        stats: _StartupStats | None = None,
        *,
        cmeta: ConsensusMetaPB | None = None,
        wal_synced: bool = False,
        hold: bool = False,
    ) -> Replica:
        """`hold`: opened at start-up (RaftDriver.add_group)."""
        stats = stats if stats is not None else _StartupStats()
        tablet_id = sb.tablet_id
        tablet: Tablet | None = None
        t0 = time.monotonic()
        try:
            if cmeta is None:
                cmeta = self.fs.read_cmeta(tablet_id)
            t1 = time.monotonic()
            stats.metadata_s += t1 - t0
            tablet = Tablet(self.fs, sb, cmeta, self.appender, self.wal_opts, self.tablet_opts)
            tablet.on_written = self._note_written
            tablet.on_failed = self._tablet_failed
            entries = tablet.bootstrap(wal_synced=wal_synced)
            with tablet.lock:
                tablet.status = TabletStatus.RUNNING
            t2 = time.monotonic()
            stats.bootstrap_s += t2 - t1
            self.driver.add_group(tablet, cmeta, entries, tablet.snapshot_op_id(), hold=hold)
            stats.raft_s += time.monotonic() - t2
        except Exception as e:  # any failure: this tablet stays offline, the server runs on
            log.error("tablet %s: bootstrap failed, staying offline: %s", tablet_id, e)
            if tablet is not None:
                with tablet.lock:
                    tablet.status = TabletStatus.FAILED
                    tablet.error = str(e)
                if tablet.wal is not None:
                    tablet.wal.close()
            return Replica(tablet_id, sb, TabletStatus.FAILED, f"{type(e).__name__}: {e}", tablet)
        return Replica(tablet_id, sb, TabletStatus.RUNNING, "", tablet)

    # ================================================================ create
    def create_tablet(self, req: CreateTabletRequest) -> Tablet:
        check_tablet_id(req.tablet_id)
        tablet_id = req.tablet_id
        if self.disk is not None:
            self.disk.require(f"new tablet {tablet_id}")
        schema_pb = schemamod.validate_new(req.schema)
        config = RaftConfigPB()
        config.CopyFrom(req.config)
        if not config.peers:
            config.opid_index = -1
            config.peers.add(uuid=self.fs.uuid, member_type=MemberType.VOTER)
        try:
            raft_config = config_from_pb(config)
        except WireError as e:
            raise BadRequest(f"bad config: {e}") from e
        if not raft_config.voters:
            raise BadRequest("config has no VOTER")
        if raft_config.member(self.fs.uuid) is None:
            raise BadRequest(f"config does not name this server ({self.fs.uuid})")
        for p in config.peers:
            if p.uuid != self.fs.uuid and not p.address:
                raise BadRequest(f"config peer {p.uuid} has no address")
        config.opid_index = -1  # no entry committed it: the initial config
        if self.copy_jobs is not None and self.copy_jobs.pending(tablet_id):
            # (Checked again by the job when it starts: the state it expects is gone.)
            raise IllegalState(f"tablet {tablet_id}: a tablet copy of it is queued or running")
        with self._lock:
            r = self.replicas.get(tablet_id)
            if r is not None and r.starting:
                raise _starting(tablet_id)  # it may be a tombstone: asked again once open
            if r is not None and r.status is not TabletStatus.TOMBSTONED:
                raise AlreadyExists(f"tablet {tablet_id} already exists ({r.status.value})")
            if r is None and len(self.replicas) >= TABLETS_MAX:
                # Not Unavailable: that is retried, and a create would wait out its whole
                # deadline on a server that stays at its limit (the 10,000-table run).
                raise NoSpace(
                    f"server {self.fs.uuid} hosts {len(self.replicas)} tablet replicas, "
                    f"its limit ({TABLETS_MAX}); place the tablet elsewhere or delete some"
                )
            # Reserve the id so that concurrent creates of the same tablet fail.
            placeholder = Replica(tablet_id, r.sb if r else None, TabletStatus.BOOTSTRAPPING)
            self.replicas[tablet_id] = placeholder
        if r is not None:
            self.driver.remove_group(tablet_id)  # the tombstone's vote-only core
        try:
            cmeta = ConsensusMetaPB(tablet_id=tablet_id)
            if r is not None:  # re-created over a tombstone: terms stay monotonic
                try:
                    old = self.fs.read_cmeta(tablet_id)
                    cmeta.current_term = old.current_term
                    cmeta.voted_for = old.voted_for
                except (MetaFileCorrupt, FileNotFoundError):
                    pass
            cmeta.committed_config.CopyFrom(config)
            # Leftovers of a create that crashed before its superblock was written.
            for d in (self.fs.wal_dir(tablet_id), self.fs.data_dir(tablet_id)):
                if d.exists():
                    shutil.rmtree(d)
            self.fs.write_cmeta(cmeta)
            self.fs.data_dir(tablet_id).mkdir(parents=True)
            self.fs.wal_dir(tablet_id).mkdir(parents=True)
            fsync_dir(self.fs.root / "data")
            fsync_dir(self.fs.root / "wals")
            sb = SuperblockPB(
                tablet_id=tablet_id,
                table_id=req.table_id,
                table_name=req.table_name,
                data_state=DataState.READY,
                schema=schema_pb,
                partition=req.partition,
                next_block_id=1,
            )
            if r is not None and r.sb is not None:
                sb.last_op_id.CopyFrom(r.sb.last_op_id)
            self.fs.write_superblock(sb)  # the tablet exists from here on
        except BaseException:
            with self._lock:
                if r is not None:
                    self.replicas[tablet_id] = r
                else:
                    self.replicas.pop(tablet_id, None)
            if r is not None and r.sb is not None and r.status is TabletStatus.TOMBSTONED:
                self._start_tombstone(r.sb)
            self._report_changed(tablet_id)
            raise
        replica = self._start_ready(sb)
        with self._lock:
            self.replicas[tablet_id] = replica
        self._report_changed(tablet_id)
        if replica.tablet is None or replica.status is not TabletStatus.RUNNING:
            raise TabletFailed(f"tablet {tablet_id} created but failed to start: {replica.error}")
        self._wait_lone_voter(replica.tablet, time.monotonic() + LONE_VOTER_READY_S)
        log.info("tablet %s: created (table %s)", tablet_id, req.table_name)
        return replica.tablet

    def _start_tombstone(self, sb: SuperblockPB) -> None:
        """A DELETED replica votes with its last op id (seed 000); without readable consensus
        metadata it cannot, and answers as a missing replica."""
        try:
            cmeta = self.fs.read_cmeta(sb.tablet_id)
            last = OpId(sb.last_op_id.term, sb.last_op_id.index)
            self.driver.add_tombstone(sb.tablet_id, self.fs, cmeta, last)
        except (MetaFileCorrupt, OSError, WireError, AssertionError) as e:
            log.warning("tablet %s: tombstone will not vote: %s", sb.tablet_id, e)

    def _lone_voter(self, tablet: Tablet) -> bool:
        """Whether this server is the tablet's only voter."""
        voters = [
            p.uuid for p in tablet.cmeta.committed_config.peers if p.member_type == MemberType.VOTER
        ]
        return voters == [self.fs.uuid]

    def _wait_lone_voter(self, tablet: Tablet, deadline: float) -> None:
        """A tablet whose only voter is this server elects itself at once; wait for that
        and for its first entry to apply, so that it serves as soon as it is reported."""
        if not self._lone_voter(tablet):
            return
        if not tablet.wait_leader_ready(deadline):
            log.warning("tablet %s: lone voter not leading yet", tablet.tablet_id)

    def _missing_status(self, tablet_id: str) -> ReplicaStatus | None:
        """What the driver answers for a replica it has no core for; None: no answer (a
        replica still starting answers nothing, like a server not up yet: TABLET_NOT_FOUND
        would make its leader copy the tablet over it)."""
        with self._lock:
            r = self.replicas.get(tablet_id)
        if r is not None and r.starting:
            return None
        if r is not None and r.status is TabletStatus.TOMBSTONED:
            return ReplicaStatus.TABLET_DELETED
        if r is not None and (
            r.status is TabletStatus.FAILED
            or (r.tablet is not None and r.tablet.status is TabletStatus.FAILED)
        ):
            return ReplicaStatus.TABLET_FAILED  # no copy over it: see ReplicaStatus
        return ReplicaStatus.TABLET_NOT_FOUND

    # ================================================================ delete
    def delete_tablet(self, tablet_id: str, cas_config_index: int | None = None) -> OpIdPB:
        """Tombstone a tablet (seed 000 steps 1-6). Deleting a tombstone is a no-op.

        With `cas_config_index`, the replica is deleted only if its committed config index is
        not greater (CAS_FAILED otherwise): the coordinator removes a replica evicted from its
        tablet's config this way, and a replica added back since is left alone."""
        check_tablet_id(tablet_id)
        r = self._replica(tablet_id)
        if r.starting:
            raise _starting(tablet_id)
        with r.lock:
            if r.status is TabletStatus.TOMBSTONED:
                assert r.sb is not None
                return r.sb.last_op_id
            if r.status in (TabletStatus.BOOTSTRAPPING, TabletStatus.COPYING):
                raise IllegalState(f"tablet {tablet_id} is {r.status.value}")
            if r.sb is None:
                raise TabletFailed(
                    f"tablet {tablet_id} has an unreadable superblock: "
                    f"{r.error}; repair it with `tserver` tools first"
                )
            if cas_config_index is not None:
                index = self._committed_config_index(r)
                if index > cas_config_index:
                    raise CasFailed(
                        f"tablet {tablet_id}: committed config index is {index}, "
                        f"above {cas_config_index}"
                    )
            # Step 1: shut the tablet down.
            current = r.sb
            last = OpIdPB()
            last.CopyFrom(r.sb.last_op_id)
            if r.tablet is not None:
                r.tablet.shutdown()
                current = r.tablet.sb
                op = r.tablet.last_op_id()
                if op.index >= last.index:
                    last = op
            crash_point("delete.after_step_1")
            sb = self._delete_from_step2(current, last)
            r.sb = sb
            r.tablet = None
            r.status = TabletStatus.TOMBSTONED
            r.error = ""
            self._start_tombstone(sb)
            self.driver.announce_deleted(tablet_id)  # (a quiet leader would never know)
        self._report_changed(tablet_id)
        log.info("tablet %s: deleted (tombstone at %d.%d)", tablet_id, last.term, last.index)
        return last

    def _committed_config_index(self, r) -> int:
        """The committed config index of a replica (caller holds r.lock)."""
        if r.tablet is not None:
            return r.tablet.cmeta.committed_config.opid_index
        try:
            return self.fs.read_cmeta(r.sb.tablet_id).committed_config.opid_index
        except Exception as e:  # no readable cmeta: nothing says it was re-added
            log.warning("tablet %s: consensus metadata unreadable: %s", r.sb.tablet_id, e)
            return -1

    def _delete_from_step2(self, sb: SuperblockPB, last: OpIdPB) -> SuperblockPB:
        with self.quarantine.filling(sb.tablet_id):  # its directory is not reaped meanwhile
            return tombstone_files(self.fs, sb, last)

    # ================================================================ copy (step 1)
    def begin_copy(self, tablet_id: str, caller_term: int = 0) -> None:
        """Follower tablet copy, step 1: superblock COPYING (fsynced). The quarantine path is
        cleared, the last op id kept. Only DOES_NOT_EXIST or DELETED replicas may start.

        A tombstone whose last logged entry has a term above `caller_term` (when given) is
        refused: that entry may be committed, and a leader of an older term cannot have it
        (a copy would leave this replica with a log that lacks it, and voting)."""
        check_tablet_id(tablet_id)
        if self.disk is not None:
            self.disk.require(f"tablet copy of {tablet_id} onto this server")
        with self._lock:
            r = self.replicas.get(tablet_id)
            if r is not None and r.starting:
                raise _starting(tablet_id)
            if r is not None and r.status is TabletStatus.COPYING:
                raise IllegalState(f"tablet {tablet_id} is already copying")
            if r is not None and r.status is not TabletStatus.TOMBSTONED:
                raise IllegalState(f"tablet {tablet_id} is {r.status.value}; delete it first")
            if r is not None and r.sb is not None and caller_term:
                last = r.sb.last_op_id
                if last.term > caller_term:
                    raise IllegalState(
                        f"tablet {tablet_id}: its last logged entry {last.term}.{last.index} "
                        f"is of a term above the caller's ({caller_term}); refusing a copy "
                        "from an older leader"
                    )
            if r is not None:
                self.driver.remove_group(tablet_id)  # the tombstone's vote-only core
            sb = SuperblockPB()
            if r is not None and r.sb is not None:
                sb.CopyFrom(r.sb)
            sb.tablet_id = tablet_id
            sb.data_state = DataState.COPYING
            sb.quarantine_path = ""
            self.fs.write_superblock(sb)
            self.replicas[tablet_id] = Replica(tablet_id, sb, TabletStatus.COPYING)
            self._copy_failures.pop(tablet_id, None)
        self._report_changed(tablet_id)  # COPYING (a new replica: no driver event)
        crash_point("copy.after_copying_superblock")

    def finish_copy(self, tablet_id: str, remote_sb: SuperblockPB) -> None:
        """Copy steps 5 and 6: superblock READY (fsynced), then start the replica."""
        with self._lock:
            r = self.replicas.get(tablet_id)
        if r is None or r.status is not TabletStatus.COPYING:
            raise IllegalState(f"tablet {tablet_id} is not copying")
        sb = ready_superblock(tablet_id, remote_sb)
        self.fs.write_superblock(sb)
        crash_point("copy.after_ready_superblock")
        replica = self._start_ready(sb)
        with self._lock:
            self.replicas[tablet_id] = replica
        self._report_changed(tablet_id)
        if replica.status is not TabletStatus.RUNNING:
            raise TabletFailed(f"copied tablet {tablet_id} failed to start: {replica.error}")

    def _quarantine_space(self) -> tuple[int, int]:
        """(free bytes, reserved bytes) for the quarantine's LOW_SPACE rule; (1, 0), never
        short of space, without a DiskSpace."""
        if self.disk is None:
            return 1, 0
        st = self.disk.state(fresh=True)
        return st.free_bytes, st.reserved_bytes

    def require_copy_space(self, tablet_id: str, size_bytes: int) -> None:
        """NoSpace unless `size_bytes` (a copy's announced size) fits above the reserve."""
        if self.disk is not None:
            self.disk.require(
                f"tablet copy of {tablet_id} ({size_bytes} bytes) onto this server",
                need_bytes=size_bytes,
            )

    def abort_copy(self, tablet_id: str, reason: str = "") -> None:
        """A failed copy: the COPYING replica deletes itself (last op id kept) and votes on.

        The partial data goes first (data before metadata): a copy that failed on a full
        disk (ENOSPC) frees its bytes before the tombstone's few writes, so the cleanup
        itself needs no space. Partial files are garbage, not a replica: they are deleted,
        not set aside in quarantine/. A COPYING superblock with no data is what a restart
        deletes anyway."""
        with self._lock:
            r = self.replicas.get(tablet_id)
            if len(self._copy_failures) >= COPY_FAILURES_MAX:
                self._copy_failures.clear()
            self._copy_failures[tablet_id] = (time.monotonic(), reason or "tablet copy failed")
        self._report_changed(tablet_id)  # COPY_FAILED, within COPY_FAILED_REPORT_S
        if r is None or r.status is not TabletStatus.COPYING or r.sb is None:
            return
        with r.lock:
            try:
                for d in (self.fs.data_dir(tablet_id), self.fs.wal_dir(tablet_id)):
                    if d.exists():
                        shutil.rmtree(d)
                        fsync_dir(d.parent)
                sb = self._delete_from_step2(r.sb, r.sb.last_op_id)
            except BaseException as e:
                # Not COPYING for ever (every copy request would be ALREADY_IN_PROGRESS):
                # FAILED, which a restart rolls forward (COPYING at startup is deleted).
                r.status = TabletStatus.FAILED
                r.error = f"cleaning up a failed copy: {type(e).__name__}: {e}"
                self._report_changed(tablet_id)
                raise
            r.sb = sb
            r.status = TabletStatus.TOMBSTONED
            r.error = f"tablet copy failed: {reason}" if reason else "tablet copy failed"
            self._start_tombstone(sb)
        self._report_changed(tablet_id)

    # ================================================================ data path
    def _replica(self, tablet_id: str) -> Replica:
        with self._lock:
            r = self.replicas.get(tablet_id)
        if r is None:
            raise TabletNotFound(f"tablet {tablet_id} not found on server {self.fs.uuid}")
        return r

    def data_state(self, tablet_id: str) -> TabletDataState:
        with self._lock:
            r = self.replicas.get(tablet_id)
        if r is not None and r.starting:
            raise _starting(tablet_id)
        if r is None or r.sb is None:
            return TabletDataState.DOES_NOT_EXIST
        sb = r.tablet.sb if r.tablet is not None else r.sb
        return TabletDataState(sb.data_state)

    def last_op_id(self, tablet_id: str) -> OpIdPB:
        """The last op id a replica knows: from its log when running, from the tombstone
        otherwise (a tombstoned replica still votes with it)."""
        r = self._replica(tablet_id)
        if r.starting:
            raise _starting(tablet_id)
        if r.tablet is not None:
            return r.tablet.last_op_id()
        assert r.sb is not None
        return r.sb.last_op_id

    def tablet(self, tablet_id: str) -> Tablet:
        """The running tablet, or the error a client should get."""
        r = self._replica(tablet_id)
        if r.starting:
            raise _starting(tablet_id)
        if r.status is TabletStatus.TOMBSTONED:
            raise TabletDeleted(f"tablet {tablet_id} is deleted")
        if r.status is TabletStatus.FAILED:
            raise TabletFailed(f"tablet {tablet_id} failed: {r.error}")
        if r.tablet is None or r.status is not TabletStatus.RUNNING:
            raise Unavailable(f"tablet {tablet_id} is {r.status.value}", retry_after_ms=100)
        return r.tablet

    def alter_schema(
        self,
        tablet_id: str,
        expected_version: int,
        add,
        drop,
        deadline: float,
        new_version: int = 0,
        next_column_id: int = 0,
    ) -> SchemaPB:
        """Alter the replica's schema (CAS on `expected_version`, 0: none). `new_version`
        0: the next version; given, the version to take, the added columns keeping their
        ids (`schema.altered`), and nothing to add or drop is allowed (a replica that
        missed an alter adding a column and one dropping it only takes the version)."""
        if not add and not drop and not new_version:  # it would only raise the version
            raise BadRequest("nothing to alter: no column to add or drop")
        r = self._replica(tablet_id)
        with r.lock:
            t = self.tablet(tablet_id)
            current = t.sb.schema
            if expected_version and expected_version != current.version:
                raise CasFailed(f"schema version is {current.version}, expected {expected_version}")
            new = schemamod.altered(current, list(add), list(drop), new_version, next_column_id)
            t.alter_schema(new, deadline)
        # Its report says the new version at the next heartbeat: no Raft driver event
        # names a schema change, and the coordinator acts on the version (a replica left
        # behind is brought to the table's schema, coordinator/replication.py).
        self._report_changed(tablet_id)
        return new

    def brief_reports(self, *, not_serving_only: bool = False) -> tuple[list[TabletReportPB], int]:
        """A report per replica with only its id, status and, where it runs, its Raft role,
        term and leader (`ListTablets` with `brief`), and how many replicas there are: what
        a probe polling a server of thousands of replicas asks, at a fraction of `reports`'
        cost (which copies the superblock's and the config's fields: a ListTablets of 10,000
        took 180-190 ms of the server's CPU, and a bench polling it ten times a second took
        60% of a core from the restart it measured). `not_serving_only`: only the replicas
        not RUNNING or knowing no leader; the others cost a look at their group (a brief
        listing of all 10,000 still took ~40 ms a call, 20% of a restarting server's GIL
        at a poll every 0.2 s)."""
        with self._lock:
            replicas = list(self.replicas.values())
        out = []
        for r in replicas:
            t = r.tablet
            running = not r.starting and t is not None and r.status is TabletStatus.RUNNING
            if not_serving_only and running and t.status is TabletStatus.RUNNING:
                g = t.group
                if g is not None and not g.closed and g.summary()[2]:
                    continue  # serving: RUNNING, and its group has a leader it knows
            rep = TabletReportPB(tablet_id=r.tablet_id, status=r.status.value)
            if running:
                rep.status = t.status.value
                self._raft_fields(rep, t, brief=True)
            out.append(rep)
        return out, len(replicas)

    def _raft_fields(self, rep: TabletReportPB, t: Tablet, *, brief: bool) -> None:
        """The replica's Raft role, term and leader into `rep` (and unless `brief` its
        commit index and the leader's address), from its group when it has an open one."""
        g = t.group
        if g is None or g.closed:
            return
        role, term, leader, commit = g.summary()
        rep.role = role.value
        rep.current_term = term
        if not brief:
            rep.commit_index = commit
        if leader:
            rep.leader_uuid = leader
            if not brief:
                rep.leader_address = (
                    self.driver.address
                    if leader == self.fs.uuid
                    else self.driver.addresses.get(leader, "")
                )

    def reports(
        self, *, starting: bool = True, tablet_ids: Collection[str] | None = None
    ) -> list[TabletReportPB]:
        """A report per replica; `starting` False leaves out those not open yet (the
        heartbeat's: the coordinator learns of each replica once it is open); `tablet_ids`:
        only those (the heartbeat's incremental report, tservers/heartbeat.py)."""
        now = time.monotonic()
        with self._lock:
            if tablet_ids is None:
                replicas = list(self.replicas.values())
            else:
                replicas = [r for t in tablet_ids if (r := self.replicas.get(t)) is not None]
            failures = {
                t: why
                for t, (at, why) in self._copy_failures.items()
                if now - at < COPY_FAILED_REPORT_S and (tablet_ids is None or t in tablet_ids)
            }
        out = [
            TabletReportPB(tablet_id=t, status=COPY_FAILED, error=f"tablet copy failed: {why}")
            for t, why in sorted(failures.items())
            if t not in {r.tablet_id for r in replicas}
        ]
        for r in replicas:
            if r.starting:
                if starting:
                    out.append(TabletReportPB(tablet_id=r.tablet_id, status=r.status.value))
                continue
            rep = TabletReportPB(tablet_id=r.tablet_id, status=r.status.value, error=r.error)
            if r.status is TabletStatus.TOMBSTONED and r.tablet_id in failures:
                rep.status = COPY_FAILED
            sb = r.tablet.sb if r.tablet is not None else r.sb
            if sb is not None:
                rep.table_id = sb.table_id
                rep.table_name = sb.table_name
                rep.data_state = sb.data_state
                rep.last_op_id.CopyFrom(sb.last_op_id)
                rep.schema_version = sb.schema.version
                rep.flushed_index = sb.flushed_index
            t = r.tablet
            if t is not None and r.status is TabletStatus.RUNNING:
                rep.status = t.status.value
                if t.error and not rep.error:  # the tablet failed while it ran (apply, replay)
                    rep.error = t.error
                rep.last_op_id.CopyFrom(t.last_op_id())
                rep.current_term = t.cmeta.current_term
                rep.committed_config.CopyFrom(t.cmeta.committed_config)
                rep.memstore_rows = t.memstore_rows()
                rep.blocks = len(t.blocks)
                rep.applied_index = t.applied_index
                self._raft_fields(rep, t, brief=False)
            else:
                try:
                    cm = self.fs.read_cmeta(r.tablet_id)
                    rep.current_term = cm.current_term
                    rep.committed_config.CopyFrom(cm.committed_config)
                except (MetaFileCorrupt, OSError):
                    pass
            out.append(rep)
        return out

    # ================================================================ report changes
    def _report_changed(self, tablet_id: str) -> None:
        """The replica's heartbeat report may have changed in a way the Raft driver does not
        see (tservers/heartbeat.py: the heartbeat's incremental report looks at it next; its
        full scan is rare)."""
        self.driver.report_changed(tablet_id)

    def _tablet_failed(self, tablet: Tablet) -> None:
        """A tablet failed by applying an entry (Tablet.on_failed; it holds its lock)."""
        self._report_changed(tablet.tablet_id)

    def _expire_copy_failures(self) -> None:
        """A copy failure COPY_FAILED_REPORT_S old leaves the reports: forgotten here, and its
        replica's report named as changed (it stops saying COPY_FAILED). Maintenance thread."""
        if not self._copy_failures:
            return
        now = time.monotonic()
        with self._lock:
            expired = [
                t for t, (at, _) in self._copy_failures.items() if now - at >= COPY_FAILED_REPORT_S
            ]
            for t in expired:
                del self._copy_failures[t]
        for t in expired:
            self._report_changed(t)

    # ================================================================ maintenance
    def _note_written(self, tablet: Tablet) -> None:
        with self._written_lock:
            self._written.add(tablet)

    def _maintenance_loop(self) -> None:
        full_at = time.monotonic() + MAINTENANCE_FULL_PASS_S
        while not self._stop.wait(MAINTENANCE_INTERVAL_S):
            self._expire_copy_failures()
            if time.monotonic() >= full_at:
                full_at = time.monotonic() + MAINTENANCE_FULL_PASS_S
                self.run_maintenance_once()
                continue
            with self._written_lock:
                written, self._written = self._written, set()
            self._disk_written(written)
            self._flush_if_needed([t for t in written if t.status is TabletStatus.RUNNING])
            flushed = self._flush_idle(time.monotonic(), written)
            # Memstores grow by writes only; an idle flush shrinks their sum (the gauge).
            if written or flushed:
                flushed += self._flush_for_memory()
            if flushed:
                self._release_heap()
            self.trim_mapped()

    @staticmethod
    def _release_heap() -> None:
        """After memstores were flushed by the idle or memory rule: the memory they held back
        to the system (mimalloc's pages, glibc's arenas: `malloc_trim`), or the server's RSS
        stays as it was (bench/memstores.py: 40 memstores flushed, RssAnon 339 -> 309 MiB
        without this). A few ms, on the maintenance thread, only after such flushes."""
        pa.default_memory_pool().release_unused()
        heap.trim()

    def _flush_logged(self, t: Tablet, why: str) -> bool:
        """One flush by the idle or memory rule; False (logged) if it failed: the tablet
        keeps serving from its memstore and WAL."""
        try:
            t.flush()
        except Exception as e:
            log.exception("tablet %s: %s flush failed: %s", t.tablet_id, why, e)
            return False
        return True

    def _flush_for_memory(self) -> int:
        """While the memstores of the tablets written since their last idle flush hold more
        than `memstore_bytes_max` together (estimated, `Tablet.memstore_bytes`), flush the
        biggest (Kudu flushes the biggest memstores under memory pressure); the number
        flushed. Tablets found shut down or with an empty memstore are forgotten until their
        next write (the idle rule has nothing to flush in them either). Maintenance thread."""
        if self.memstore_bytes_max <= 0:
            return 0
        sizes = {}
        for t in list(self._idle_since):
            size = t.memstore_bytes() if t.status is TabletStatus.RUNNING else 0
            if size:
                sizes[t] = size
            else:
                del self._idle_since[t]
        total = sum(sizes.values())
        flushed = 0
        for t in sorted(sizes, key=sizes.get, reverse=True):
            if total <= self.memstore_bytes_max or self._stop.is_set():
                break
            if not self._flush_logged(t, "memory"):
                continue
            log.info(
                "tablet %s: memstore of ~%d bytes flushed: the memstores held ~%d bytes, over "
                "--memstore-bytes-max %d",
                t.tablet_id,
                sizes[t],
                total,
                self.memstore_bytes_max,
            )
            total -= sizes[t]
            flushed += 1
        self.memstore_bytes_last = total
        if flushed:
            self.memory_flushes += flushed
            self.compaction.poke()
        return flushed

    def _flush_idle(self, now: float, written: set[Tablet] = frozenset()) -> int:
        """Flush the memstores that have taken no write for `flush_idle_s` (`TabletOptions`;
        0: never): `written` (the tablets written since the last round) are seen written at
        `now`; a tablet not written again that long is flushed if its memstore holds rows,
        then forgotten until its next write (the tablets kept are also the ones whose
        memstores `_flush_for_memory` counts). The tablets are kept in the order they were
        last seen written, so a round stops at the first one not idle long enough. Returns
        how many it flushed. Maintenance thread."""
        idle_s = self.tablet_opts.flush_idle_s
        if idle_s <= 0 and self.memstore_bytes_max <= 0:
            self._idle_since.clear()  # neither rule needs them
            return 0
        for t in written:  # to the end: oldest first
            self._idle_since.pop(t, None)
            self._idle_since[t] = now
        if idle_s <= 0:
            return 0
        flushed = 0
        while self._idle_since and not self._stop.is_set():
            t, since = next(iter(self._idle_since.items()))
            if now - since < idle_s:
                break  # and every one after it: seen written later
            del self._idle_since[t]
            if t.status is not TabletStatus.RUNNING:  # shut down, deleted: forgotten
                continue
            rows = t.memstore_rows()
            if rows and self._flush_logged(t, "idle"):
                flushed += 1
                log.info(
                    "tablet %s: %d memstore rows flushed after %.0f s without a write",
                    t.tablet_id,
                    rows,
                    now - since,
                )
        if flushed:
            self.idle_flushes += flushed
            self.compaction.poke()
        return flushed

    def trim_mapped(self, bytes_max: int | None = None) -> int:
        """If the process's resident file-mapped pages are over `bytes_max` (default: the
        server's `mapped_bytes_max`; 0: no bound), every running tablet's blocks hand their
        pages back (`pages.release_blocks`): readers map what they touch again from the
        page cache. Returns the RssFile it took down (0 when under the bound). A bound
        below what the last trim left (`_mapped_floor`) trims again only once RssFile grew
        MAPPED_GROWTH_MIN past that. A read of /proc/self/statm each maintenance round
        (every 0.2 s) when under it."""
        limit = self.mapped_bytes_max if bytes_max is None else bytes_max
        if limit <= 0 and bytes_max is None:
            return 0
        before = mapped_file_bytes()
        if before <= max(limit, self._mapped_floor + MAPPED_GROWTH_MIN):
            return 0
        for t in self.running_tablets():
            release_blocks(list(t.blocks))
        self._mapped_floor = after = mapped_file_bytes()
        freed = max(0, before - after)
        self.mapped_trims += 1
        self.mapped_trimmed_bytes += freed
        log.debug("mapped pages %d bytes over %d: trimmed %d", before, limit, freed)
        return freed

    def _disk_written(self, written: set[Tablet]) -> None:
        """Tablets written (their WAL grew): counted again in the disk's root_bytes."""
        if self.disk is not None and written:
            self.disk.tablets_changed([t.tablet_id for t in written])

    def running_tablets(self) -> list[Tablet]:
        with self._lock:
            return [
                r.tablet
                for r in self.replicas.values()
                if r.tablet is not None and r.status is TabletStatus.RUNNING
            ]

    def run_maintenance_once(self, *, compact: bool = False) -> None:
        """Flush the tablets that need it; with `compact`, also one compaction round here
        (the background CompactionScheduler runs them otherwise, under its rate limit)."""
        with self._written_lock:
            written, self._written = self._written, set()  # every tablet is looked at now
        self._disk_written(written)
        self._flush_if_needed(self.running_tablets())
        if compact:
            for t in self.compaction.candidates():
                self.compaction.compact(t)

    def _flush_if_needed(self, tablets: list[Tablet]) -> None:
        for t in tablets:
            if self._stop.is_set():
                return
            try:
                wal_segments = t.wal_segments_unflushed()
                if (
                    t.memstore_rows() >= self.tablet_opts.flush_rows_threshold
                    or wal_segments > self.tablet_opts.wal_segments_flush
                ):
                    t.flush()
                    self.compaction.poke()
            except Exception as e:  # the tablet keeps serving from memstore and WAL
                log.exception("tablet %s: maintenance failed: %s", t.tablet_id, e)

    def close(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        if self._startup_thread is not None:
            # Tablets being opened finish opening (to be shut down below); the rest are not.
            self._startup_thread.join(max(0.1, deadline - time.monotonic()))
        self.quarantine.close(max(0.1, min(10.0, deadline - time.monotonic())))
        if self._maint is not None:
            self._maint.join(max(0.1, deadline - time.monotonic()))
        self.compaction.close(max(0.1, deadline - time.monotonic()))
        with self._lock:
            tablets = [r.tablet for r in self.replicas.values() if r.tablet is not None]
        # One syncfs for every WAL's footer instead of an fsync each: 10,000 of those were
        # ~2.9 s of a server's stop (issue 28). See `_sync_closed_wals`.
        batch = self.wal_opts.sync and syncfs.available() and len(tablets) > 1
        for t in tablets:
            t.shutdown(max(0.1, deadline - time.monotonic()), sync_wal=not batch)
        if batch:
            self._sync_closed_wals()
        if self.copy_jobs is not None:
            self.copy_jobs.close(max(0.1, deadline - time.monotonic()))
        self.copy_source.close()
        self.driver.close(max(0.1, deadline - time.monotonic()))
        self.appender.close(max(0.1, deadline - time.monotonic()))
        self.fs.close_journal()

    def _sync_closed_wals(self) -> None:
        """The stop's one syncfs of the WALs' file system, for every footer written
        unsynced. If it fails, a footer may be lost: the next start-up then reads those
        segments as after a crash (its own syncfs, then up to the first hole); every entry
        was synced by the appender before it was acknowledged, so none is at risk."""
        t0 = time.monotonic()
        try:
            syncfs.sync_file_system(self.fs.root / "wals")
        except OSError as e:
            log.error("stop: %s; the WALs' footers may not be durable (the next start-up "
                      "reads them as after a crash)", e)  # fmt: skip
        else:
            log.info("stop: every WAL footer synced by one syncfs in %.2f s",
                     time.monotonic() - t0)  # fmt: skip

    def __enter__(self) -> TabletManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
