"""The Raft driver: one thread per tablet server owning every tablet's RaftCore.

It connects the pure cores (tservers/consensus/) to the world, following the driver
contract of design/consensus.md:
- time: ticks of `tick_interval_s` of time.monotonic(), passed to a group only when it has
  something due (`RaftCore.ticks_to_next_event`: a heartbeat, a quorum check, an election)
  or an input arrives, all those it slept through at once: idle groups cost nothing between
  events (a timer heap of next-due ticks, not a tick of every group every interval);
- input: messages from TServer.Consensus (a bounded inbox), proposals and read-index
  requests from rpc threads (under the group's lock), WAL completions from the appender;
- per Ready, in order: hard state -> consensus metadata (written and fsynced here, at once);
  entries -> the tablet's WAL through the server's group-commit appender (a conflict
  truncation is an append that restarts at a lower index); only once they are durable:
  the Ready's messages, `persisted()`, then committed entries handed (in order) to the
  apply thread, which applies them to the tablet and then releases the Ready's reads.
  A leader's AppendRequests leave at once (every hard state is durable by then: it is
  written synchronously), in parallel with its own WAL write;
- output: the messages of a round batched per peer server and posted by the driver itself
  as one-way `TServer.Consensus` messages (no answer, no sender thread): zmq's queue per
  peer is bounded and nothing is queued for a peer that is not connected, so a slow or
  dead peer never blocks the driver (what does not fit is dropped: Raft resends);
- liveness (quiet groups, design/consensus.md): every heartbeat interval an empty
  `TServer.Consensus` message to each peer server that shares a group with this one, from a
  thread of its own (`_ping_loop`, on sockets of its own) so that a driver busy with a long
  round still looks alive, but not while the driver has been stuck in one step for
  `liveness_stall_s`; a peer not heard from (any consensus message) for an election timeout
  is declared dead by the driver and every quiet group naming it wakes
  (`RaftCore.peer_down`). Quiet groups have no timer at all.
- a graceful stop (`hand_over_leadership`, called by the tablet server before it closes):
  the leadership of every group led here goes to a caught-up follower on a live server
  (TimeoutNow), a bounded number at a time within a deadline, and no replica here starts
  an election from then on.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rpc import errors
from rpc.client import Poster, RpcClient, Transport
from rpc.keys import ClientCurve
from rpc.protocols.tserver_pb2 import (
    ConsensusMessagePB,
    ConsensusMetaPB,
    ConsensusRequest,
    DataState,
    LogEntryPB,
    StartTabletCopyRequest,
    StartTabletCopyResponse,
)
from tservers.consensus import (
    INDEX_MAX,
    TERM_MAX,
    AppendRequest,
    AppendResponse,
    ConfigChange,
    CopyReason,
    Entry,
    EntryType,
    HardState,
    Message,
    OpId,
    ProposalStatus,
    ProposeResult,
    RaftCore,
    RaftOptions,
    ReadResult,
    Ready,
    ReplicaStatus,
    Role,
    SoftState,
    TabletCopyRequest,
    missing_replica_response,
)
from tservers.consensus_wire import (
    WireError,
    config_from_pb,
    entry_from_pb,
    entry_to_pb,
    hard_state_meta,
    message_to_pb,
    peer_addresses,
)
from tservers.wal.log import Appender

log = logging.getLogger(__name__)

CONSENSUS_METHOD = "TServer.Consensus"
COPY_BACKOFF_INITIAL_S = 1.0
COPY_BACKOFF_MAX_S = 30.0
# WAL retention for lagging peers (entries below the flushed index); `tserver start
# --wal-retain-entries` sets it.
RETAIN_ENTRIES_MAX_DEFAULT = 200_000
RETAIN_BYTES_MAX_DEFAULT = 1 << 30  # and at most this many payload bytes (`--wal-retain-mb`)
# What a queued message counts besides its entries' payloads (ids, terms, indexes).
MESSAGE_OVERHEAD_BYTES = 128
REFUSALS_LOG_INTERVAL_S = 10.0  # a tablet's refused messages are logged at most this often
# Senders' addresses learned from messages (not from configs), and peer sockets: bounded, so
# that messages naming ever new sender uuids cannot grow the maps or open a socket each.
# Beyond, the oldest learned address / a socket of a peer no config names goes first.
LEARNED_ADDRESSES_MAX = 4096
PEER_SOCKETS_MAX = 1024
# The driver wakes at least this often when no group has anything due (peers' refusals).
IDLE_WAIT_S_MAX = 1.0
# Liveness: the peers watched are those named by the configs of this server's groups,
# recomputed from every group this often (a peer a new config names is watched at once).
LIVENESS_REFRESH_S = 30.0
# Servers declared dead are probed (`RaftDriver._probe`) after an election timeout, then
# at intervals doubling up to this while they stay dead.
PROBE_INTERVAL_MAX_S = 8.0
# Elections that find no leader back off up to [T, 9T) (RaftOptions): 1-9 s at T = 1 s.
ELECTION_BACKOFF_DOUBLINGS = 3
# A leader steps down when it has not heard from a majority over this many election timeouts
# (RaftOptions.check_quorum_timeouts): 3 s at T = 1 s.
CHECK_QUORUM_TIMEOUTS = 3
# A leader replica's last heartbeat (it stops while the server lives on) is sent again at
# this many liveness rounds after the first: one lost (a full peer queue, a connection being
# made) would leave quiet followers without a leader; repeats of it are harmless.
FAREWELL_REPEATS = 3
# A server heard from again gets the quiesce heartbeat it missed from each quiet leader
# naming it (`RaftCore.peer_up`), and again after 1, 2, 4 and 8 more liveness rounds
# (0.2 to 3 s): the first may leave before this server's socket to it has reconnected (zmq
# retries every 20-500 ms; a message posted while disconnected is dropped), and a restarted
# server holding only a tombstone of the group never speaks first: its leader stayed quiet
# and never copied the tablet to it again (seen once in tests/replication/test_tablet_copy.py).
RETURN_PROBE_ROUNDS_MAX = 8
# A liveness round later than this many heartbeat intervals after the one before means this
# process did not run meanwhile (an oversubscribed machine, a long driver step): the pings
# that came while it was stalled may still wait in its socket, so silence seen in that round
# declares a peer dead only past LATE_ROUND_SILENCE_TIMEOUTS election timeouts. At 10,000
# replicas on a loaded 2-core machine the servers declared each other dead every 10-30 s for
# minutes after a restart, often two peers at once, and every false declaration woke
# thousands of groups into elections that loaded them more.
LATE_ROUND_INTERVALS = 3
# Elections run at once per server (DriverOptions.campaigns_max), and how long one holds its
# place at most (election timeouts): one that cannot finish (its peers dead) lets others in.
# 256 until the hard-state journal made a round's new terms one fdatasync; with it, kill -9
# restarts of 10,000 replicas took 14.1 and 15.8 s at 1,024 against 18.4 and 18.4 s at 256
# (design/consensus.md, "Deferred elections take freed places").
CAMPAIGNS_MAX_DEFAULT = 1024
CAMPAIGNS_MAX_ENV = "LOGCENTRIC_RAFT_CAMPAIGNS_MAX"  # another bound (0: none), for operators
CAMPAIGN_SLOT_TIMEOUTS = 3
LATE_ROUND_SILENCE_TIMEOUTS = 3
# Start-up: the replicas opened then start no election until every one is open
# (`hold_elections_while_opening`, `opened`), or at the latest this long after the hold began
# (a tablet whose open hangs must not keep the others from campaigning for ever).
STARTUP_HOLD_MAX_S = 120.0
# Leadership hand-over before a graceful stop (`RaftDriver.hand_over_leadership`): groups
# in transfer at once (each costs its target one TimeoutNow, then an election's messages:
# well inside a peer's queue of 16 batches of 256 messages), and how often the caller looks
# whether they are done.
HANDOVER_WINDOW = 128
HANDOVER_POLL_S = 0.02


def message_bytes(m: Message) -> int:
    """What a message counts against the byte budgets: its entries' payloads and a fixed
    overhead."""
    if isinstance(m, AppendRequest):
        return MESSAGE_OVERHEAD_BYTES + sum(len(e.payload) for e in m.entries)
    return MESSAGE_OVERHEAD_BYTES


QUIET_GROUPS_ENV = "LOGCENTRIC_QUIET_GROUPS"


def quiet_groups_on() -> bool:
    """Whether idle groups go quiet (issue 28): yes unless `LOGCENTRIC_QUIET_GROUPS=0` (the
    way back to heartbeating every group, should quiet groups misbehave somewhere)."""
    return os.environ.get(QUIET_GROUPS_ENV, "").strip() != "0"


def campaigns_max() -> int:
    """Elections run at once per server: CAMPAIGNS_MAX_DEFAULT, or `LOGCENTRIC_RAFT_CAMPAIGNS_MAX`
    (an integer >= 0; 0: no bound). A bad value is logged and the default used."""
    text = os.environ.get(CAMPAIGNS_MAX_ENV, "").strip()
    if not text:
        return CAMPAIGNS_MAX_DEFAULT
    try:
        n = int(text)
        if n < 0:
            raise ValueError(text)
        return n
    except ValueError:
        log.warning(
            "%s=%r is not an integer >= 0: %d", CAMPAIGNS_MAX_ENV, text, CAMPAIGNS_MAX_DEFAULT
        )
        return CAMPAIGNS_MAX_DEFAULT


@dataclass(frozen=True, slots=True)
class DriverOptions:
    tick_interval_s: float = 0.1
    # Quiet groups (RaftOptions.quiesce; this driver then detects dead peer servers itself):
    # on unless LOGCENTRIC_QUIET_GROUPS=0 (design/consensus.md "Quiet groups").
    raft: RaftOptions = field(
        default_factory=lambda: RaftOptions(
            quiesce=quiet_groups_on(),
            election_backoff_doublings_max=ELECTION_BACKOFF_DOUBLINGS,
            check_quorum_timeouts=CHECK_QUORUM_TIMEOUTS,
        )
    )
    inbox_messages_max: int = 16_384  # network messages waiting for the driver
    inbox_bytes_max: int = 256 << 20  # their entries' payload bytes (one message at least)
    # Batches waiting for the wire per peer server (zmq's queue); beyond, new ones are
    # dropped. With the batch budget below: at most 256 MiB of payload per peer.
    peer_queue_batches_max: int = 16
    # Messages per TServer.Consensus message: a round's messages to a peer go out together
    # (`_send`), and a restart's round of thousands (a pre-vote or a vote per group) fits
    # in a few batches of the peer's queue of 16.
    peer_batch_messages_max: int = 1024
    peer_batch_bytes_max: int = 16 << 20  # payload bytes per batch (one message at least)
    send_timeout_s: float = 2.0  # a batch not read by then is dropped by its recipient
    process_rounds_max: int = 64  # Readies handled per group per loop round
    # WAL retention for lagging peers: at most this many entries below the flushed index
    # (beyond it a lagging peer needs a tablet copy).
    retain_entries_max: int = RETAIN_ENTRIES_MAX_DEFAULT
    retain_bytes_max: int = RETAIN_BYTES_MAX_DEFAULT  # their payload bytes (and in memory)
    apply_queue_max: int = 4096  # Readies' committed entries waiting for the apply thread
    # Elections this server's replicas run at once (timeouts' elections; 0: no bound). More
    # wait a new election timeout (`_campaign_slot`): thousands at once after a server died
    # took longer than a timeout to go round on a loaded machine, and ran again and again.
    campaigns_max: int = field(default_factory=campaigns_max)
    # Signs StartTabletCopy to peers (a privileged method: rpc/privileged.py); None when the
    # cluster runs without a password.
    privileged_key: bytes | None = None
    # CURVE to peers (rpc.keys.ClientCurve; a tablet server's: the key of each peer UUID in
    # its principals table, tservers/principals.py); None: plaintext.
    curve: ClientCurve | None = None
    # Liveness pings stop while the driver has been inside one step of a round (one group's
    # processing, one batch of terms persisted) for this long: a driver stuck that long is
    # dead for its groups, and its peers' quiet groups should wake. A round over thousands
    # of groups makes progress between them and keeps pinging however long it lasts.
    liveness_stall_s: float = 5.0


def check_durable_state(
    tablet_id: str, cmeta: ConsensusMetaPB, last: OpId, wal_entries: list[LogEntryPB]
) -> None:
    """What a replica starts from must be within the bounds of design/consensus.md
    ("Bounds"): a term or index beyond them (written before they were enforced, by a message
    with a term of 2^64-1) would fail the replica at its next election instead, again after
    every restart. Raises WireError: the replica stays FAILED, saying what to repair."""
    worst = max([cmeta.current_term, last.term] + [e.term for e in wal_entries[-1:]])
    if worst > TERM_MAX:
        raise WireError(
            f"tablet {tablet_id}: term {worst} in its consensus metadata or WAL is above "
            f"{TERM_MAX}; it cannot hold an election. Copy the tablet from a healthy replica "
            "(delete this one) or rewrite the term with `tserver cmeta`"
        )
    idx = max([last.index, cmeta.committed_config.opid_index] + [e.index for e in wal_entries[-1:]])
    if idx > INDEX_MAX:
        raise WireError(f"tablet {tablet_id}: index {idx} is above {INDEX_MAX}")


class _Stage:
    """One Ready on its way: waiting for its WAL write, then finished in order."""

    __slots__ = ("ready", "durable", "error", "sent_early")

    def __init__(self, ready: Ready) -> None:
        self.ready = ready
        self.durable = False
        self.error: Exception | None = None
        self.sent_early = False


class _ReadWaiter:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: ReadResult | None = None


class RaftGroup:
    """One tablet's core on this server. `lock` guards the core: the driver and rpc threads
    (proposals, reads) take it; nobody holds it while waiting for anything else."""

    def __init__(self, driver: RaftDriver, tablet, core: RaftCore) -> None:
        self.driver = driver
        self.tablet = tablet
        self.tablet_id: str = core.tablet_id
        self.core = core
        self.lock = threading.Lock()
        self.process_lock = threading.Lock()  # held by the driver while it works on the group
        self.stages: deque[_Stage] = deque()
        self.reads: dict[int, _ReadWaiter] = {}
        self._read_ids = itertools.count(1)
        self.closed = False
        self.failed = False
        self.copy_backoff: dict[str, tuple[float, float]] = {}  # peer -> (next, delay)
        self.refusals_logged = 0  # the core's refused_messages when last logged
        self.refusals_logged_at = -REFUSALS_LOG_INTERVAL_S
        # The driver's tick up to which the core has had its ticks (under `lock`), the tick
        # it is due next and the tick of its entry in the driver's timer heap (driver only).
        self.ticked_at = driver.tick_now()
        self.due_tick = self.ticked_at
        self.queued_tick: int | None = None
        self.tick_calls = 0  # times the core was given ticks (each call passes one or more)

    # ------------------------------------------------------------ rpc threads
    def propose(self, payload: bytes) -> ProposeResult:
        """Caller holds the tablet lock (so proposals enter the log in validation order)
        and wakes the driver after an accepted proposal; a refused one wakes it here if the
        core changed all the same (see change_config)."""
        with self.lock:
            if self.closed:
                return ProposeResult(ProposalStatus.UNAVAILABLE, message="replica closed")
            self.catch_up_locked()
            was_quiet = self.core.quiesced
            res = self.core.propose(payload)
            wake = res.status is not ProposalStatus.OK and (
                self.core.has_ready() or (was_quiet and not self.core.quiesced)
            )
        if wake:
            self.driver.wake(self)
        return res

    def change_config(self, change: ConfigChange, cas_config_index: int | None) -> ProposeResult:
        """Caller holds the tablet lock (like propose). The driver is woken whenever the
        core has output, also when the change is refused: a REMOVE of the leader is refused
        while it transfers leadership, and the transfer (its heartbeats, TimeoutNow) is
        output of this call; a group that woke needs its timer back. A quiet group has no
        timer: unwoken, that output stayed in the core until check-quorum made the leader
        step down on a later call, and the tablet had no leader (design/consensus.md,
        Quiet groups, "An input on an rpc thread wakes the driver")."""
        with self.lock:
            if self.closed:
                return ProposeResult(ProposalStatus.UNAVAILABLE, message="replica closed")
            self.catch_up_locked()
            was_quiet = self.core.quiesced
            res = self.core.change_config(change, cas_config_index)
            wake = self.core.has_ready() or (was_quiet and not self.core.quiesced)
        if wake:
            self.driver.wake(self)
        return res

    def read_index(self, deadline: float) -> int:
        """Linearizable read point: returns once leadership is confirmed and the tablet has
        applied up to the read index. Raises NotLeader / TimedOut / Throttled."""
        w = _ReadWaiter()
        with self.lock:
            rid = next(self._read_ids)
            self.reads[rid] = w
            self.catch_up_locked()
            self.core.read_index(rid)
        self.driver.wake(self)
        if not w.event.wait(max(0.0, deadline - time.monotonic())):
            with self.lock:
                self.reads.pop(rid, None)
            raise errors.TimedOut(f"tablet {self.tablet_id}: read index not confirmed in time")
        r = w.result
        assert r is not None
        if r.status is ProposalStatus.OK:
            return r.read_index
        if r.status is ProposalStatus.THROTTLED:
            raise errors.Throttled("too many pending reads", retry_after_ms=50)
        raise self.driver.not_leader(self.tablet_id, r.leader_hint)

    def status(self):
        with self.lock:
            return self.core.status()

    def summary(self):
        """`RaftCore.summary`: (role, term, leader uuid, commit index)."""
        with self.lock:
            return self.core.summary()

    def knows_voter(self, uuid: str) -> bool:
        """`uuid` is a voter of a config this replica knows (committed or in its log)."""
        with self.lock:
            return self.core.knows_voter(uuid)

    def last_op_id(self) -> OpId:
        with self.lock:
            return OpId(self.core.last_term, self.core.last_index)

    def wake(self) -> None:
        self.driver.wake(self)

    def hand_over(
        self, assigned: dict[str, int], alive: Callable[[str], bool], again: str | None = None
    ) -> str | None:
        """Start handing this group's leadership over (the server is stopping): to the
        voter on a live server (`alive`) that holds the whole log and has been given the
        fewest groups so far (`assigned`, counted here), else to the best one behind (the
        core catches it up first). `again`: the target of an earlier attempt whose window
        ended, asked again while it is alive (its TimeoutNow may only be late: a second
        target campaigning in the same term split the votes, and both elections failed,
        in the restart of 3,000 replicas). The target; None when this replica does not
        lead or no voter can take over."""
        with self.lock:
            if self.closed or self.failed:
                return None
            self.catch_up_locked()
            core = self.core
            if core.role is not Role.LEADER:
                return None
            targets = [(v, c) for v, c in core.handover_targets() if alive(v)]
            if not targets:
                return None
            caught_up = [v for v, c in targets if c]
            if again is not None and any(v == again for v, _ in targets):
                target = again
            elif caught_up:
                target = min(caught_up, key=lambda v: (assigned.get(v, 0), v))
            else:
                target = targets[0][0]
            if core.transfer_target != target:
                res = core.transfer_leadership(target, heartbeat=False)
                if res.status is not ProposalStatus.OK:
                    return None
        if target != again:
            assigned[target] = assigned.get(target, 0) + 1
        self.driver.wake(self)
        return target

    def catch_up_locked(self, upto: int | None = None) -> None:
        """Give the core the ticks it slept through, up to the driver's current tick or
        `upto` (caller holds `lock`), before any input: an input must find the core's clocks
        (election timeout, lease) where they would be had it been ticked every interval."""
        now_tick = self.driver.tick_now() if upto is None else upto
        n = now_tick - self.ticked_at
        if n > 0:
            self.ticked_at = now_tick
            if not (self.closed or self.failed):
                self.core.tick(n)
                self.tick_calls += 1

    def compact_for_flush(self, flushed_index: int) -> int:
        """After a flush: the index up to which the WAL may be deleted (kept for lagging
        peers up to `retain_entries_max` entries and `retain_bytes_max` payload bytes: the
        core holds them in memory too) and the core's log trimmed."""
        with self.lock:
            st = self.core.status()
            upto = min(flushed_index, st.applied_index)
            if st.role is Role.LEADER and st.peers:
                lag = min(p.match_index for p in st.peers)
                opts = self.driver.options
                floor = max(
                    upto - opts.retain_entries_max,
                    self.core.retain_point(upto, opts.retain_bytes_max),
                )
                upto = max(min(upto, lag), floor)
            upto = max(0, upto)
            if upto > st.first_index - 1:
                self.core.compact(upto)
                behind = [p.uuid for p in st.peers if p.match_index < upto]
            else:
                behind = []
        for uuid in behind:
            # Messages queued for a peer the log was just collected past are stale: it needs
            # a tablet copy now, not a late batch of entries the leader no longer keeps.
            self.driver.purge_peer(uuid)
        return upto


