"""The tablet server daemon: file system root, tablet manager and the rpc service together."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from rpc import join_token, keys, privileged
from rpc.errors import IllegalState
from rpc.http_access import HttpAccess
from rpc.privileged import is_loopback
from rpc.server import RpcServer
from tservers.fs import DiskSpace, FsLayout, lock_root
from tservers.heartbeat import HEARTBEAT_INTERVAL_S_DEFAULT, Heartbeater, disk_report
from tservers.metrics import TServerObserver
from tservers.principals import Guarded, PrincipalCache, TableServerKeys
from tservers.quarantine import BYTES_MAX_DEFAULT, RETENTION_S_DEFAULT
from tservers.quarantine import Policy as QuarantinePolicy
from tservers.raft_driver import RETAIN_BYTES_MAX_DEFAULT, RETAIN_ENTRIES_MAX_DEFAULT, DriverOptions
from tservers.service import TServerService
from tservers.tablet.budgets import MEMSTORE_BYTES_MAX_DEFAULT
from tservers.tablet.compaction import (
    RATE_BYTES_S_DEFAULT,
    RUN_BYTES_MAX_DEFAULT,
    CompactionOptions,
)
from tservers.tablet.manager import STARTUP_THREADS_DEFAULT, TabletManager
from tservers.tablet.pages import MAPPED_BYTES_MAX_DEFAULT
from tservers.tablet.tablet import TabletOptions
from tservers.tablet_copy import SESSION_IDLE_S
from tservers.wal.log import SEGMENT_SIZE_BYTES_DEFAULT, WalOptions

log = logging.getLogger(__name__)

# Set to a file path, the server profiles its start-up (cProfile, pstats format) into it:
# for bench/tserver_startup.py and anyone asking where a restart spends its time.
STARTUP_PROFILE_ENV = "TSERVER_STARTUP_PROFILE"
# A graceful stop first hands the leadership of the groups this server leads to their
# followers, for at most this long (`RaftDriver.hand_over_leadership`); the environment
# variable overrides it (seconds; 0: no hand-over, the followers elect once it is gone).
LEADERSHIP_HANDOVER_S_DEFAULT = 5.0
LEADERSHIP_HANDOVER_ENV = "LOGCENTRIC_LEADERSHIP_HANDOVER_S"
# The heartbeat's disk report counts the bytes under the root (`DiskSpace.root_bytes`, shown
# as the server's files) only once the tablets have been open this long: the first count
# after a start stats every file of every replica (1-2 s of CPU at 10,000 replicas), which
# the opening and the elections that follow it want (issue 28). Until then it reports the
# last count: 0 in a new process.
ROOT_COUNT_AFTER_OPEN_S = 10.0


def leadership_handover_s() -> float:
    text = os.environ.get(LEADERSHIP_HANDOVER_ENV, "").strip()
    if not text:
        return LEADERSHIP_HANDOVER_S_DEFAULT
    try:
        return max(0.0, float(text))
    except ValueError:
        log.warning("%s=%r is not a number of seconds: %.1f s", LEADERSHIP_HANDOVER_ENV, text,
                    LEADERSHIP_HANDOVER_S_DEFAULT)  # fmt: skip
        return LEADERSHIP_HANDOVER_S_DEFAULT


@dataclass(frozen=True, slots=True)
class TServerConfig:
    fs_root: Path
    bind: str = "127.0.0.1:0"
    wal_sync: bool = True
    segment_size_bytes_max: int = SEGMENT_SIZE_BYTES_DEFAULT
    flush_rows_threshold: int = 200_000
    flush_idle_s: float = 60.0  # a memstore without a write this long is flushed (0: never)
    compaction_blocks_min: int = 4
    workers: int = 8
    # Threads opening the tablets at start-up (tservers/tablet/manager.py: two by default).
    startup_threads: int = STARTUP_THREADS_DEFAULT
    queue_max: int = 256
    message_bytes_max: int = 64 << 20
    # Coordinator node addresses to heartbeat to; empty: a standalone server.
    coordinators: tuple[str, ...] = ()
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S_DEFAULT
    copy_rate_limit_bytes_s: int = 0  # tablet copies onto this server; 0: unthrottled
    copy_session_idle_s: float = SESSION_IDLE_S  # copy sessions served by this server
    # WAL entries kept below the flushed index for lagging peers (beyond: tablet copy).
    wal_retain_entries_max: int = RETAIN_ENTRIES_MAX_DEFAULT
    wal_retain_bytes_max: int = RETAIN_BYTES_MAX_DEFAULT
    # What deletions set aside under quarantine/ is removed once this old (0: at once) and,
    # oldest first, while the quarantine holds more than quarantine_bytes_max.
    quarantine_retention_s: float = RETENTION_S_DEFAULT
    quarantine_bytes_max: int = BYTES_MAX_DEFAULT
    http_bind: str = ""  # HOST:PORT of /metrics, /healthz, /readyz (tservers/metrics.py)
    http_access: HttpAccess = HttpAccess()  # beyond loopback: auth or public (rpc/observe.py)
    metrics: bool = True  # per-method rpc metrics (False: for benchmarks)
    # The cluster's password: privileged methods (DeleteTablet, ChangeConfig,
    # StartTabletCopy) answer only calls signed with it (rpc/privileged.py). None: open to
    # anyone who reaches the port, allowed only on a loopback address (a development server).
    password: str | None = None
    # Free space kept on the fs root's file system (tservers/fs.py): at or below it, new
    # tablets, copies onto this server and writes are refused (NO_SPACE). None: 1% of the
    # file system or 1 GiB, whichever is smaller; 0: none.
    fs_reserved_bytes: int | None = None
    # Resident file-mapped pages kept before every block's pages are handed back to the
    # kernel (TabletManager.trim_mapped); 0: no bound.
    mapped_bytes_max: int = MAPPED_BYTES_MAX_DEFAULT
    # The memstores of all tablets, estimated, above which the biggest are flushed; 0: none.
    memstore_bytes_max: int = MEMSTORE_BYTES_MAX_DEFAULT
    compaction_rate_bytes_s: int = RATE_BYTES_S_DEFAULT  # background compactions; 0: no limit
    compaction_run_bytes_max: int = RUN_BYTES_MAX_DEFAULT  # bytes of blocks merged at once
    # CURVE (design/security.md sections 2 and 4): the rpc server encrypts and authenticates
    # every connection with the server's key pair (keys/ of the fs root) and admits callers
    # by the principals table the coordinator leader pushes in heartbeat answers; heartbeats
    # go as a CURVE client. Off: plaintext, as before.
    curve: bool = False
    # The coordinator nodes' public keys (z85), one per address of `coordinators`, in order:
    # the heartbeats' server keys, and admitted as the server role (the coordinator's calls).
    coordinator_keys: tuple[str, ...] = ()
    # With CURVE: after this long without an answer from a coordinator leader the server
    # refuses calls of every principal but the cluster's own (its table may be stale).
    leader_silence_s: float = 30.0
    # With CURVE: a one-use join token (`coordinator join-token`, design/security.md section
    # 5), used to admit this server's key while the coordinators refuse it. A secret: never
    # in the repr, never logged.
    join_token: str = field(default="", repr=False)


class TabletServer:
    """Opens the fs root (refusing an unformatted or corrupt one), starts tablets, serves."""

    def __init__(self, config: TServerConfig) -> None:
        self.config = config
        if config.curve and len(config.coordinator_keys) != len(config.coordinators):
            raise IllegalState(
                f"a CURVE tablet server needs one coordinator public key per coordinator "
                f"address: {len(config.coordinators)} addresses, "
                f"{len(config.coordinator_keys)} keys (--coordinator-keys)"
            )
        self.privileged_key = privileged.derive_key(config.password) if config.password else None
        self.join_keypair: keys.KeyPair | None = None
        if config.join_token:
            if not config.curve or not config.coordinators:
                raise IllegalState("a join token needs --curve and --coordinators")
            try:
                self.join_keypair = join_token.keypair_of(config.join_token)
            except join_token.JoinTokenError as e:
                raise IllegalState(str(e)) from None
        if self.privileged_key is None and not config.curve:
            if not is_loopback(config.bind):
                raise IllegalState(
                    f"a tablet server on {config.bind} needs the cluster's password "
                    "(--password-file): without it anyone who reaches the port may delete "
                    "its replicas; only a development server on 127.0.0.1 runs without one"
                )
            # Said once it serves (start()): a start that fails says only why.
        # Held until close (or the process dies): offline tools that change the fs root
        # (`copy-from-remote`) refuse to run beside a live server. FsLocked if one runs.
        self._fs_lock = lock_root(config.fs_root)
        try:
            self.fs = FsLayout.open(config.fs_root)  # raises FsError with a clear message
        except BaseException:
            self._fs_lock.release()
            raise
        try:
            self.keypair, created = self.fs.load_keys()
        except BaseException:
            self._fs_lock.release()
            raise
        if created:
            log.warning(
                "made a key pair for tablet server %s in %s (its fs root predates keys): "
                "public key %s; an admin admits it with `coordinator users add %s --kind "
                "tserver --role server --public-key ...`",
                self.fs.uuid,
                self.fs.keys_dir,
                self.keypair.public,
                self.fs.uuid,
            )
        # With CURVE: the principals table the coordinator leader pushes (section 4), and
        # the keys of peer tablet servers by UUID from it (tablet Raft, tablet copy).
        self.principals: PrincipalCache | None = None
        self.peer_curve: TableServerKeys | None = None
        if config.curve:
            self.principals = PrincipalCache(
                self.fs.uuid,
                self.keypair.public,
                config.coordinator_keys,
                leader_silence_s=config.leader_silence_s,
                path=Path(config.fs_root) / "principals",
            )
            self.peer_curve = TableServerKeys(self.keypair, self.principals)
        self.disk = DiskSpace(config.fs_root, self.fs.uuid, config.fs_reserved_bytes)
        self.manager = TabletManager(
            self.fs,
            WalOptions(segment_size_bytes_max=config.segment_size_bytes_max, sync=config.wal_sync),
            TabletOptions(
                flush_rows_threshold=config.flush_rows_threshold,
                flush_idle_s=config.flush_idle_s,
                compaction_blocks_min=config.compaction_blocks_min,
            ),
            copy_rate_limit_bytes_s=config.copy_rate_limit_bytes_s,
            copy_session_idle_s=config.copy_session_idle_s,
            driver_opts=DriverOptions(
                retain_entries_max=config.wal_retain_entries_max,
                retain_bytes_max=config.wal_retain_bytes_max,
                privileged_key=self.privileged_key,
                curve=self.peer_curve,
            ),
            quarantine_policy=QuarantinePolicy(
                retention_s=config.quarantine_retention_s,
                bytes_max=config.quarantine_bytes_max,
            ),
            startup_threads=config.startup_threads,
            startup_profile=Path(profile)
            if (profile := os.environ.get(STARTUP_PROFILE_ENV))
            else None,
            disk=self.disk,
            mapped_bytes_max=config.mapped_bytes_max,
            memstore_bytes_max=config.memstore_bytes_max,
            compaction=CompactionOptions(
                rate_bytes_s=config.compaction_rate_bytes_s,
                blocks_min=config.compaction_blocks_min,
                run_bytes_max=config.compaction_run_bytes_max,
            ),
        )
        self.rpc: RpcServer | None = None
        self.service: TServerService | None = None
        self.heartbeater: Heartbeater | None = None
        self.observer = TServerObserver(self)

    @property
    def uuid(self) -> str:
        return self.fs.uuid

    @property
    def address(self) -> str:
        return self.rpc.address if self.rpc else ""

    def start(self, *, wait_open: bool = True) -> TabletServer:
        """Serve at once and open the tablets in the background, each serving as soon as it
        is open (calls to one still opening answer UNAVAILABLE with a retry hint); heartbeats
        start at once and report each tablet once it is open. With `wait_open`, return once
        every tablet is open (the CLI then prints its "serving on" line)."""
        started = time.monotonic()
        self.manager.list_tablets()  # before the port answers: no call finds a tablet missing
        assert self.manager.copy_jobs is not None
        self.manager.copy_jobs.curve = self.peer_curve  # copies onto this server: CURVE
        self.rpc = RpcServer(
            self.fs.uuid,
            self.config.bind,
            service="tserver",
            workers=self.config.workers,
            queue_max=self.config.queue_max,
            message_bytes_max=self.config.message_bytes_max,
            metrics=self.config.metrics,
            privileged_key=self.privileged_key,
            curve=keys.ServerCurve(self.keypair, self.principals.authorize_key)
            if self.principals is not None
            else None,
        )
        self.service = TServerService(self.manager, lambda: self.address)
        self.service.register(
            Guarded(self.rpc, self.principals) if self.principals is not None else self.rpc
        )
        self.rpc.start()
        self.manager.driver.set_address(self.rpc.address)
        if self.principals is not None:
            log.info(
                "tablet server %s: CURVE on %s, key %s; callers admitted by the principals "
                "table the coordinator leader pushes",
                self.fs.uuid,
                self.rpc.address,
                self.keypair.public,
            )
        elif self.privileged_key is None:
            log.warning(
                "INSECURE: no cluster password; DeleteTablet, ChangeConfig and StartTabletCopy "
                "are open to anyone who reaches %s (development only)",
                self.rpc.address,
            )
        log.info(
            "tablet server %s answering on %s; opening %d tablets",
            self.fs.uuid,
            self.rpc.address,
            self.manager.starting,
        )
        self.manager.start_opening()
        if self.config.coordinators:
            self.heartbeater = Heartbeater(
                self.fs.uuid,
                lambda: self.address,
                lambda ids: self.manager.reports(starting=False, tablet_ids=ids),
                self.config.coordinators,
                changes=self.manager.driver.take_report_changes,
                interval_s=self.config.heartbeat_interval_s,
                http_address=lambda: self.observer.http.advertised if self.observer.http else "",
                disk=lambda: disk_report(
                    self.disk, count_root=self.manager.open_for_s() >= ROOT_COUNT_AFTER_OPEN_S
                ),
                curve=keys.ClientCurve(self.keypair) if self.config.curve else None,
                coordinator_keys=self.config.coordinator_keys,
                principals=self.principals,
                join_keypair=self.join_keypair,
            ).start()
        self.observer.start(self.config.http_bind, self.config.http_access)
        if wait_open:
            self.manager.wait_open()
            log.info(
                "tablet server %s serving on %s: %d tablets open in %.2f s",
                self.fs.uuid,
                self.rpc.address,
                len(self.manager.replicas),
                time.monotonic() - started,
            )
        return self

    def close(self) -> None:
        started = time.monotonic()
        if self.rpc is not None:
            # While everything still serves (the rpc server carries the transfers' votes and
            # the new leaders' first appends; the heartbeat tells the coordinator): the
            # survivors lead before this server goes, and its restart finds them leading.
            deadline_s = leadership_handover_s()
            if deadline_s > 0:
                try:
                    self.manager.driver.hand_over_leadership(deadline_s)
                except Exception:  # the stop goes on: the followers elect once it is gone
                    log.exception("leadership hand-over failed")
        self.observer.close()
        if self.heartbeater is not None:
            self.heartbeater.close()
        if self.rpc is not None:
            self.rpc.close()
        self.manager.close()
        self._fs_lock.release()
        log.info("tablet server %s closed in %.2f s", self.uuid, time.monotonic() - started)

    def __enter__(self) -> TabletServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
