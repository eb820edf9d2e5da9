"""The coordinator lease as a pure object: time and log observations in, actions out.

Architecture 4.2, exactly:
- Every append of the leader is conditional on `expected_id = last id it knows + 1`; a failed
  condition means someone else wrote, and the node steps down at once.
- The leader appends a `Lease` record when it has written nothing for `renew_interval_s`; a
  renewal invalidates the previous renewal of the same epoch. The takeover record that opens an
  epoch stays live until `epochs_kept` later epochs exist.
- A follower that sees the log's last id unchanged for `lease_timeout_s` (measured from when
  it SAW that id) appends a takeover `Lease` conditional on that id. Success: leader. Failure:
  a randomized back-off, then it keeps watching.
- The leader serves only until `start of its last successful append + lease_timeout_s -
  drift_margin_s`.

No threads, clocks or I/O here: every method takes `now` (a time.monotonic() value of the
caller's clock), so the unit tests and the simulator are plain calls. `LeaseDriver`
(coordinator/leases/driver.py) runs it against a LogStore.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable
from dataclasses import dataclass

from rpc.errors import LeaderHintValue


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"


class AppendKind(enum.Enum):
    TAKEOVER = "TAKEOVER"
    RENEW = "RENEW"
    OP = "OP"


class NotServing(Exception):
    """Raised by begin_append when this node may not write (not leader or lease run out)."""


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    lease_timeout_s: float = 1.0
    renew_interval_s: float = 0.2
    # Covers clock-rate drift between nodes: the margin must be at least
    # lease_timeout_s * 2 * rho / (1 + rho) for a drift rate rho (design/coordinator.md).
    drift_margin_s: float = 0.1
    backoff_min_s: float = 0.05
    backoff_max_s: float = 0.4
    epochs_kept: int = 3

    def __post_init__(self) -> None:
        assert self.lease_timeout_s > 0
        assert 0 < self.drift_margin_s < self.lease_timeout_s
        # A renewal must be able to land before the leader's own lease runs out.
        assert 0 < self.renew_interval_s < (self.lease_timeout_s - self.drift_margin_s) / 2
        assert 0 <= self.backoff_min_s <= self.backoff_max_s
        assert 1 <= self.epochs_kept <= 100


@dataclass(frozen=True, slots=True)
class LeaseValue:
    """The content of a `Lease` log record."""

    holder_uuid: str
    holder_address: str
    epoch: int  # id of the takeover record opening the epoch; 0 in that record itself
    takeover: bool
    holder_http_address: str = ""  # the holder's web console, "" without one


@dataclass(frozen=True, slots=True)
class AppendLease:
    """Action: append this Lease record conditional on expected_id, invalidating these ids."""

    expected_id: int
    lease: LeaseValue
    invalidates: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Inflight:
    kind: AppendKind
    expected_id: int
    start: float
    lease: LeaseValue | None = None
    invalidates: tuple[int, ...] = ()


class LeaseKeeper:
    """One node's view of the lease. Not thread-safe: the driver serializes every call."""

    def __init__(self, uuid: str, address: str, config: LeaseConfig, seed: int = 0) -> None:
        self.uuid = uuid
        self.address = address
        # This node's web console (HOST:PORT), written in its Lease records once set: a
        # follower's console links to the leader's from the record (coordinator/console.py).
        self.http_address = ""
        self.config = config
        # The margin the lease gives up for clock drift; 0 only in a test-only broken build
        # (coordinator/leases/testclock.py, LOGCENTRIC_TEST_UNSAFE_NO_DRIFT_MARGIN).
        self.drift_margin_s = config.drift_margin_s
        # True only in a test-only broken build (testclock.py,
        # LOGCENTRIC_TEST_UNSAFE_SERVE_PAST_LEASE): a leader serves past lease_end, learning
        # it is deposed only when its next renewal fails (the nemesis `pause` proof).
        self.serve_past_lease = False
        self._rng = random.Random(seed)
        self.role = Role.FOLLOWER
        self.epoch = 0
        # Highest log id this node knows to exist.
        self.last_id_known = 0
        # The tail the follower watches, and when (local clock) it first saw that value.
        self.seen_id: int | None = None
        self.seen_at: float | None = None
        # Lease records are known exactly up to this id (fed by observe_entries).
        self.read_through = 0
        self._live_leases: dict[int, LeaseValue] = {}
        self._last_lease: tuple[int, LeaseValue] | None = None
        self._own_renewal_id = 0
        # The log id as of which _live_leases is exact (a full read, or our own appends).
        self._full_through = -1
        self.last_append_start: float | None = None
        self.lease_end = float("-inf")
        self.backoff_until = float("-inf")
        self._inflight: _Inflight | None = None
        self.step_down_reason = ""

    # ------------------------------------------------------------ observations

    def observe_tail(self, now: float, last_id: int) -> None:
        """The log's last id as just read from the store."""
        inflight_id = self._inflight.expected_id if self._inflight else None
        if self.role is Role.LEADER:
            # While an append is in flight an id equal to it may be our own; anything beyond
            # what we wrote (or beyond the in-flight id) was written by someone else.
            own_max = max(self.last_id_known, inflight_id or 0)
            if last_id > own_max:
                self._step_down(now, f"log tail {last_id} beyond own last id {own_max}")
        if last_id > self.last_id_known and not (inflight_id and last_id == inflight_id):
            self.last_id_known = last_id
        if self.role is Role.FOLLOWER and (self.seen_id != last_id or self.seen_at is None):
            self.seen_id = last_id
            self.seen_at = now

    def observe_entries(
        self, through_id: int, entries: Iterable[tuple[int, LeaseValue | None, tuple[int, ...]]]
    ) -> None:
        """Live entries read from the log up to through_id: (id, lease or None, invalidates)."""
        for entry_id, lease, invalidates in entries:
            assert entry_id <= through_id
            for i in invalidates:
                self._live_leases.pop(i, None)
            if lease is not None:
                self._note_lease(entry_id, lease)
        self.read_through = max(self.read_through, through_id)

    def wants_full_read(self, now: float) -> bool:
        """True when a takeover is due and the live lease records must be read afresh.

        Incremental reads cannot see an invalidation made by a record that was itself
        invalidated before it was read, so before invalidating anything the follower learns
        the exact live set as of the id it is about to build on."""
        return (
            self.role is Role.FOLLOWER
            and self._inflight is None
            and self.seen_at is not None
            and now - self.seen_at >= self.config.lease_timeout_s
            and self._full_through != self.seen_id
        )

    def observe_live_leases(self, through_id: int, leases: dict[int, LeaseValue]) -> None:
        """Every live Lease record of the log as of through_id (a full read)."""
        self._live_leases = dict(leases)
        for entry_id, lease in leases.items():
            self._note_lease(entry_id, lease)
        self._full_through = through_id
        self.read_through = max(self.read_through, through_id)

    # ------------------------------------------------------------ decisions

    def poll(self, now: float) -> AppendLease | None:
        """What to do now: a lease append, or nothing. At most one append is in flight."""
        if self._inflight is not None:
            return None
        cfg = self.config
        if self.role is Role.LEADER:
            if now >= self.lease_end and not self.serve_past_lease:
                self._step_down(now, "lease ran out without a successful append")
                return None
            assert self.last_append_start is not None
            if now - self.last_append_start < cfg.renew_interval_s:
                return None
            invalidates = (self._own_renewal_id,) if self._own_renewal_id else ()
            lease = LeaseValue(
                self.uuid,
                self.address,
                self.epoch,
                takeover=False,
                holder_http_address=self.http_address,
            )
            return self._start(AppendKind.RENEW, now, lease, invalidates)
        if self.seen_at is None or self.seen_id is None or now < self.backoff_until:
            return None
        if now - self.seen_at < cfg.lease_timeout_s:
            return None
        if self.read_through < self.seen_id or self._full_through != self.seen_id:
            return None  # the driver reads the live lease records as of the tail first
        lease = LeaseValue(
            self.uuid, self.address, 0, takeover=True, holder_http_address=self.http_address
        )
        return self._start(AppendKind.TAKEOVER, now, lease, self._takeover_invalidates())

    def begin_append(self, now: float) -> int:
        """Start an operation append; returns the expected id. Raises NotServing."""
        if not self.is_serving(now):
            raise NotServing(self.step_down_reason or "not the leader")
        assert self._inflight is None, "leader appends are serialized by the driver"
        return self._start(AppendKind.OP, now, None, ()).expected_id

    def append_succeeded(self, now: float, entry_id: int) -> None:
        inf = self._inflight
        assert inf is not None, "no append in flight"
        assert entry_id == inf.expected_id, (entry_id, inf.expected_id)
        self._inflight = None
        self.last_id_known = max(self.last_id_known, entry_id)
        if self.read_through == entry_id - 1:
            self.read_through = entry_id  # our own entry: the lease history stays current
        if self._full_through == entry_id - 1:
            self._full_through = entry_id
        for i in inf.invalidates:
            self._live_leases.pop(i, None)
        if inf.lease is not None:
            lease = inf.lease
            self._note_lease(entry_id, lease)
        if inf.kind is AppendKind.TAKEOVER:
            self.role = Role.LEADER
            self.epoch = entry_id
            self._own_renewal_id = 0
            self.step_down_reason = ""
        elif inf.kind is AppendKind.RENEW:
            self._own_renewal_id = entry_id
        if self.role is Role.LEADER:
            # The append was conditional on the previous id, so nobody took over before it
            # landed; any follower sees its id only after it started. The lease counts from
            # the start of the append, on our own clock.
            self.last_append_start = inf.start
            self.lease_end = inf.start + self.config.lease_timeout_s - self.drift_margin_s
        else:
            self.seen_id = entry_id
            self.seen_at = now

    def cancel_append(self) -> None:
        """The operation append was abandoned before it was sent (its decision failed)."""
        assert self._inflight is not None and self._inflight.kind is AppendKind.OP
        self._inflight = None

    def append_failed(self, now: float, last_id: int | None) -> None:
        """The append failed: CONDITION_FAILED with the current last id, or None if the
        outcome is unknown (timeout). Steps down at once and backs off for a random time."""
        inf = self._inflight
        assert inf is not None, "no append in flight"
        self._inflight = None
        if last_id is not None:
            self.last_id_known = max(self.last_id_known, last_id)
        kind = inf.kind.value.lower()
        if self.role is Role.LEADER:
            self._step_down(now, f"{kind} append failed (last id {last_id})")
        if inf.kind is AppendKind.TAKEOVER and last_id is None:
            # Outcome unknown (the store did not answer): the tail we watch has not been
            # seen to change, so the watch keeps its start; a new id resets it as usual.
            pass
        else:
            self.seen_id = self.last_id_known
            self.seen_at = now
        self.backoff_until = now + self._rng.uniform(
            self.config.backoff_min_s, self.config.backoff_max_s
        )

    def step_down(self, now: float, reason: str) -> None:
        if self.role is Role.LEADER:
            self._step_down(now, reason)

    # ------------------------------------------------------------ queries

    def is_serving(self, now: float) -> bool:
        return self.role is Role.LEADER and (now < self.lease_end or self.serve_past_lease)

    @property
    def append_in_flight(self) -> bool:
        return self._inflight is not None

    def hint(self, now: float) -> LeaderHintValue:
        """Leader hint: the holder of the last Lease record seen (epoch = the takeover
        record's id) while it may still hold the lease, else nothing.

        A hint names the current holder or nothing. This node names itself only while it
        serves: a leader woken past its lease (SIGSTOP) knows no holder but itself until it
        reads the log again, and a NOT_LEADER naming the node that says it is not the
        leader sends clients straight back to it. Another holder is named only while the
        tail this node watches changed less than `lease_timeout_s` ago: a tail unchanged
        that long means the holder's lease has ended (the takeover rule), and whoever
        takes over is not known yet."""
        if self._last_lease is None:
            return LeaderHintValue()
        entry_id, lease = self._last_lease
        if lease.holder_uuid == self.uuid:
            if not self.is_serving(now):
                return LeaderHintValue()
        elif self.role is Role.FOLLOWER and (
            self.seen_at is None or now - self.seen_at >= self.config.lease_timeout_s
        ):
            return LeaderHintValue()
        epoch = entry_id if lease.takeover else lease.epoch
        return LeaderHintValue(lease.holder_uuid, lease.holder_address, epoch)

    def holder_http_address(self, holder_uuid: str) -> str:
        """The web console the last Lease record seen names, if `holder_uuid` wrote it."""
        last = self._last_lease
        if last is None or last[1].holder_uuid != holder_uuid:
            return ""
        return last[1].holder_http_address

    def live_lease_ids(self) -> list[int]:
        return sorted(self._live_leases)

    # ------------------------------------------------------------ internals

    def _start(
        self, kind: AppendKind, now: float, lease: LeaseValue | None, invalidates: tuple[int, ...]
    ) -> AppendLease:
        expected = (
            self.seen_id + 1
            if kind is AppendKind.TAKEOVER and self.seen_id is not None
            else self.last_id_known + 1
        )
        self._inflight = _Inflight(kind, expected, now, lease, invalidates)
        assert lease is not None or kind is AppendKind.OP
        return AppendLease(expected, lease, invalidates)  # type: ignore[arg-type]

    def _takeover_invalidates(self) -> tuple[int, ...]:
        """Renewals of earlier epochs are moot; takeovers beyond epochs_kept are dropped."""
        renewals = [i for i, v in self._live_leases.items() if not v.takeover]
        takeovers = sorted(i for i, v in self._live_leases.items() if v.takeover)
        keep = self.config.epochs_kept - 1
        old = takeovers[: max(0, len(takeovers) - keep)]
        return tuple(sorted(renewals + old))

    def _note_lease(self, entry_id: int, lease: LeaseValue) -> None:
        self._live_leases[entry_id] = lease
        if self._last_lease is None or entry_id > self._last_lease[0]:
            self._last_lease = (entry_id, lease)

    def _step_down(self, now: float, reason: str) -> None:
        self.role = Role.FOLLOWER
        self.step_down_reason = reason
        self.lease_end = float("-inf")
        self._own_renewal_id = 0
        self.seen_id = self.last_id_known
        self.seen_at = now