class _TombstoneSink:
    """What a vote-only (tombstoned) group needs of a tablet: its hard state persisted."""

    def __init__(self, fs, tablet_id: str, cmeta: ConsensusMetaPB) -> None:
        self.fs = fs
        self.tablet_id = tablet_id
        self.cmeta = cmeta
        self.cmeta_lock = threading.Lock()  # as Tablet.cmeta_lock
        self.wal = None

    def on_soft_state(self, s: SoftState) -> None:
        pass

    def persist_hard_state(self, hs: HardState) -> None:
        with self.cmeta_lock:
            cm = hard_state_meta(self.cmeta, hs)
            self.fs.write_hard_states([cm])
            self.cmeta = cm

    def apply_entry(self, e: Entry) -> None:  # pragma: no cover - a vote-only core has no log
        raise AssertionError(f"tombstoned replica {self.tablet_id} applying {e}")

    def fail(self, reason: str) -> None:
        log.error("tombstoned replica %s: %s", self.tablet_id, reason)


_PING_OPENING = ConsensusRequest(opening=True).SerializeToString()


class _PeerOut:
    """The driver's way to one peer server: one-way batches on a socket of its own, posted
    from the driver thread (no hand-off). Closing it drops what zmq still queues."""

    __slots__ = ("driver", "uuid", "address", "poster", "key")

    def __init__(self, driver: RaftDriver, uuid: str, address: str) -> None:
        self.driver = driver
        self.uuid = uuid
        self.address = address
        self.poster: Poster | None = None
        self.key = ""  # with CURVE: the peer's key the poster's socket was made for

    def _ready_poster(self, address: str) -> Poster | None:
        opts = self.driver.options
        if address and address != self.address:
            self.reset()
            self.address = address
        curve = opts.curve
        if curve is not None:
            # The peer's key as the principals table has it now (a peer re-admitted with a
            # new key gets a new socket); none known yet: dropped, Raft resends.
            key = curve.server_key(self.uuid)
            if not key:
                log.debug("no key known for peer %s yet: consensus messages dropped", self.uuid)
                return None
            if key != self.key:
                self.reset()
                self.key = key
        if self.poster is None:
            assert self.driver.transport is not None
            self.poster = Poster(
                self.driver.transport,
                self.address,
                self.driver.uuid,
                queue_max=opts.peer_queue_batches_max,
                recipient_uuid=self.uuid,  # with CURVE: the key of this peer's UUID
            )
        return self.poster

    def connect(self) -> None:
        """Make the socket now (it connects in the background), before the first post."""
        self._ready_poster(self.address)

    def ping(self, address: str = "", opening: bool = False) -> None:
        """The liveness message: an empty batch (the peer notes that it heard this server),
        saying whether this server still opens the tablets it found at start-up."""
        poster = self._ready_poster(address)
        if poster is not None:
            body = _PING_OPENING if opening else b""
            poster.post(self.uuid, CONSENSUS_METHOD, body, self.driver.options.send_timeout_s)

    def post(self, pbs: list[tuple[ConsensusMessagePB, int]], address: str) -> None:
        opts = self.driver.options
        if self._ready_poster(address) is None:
            return
        assert self.poster is not None
        i, n = 0, len(pbs)
        while i < n:
            batch, size = [], 0
            while i < n and len(batch) < opts.peer_batch_messages_max:
                if batch and size + pbs[i][1] > opts.peer_batch_bytes_max:
                    break
                batch.append(pbs[i][0])
                size += pbs[i][1]
                i += 1
            body = ConsensusRequest(messages=batch).SerializeToString()
            if not self.poster.post(self.uuid, CONSENSUS_METHOD, body, opts.send_timeout_s):
                # Not connected, or a full queue: dropped (Raft resends).
                self.driver.messages_unsent += len(batch)
                log.debug(
                    "%d consensus messages to %s at %s dropped (not connected or queue full)",
                    len(batch),
                    self.uuid,
                    self.address,
                )

    def log_refusals(self) -> None:
        """Log what the peer refused since the last look (once per tick, off the send path):
        INVALID_NAME means another server (a wiped one, under a new UUID) listens there."""
        if self.poster is None:
            return
        for err in self.poster.refusals():
            log.warning(
                "peer %s at %s refused consensus messages: %s", self.uuid, self.address, err
            )

    def reset(self) -> None:
        """Close the socket: messages still queued in zmq are dropped (stale)."""
        if self.poster is not None:
            self.poster.close()
            self.poster = None


