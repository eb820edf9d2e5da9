"""Thin driver that runs the pure LeaseKeeper against any LogStore with time.monotonic().

One named thread polls the log's tail every `poll_interval_s`, reads new entries to keep the
lease history exact, and performs the keeper's lease appends. Operation appends of the leader
go through `safe_append`, which serializes them with the lease appends (one append in flight
per node, each conditional on the id after the last one this node knows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from coordinator.leases.lease import (
    AppendLease,
    LeaseConfig,
    LeaseKeeper,
    LeaseValue,
    NotServing,
    Role,
)
from coordinator.leases.testclock import (
    SERVE_PAST_LEASE_LATE_S,
    drift_margin_from_env,
    serve_past_lease_from_env,
)
from logstore.api import LogConditionFailed, LogStore, read_live
from rpc.errors import LeaderHintValue, NotLeader, RpcError, Unavailable
from rpc.protocols import coordinator_pb2 as pb

logger = logging.getLogger(__name__)

LOG_NAME = "coordinator"
READ_CHUNK_ENTRIES = 1000
JOIN_TIMEOUT_S = 5.0


def encode_lease(lease: LeaseValue, written_unix_ms: int = 0) -> bytes:
    """The record; `written_unix_ms` (wall clock) is for people reading the log only."""
    return pb.LogRecord(
        lease=pb.Lease(
            holder_uuid=lease.holder_uuid,
            holder_address=lease.holder_address,
            epoch=lease.epoch,
            takeover=lease.takeover,
            written_unix_ms=written_unix_ms,
            holder_http_address=lease.holder_http_address,
        )
    ).SerializeToString()


def decode_lease(data: bytes) -> LeaseValue | None:
    """The Lease in a log record, or None for any other record."""
    record = pb.LogRecord()
    record.ParseFromString(data)
    if record.WhichOneof("record") != "lease":
        return None
    lease = record.lease
    return LeaseValue(
        lease.holder_uuid,
        lease.holder_address,
        lease.epoch,
        lease.takeover,
        lease.holder_http_address,
    )


class LeaseDriver:
    """Runs one LeaseKeeper; `on_role_change(role, epoch)` is called from the driver thread
    (or the appending thread) after every change of role, outside the lock."""

    def __init__(
        self,
        store: LogStore,
        uuid: str,
        address: str,
        config: LeaseConfig | None = None,
        *,
        log: str = LOG_NAME,
        poll_interval_s: float | None = None,
        seed: int = 0,
        on_role_change: Callable[[Role, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or LeaseConfig()
        self.store = store
        self.log = log
        self.keeper = LeaseKeeper(uuid, address, self.config, seed=seed)
        self.keeper.drift_margin_s = drift_margin_from_env(self.config.drift_margin_s)
        self.keeper.serve_past_lease = serve_past_lease_from_env()
        self.poll_interval_s = poll_interval_s or min(
            self.config.renew_interval_s / 2, self.config.lease_timeout_s / 10
        )
        self.append_timeout_s = self.config.lease_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._on_role_change = on_role_change
        self._thread: threading.Thread | None = None
        self._reported = (Role.FOLLOWER, 0)
        self._report_lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(
            target=self._run, name=f"lease-{self.keeper.uuid[:8]}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            assert not self._thread.is_alive(), "lease thread did not stop"
            self._thread = None
        with self._lock:
            self.keeper.step_down(self._clock(), "closed")
        self._report()

    def __enter__(self) -> LeaseDriver:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ queries

    def is_serving(self) -> bool:
        # No lock: the driver's lock is held across store I/O, and a request must not wait
        # behind an append to learn whether it may be served. The keeper's role and
        # lease_end are each replaced atomically; reading them unlocked is as if the check
        # ran just before or after the concurrent change.
        return self.keeper.is_serving(self._clock())

    @property
    def role(self) -> Role:
        return self.keeper.role

    @property
    def epoch(self) -> int:
        return self.keeper.epoch

    def hint(self) -> LeaderHintValue:
        # No lock (see is_serving): each field it reads is replaced atomically.
        return self.keeper.hint(self._clock())

    def set_http_address(self, address: str) -> None:
        """This node's web console, written in its Lease records from the next one on."""
        with self._lock:
            self.keeper.http_address = address

    def leader_http_address(self, leader_uuid: str) -> str:
        """The web console of `leader_uuid` (a hint), from the last Lease record seen. No
        lock, as hint: the record it reads is replaced atomically."""
        return self.keeper.holder_http_address(leader_uuid)

    # ------------------------------------------------------------ appends

    def safe_append(
        self,
        build: Callable[[int], tuple[bytes, Sequence[int]]],
        timeout_s: float | None = None,
    ) -> int:
        """Append the record `build(expected_id)` returns, conditional on expected_id.

        Raises NotLeader (with the hint) when this node may not write or the condition
        failed, and Unavailable when the outcome is unknown; the node steps down in both
        failure cases. `build` runs under the append lock and may raise to abort cleanly.
        """
        with self._lock:
            now = self._clock()
            try:
                expected = self.keeper.begin_append(now)
            except NotServing as e:
                raise NotLeader(str(e), leader_hint=self.keeper.hint(self._clock())) from None
            try:
                data, invalidates = build(expected)
            except BaseException:
                self.keeper.cancel_append()
                raise
            try:
                got = self.store.append(
                    self.log,
                    data,
                    expected_id=expected,
                    invalidates=tuple(invalidates),
                    timeout_s=timeout_s or self.append_timeout_s,
                )
            except LogConditionFailed as e:
                self.keeper.append_failed(self._clock(), e.last_id)
                err: RpcError = NotLeader(
                    f"lost the lease: {e.message}", leader_hint=self.keeper.hint(self._clock())
                )
            except RpcError as e:
                self.keeper.append_failed(self._clock(), None)
                err = Unavailable(f"append outcome unknown: {e}", retry_after_ms=100)
            else:
                self.keeper.append_succeeded(self._clock(), got)
                err = None
        self._report()
        if err is not None:
            raise err
        return got

    # ------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            try:
                self.step()
            except RpcError as e:
                logger.warning("lease %s: store error: %s", self.keeper.uuid, e)

    def step(self) -> None:
        """One round: read the tail and new entries, then do what the keeper says."""
        with self._lock:
            last = self.store.last_id(self.log, timeout_s=self.config.lease_timeout_s)
            self._read_entries(last)
            # The time of sighting is taken after the read returned (never earlier).
            self.keeper.observe_tail(self._clock(), last)
            if self.keeper.wants_full_read(self._clock()):
                self.keeper.observe_live_leases(last, self._read_live_leases(last))
            action = self.keeper.poll(self._clock())
            if action is not None:
                self._do_lease_append(action)
        self._report()

    def _read_entries(self, last: int) -> None:
        keeper = self.keeper
        rounds = 0
        while keeper.read_through < last and rounds < 1000:
            rounds += 1
            start = keeper.read_through + 1
            entries = self.store.read(self.log, from_id=start, limit=READ_CHUNK_ENTRIES)
            entries = [e for e in entries if e.id <= last]
            through = last if len(entries) < READ_CHUNK_ENTRIES else entries[-1].id
            keeper.observe_entries(
                through, [(e.id, decode_lease(e.data), tuple(e.invalidates)) for e in entries]
            )

    def _read_live_leases(self, last: int) -> dict[int, LeaseValue]:
        """Every live Lease record with id <= last (bounded by the live log, not history)."""
        leases: dict[int, LeaseValue] = {}
        for e in read_live(self.store, self.log, through=last, chunk=READ_CHUNK_ENTRIES):
            if (lease := decode_lease(e.data)) is not None:
                leases[e.id] = lease
        return leases

    def _do_lease_append(self, action: AppendLease) -> None:
        try:
            got = self.store.append(
                self.log,
                encode_lease(action.lease, written_unix_ms=int(time.time() * 1000)),
                expected_id=action.expected_id,
                invalidates=action.invalidates,
                timeout_s=self.append_timeout_s,
            )
        except LogConditionFailed as e:
            self._late_in_broken_build()
            self.keeper.append_failed(self._clock(), e.last_id)
            logger.info("lease %s: conditional append failed at %d", self.keeper.uuid, e.last_id)
        except RpcError as e:
            self._late_in_broken_build()
            self.keeper.append_failed(self._clock(), None)
            logger.warning("lease %s: lease append failed: %s", self.keeper.uuid, e)
        else:
            self.keeper.append_succeeded(self._clock(), got)

    def _late_in_broken_build(self) -> None:
        """The test-only broken build (testclock.py, SERVE_PAST_LEASE_ENV) learns of a
        failed renewal past its lease SERVE_PAST_LEASE_LATE_S late, serving meanwhile."""
        k = self.keeper
        if k.serve_past_lease and k.role is Role.LEADER and self._clock() >= k.lease_end:
            time.sleep(SERVE_PAST_LEASE_LATE_S)

    def _report(self) -> None:
        with self._report_lock:
            now = (self.keeper.role, self.keeper.epoch)
            if now == self._reported:
                return
            self._reported = now
        logger.info("lease %s: %s epoch %d", self.keeper.uuid, now[0].value, now[1])
        if self._on_role_change is not None:
            self._on_role_change(*now)