class RaftDriver:
    """Owns every RaftGroup of the server; a named thread; stop with close()."""

    def __init__(
        self,
        uuid: str,
        appender: Appender,
        options: DriverOptions | None = None,
        *,
        missing_status: Callable[[str], ReplicaStatus | None] | None = None,
    ) -> None:
        self.uuid = uuid
        self.appender = appender
        self.options = options or DriverOptions()
        self._missing_status = missing_status or (lambda _t: ReplicaStatus.TABLET_NOT_FOUND)
        self.address = ""
        self.addresses: dict[str, str] = {}  # peer uuid -> rpc address
        # Peers whose address came from a config (consensus metadata, ChangeConfig): a
        # message's sender_address never replaces one of those, so that a message naming a
        # member with another address cannot divert its traffic (servers keep their address
        # across restarts). Other peers' addresses are learned from their messages.
        self._config_addressed: set[str] = set()
        self._learned: deque[str] = deque()  # peers whose address came from a message, oldest first
        self._groups: dict[str, RaftGroup] = {}
        self._groups_lock = threading.Lock()
        self._cond = threading.Condition()
        self._inbox: deque = deque()
        self._net_queued = 0
        self._net_bytes = 0
        self._stop = False
        self._peers: dict[str, _PeerOut] = {}  # the driver thread's only
        self.transport: Transport | None = None
        self._thread: threading.Thread | None = None
        # Committed entries go to one apply thread, so that applying (Python work per row
        # on followers) never delays the driver's messages and WAL writes. Bounded: a full
        # queue makes the driver wait (backpressure).
        self._apply_q: queue.Queue = queue.Queue(maxsize=self.options.apply_queue_max)
        self._applier: threading.Thread | None = None
        self._kicks: queue.Queue = queue.Queue(maxsize=256)  # StartTabletCopy calls to make
        self._kicker: threading.Thread | None = None
        self.messages_in = 0
        self.messages_dropped = 0
        self.messages_unsent = 0  # dropped on the way out: no connection, or a full queue
        self.messages_out = 0  # Raft messages handed to the peers' sockets (metrics)
        # The tick clock: tick n starts at _epoch + n * tick_interval_s. It is read once at
        # the start of each round (`_clock_tick`), so a long round does not count as time
        # until the next one, and a driver running late moves _epoch forward: the ticks it
        # missed are skipped, not replayed (a stalled driver must not make every follower
        # time out at once when it comes back). Both as when every group was ticked once
        # per round.
        self._epoch = time.monotonic()
        self._clock_tick = 0
        # (due tick, sequence, group): each group has at most one live entry (its
        # queued_tick); stale ones are skipped when they come up. Driver thread only.
        self._timers: list[tuple[int, int, RaftGroup]] = []
        self._timer_seq = itertools.count()
        self._refusals_tick = -1
        self.groups_ticked = 0  # groups given ticks by their timer (metrics, tests)
        # Liveness of peer servers (quiet groups). _heard: peer uuid -> time.monotonic() of
        # its last consensus message (any thread writes it: deliver() on rpc threads);
        # the rest is the driver thread's.
        self._heard: dict[str, float] = {}
        # ...and of its last liveness ping (an empty batch, from its ping thread): a peer
        # declared down is back only on a ping, which says whether it still opens its
        # tablets. Messages come from the driver's sockets, pings from the ping thread's:
        # a restarted server's first messages (a replica opened early answering a vote)
        # can come before its first ping, and heard from that way alone it was "back" and
        # not restarted (its followers here back to quiet) until that ping said "opening".
        self._pinged: dict[str, float] = {}
        self._watch: set[str] = set()  # peers named by this server's groups' configs
        self._watch_refreshed_s = -LIVENESS_REFRESH_S
        # Declared dead (not heard from for an election timeout); replaced, never changed in
        # place, as new groups read it from other threads (`add_group`).
        self._down: frozenset[str] = frozenset()
        # Stopping (`hand_over_leadership`): no replica here starts an election any more.
        self._leaving = False
        # On time.monotonic(), not on the tick clock: that one only runs for due timers, and
        # quiet groups have none.
        self._next_ping_s = 0.0
        # Farewells still to repeat: [repeats left, messages] (driver thread only).
        self._farewells: list[list] = []
        # Servers heard from again, to probe again: uuid -> [rounds to the next, interval].
        self._returned: dict[str, list[int]] = {}
        self.return_probes = 0  # quiet leaders' probes of returned servers, repeats (tests)
        # Start-up (`hold_elections_while_opening`): this server's replicas opened meanwhile
        # start no election until `opened` (or STARTUP_HOLD_MAX_S), and its liveness pings
        # say it is opening, to the peers its tablets' configs name (`watch_configs`: read
        # before any tablet opens). Peers whose last ping said they were opening (any thread
        # adds and removes: set operations are atomic): liveness counts them as down (their
        # replicas lead nothing and answer little) until a ping says they are open, which
        # is their return (`peer_up`: quiet leaders here probe them).
        self._opening = False
        self._hold_until_s = 0.0
        self._startup_watch: set[str] = set()
        self._opening_peers: set[str] = set()
        # Peers declared down that said they were opening meanwhile: restarted (driver
        # thread). Their return gives their replicas the first election in the groups they
        # led; the return of one that was only silent puts those groups back to quiet.
        self._restarted: set[str] = set()
        self.peers_declared_down = 0  # metrics, tests
        self._last_liveness_s = 0.0  # the previous liveness round (driver thread)
        # Elections running (`_campaign_slot`): tablet id -> the tick it began. Any thread
        # that ticks a core asks (under the lock).
        self._campaigns: dict[str, int] = {}
        self._campaigns_lock = threading.Lock()
        self.campaigns_deferred = 0  # elections put off for want of a place (metrics, tests)
        # Tablets whose election was put off, oldest first (a dict as an ordered set): as
        # places free up, the round's end starts them (`_refill_campaigns`) instead of
        # leaving each a whole timeout.
        self._campaigns_waiting: dict[str, None] = {}
        self.campaigns_refilled = 0  # deferred elections started early so (metrics, tests)
        self.late_liveness_rounds = 0  # rounds that found this process stalled (metrics)
        self._next_probe_s = 0.0  # the next probe of the servers declared dead (`_probe`)
        self._probe_interval_s = 0.0
        self.probes = 0  # heartbeats sent as probes of dead servers (tests)
        self.groups_woken_by_liveness = 0
        self.hard_state_batches = 0  # rounds whose terms and votes were persisted together
        # Liveness pings (`_ping_loop`): the driver's last sign of progress (the start of a
        # round, each group processed: time.monotonic()), and whether it is inside a round.
        self._progress_s = time.monotonic()
        self._in_round = False
        # Messages of this round not sent yet: peer uuid -> [(pb, payload bytes)] (`_send`).
        self._outbox: dict[str, list] = {}
        self._pinger: threading.Thread | None = None
        self._pinger_stop = threading.Event()
        self.pings_sent = 0  # liveness ping rounds sent (metrics, tests)
        self.mid_round_pings = 0  # of which while the driver was inside a round (tests)
        self.pings_withheld = 0  # rounds not sent: the driver stuck in one step (tests)
        # Tablets whose heartbeat report may have changed (role, term, leader, committed
        # config; a replica added, removed or failed) since the heartbeater last took them
        # (`take_report_changes`): the incremental tablet report (tservers/heartbeat.py).
        # Any thread; at most one entry per tablet id.
        self._report_changes: set[str] = set()
        self._report_changes_lock = threading.Lock()

    def tick_now(self) -> int:
        """The driver's clock, as of the start of its current or last round (any thread)."""
        return self._clock_tick

    def _advance_clock(self) -> None:
        """At the start of a round: the ticks that passed, at most one past the first timer
        that was due (the rest is lateness, skipped). Driver thread only."""
        real = int((time.monotonic() - self._epoch) / self.options.tick_interval_s)
        allowed = self._clock_tick + 1
        if self._timers:
            allowed = max(allowed, self._timers[0][0])
        if real > allowed:
            self._epoch += (real - allowed) * self.options.tick_interval_s
            real = allowed
        self._clock_tick = max(self._clock_tick, real)

    def report_changed(self, tablet_id: str) -> None:
        """The tablet's heartbeat report may have changed (any thread)."""
        with self._report_changes_lock:
            self._report_changes.add(tablet_id)

    def take_report_changes(self) -> set[str]:
        """The tablets whose report may have changed since the last call (the heartbeater)."""
        with self._report_changes_lock:
            out, self._report_changes = self._report_changes, set()
        return out

    @property
    def peers_down(self) -> frozenset[str]:
        """The peer servers declared dead and not heard from since (metrics, status)."""
        return self._down

    @property
    def peers_opening(self) -> frozenset[str]:
        """The peer servers whose last ping said they still open their tablets."""
        return frozenset(self._opening_peers)

    def held_groups(self) -> int:
        """How many replicas hold their elections now (start-up; a racy read: metrics)."""
        if not self._opening:
            return 0  # (the release follows within a round of the driver)
        with self._groups_lock:
            groups = list(self._groups.values())
        return sum(1 for g in groups if g.core.elections_held)

    def quiet_groups(self) -> int:
        """How many groups are quiet now (a racy read of each core's flag: metrics)."""
        with self._groups_lock:
            groups = list(self._groups.values())
        return sum(1 for g in groups if g.core.quiesced)

    def purge_peer(self, uuid: str) -> None:
        """Drop the messages queued for a peer server (any thread; done by the driver)."""
        self._post(("purge", uuid))

    # ------------------------------------------------------------ lifecycle
    def start(self) -> RaftDriver:
        self.transport = Transport(name="raft", curve=self.options.curve)
        self._thread = threading.Thread(target=self._run, name="raft-driver", daemon=True)
        self._thread.start()
        self._applier = threading.Thread(target=self._apply_loop, name="raft-apply", daemon=True)
        self._applier.start()
        self._kicker = threading.Thread(target=self._kick_loop, name="copy-kick", daemon=True)
        self._kicker.start()
        if self.options.raft.quiesce:
            self._pinger = threading.Thread(
                target=self._ping_loop, name="raft-liveness", daemon=True
            )
            self._pinger.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._pinger_stop.set()
        if self._pinger is not None:  # it closes its sockets before the transport goes
            self._pinger.join(max(0.1, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))
        if self._kicker is not None:
            try:
                self._kicks.put(None, timeout=max(0.1, deadline - time.monotonic()))
            except queue.Full:
                log.warning("copy request queue full at close")
            self._kicker.join(max(0.1, deadline - time.monotonic()))
        if self._applier is not None:
            try:
                self._apply_q.put(None, timeout=max(0.1, deadline - time.monotonic()))
            except queue.Full:
                log.warning("apply queue full at close")
            self._applier.join(max(0.1, deadline - time.monotonic()))
        if self._thread is None or not self._thread.is_alive():
            for p in self._peers.values():  # the driver thread is gone: its sockets are free
                p.reset()
        else:
            log.warning("raft driver did not stop in time; its sockets are left open")
        if self.transport is not None:
            self.transport.close(max(0.1, deadline - time.monotonic()))

    def set_address(self, address: str) -> None:
        self.address = address

    def hand_over_leadership(
        self, deadline_s: float, window: int = HANDOVER_WINDOW
    ) -> tuple[int, int, int]:
        """Before a graceful stop: hand the leadership of every group this server leads to
        a caught-up follower on a live server (`RaftCore.transfer_leadership`: TimeoutNow,
        the target campaigns at once, skipping pre-vote and the lease), `window` groups at
        a time, until each follows a new leader or `deadline_s` has passed. The survivors
        then lead already when this server is gone: no election waits for it to be
        declared dead, none races its return (the restart of thousands of replicas,
        design/consensus.md section 8, "Fourth step"). A transfer that found no leader
        after its window (an election timeout) is started again. Runs on the caller's
        thread; the driver sends and receives meanwhile. Returns (groups led at the
        start, handed over, still led here) and logs them in one line."""
        t0 = time.monotonic()
        end = t0 + max(0.0, deadline_s)
        with self._groups_lock:
            self._leaving = True
            groups = list(self._groups.values())
        for g in groups:  # a replica here that won an election now would lead for a moment
            with g.lock:
                g.core.stop_campaigning()
        led = [
            g
            for g in groups
            if g.core.role is Role.LEADER and len(g.core.config.voters) > 1  # racy; rechecked
        ]
        if not led:
            return 0, 0, 0
        timeout_s = self.options.raft.election_timeout_ticks * self.options.tick_interval_s

        def alive(uuid: str) -> bool:
            heard = self._heard.get(uuid)
            return (
                uuid not in self._down
                and heard is not None
                and time.monotonic() - heard <= timeout_s
            )

        assigned: dict[str, int] = {}
        pending: deque[tuple[RaftGroup, str | None]] = deque((g, None) for g in led)
        active: dict[str, tuple[RaftGroup, str]] = {}  # tablet id -> (group, its target)
        # Tablet id -> when its replica here was first seen stepped down with no leader
        # known yet: given up after an election timeout (the survivors finish the election
        # or hold another; nothing here can help), not waited for until the deadline.
        stepped: dict[str, float] = {}
        handed = 0
        stuck: list[RaftGroup] = []  # no live voter to take over (now)
        transfers = 0
        while (pending or active) and time.monotonic() < end:
            for tid, (g, target) in list(active.items()):
                core = g.core  # racy reads; a wrong one costs a poll
                if g.closed or g.failed:
                    del active[tid]
                elif core.role is not Role.LEADER:
                    leader = core.leader_uuid
                    if leader is not None and leader != self.uuid:
                        handed += 1
                        del active[tid]
                    elif not alive(target):
                        del active[tid]  # stepped down (check-quorum), nobody answering
                    elif time.monotonic() - stepped.setdefault(tid, time.monotonic()) > timeout_s:
                        del active[tid]
                elif core.transfer_target is None or not alive(target):
                    # The transfer's window ended with this replica still leading (its
                    # TimeoutNow or the vote lost, the target slow): again, to the same
                    # target; or the target went quiet: to the best target now.
                    del active[tid]
                    pending.appendleft((g, target))
            while pending and len(active) < window:
                g, again = pending.popleft()
                target = g.hand_over(assigned, alive, again)
                if target is not None:
                    active[g.tablet_id] = (g, target)
                    transfers += 1
                elif g.core.role is Role.LEADER and not (g.closed or g.failed):
                    stuck.append(g)
            if not active:
                break  # nothing more can move: what is left has no live voter to take over
            time.sleep(HANDOVER_POLL_S)
        still = sum(1 for g in led if g.core.role is Role.LEADER and not (g.closed or g.failed))
        left = len(led) - handed
        why = (
            f" (deadline {deadline_s:.1f} s, or no live follower answered: their followers "
            "elect a leader once this server is gone)"
        )
        log.log(
            logging.INFO if left == 0 else logging.WARNING,
            "leadership handed over for %d of %d tablets led here in %.2f s (%d transfers "
            "to %s); %d left, %d of them still led here%s",
            handed,
            len(led),
            time.monotonic() - t0,
            transfers,
            ", ".join(f"{u}: {n}" for u, n in sorted(assigned.items())) or "nobody",
            left,
            still,
            "" if left == 0 else why,
        )
        return len(led), handed, still

    # ------------------------------------------------------------ groups
    def hold_elections_while_opening(self) -> None:
        """Start-up begins: the replicas added with `hold=True` from now on start no
        election until `opened` (at most STARTUP_HOLD_MAX_S), and the liveness pings say
        this server is opening. A kill -9 and restart of a server of 3,000 replicas had each
        of them pre-vote 1-2 s after its own open, while the others were still opening and
        before its peers' leaders had reached it: every pre-vote woke a quiet leader and a
        quiet follower on the two other servers, and the elections that load set off went on
        for 20 s (design/consensus.md, "Restart without a storm")."""
        self._hold_until_s = time.monotonic() + STARTUP_HOLD_MAX_S
        self._opening = True

    def watch_configs(self, configs: list) -> None:
        """Start-up: the committed configs (RaftConfigPB) of the tablets about to open. Their
        peers are watched (and pinged) from now on, before any of those tablets is open: a
        restarted server says at once that it is back and opening."""
        peers: set[str] = set()
        for cfg in configs:
            self.learn_addresses(peer_addresses(cfg))
            peers.update(p.uuid for p in cfg.peers)
        peers.discard(self.uuid)
        self._startup_watch = peers
        self._watch = self._watch | peers
        # The driver's sockets to them connect while the tablets open: a message posted
        # before its socket is connected is dropped (zmq IMMEDIATE), and the open's first
        # replicas may answer their peers at once.
        self._post(("connect", sorted(peers)))

    def opened(self) -> None:
        """Start-up's opening is over: the held replicas are released (each times out a
        randomized election timeout from now unless a leader reaches it first) and the
        pings say so, which makes the peers' quiet leaders probe this server."""
        if self._opening:
            self._opening = False
            self._post(("release",))

    def _campaign_slot(self, tablet_id: str) -> bool:
        """Whether the replica of `tablet_id` may start an election now (`RaftCore` asks at
        each timeout's election): yes while fewer than `campaigns_max` run here, counting
        each from its first try until its group has a leader or a follower again
        (`_handle_ready`) or CAMPAIGN_SLOT_TIMEOUTS election timeouts went by (one that
        cannot win, its peers gone, must not keep the place)."""
        now = self._clock_tick
        expiry = CAMPAIGN_SLOT_TIMEOUTS * self.options.raft.election_timeout_ticks
        with self._campaigns_lock:
            began = self._campaigns.get(tablet_id)
            if began is not None and now - began <= expiry:
                return True
            if len(self._campaigns) >= self.options.campaigns_max:
                for tid in [t for t, b in self._campaigns.items() if now - b > expiry]:
                    del self._campaigns[tid]
            if len(self._campaigns) >= self.options.campaigns_max:
                self.campaigns_deferred += 1
                self._campaigns_waiting[tablet_id] = None
                return False
            self._campaigns_waiting.pop(tablet_id, None)
            self._campaigns[tablet_id] = now
            return True

    def _refill_campaigns(self) -> None:
        """Start deferred elections early, oldest first, as many as there are free places
        (driver thread, at a round's end): each times out at its next tick
        (`RaftCore.campaign_soon`) and takes its place then. One that heard from a live
        leader meanwhile, or is gone, is dropped from the waiting."""
        if not self._campaigns_waiting:
            return
        now = self._clock_tick
        expiry = CAMPAIGN_SLOT_TIMEOUTS * self.options.raft.election_timeout_ticks
        with self._campaigns_lock:
            for tid in [t for t, b in self._campaigns.items() if now - b > expiry]:
                del self._campaigns[tid]
            free = self.options.campaigns_max - len(self._campaigns)
            picked = []
            while free > 0 and self._campaigns_waiting:
                tid = next(iter(self._campaigns_waiting))
                del self._campaigns_waiting[tid]
                picked.append(tid)
                free -= 1
        for tid in picked:
            with self._groups_lock:
                g = self._groups.get(tid)
            if g is None:
                continue
            with g.lock:
                if g.closed or g.failed or not g.core.campaign_soon():
                    continue
            self.campaigns_refilled += 1
            self._schedule(g)

    def _campaign_over(self, tablet_id: str) -> None:
        with self._campaigns_lock:
            self._campaigns.pop(tablet_id, None)

    def _release_held(self, dirty: dict[str, RaftGroup]) -> None:
        with self._groups_lock:
            groups = list(self._groups.values())
        n = 0
        for g in groups:
            with g.lock:
                if g.closed or g.failed or not g.core.elections_held:
                    continue
                g.catch_up_locked()  # the ticks it slept through count before the release
                g.core.release_elections()
            n += 1
            dirty[g.tablet_id] = g  # (its timer is due again)
        if n:
            log.info("start-up over: %d replicas may start elections from now", n)

    def add_group(
        self,
        tablet,
        cmeta: ConsensusMetaPB,
        wal_entries: list[LogEntryPB],
        snapshot: OpId,
        *,
        hold: bool = False,
    ) -> RaftGroup:
        """Start (or restart) a tablet's core from consensus metadata, the snapshot point
        (the flushed op id: everything at or below it is in the tablet's blocks) and the WAL
        entries after it. `hold`: opened at start-up; while the server is still opening
        (`hold_elections_while_opening`), it starts no election of its own."""
        tablet_id = tablet.tablet_id
        check_durable_state(tablet_id, cmeta, snapshot, wal_entries)
        entries: list[Entry] = [entry_from_pb(e) for e in wal_entries if e.index > snapshot.index]
        if entries and entries[0].index != snapshot.index + 1:
            raise ValueError(
                f"WAL of tablet {tablet_id} starts at {entries[0].index}, "
                f"after flushed index {snapshot.index}"
            )
        hs_term = max([cmeta.current_term, snapshot.term] + [e.term for e in entries[-1:]])
        hard_state = HardState(hs_term, cmeta.voted_for or None)
        config_pb = cmeta.committed_config
        self.learn_addresses(peer_addresses(config_pb))
        core = RaftCore(
            self.uuid,
            tablet_id,
            options=self.options.raft,
            rng=random.Random(f"{self.uuid}/{tablet_id}/{time.time_ns()}"),
            base_config=config_from_pb(config_pb),
            base_config_index=min(max(0, config_pb.opid_index), snapshot.index),
            hard_state=hard_state,
            snapshot=snapshot,
            entries=entries,
            applied_index=snapshot.index,
        )
        g = RaftGroup(self, tablet, core)
        if core.config.voters == (self.uuid,):
            # A lone voter needs no election timeout (nobody else can lead): campaign now.
            for _ in range(2 * self.options.raft.election_timeout_ticks + 1):
                if core.role is Role.LEADER:
                    break
                core.tick()
        tablet.group = g
        with self._groups_lock:
            # The dead peers as of now; the driver changes them under this lock, so a group
            # hears of each change either here or from `_tell_groups`.
            with g.lock:
                for u in self._down:
                    core.peer_down(u)
                if self._leaving:
                    core.stop_campaigning()
                if hold and self._opening and len(core.config.voters) > 1:
                    core.hold_elections()
                if self.options.campaigns_max > 0:
                    core.set_campaign_gate(self._campaign_slot)
            self._groups[tablet_id] = g
        self.report_changed(tablet_id)
        self.wake(g)
        return g

    def add_tombstone(
        self, tablet_id: str, fs, cmeta: ConsensusMetaPB, last_op_id: OpId
    ) -> RaftGroup:
        """A DELETED replica keeps voting with its last op id (seed 000) and persists its
        term and vote; it never campaigns and answers appends with TABLET_DELETED."""
        check_durable_state(tablet_id, cmeta, last_op_id, [])
        config_pb = cmeta.committed_config
        self.learn_addresses(peer_addresses(config_pb))
        term = max(cmeta.current_term, last_op_id.term)
        core = RaftCore.tombstoned(
            self.uuid,
            tablet_id,
            options=self.options.raft,
            rng=random.Random(f"{self.uuid}/{tablet_id}/{time.time_ns()}"),
            hard_state=HardState(term, cmeta.voted_for or None),
            last_op_id=last_op_id,
            config=config_from_pb(config_pb),
            config_index=max(0, config_pb.opid_index),
        )
        g = RaftGroup(self, _TombstoneSink(fs, tablet_id, cmeta), core)
        with self._groups_lock:
            self._groups[tablet_id] = g
        self.report_changed(tablet_id)
        return g

    def remove_group(self, tablet_id: str) -> None:
        """Stop driving a tablet (shutdown, deletion). Returns once the driver is not
        working on it any more; later WAL completions and messages for it are ignored."""
        with self._groups_lock:
            g = self._groups.pop(tablet_id, None)
        if g is None:
            return
        with g.process_lock:
            with g.lock:
                farewell = [] if g.failed else self._farewell_locked(g)
                g.closed = True
                reads = list(g.reads.values())
                g.reads.clear()
        if farewell:
            self._post(("farewell", farewell))
        self._campaign_over(tablet_id)
        self.report_changed(tablet_id)
        for w in reads:
            w.result = ReadResult(0, ProposalStatus.NOT_LEADER)
            w.event.set()

    def group(self, tablet_id: str) -> RaftGroup | None:
        with self._groups_lock:
            return self._groups.get(tablet_id)

    def learn_addresses(self, addresses: dict[str, str], *, from_config: bool = True) -> None:
        """Peer addresses from a config (authoritative), or from messages' sender_address
        (`from_config=False`: only for peers no config gave an address)."""
        for u, a in addresses.items():
            if u == self.uuid or not a:
                continue
            if from_config:
                self._config_addressed.add(u)
                self._watch.add(u)  # (set.add: atomic; the driver thread reads it)
            elif u in self._config_addressed:
                if self.addresses.get(u) != a:
                    log.debug("peer %s: sender address %s ignored (config's)", u, a)
                continue
            elif u not in self.addresses:
                self._learned.append(u)
                while len(self._learned) > LEARNED_ADDRESSES_MAX:
                    old = self._learned.popleft()
                    if old not in self._config_addressed:
                        self.addresses.pop(old, None)
            self.addresses[u] = a

    def not_leader(self, tablet_id: str, leader: str | None) -> errors.NotLeader:
        hint = errors.LeaderHintValue()
        if leader and leader != self.uuid:
            hint = errors.LeaderHintValue(uuid=leader, address=self.addresses.get(leader, ""))
        return errors.NotLeader(
            f"server {self.uuid} is not the leader of tablet {tablet_id}", leader_hint=hint
        )

    # ------------------------------------------------------------ inputs
    def deliver(
        self,
        messages: list[Message],
        sender_addresses: dict[str, str],
        caller: str = "",
        opening: bool = False,
    ) -> int:
        """Queue network messages for the driver; returns how many were accepted (the
        others are dropped: the inbox is bounded and Raft resends). `caller` (the rpc
        caller's server uuid) and every sender are heard from now (liveness); an empty
        batch is a liveness message, `opening` its word that the caller still opens its
        tablets (the first ping without it has the quiet leaders here probe the caller)."""
        now = time.monotonic()
        watch = self._watch  # only peers of our groups: strangers cannot grow the map
        if caller in watch:
            self._heard[caller] = now
            if not messages:
                self._pinged[caller] = now
                if opening:
                    self._opening_peers.add(caller)
                else:
                    self._opening_peers.discard(caller)
        for m in messages:
            if m.sender in watch:
                self._heard[m.sender] = now
        if not messages:
            return 0
        self.learn_addresses(sender_addresses, from_config=False)
        opts = self.options
        with self._cond:
            room = opts.inbox_messages_max - self._net_queued
            size = self._net_bytes
            accepted = []
            for m in messages[: max(0, room)]:
                n = message_bytes(m)
                if size + n > opts.inbox_bytes_max and (accepted or self._net_queued):
                    break  # full: dropped (an empty inbox takes one message of any size)
                accepted.append(m)
                size += n
            for m in accepted:
                self._inbox.append(("msg", m))
            self._net_queued += len(accepted)
            self._net_bytes = size
            self.messages_in += len(accepted)
            self.messages_dropped += len(messages) - len(accepted)
            if accepted:
                self._cond.notify()
        return len(accepted)

    def wake(self, g: RaftGroup) -> None:
        self._post(("wake", g))

    def _post(self, event: tuple) -> None:
        with self._cond:
            self._inbox.append(event)
            self._cond.notify()

    # ------------------------------------------------------------ the loop
    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                if not self._inbox:
                    self._cond.wait(self._sleep_s())
                    if self._stop:
                        return
                events = list(self._inbox)
                self._inbox.clear()
                self._net_queued = 0
                self._net_bytes = 0
            self._progress_s = time.monotonic()
            self._in_round = True
            try:
                self._round(events)
            except Exception:  # a bug must not stop every tablet's consensus
                log.exception("raft driver round failed")
            finally:
                self._in_round = False
                try:
                    self._flush_out()
                except Exception:
                    log.exception("raft driver: sending a round's messages failed")

    def _due_s(self, tick: int) -> float:
        return self._epoch + tick * self.options.tick_interval_s

    def _sleep_s(self) -> float:
        """Until the first timer is due (a stale entry only wakes the driver once early)."""
        now = time.monotonic()
        wait = min(IDLE_WAIT_S_MAX, self._next_ping_s - now)  # liveness
        if self._timers:
            wait = min(wait, self._due_s(self._timers[0][0]) - now)
        return max(0.0, wait)

    def _round(self, events: list) -> None:
        self._advance_clock()
        dirty: dict[str, RaftGroup] = {}
        for ev in events:
            kind = ev[0]
            if kind == "msg":
                self._on_message(ev[1], dirty)
            elif kind == "farewell":
                self._send_farewell(ev[1])
            elif kind == "purge":
                p = self._peers.get(ev[1])
                if p is not None:
                    p.reset()
                    log.debug("dropped the messages queued for %s", ev[1])
            elif kind == "durable":
                _, g, stage, err = ev
                stage.error = err
                stage.durable = True
                dirty[g.tablet_id] = g
            elif kind == "release":
                self._release_held(dirty)
            elif kind == "connect":
                for uuid in ev[1]:
                    self._peer_out(uuid)
            else:  # wake
                g = ev[1]
                dirty[g.tablet_id] = g
        now = time.monotonic()
        now_tick = self._clock_tick
        if now >= self._next_ping_s:
            self._liveness(now, dirty)
        while self._timers and self._timers[0][0] <= now_tick:
            due, _, g = heapq.heappop(self._timers)
            if g.queued_tick != due:
                continue  # replaced by an earlier entry
            g.queued_tick = None
            with g.lock:
                if g.closed or g.failed:
                    continue
                self._log_refusals(g, now)
                if g.copy_backoff:  # a peer copied (or gone): its next copy starts afresh
                    for peer in [u for u in g.copy_backoff if not g.core.peer_needs_copy(u)]:
                        del g.copy_backoff[peer]
            self.groups_ticked += 1
            dirty[g.tablet_id] = g
        if now_tick != self._refusals_tick:
            self._refusals_tick = now_tick
            for p in self._peers.values():
                p.log_refusals()
        deferred: list[tuple[RaftGroup, Ready, bool]] = []
        for g in dirty.values():
            self._progress_s = time.monotonic()
            try:
                with g.lock:
                    g.catch_up_locked()
                if self._process(g, deferred):
                    continue  # its new term or vote is persisted with the others', below
                self._schedule(g)
            except Exception as e:
                log.exception("tablet %s: raft processing failed", g.tablet_id)
                self._fail(g, f"raft driver: {type(e).__name__}: {e}")
        if deferred:
            self._flush_out()  # what is ready goes out before the terms' fsync
            self._persist_deferred(deferred)
        self._refill_campaigns()

    def _persist_deferred(self, deferred: list[tuple[RaftGroup, Ready, bool]]) -> None:
        """The new terms and votes of a round's groups, persisted together (one record of
        the hard-state journal: `FsLayout.write_hard_states`), then each group's Ready handled
        and the group processed on. A restarted server's followers all take their leaders'
        new terms within a round or two: one write and fsync after another, 10,000 of them
        took minutes on the driver thread (issue 28). Each group's process lock is held
        from `_process` until its Ready is handled; its cmeta lock while its file is
        written. A batch that fails is retried one group at a time (the failing group
        fails, as with one write)."""
        batch = []
        for g, rd, _ in deferred:
            if g.closed or g.failed:
                continue
            batch.append((g, rd))
        done: set[str] = set()
        if len(batch) > 1:
            sinks = [g.tablet for g, _ in batch]
            held = []
            try:
                for sink in sinks:
                    sink.cmeta_lock.acquire()
                    held.append(sink)
                metas = [
                    hard_state_meta(sink.cmeta, rd.hard_state)
                    for sink, (_, rd) in zip(sinks, batch, strict=True)
                ]
                by_fs: dict[int, tuple] = {}
                for sink, cm in zip(sinks, metas, strict=True):
                    by_fs.setdefault(id(sink.fs), (sink.fs, []))[1].append(cm)
                for fs, cms in by_fs.values():
                    fs.write_hard_states(cms)
                for sink, cm in zip(sinks, metas, strict=True):
                    sink.cmeta = cm
                done = {g.tablet_id for g, _ in batch}
                self.hard_state_batches += 1
            except Exception as e:  # every process lock must be released below
                log.warning(
                    "persisting %d tablets' terms together failed (%s): one at a time",
                    len(batch),
                    e,
                )
            finally:
                for sink in held:
                    sink.cmeta_lock.release()
        self._progress_s = time.monotonic()
        for g, rd, is_leader in deferred:
            self._progress_s = time.monotonic()
            try:
                try:
                    if g.closed or g.failed:
                        continue
                    self._handle_ready(g, rd, is_leader, persisted=g.tablet_id in done)
                finally:
                    g.process_lock.release()
                self._process(g)
                self._schedule(g)
            except Exception as e:
                log.exception("tablet %s: raft processing failed", g.tablet_id)
                self._fail(g, f"raft driver: {type(e).__name__}: {e}")

    # ------------------------------------------------------------ liveness
    def _ping_loop(self) -> None:
        """The liveness pings, every heartbeat interval, from this thread and its own
        sockets (one `_PeerOut` per watched peer). On the driver thread they waited for
        the end of a round or a step of it: a round over thousands of woken groups, a
        batch of thousands of terms persisted, outlasted the liveness timeout, and the busy
        server looked dead to its peers, whose quiet groups woke and loaded it more (the
        restart of 10,000 replicas, design/consensus.md). Withheld while the driver has
        been stuck in one step for `liveness_stall_s`."""
        interval_s = self.options.raft.heartbeat_interval_ticks * self.options.tick_interval_s
        peers: dict[str, _PeerOut] = {}
        stuck_logged = False
        try:
            while not self._pinger_stop.wait(interval_s):
                in_round = self._in_round
                stalled_s = time.monotonic() - self._progress_s
                if in_round and stalled_s >= self.options.liveness_stall_s:
                    self.pings_withheld += 1
                    if not stuck_logged:
                        stuck_logged = True
                        log.warning(
                            "raft driver stuck in one step for %.1f s: liveness pings "
                            "withheld (peers will declare this server dead)",
                            stalled_s,
                        )
                    continue
                if stuck_logged:
                    stuck_logged = False
                    log.info("raft driver moving again: liveness pings resumed")
                watch = set(self._watch)  # (a copy of a set other threads add to)
                for uuid in [u for u in peers if u not in watch]:
                    peers.pop(uuid).reset()
                for uuid in watch:
                    address = self.addresses.get(uuid, "")
                    p = peers.get(uuid)
                    if p is None:
                        if not address:
                            continue
                        p = peers[uuid] = _PeerOut(self, uuid, address)
                    try:
                        p.ping(address, opening=self._opening)
                    except Exception as e:  # one peer's socket must not stop every ping
                        log.warning("liveness ping to %s failed: %s", uuid, e)
                        p.reset()
                self.pings_sent += 1
                if in_round:
                    self.mid_round_pings += 1
        finally:
            for p in peers.values():
                p.reset()

    def _liveness(self, now: float, dirty: dict[str, RaftGroup]) -> None:
        """Every heartbeat interval: ping the watched peers, declare dead those not heard
        from for an election timeout and wake the quiet groups naming them."""
        raft = self.options.raft
        tick_s = self.options.tick_interval_s
        self._next_ping_s = now + raft.heartbeat_interval_ticks * tick_s
        if not raft.quiesce:
            self._next_ping_s = float("inf")
            return
        if self._opening and now >= self._hold_until_s:
            log.warning(
                "start-up still opening tablets after %.0f s: elections no longer held",
                STARTUP_HOLD_MAX_S,
            )
            self._opening = False
            self._release_held(dirty)
        if now - self._watch_refreshed_s >= LIVENESS_REFRESH_S:
            self._watch_refreshed_s = now
            with self._groups_lock:
                groups = list(self._groups.values())
            watch: set[str] = set()
            for g in groups:
                watch.update(g.core.config.uuids)  # a racy read of one attribute: fine here
            if self._opening:
                watch |= self._startup_watch
            watch.discard(self.uuid)
            self._watch = watch
        for f in self._farewells:
            f[0] -= 1
            self._send(f[1])
        self._farewells = [f for f in self._farewells if f[0] > 0]
        timeout_s = raft.election_timeout_ticks * tick_s
        interval_s = raft.heartbeat_interval_ticks * tick_s
        late = bool(self._last_liveness_s) and (
            now - self._last_liveness_s > LATE_ROUND_INTERVALS * interval_s
        )
        self._last_liveness_s = now
        silence_s = timeout_s
        if late:
            self.late_liveness_rounds += 1
            silence_s = LATE_ROUND_SILENCE_TIMEOUTS * timeout_s
        newly_down, back = [], []
        opening = self._opening_peers
        for uuid in list(self._watch):
            heard = self._heard.get(uuid)
            if heard is None:
                self._heard[uuid] = now  # watched from now on: a full timeout of grace
            elif uuid in opening:
                self._restarted.add(uuid)
                # Alive but still opening its tablets (its pings say so): down for Raft.
                # Followers here whose leader it was elect another (what it led before its
                # restart it leads no more, and its replicas hold their elections), and
                # quiet leaders here do not wait for its answers; once its pings say it is
                # open it is back, and they probe it.
                if uuid not in self._down:
                    newly_down.append(uuid)
            elif now - heard <= timeout_s:
                if uuid in self._down and now - self._pinged.get(uuid, -timeout_s) <= timeout_s:
                    back.append(uuid)
            elif uuid not in self._down and now - heard > silence_s:
                newly_down.append(uuid)
        if newly_down or back:
            self.peers_declared_down += len(newly_down)
            restarted = {u for u in back if u in self._restarted}
            self._restarted -= set(back)
            woken = self._tell_groups(newly_down, back, dirty, restarted)
            silent = sorted(u for u in newly_down if u not in opening)
            if silent:
                log.info(
                    "peer servers %s not heard from for %.1f s: %d quiet groups woke",
                    ", ".join(silent),
                    timeout_s,
                    woken,
                )
            if len(silent) < len(newly_down):
                log.info(
                    "peer servers %s are opening their tablets (down until open): %d quiet "
                    "groups woke",
                    ", ".join(sorted(u for u in newly_down if u in opening)),
                    woken,
                )
            if back:
                log.info("peer servers %s heard from again", ", ".join(sorted(back)))
        for uuid in newly_down:
            self._returned.pop(uuid, None)
        for uuid in back:
            self._returned[uuid] = [1, 1]
        if self._returned:
            self._probe_returned(dirty)
        if newly_down:  # a new death: probe now, then soon again
            self._next_probe_s, self._probe_interval_s = now, timeout_s
        if self._down and now >= self._next_probe_s:
            self._next_probe_s = now + self._probe_interval_s
            # Doubling up to PROBE_INTERVAL_MAX_S while they stay dead: a server long gone
            # is not looked for among every group once a second.
            self._probe_interval_s = min(2 * self._probe_interval_s, PROBE_INTERVAL_MAX_S)
            self._probe(dirty)

    def _probe(self, dirty: dict[str, RaftGroup]) -> None:
        """Each server declared dead gets one heartbeat of one group this server leads with
        it (`RaftCore.probe`), after an election timeout and then at intervals doubling up
        to PROBE_INTERVAL_MAX_S. A restarted server pings the peers its groups name, but
        one holding no replica of a group with this server (a copy that crashed, every
        replica deleted) names none: only an answer to a message from here tells that it
        is back, and a quiet leader sends none."""
        with self._groups_lock:
            groups = list(self._groups.values())
        todo = set(self._down)
        for g in groups:
            if not todo:
                break
            if g.core.role is not Role.LEADER:  # a racy read, checked again under the lock
                continue
            with g.lock:
                if g.closed or g.failed or g.core.role is not Role.LEADER:
                    continue
                probed = [u for u in todo if g.core.probe(u)]
            if probed:
                todo.difference_update(probed)
                self.probes += len(probed)
                dirty[g.tablet_id] = g

    def _probe_returned(self, dirty: dict[str, RaftGroup]) -> None:
        """The repeats of `peer_up`'s probe (RETURN_PROBE_ROUNDS_MAX): each quiet leader
        naming a server heard from again after 1, 2, 4 and 8 liveness rounds sends it the
        quiesce heartbeat again. A follower that has it already ignores it; one that missed
        it answers (matching: quiet; behind, or deleted: a rejection that wakes the leader)."""
        due = []
        for uuid, st in list(self._returned.items()):
            st[0] -= 1
            if st[0] > 0:
                continue
            due.append(uuid)
            st[1] *= 2
            st[0] = st[1]
            if st[1] > RETURN_PROBE_ROUNDS_MAX:
                del self._returned[uuid]
        if not due:
            return
        with self._groups_lock:
            groups = list(self._groups.values())
        for g in groups:
            core = g.core
            if core.role is not Role.LEADER or not core.quiesced:  # racy; checked below
                continue
            with g.lock:
                if g.closed or g.failed or not core.quiesced:
                    continue
                sent = [u for u in due if core.probe(u, repeat=True)]
            if sent:
                self.return_probes += len(sent)
                dirty[g.tablet_id] = g

    def _tell_groups(
        self,
        down: list[str],
        back: list[str],
        dirty: dict[str, RaftGroup],
        restarted: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        """Every group hears which peer servers were declared dead and which are heard from
        again (`RaftCore.peer_down`, `peer_up`); returns how many quiet groups woke (a
        follower whose leader died, a leader left without a live majority). A quiet leader
        sends a returned follower the quiesce heartbeat it missed and stays quiet."""
        with self._groups_lock:
            self._down = (self._down | set(down)) - set(back)
            groups = list(self._groups.values())
        woken = 0
        for g in groups:
            with g.lock:
                if g.closed or g.failed:
                    continue
                quiet = g.core.quiesced
                # Its clocks where they would be had it been ticked every interval, before
                # peer_down / peer_up restart its election timer: the ticks it slept through
                # handed over later would fire the new timer early (a survivor's follower
                # then ran at once on its leader's return instead of a timeout later).
                g.catch_up_locked()
                for u in down:
                    g.core.peer_down(u)
                sent = False
                for u in back:
                    # A quiet leader's probe of u, or a follower of u's timer moved.
                    sent = g.core.peer_up(u, restarted=u in restarted) or sent
                woke = quiet and not g.core.quiesced
            if woke:
                woken += 1
            if woke or sent:
                dirty[g.tablet_id] = g
        self.groups_woken_by_liveness += woken
        return woken

    def _farewell_locked(self, g: RaftGroup) -> list[Message]:
        """A leader's replica stops here while this server lives on (deleted, failed): its
        followers may be quiet and would not notice by liveness. A last heartbeat wakes
        them; with no more to come they elect a new leader. Caller holds g.lock."""
        if not self.options.raft.quiesce or g.core.role is not Role.LEADER:
            return []
        try:
            g.core.wake()
            return [m for m in g.core.ready().messages if isinstance(m, AppendRequest)]
        except Exception:  # a failed core may be in any state: its followers time out
            log.exception("tablet %s: no last heartbeat", g.tablet_id)
            return []

    def announce_deleted(self, tablet_id: str) -> None:
        """This server's replica of `tablet_id` was just tombstoned. Its leader learns that
        from a TABLET_DELETED answer to its next append and copies the tablet back; a quiet
        leader sends none (and this replica may not even know which peer leads, just
        restarted), so the tombstone answers first: to every other member of its config,
        in its term, now and at the next liveness rounds (a farewell). The leader copies;
        a follower wakes and goes quiet again on its leader's next heartbeat; a leader of
        a later term drops the answer but is awake; copies are idempotent per peer."""
        g = self.group(tablet_id)
        if g is None:
            return
        with g.lock:
            term, members = g.core.term, g.core.config.uuids
        msgs: list[Message] = [
            AppendResponse(
                tablet_id, self.uuid, u, term, success=False, status=ReplicaStatus.TABLET_DELETED
            )
            for u in members
            if u != self.uuid
        ]
        if msgs:
            self._post(("farewell", msgs))

    def _send_farewell(self, msgs: list[Message]) -> None:
        """Send a leader replica's last heartbeat now and again at the next
        FAREWELL_REPEATS liveness rounds (driver thread only)."""
        if not msgs:
            return
        self._send(msgs)
        self._farewells.append([FAREWELL_REPEATS, msgs])

    def _schedule(self, g: RaftGroup) -> None:
        """Put the group's next due tick in the timer heap (driver thread only). A quiet
        group gets none: only an input (a message, a proposal, a dead peer) wakes it."""
        with g.lock:
            if g.closed or g.failed or g.core.quiesced:
                return
            g.due_tick = g.ticked_at + g.core.ticks_to_next_event()
        if g.queued_tick is None or g.due_tick < g.queued_tick:
            g.queued_tick = g.due_tick
            heapq.heappush(self._timers, (g.due_tick, next(self._timer_seq), g))

    def _on_message(self, msg: Message, dirty: dict[str, RaftGroup]) -> None:
        with self._groups_lock:
            g = self._groups.get(msg.tablet_id)
        if g is None or g.closed or g.failed:
            status = self._missing_status(msg.tablet_id)
            # None: a replica still being opened at start-up answers nothing (Raft resends).
            answer = None if status is None else missing_replica_response(msg, status)
            if answer is not None:
                self._send([answer])
            return
        with g.lock:
            # The ticks before this round's count before the message, this round's after it
            # (the round's processing below): the order of the loop that ticked every group
            # after the round's messages, so a heartbeat arriving as an election timeout
            # ends still counts first.
            g.catch_up_locked(self._clock_tick - 1)
            g.core.step(msg)
        dirty[g.tablet_id] = g

    @staticmethod
    def _log_refusals(g: RaftGroup, now: float) -> None:
        """Messages the core refused since the last report (a term jump from a stranger or
        too far, a second leader, an answer naming what was never sent), at most once per
        REFUSALS_LOG_INTERVAL_S per tablet: a flood of them must not flood the log."""
        n = g.core.refused_messages
        if n == g.refusals_logged or now - g.refusals_logged_at < REFUSALS_LOG_INTERVAL_S:
            return
        log.warning(
            "tablet %s: %d consensus messages refused; the last: %s",
            g.tablet_id,
            n - g.refusals_logged,
            g.core.last_refusal,
        )
        g.refusals_logged, g.refusals_logged_at = n, now

    def _process(
        self, g: RaftGroup, deferred: list[tuple[RaftGroup, Ready, bool]] | None = None
    ) -> bool:
        """Handle the group's Readies (a bounded number; then it is woken again). With
        `deferred`, a Ready with a new hard state is not handled here: it is appended there
        with the group's process lock still held, for `_persist_deferred`; returns True
        then."""
        g.process_lock.acquire()
        held = True
        try:
            for _ in range(self.options.process_rounds_max):
                if g.closed or g.failed:
                    return False
                self._finish_stages(g)
                with g.lock:
                    if not g.core.has_ready():
                        return False
                    rd = g.core.ready()
                    is_leader = g.core.role is Role.LEADER
                if deferred is not None and rd.hard_state is not None:
                    deferred.append((g, rd, is_leader))
                    held = False  # (released by _persist_deferred)
                    return True
                self._handle_ready(g, rd, is_leader)
            self.wake(g)  # more to do: come back after the other groups had their turn
            return False
        finally:
            if held:
                g.process_lock.release()

    def _handle_ready(
        self, g: RaftGroup, rd: Ready, is_leader: bool, *, persisted: bool = False
    ) -> None:
        """`persisted`: its hard state is durable already (a batch of the round)."""
        tablet = g.tablet
        if rd.soft_state is not None:
            s: SoftState = rd.soft_state
            # A follower that stays one (it learned its term's leader, or a new term's) is
            # logged at DEBUG: at a restart of 10,000 replicas those were two lines of five
            # per group, 4-6% of a server's GIL. Every change of role stays at INFO.
            quiet = s.role is Role.FOLLOWER and tablet.role is Role.FOLLOWER
            (log.debug if quiet else log.info)(
                "tablet %s: %s in term %d (leader %s)",
                g.tablet_id,
                s.role.value,
                s.term,
                s.leader_uuid or "unknown",
            )
            tablet.on_soft_state(s)
            if s.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
                self._campaign_over(g.tablet_id)
        if rd.hard_state is not None and not persisted:
            tablet.persist_hard_state(rd.hard_state)  # written and fsynced before any message
        if rd.soft_state is not None or rd.hard_state is not None:
            self.report_changed(g.tablet_id)
        stage = _Stage(rd)
        g.stages.append(stage)
        if not rd.entries:
            stage.durable = True
            return
        if is_leader:
            early = [m for m in rd.messages if isinstance(m, AppendRequest)]
            self._send(early)
            stage.sent_early = True
        pbs = [entry_to_pb(e, self.addresses) for e in rd.entries]
        try:
            self.appender.append(
                tablet.wal,
                pbs,
                lambda err, g=g, st=stage: self._post(("durable", g, st, err)),
            )
        except (OSError, TimeoutError) as e:
            stage.error = e
            stage.durable = True

    def _finish_stages(self, g: RaftGroup) -> None:
        while g.stages and g.stages[0].durable:
            st = g.stages.popleft()
            rd = st.ready
            if st.error is not None:
                self._fail(g, f"WAL append failed: {st.error}")
                return
            msgs = rd.messages
            if st.sent_early:
                msgs = tuple(m for m in msgs if not isinstance(m, AppendRequest))
            self._send(msgs)
            if rd.entries:
                last = rd.entries[-1]
                with g.lock:
                    g.core.persisted(last.index, last.term)
            if rd.committed_entries or rd.reads:
                # Applied in order on the apply thread; reads are released after the entries
                # before them (the core hands out an OK read only with its entries).
                self._apply_q.put((g, rd.committed_entries, rd.reads))
            for c in rd.copy_requests:
                self._kick_copy(g, c)

    def _apply_loop(self) -> None:
        while True:
            item = self._apply_q.get()
            if item is None:
                return
            g, entries, reads = item
            try:
                for e in entries:
                    g.tablet.apply_entry(e)
                    if e.entry_type is EntryType.CONFIG:  # the committed config reported
                        self.report_changed(g.tablet_id)
            except Exception:  # apply_entry fails the tablet itself; this is a bug
                log.exception("tablet %s: apply failed", g.tablet_id)
                self.report_changed(g.tablet_id)
            for r in reads:
                with g.lock:
                    w = g.reads.pop(r.request_id, None)
                if w is not None:
                    w.result = r
                    w.event.set()

    def _kick_copy(self, g: RaftGroup, c: TabletCopyRequest) -> None:
        """Ask a peer to copy the tablet from here (StartTabletCopy), with backoff per peer."""
        now = time.monotonic()
        next_at, delay = g.copy_backoff.get(c.peer_uuid, (0.0, COPY_BACKOFF_INITIAL_S))
        if now < next_at:
            return
        g.copy_backoff[c.peer_uuid] = (now + delay, min(delay * 2, COPY_BACKOFF_MAX_S))
        address = self.addresses.get(c.peer_uuid, "")
        if not address:
            return
        expected = {
            CopyReason.TABLET_NOT_FOUND: DataState.DATA_STATE_UNKNOWN,
            CopyReason.TABLET_DELETED: DataState.DELETED,
            CopyReason.LOG_COMPACTED: DataState.READY,
        }[c.reason]
        req = StartTabletCopyRequest(
            tablet_id=c.tablet_id,
            source_uuid=self.uuid,
            source_address=self.address,
            caller_term=c.leader_term,
            expected_state=expected,
        )
        try:
            self._kicks.put_nowait((c.peer_uuid, address, req))
        except queue.Full:
            log.debug("copy request queue full; %s will be asked again", c.peer_uuid)

    def _kick_loop(self) -> None:
        while True:
            item = self._kicks.get()
            if item is None:
                return
            peer, address, req = item
            try:
                with RpcClient(
                    address,
                    self.uuid,
                    transport=self.transport,
                    privileged_key=self.options.privileged_key,
                ) as rc:
                    rc.call(
                        peer,
                        "TServer.StartTabletCopy",
                        req,
                        StartTabletCopyResponse,
                        timeout_s=self.options.send_timeout_s,
                    )
                log.info("tablet %s: peer %s starts a tablet copy from here", req.tablet_id, peer)
            except errors.AlreadyInProgress:
                pass
            except errors.RpcError as e:
                log.info("tablet %s: StartTabletCopy to %s: %s", req.tablet_id, peer, e)

    def _fail(self, g: RaftGroup, reason: str) -> None:
        if not g.failed:
            with g.lock:
                farewell = self._farewell_locked(g)
            self._send_farewell(farewell)
        g.failed = True
        g.stages.clear()
        g.tablet.fail(reason)
        self.report_changed(g.tablet_id)

    # ------------------------------------------------------------ output
    def _evict_peer(self) -> bool:
        """Close the oldest socket of a peer no config names (driver thread only)."""
        for uuid, p in self._peers.items():
            if uuid not in self._config_addressed:
                p.reset()
                del self._peers[uuid]
                return True
        return False

    def _send(self, msgs) -> None:
        """Messages to peers (driver thread). Within a round they wait in the outbox until
        the round's end, or its terms' persistence, whichever comes first (`_flush_out`):
        one round's messages to a peer go out in full batches, not a batch per group. Sent
        a batch per group, a restart's thousand elections in one round overflowed the
        peer's queue of 16 batches, and the messages beyond were dropped (a kill -9 restart
        of 3,000 replicas: ~56,000 handed to a server's sockets, ~38,000 taken in by its
        peers; design/consensus.md, "Messages dropped at a restart")."""
        if not msgs:
            return
        self.messages_out += len(msgs)
        out = self._outbox
        full = self.options.peer_batch_messages_max
        for m in msgs:
            pbs = out.setdefault(m.recipient, [])
            pbs.append((message_to_pb(m, self.address), message_bytes(m)))
            if len(pbs) >= full:  # a full batch goes at once
                self._post_out(m.recipient, out.pop(m.recipient))
        if not self._in_round:
            self._flush_out()

    def _flush_out(self) -> None:
        out, self._outbox = self._outbox, {}
        for uuid, pbs in out.items():
            self._post_out(uuid, pbs)

    def _post_out(self, uuid: str, pbs: list) -> None:
        p = self._peer_out(uuid)
        if p is None:
            self.messages_unsent += len(pbs)
            log.debug("no socket for peer %s: %d messages dropped", uuid, len(pbs))
            return
        p.post(pbs, self.addresses.get(uuid, ""))

    def _peer_out(self, uuid: str) -> _PeerOut | None:
        """The driver's way to the peer `uuid` (driver thread), its socket made and
        connecting; None without an address or a free socket."""
        p = self._peers.get(uuid)
        if p is None:
            address = self.addresses.get(uuid, "")
            if not address:
                return None
            if len(self._peers) >= PEER_SOCKETS_MAX and not self._evict_peer():
                return None
            p = self._peers[uuid] = _PeerOut(self, uuid, address)
            p.connect()
        return p
