"""The pure per-tablet Raft core (etcd-io/raft's Ready style, sans-I/O).

RaftCore owns one tablet replica's consensus state in memory: term and vote, the log
after the snapshot point, the member config, the commit index, and the leader's view of
its peers. It takes inputs (step, tick, propose, change_config, transfer_leadership,
read_index, persisted, compact) and accumulates outputs that the driver collects with
ready(). No threads, sockets, clocks, files or global randomness: the only source of
randomness is the injected `random.Random` that spreads election timeouts, so the same
inputs always give the same outputs. The driver contract (what must be durable before
which message leaves) is in design/consensus.md and on types.Ready.
"""

from __future__ import annotations

import bisect
import logging
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tservers.consensus.types import (
    TERM_JUMP_MAX,
    TERM_MAX,
    AppendRequest,
    AppendResponse,
    ConfigChange,
    ConfigChangeType,
    CopyReason,
    CoreStatus,
    Entry,
    EntryType,
    HardState,
    Member,
    MemberType,
    Message,
    OpId,
    PeerProgress,
    ProposalStatus,
    ProposeResult,
    RaftConfig,
    ReadResult,
    Ready,
    ReplicaStatus,
    Role,
    SoftState,
    TabletCopyRequest,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RaftOptions:
    election_timeout_ticks: int = 10  # randomized in [T, 2T) with the injected rng
    heartbeat_interval_ticks: int = 2
    pre_vote: bool = True
    # The leader steps down when it has not heard from a majority for an election timeout;
    # followers that heard from a leader within an election timeout ignore (pre-)votes
    # (leader stickiness), except those of a leadership transfer.
    check_quorum: bool = True
    # ... over this many election timeouts (the window of peers heard from). Longer than one
    # on the tablet servers: on an oversubscribed machine answers took over a second, and
    # leaders that stepped down for it were 10,508 of 18,014 leaderships in the three
    # minutes after a 10,000-replica restart. Reads are not lease-based (read-index asks a
    # heartbeat round), so a longer window delays only a cut-off leader's stepping down.
    check_quorum_timeouts: int = 1
    append_entries_max: int = 64  # entries per AppendRequest
    append_bytes_max: int = 4 << 20  # payload bytes per AppendRequest (one entry at least)
    inflight_entries_max: int = 4096  # sent but unacknowledged entries per peer
    inflight_bytes_max: int = 64 << 20  # their payload bytes (a peer catching up)
    uncommitted_entries_max: int = 10_000  # proposals beyond this get THROTTLED
    pending_reads_max: int = 10_000
    # Quiet groups (design/consensus.md): a leader whose peers are all caught up sends one
    # last heartbeat marked quiesce and stops heartbeating; its followers stop their
    # election timers. Only for a driver that detects dead peer servers by itself and says
    # so with `peer_down` (the tablet server's liveness exchange): off by default.
    quiesce: bool = False
    # Elections that end without a leader back off (Kudu's leader_failure_exp_backoff):
    # after k timeouts in a row with no leader heard, the next timeout is drawn from
    # [T, T + T * 2^min(k, this)) instead of [T, 2T). When messages take longer than an
    # election timeout to go round (thousands of groups electing at once on a loaded
    # machine), fixed timeouts start a new election before any vote of the last one is
    # back, over and over; spreading them out lets the elections finish. 0: off (the
    # simulator's default); the tablet server's driver turns it on.
    election_backoff_doublings_max: int = 0

    def __post_init__(self) -> None:
        assert self.election_timeout_ticks >= 2
        assert 1 <= self.heartbeat_interval_ticks < self.election_timeout_ticks
        assert self.append_entries_max >= 1 and self.inflight_entries_max >= 1
        assert self.append_bytes_max >= 1 and self.inflight_bytes_max >= 1
        assert self.uncommitted_entries_max >= 1 and self.pending_reads_max >= 1


class _Progress:
    """The leader's view of one peer (mutable, private)."""

    __slots__ = (
        "match",
        "next",
        "probing",
        "probe_inflight",
        "acked",
        "needs_copy",
        "heard_tick",
        "answered",
    )

    def __init__(self, next_index: int) -> None:
        self.match = 0
        self.next = next_index
        self.probing = True  # until the first success: one request at a time
        self.probe_inflight = False
        self.acked = False  # any success since the last heartbeat
        self.needs_copy = False
        self.heard_tick = -(1 << 30)  # leader tick of the last OK answer
        self.answered = False  # an OK answer since the last heartbeat round (or wake)


class _PendingRead:
    __slots__ = ("request_id", "seq", "index")

    def __init__(self, request_id: int, seq: int, index: int | None) -> None:
        self.request_id = request_id
        self.seq = seq
        self.index = index  # None until the leader has committed in its term


_INFINITE_SEQ = 1 << 62
# The longest a core asks to sleep (`ticks_to_next_event`) when nothing is due at all.
QUIET_TICKS_MAX = 100
_NO_HARD_STATE = HardState(0, None)
_NO_OP_ID = OpId(0, 0)


def missing_replica_response(message: Message, status: ReplicaStatus) -> Message | None:
    """The answer of a server that has no core for the tablet (DOES_NOT_EXIST, or a replica
    that is not running). AppendRequests get `status` so the leader starts a tablet copy;
    VoteRequests get a term-0 refusal, which counts for nothing: such replicas do not vote.
    Other messages get no answer."""
    assert status is not ReplicaStatus.OK
    if isinstance(message, AppendRequest):
        return AppendResponse(
            message.tablet_id,
            message.recipient,
            message.sender,
            message.term,
            success=False,
            status=status,
        )
    if isinstance(message, VoteRequest):
        return VoteResponse(
            message.tablet_id,
            message.recipient,
            message.sender,
            0,
            granted=False,
            pre_vote=message.pre_vote,
            status=status,
        )
    return None


def split_rank(tablet_id: str, term: int, uuid: str) -> int:
    """The order in which candidates of a split vote run again (`RaftCore._split_vote`):
    the same on every server, a different one per group and term."""
    return zlib.crc32(f"{tablet_id}\0{term}\0{uuid}".encode())


class RaftCore:
    """One replica of one tablet. Not thread-safe: one driver thread calls it."""

    def __init__(
        self,
        uuid: str,
        tablet_id: str,
        *,
        options: RaftOptions,
        rng: random.Random,
        base_config: RaftConfig,
        base_config_index: int = 0,
        hard_state: HardState = _NO_HARD_STATE,
        snapshot: OpId = _NO_OP_ID,
        entries: Sequence[Entry] = (),
        applied_index: int | None = None,
        vote_only: bool = False,
    ) -> None:
        """Start (or restart) a replica from what the driver has durable: the hard state,
        the config as of the snapshot point (`base_config` at `base_config_index`), the
        snapshot point (last entry compacted away) and the log entries after it.
        `applied_index` (default: the snapshot index) is what the state machine already
        holds; entries after it are handed out again once known committed.
        `vote_only` is a tombstoned replica: no log, votes with `snapshot` as last op id."""
        assert uuid and tablet_id
        assert base_config_index <= snapshot.index
        assert hard_state.term >= snapshot.term
        assert hard_state.term <= TERM_MAX, "the driver refuses such metadata before this"
        self.uuid = uuid
        self.tablet_id = tablet_id
        self._opts = options
        self._rng = rng
        self._vote_only = vote_only
        self._term = hard_state.term
        self._voted_for = hard_state.voted_for
        self._snap_index = snapshot.index
        self._snap_term = snapshot.term
        self._log: list[Entry] = []
        # Running payload bytes: _cum[i] counts every entry up to _log[i] (and _cum_base every
        # entry compacted away), so the bytes of any range of the log are one subtraction.
        self._cum: list[int] = []
        self._cum_base = 0
        expected = snapshot.index + 1
        for e in entries:
            assert e.index == expected, f"log not contiguous at {e.index}, expected {expected}"
            assert e.term <= self._term, (e, self._term)
            assert not self._log or self._log[-1].term <= e.term
            expected += 1
            self._log_append(e)
        assert not (vote_only and self._log), "a tombstoned replica has no log"
        self._base_config = base_config
        self._base_config_index = base_config_index
        self._config_indexes = [e.index for e in self._log if e.entry_type is EntryType.CONFIG]
        self._config, self._config_index = self._tail_config()
        if applied_index is None:
            applied_index = snapshot.index
        assert snapshot.index <= applied_index <= self.last_index
        self._commit = applied_index
        self._applied = applied_index
        self._durable = self.last_index  # everything given to us came from storage
        self._unstable_from: int | None = None
        self._hs_sent = HardState(self._term, self._voted_for)

        self._role = Role.VOTE_ONLY if vote_only else Role.FOLLOWER
        self._leader: str | None = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        # Election timeouts in a row that found no leader (reset by a leader heard from or
        # by leading): the backoff of RaftOptions.election_backoff_doublings_max.
        self._leaderless_timeouts = 0
        self._randomized_timeout = self._new_timeout()
        # Members this leader probed (`probe`), and whether each answered since.
        self._probed: dict[str, bool] | None = None
        # Split votes after which this replica runs again soon (`_split_vote`).
        self.split_votes_shortened = 0
        # The last election timeout found no room on this server (the campaign gate) and no
        # leader or election came since: `campaign_soon` may start it early.
        self._gated = False
        self._votes: dict[str, bool] = {}
        self._progress: dict[str, _Progress] = {}
        self._recent_active: set[str] = set()
        self._leader_ticks = 0
        self._leader_since_tick = 0  # _leader_ticks when it last became leader
        self._transfer_target: str | None = None
        self._transfer_elapsed = 0
        self._read_seq = 0
        self._read_acks: dict[str, int] = {}
        self._pending_reads: list[_PendingRead] = []
        # Quiet (RaftOptions.quiesce): no tick counts, nothing is due. A restart starts awake.
        self._quiesced = False
        # Servers the driver declared dead (`peer_down`) and not yet back (`peer_up`): a
        # leader goes quiet without their answers and wakes when one comes back.
        self._peers_down: frozenset[str] = frozenset()
        # The server is stopping (`stop_campaigning`): no election from here, not even one
        # a TimeoutNow asks for. Votes are still given.
        self._leaving = False
        # Held (`hold_elections`): a replica opened at its server's start-up starts no
        # election of its own accord until the driver releases it (`release_elections`):
        # the server's other replicas are still opening and its peers' leaders have not
        # had a chance to reach it. It still votes, follows and campaigns on a TimeoutNow.
        self._held = False
        self._quorum_windows = 0  # election timeouts into the leader's check-quorum window
        # The driver's admission of elections (`set_campaign_gate`): asked before each
        # election a timeout starts; refused, the replica waits a new timeout instead.
        self._gate: Callable[[str], bool] | None = None
        # Messages dropped as impossible or untrusted (a term jump from a non-voter or too
        # far, a second leader in a term, an answer naming an index never sent); the driver
        # logs them, rate-limited.
        self.refused_messages = 0
        self.last_refusal = ""

        self._msgs: list[Message] = []
        self._reads_out: list[ReadResult] = []
        self._copy_out: list[TabletCopyRequest] = []
        self._soft_sent = SoftState(self._role, self._leader, self._term)

    @classmethod
    def tombstoned(
        cls,
        uuid: str,
        tablet_id: str,
        *,
        options: RaftOptions,
        rng: random.Random,
        hard_state: HardState,
        last_op_id: OpId,
        config: RaftConfig,
        config_index: int = 0,
    ) -> RaftCore:
        """A DELETED replica: keeps its consensus metadata and last op id and only votes."""
        return cls(
            uuid,
            tablet_id,
            options=options,
            rng=rng,
            base_config=config,
            base_config_index=min(config_index, last_op_id.index),
            hard_state=hard_state,
            snapshot=last_op_id,
            vote_only=True,
        )

    # ------------------------------------------------------------------ accessors

    @property
    def role(self) -> Role:
        return self._role

    @property
    def term(self) -> int:
        return self._term

    @property
    def leader_uuid(self) -> str | None:
        return self._leader

    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def first_index(self) -> int:
        return self._snap_index + 1

    @property
    def last_index(self) -> int:
        return self._snap_index + len(self._log)

    @property
    def last_term(self) -> int:
        return self._log[-1].term if self._log else self._snap_term

    @property
    def config(self) -> RaftConfig:
        return self._config

    @property
    def quiesced(self) -> bool:
        """Quiet: ticks count for nothing and nothing is due until an input wakes it."""
        return self._quiesced

    def term_at(self, index: int) -> int | None:
        """The term of the entry at index; None when compacted away or not there."""
        if index == self._snap_index:
            return self._snap_term
        if index < self._snap_index or index > self.last_index:
            return None
        return self._log[index - self._snap_index - 1].term

    @property
    def log_bytes(self) -> int:
        """Payload bytes of the entries in the log (above the snapshot point)."""
        return self._bytes_through(self.last_index) - self._cum_base

    def retain_point(self, upto: int, bytes_max: int) -> int:
        """The lowest index i (snapshot index <= i <= upto) such that the entries after i, up
        to `upto`, hold at most `bytes_max` payload bytes: how far back a log kept for lagging
        peers may reach within that budget."""
        if upto <= self._snap_index:
            return upto
        target = self._bytes_through(upto) - bytes_max
        if self._cum_base >= target:
            return self._snap_index
        # Position p holds index snap + 1 + p: the first whose running count reaches target.
        p = bisect.bisect_left(self._cum, target, 0, upto - self._snap_index)
        return self._snap_index + 1 + p

    def _log_append(self, e: Entry) -> None:
        self._cum.append(self._bytes_through(e.index - 1) + len(e.payload))
        self._log.append(e)

    def _bytes_through(self, index: int) -> int:
        """Payload bytes of every entry up to `index` (snapshot index <= index <= last), as a
        running count: only differences mean anything."""
        if index == self._snap_index:
            return self._cum_base
        return self._cum[index - self._snap_index - 1]

    def entry(self, index: int) -> Entry:
        assert self._snap_index < index <= self.last_index, index
        return self._log[index - self._snap_index - 1]

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._log)

    def committed_config_index(self) -> int:
        for idx in reversed(self._config_indexes):
            if idx <= self._commit:
                return idx
        return self._base_config_index

    def committed_config(self) -> RaftConfig:
        idx = self.committed_config_index()
        if idx == self._base_config_index:
            return self._base_config
        cfg = self.entry(idx).config
        assert cfg is not None
        return cfg

    def status(self) -> CoreStatus:
        return CoreStatus(
            uuid=self.uuid,
            tablet_id=self.tablet_id,
            role=self._role,
            term=self._term,
            voted_for=self._voted_for,
            leader_uuid=self._leader,
            commit_index=self._commit,
            applied_index=self._applied,
            first_index=self.first_index,
            last_op_id=OpId(self.last_term, self.last_index),
            config=self._config,
            config_index=self._config_index,
            committed_config=self.committed_config(),
            committed_config_index=self.committed_config_index(),
            peers=tuple(
                PeerProgress(u, p.match, p.next, p.needs_copy)
                for u, p in sorted(self._progress.items())
            ),
        )

    def summary(self) -> tuple[Role, int, str | None, int]:
        """(role, term, leader uuid, commit index): what a tablet report and a listing take
        from the core. `status` builds every field and each peer's progress: at a restart
        of 10,000 replicas the reports asked for it some 40,000 times (issue 28)."""
        return self._role, self._term, self._leader, self._commit

    def peer_needs_copy(self, peer: str) -> bool:
        """This leader's last word from `peer` said it needs a tablet copy."""
        pr = self._progress.get(peer) if self._role is Role.LEADER else None
        return pr is not None and pr.needs_copy

    # ------------------------------------------------------------------ inputs

    def tick(self, ticks: int = 1) -> None:
        """`ticks` logical clock ticks, one after another (a driver that let the core sleep
        through `ticks_to_next_event` passes them all when it wakes it)."""
        assert ticks >= 1
        if self._quiesced or self._vote_only:
            return  # no clock runs while quiet (and quiet does not end by a tick)
        if self._role is not Role.LEADER:
            # A non-leader's tick only counts until its election timeout (and all along
            # while its elections are held): those ticks are counted at once. A restarted
            # server's release catches up 10,000 held replicas of ~50 slept ticks each
            # (issue 28); the tick that may start an election still goes one by one.
            counting = (
                ticks if self._held else self._randomized_timeout - 1 - self._election_elapsed
            )
            counting = max(0, min(ticks, counting))
            self._election_elapsed += counting
            ticks -= counting
        for _ in range(ticks):
            self._tick_once()

    def ticks_to_next_event(self) -> int:
        """How many ticks may pass before one does anything but count (a heartbeat, a quorum
        check, an election, the end of a transfer); at least 1. Messages and proposals are
        events of their own: after one, ask again. A leader with no peers has nothing due."""
        if self._vote_only or self._quiesced:
            return QUIET_TICKS_MAX
        t = self._opts.election_timeout_ticks
        if self._role is Role.LEADER:
            if not self._progress and self._transfer_target is None:
                return QUIET_TICKS_MAX
            n = min(
                self._opts.heartbeat_interval_ticks - self._heartbeat_elapsed,
                t - self._election_elapsed,
            )
            if self._transfer_target is not None:
                n = min(n, t - self._transfer_elapsed)
        else:
            n = self._randomized_timeout - self._election_elapsed
            if n <= 0:  # timed out: campaigns at the next tick if it may now, else only counts
                return 1 if not self._held and self._may_campaign() else QUIET_TICKS_MAX
        return max(1, min(n, QUIET_TICKS_MAX))

    def _tick_once(self) -> None:
        if self._vote_only:
            return
        self._election_elapsed += 1
        if self._role is Role.LEADER:
            self._tick_leader()
            return
        if (
            self._election_elapsed >= self._randomized_timeout
            and not self._held
            and self._may_campaign()
        ):
            if (
                self._gate is not None
                and len(self._config.voters) > 1
                and not self._gate(self.tablet_id)
            ):
                # No room for one more election on this server now: another timeout, or
                # sooner when the driver has room again (`campaign_soon`).
                self._election_elapsed = 0
                self._randomized_timeout = self._new_timeout()
                self._gated = True
                return
            if self._leader is None:  # the last timeout's election found no leader
                self._leaderless_timeouts += 1
            self._campaign(skip_pre_vote=False, transfer=False)

    def _refuse(self, msg: Message, reason: str) -> None:
        self.refused_messages += 1
        self.last_refusal = (
            f"{type(msg).__name__} from {msg.sender} in term {msg.term} (ours {self._term}): "
            f"{reason}"
        )
        logger.debug("%s/%s refused %s", self.tablet_id, self.uuid, self.last_refusal)

    def knows_voter(self, uuid: str) -> bool:
        """`uuid` is a voter of a config this replica knows (see `_known_voter`)."""
        return self._known_voter(uuid)

    def _known_voter(self, uuid: str) -> bool:
        """`uuid` is a voter of a config this replica knows: the base (committed) config or
        any config entry in its log, committed or not. Wider than the newest config on
        purpose: a candidate demoted by an uncommitted entry may still have to lead
        (`_may_campaign`)."""
        if self._base_config.is_voter(uuid):
            return True
        for idx in self._config_indexes:
            cfg = self.entry(idx).config
            assert cfg is not None
            if cfg.is_voter(uuid):
                return True
        return False

    def _higher_term_refusal(self, msg: Message) -> str | None:
        """Why a message of a higher term must not make this replica adopt it, or None.
        A term is persisted as soon as it is adopted, so it is only taken from a voter of
        a config this replica knows, and at most TERM_JUMP_MAX above its own: a stranger or
        a member gone wrong cannot push the tablet's term towards what its fields hold."""
        if msg.term > TERM_MAX:
            return f"term above {TERM_MAX}"
        if msg.term - self._term > TERM_JUMP_MAX:
            return f"a jump of more than {TERM_JUMP_MAX} terms"
        if not self._known_voter(msg.sender):
            return "the sender is not a voter of any config this replica knows"
        return None

    def step(self, msg: Message) -> None:
        """Handle one message addressed to this replica (the driver already answered
        INVALID_NAME for a wrong recipient; a wrong one here is a programmer error)."""
        assert msg.recipient == self.uuid and msg.tablet_id == self.tablet_id, msg
        if msg.sender == self.uuid:
            return
        if self._vote_only:
            self._step_vote_only(msg)
            return
        if self._quiesced and not self._keeps_quiet(msg):
            self._unquiesce()
        if msg.term > self._term:
            refusal = self._higher_term_refusal(msg)
            if refusal is None and isinstance(msg, TimeoutNow):
                # Only our leader of our term sends it (to a peer that acknowledged it in
                # that term); a higher one is forged or confused: it would start an election
                # that ignores every leader's lease.
                refusal = "TimeoutNow of a term that is not ours"
            if refusal is not None:
                self._refuse(msg, refusal)
                return
            if isinstance(msg, VoteRequest):
                # The lease keeps a leader heard from lately from being disrupted; a vote
                # asked by that leader itself (restarted, or stepped down) disrupts nobody.
                if self._in_lease() and not msg.leadership_transfer and msg.sender != self._leader:
                    self._reply_vote(msg, granted=False)
                    return
                if not msg.pre_vote:
                    self._become_follower(msg.term, None)
            elif isinstance(msg, VoteResponse) and msg.pre_vote and msg.granted:
                pass  # a pre-vote granted for the term we would campaign in
            elif isinstance(msg, AppendRequest | TimeoutNow):
                self._become_follower(msg.term, msg.sender)
            else:
                self._become_follower(msg.term, None)
        elif msg.term < self._term:
            # Stale sender: tell it our term so it steps down; ignore stale responses.
            if isinstance(msg, AppendRequest):
                self._send(
                    AppendResponse(
                        self.tablet_id,
                        self.uuid,
                        msg.sender,
                        self._term,
                        success=False,
                        reject_index=msg.prev_log_index,
                        hint_index=0,
                    )
                )
            elif isinstance(msg, VoteRequest):
                self._reply_vote(msg, granted=False)
            return

        if isinstance(msg, VoteRequest):
            self._handle_vote_request(msg)
        elif isinstance(msg, VoteResponse):
            self._handle_vote_response(msg)
        elif isinstance(msg, AppendRequest):
            self._handle_append(msg)
        elif isinstance(msg, AppendResponse):
            self._handle_append_response(msg)
        elif isinstance(msg, TimeoutNow):
            self._handle_timeout_now(msg)
        else:  # pragma: no cover - exhaustive
            raise AssertionError(f"unknown message {msg!r}")

    def propose(self, payload: bytes) -> ProposeResult:
        """Append a WRITE at the leader. OK gives (index, term): the write is done when an
        entry with that index AND term is handed out committed; another term at that index
        means it was lost (and a stepped-down leader's writes stay unknown until then)."""
        refused = self._refuse_proposal()
        if refused is not None:
            return refused
        self._unquiesce(heartbeat=False)  # the append below goes to every peer
        e = self._append_as_leader(EntryType.WRITE, payload, None)
        return ProposeResult(ProposalStatus.OK, e.index, e.term)

    def change_config(
        self, change: ConfigChange, cas_config_index: int | None = None
    ) -> ProposeResult:
        """AddServer / RemoveServer / ChangeRole through a CONFIG entry (one member, hence at
        most one voter, per change). Checks in order: leader, CAS against the committed
        config index, no pending change, a commit in this term, then the change itself."""
        if self._role is not Role.LEADER:
            return ProposeResult(ProposalStatus.NOT_LEADER, leader_hint=self._leader)
        # Awake first: its strict check wants peers heard from, and a refused change is
        # still a sign of activity (the caller retries).
        self._unquiesce()
        committed_idx = self.committed_config_index()
        if cas_config_index is not None and cas_config_index != committed_idx:
            return ProposeResult(
                ProposalStatus.CAS_FAILED,
                message=f"committed config index is {committed_idx}, not {cas_config_index}",
            )
        if self._config_index > self._commit:
            return ProposeResult(
                ProposalStatus.ALREADY_IN_PROGRESS,
                message=f"config change at index {self._config_index} not committed yet",
            )
        if not self._committed_in_term():
            return ProposeResult(ProposalStatus.UNAVAILABLE, message="no commit in this term yet")
        if self._transfer_target is not None or not self._config.is_voter(self.uuid):
            return ProposeResult(ProposalStatus.UNAVAILABLE, message="leadership is moving")
        cfg = self._config
        current = cfg.member(change.uuid)
        if change.change_type is ConfigChangeType.ADD_MEMBER:
            if current is not None:
                return ProposeResult(ProposalStatus.ILLEGAL_STATE, message="already a member")
            if change.promote and change.member_type is not MemberType.NON_VOTER:
                return ProposeResult(ProposalStatus.BAD_REQUEST, message="promote needs NON_VOTER")
            new_cfg = cfg.with_member(Member(change.uuid, change.member_type, change.promote))
        elif change.change_type is ConfigChangeType.REMOVE_MEMBER:
            if current is None:
                return ProposeResult(ProposalStatus.ILLEGAL_STATE, message="not a member")
            if change.uuid == self.uuid:
                return self._transfer_before_leaving()
            new_cfg = cfg.without(change.uuid)
        else:
            if current is None:
                return ProposeResult(ProposalStatus.ILLEGAL_STATE, message="not a member")
            if change.promote and change.member_type is not MemberType.NON_VOTER:
                return ProposeResult(ProposalStatus.BAD_REQUEST, message="promote needs NON_VOTER")
            if change.uuid == self.uuid and change.member_type is not MemberType.VOTER:
                return self._transfer_before_leaving()
            new_cfg = cfg.with_member(Member(change.uuid, change.member_type, change.promote))
        if not new_cfg.voters:
            return ProposeResult(ProposalStatus.ILLEGAL_STATE, message="no voter would remain")
        assert len(set(new_cfg.voters) ^ set(cfg.voters)) <= 1, "one voter at a time"
        if not self._config_keeps_quorum(new_cfg):
            if self._leader_ticks - self._leader_since_tick <= self._opts.election_timeout_ticks:
                # A leader of less than an election timeout may just not have heard from a
                # voter yet (its first heartbeat's answer can trail the commit of its no-op,
                # acknowledged by the others): not known unhealthy, so the caller retries.
                return ProposeResult(
                    ProposalStatus.UNAVAILABLE,
                    message="a new leader has not heard from every voter yet: retry",
                )
            return ProposeResult(
                ProposalStatus.ILLEGAL_STATE,
                message="refused: the new config would not have a majority of healthy voters",
            )
        e = self._append_as_leader(EntryType.CONFIG, b"", new_cfg)
        return ProposeResult(ProposalStatus.OK, e.index, e.term)

    def transfer_leadership(self, target: str, *, heartbeat: bool = True) -> ProposeResult:
        """Hand leadership to `target` (a voter): catch it up, then send TimeoutNow.
        Proposals get UNAVAILABLE meanwhile; the attempt ends after an election timeout.
        `heartbeat=False`: a quiet leader wakes without a heartbeat round to every peer
        (the shutdown hand-over of thousands of groups, `RaftDriver.hand_over_leadership`:
        the TimeoutNow is the one message a caught-up target needs, and the other
        followers wake on its vote request)."""
        if self._role is not Role.LEADER:
            return ProposeResult(ProposalStatus.NOT_LEADER, leader_hint=self._leader)
        if target == self.uuid:
            return ProposeResult(ProposalStatus.OK, term=self._term)
        if not self._config.is_voter(target):
            return ProposeResult(ProposalStatus.BAD_REQUEST, message=f"{target} is not a voter")
        self._unquiesce(heartbeat=heartbeat)
        self._transfer_target = target
        self._transfer_elapsed = 0
        self._maybe_timeout_now(target)
        if self._transfer_target is not None:
            self._send_append(target)
        return ProposeResult(ProposalStatus.OK, term=self._term)

    @property
    def transfer_target(self) -> str | None:
        """The voter a leadership transfer is running to, or None."""
        return self._transfer_target

    def handover_targets(self) -> list[tuple[str, bool]]:
        """The voters this leader could hand leadership to now, best first, each with
        whether it holds the whole log (a TimeoutNow goes at once): not on a server
        declared dead, needing no copy. Empty when not leading."""
        if self._role is not Role.LEADER:
            return []
        last = self.last_index
        out = []
        for v in self._config.voters:
            pr = self._progress.get(v)
            if v == self.uuid or v in self._peers_down or pr is None or pr.needs_copy:
                continue
            out.append((v, pr.match == last, v in self._recent_active, pr.match))
        out.sort(key=lambda t: t[1:], reverse=True)
        return [(v, caught_up) for v, caught_up, _, _ in out]

    def read_index(self, request_id: int) -> None:
        """Ask for a linearizable read point. A ReadResult comes back in a later Ready: OK
        once a heartbeat round confirmed leadership with a majority of voters after this
        call, and the committed entries up to read_index (the commit index at request time,
        or the first commit of the term) have been handed out; else NOT_LEADER."""
        if self._role is not Role.LEADER:
            self._reads_out.append(
                ReadResult(request_id, ProposalStatus.NOT_LEADER, leader_hint=self._leader)
            )
            return
        if len(self._pending_reads) >= self._opts.pending_reads_max:
            self._reads_out.append(ReadResult(request_id, ProposalStatus.THROTTLED))
            return
        self._unquiesce(heartbeat=False)  # the read's own heartbeat round follows
        self._read_seq += 1
        index = self._commit if self._committed_in_term() else None
        self._pending_reads.append(_PendingRead(request_id, self._read_seq, index))
        for peer in self._progress:
            self._send_append(peer, heartbeat=True)

    def persisted(self, index: int, term: int) -> None:
        """The driver made the log durable up to (index, term). Stale acknowledgements (the
        entry was truncated meanwhile) are ignored."""
        if self._vote_only or index <= self._durable:
            return
        if self.term_at(index) != term:
            return
        self._durable = index
        if self._role is Role.LEADER:
            self._maybe_commit()

    def compact(self, up_to_index: int) -> None:
        """The driver deleted the stored entries up to and including up_to_index (WAL GC).
        They must be applied and durable. Peers needing them will need a tablet copy."""
        if self._vote_only or up_to_index <= self._snap_index:
            return
        assert up_to_index <= self._applied and up_to_index <= self._durable, up_to_index
        snap_term = self.term_at(up_to_index)
        assert snap_term is not None
        for idx in self._config_indexes:
            if idx <= up_to_index:
                cfg = self.entry(idx).config
                assert cfg is not None
                self._base_config, self._base_config_index = cfg, idx
        self._config_indexes = [i for i in self._config_indexes if i > up_to_index]
        k = up_to_index - self._snap_index
        self._cum_base = self._cum[k - 1]
        del self._log[:k]
        del self._cum[:k]
        self._snap_index, self._snap_term = up_to_index, snap_term

    def has_ready(self) -> bool:
        return bool(
            self._msgs
            or self._unstable_from is not None
            or HardState(self._term, self._voted_for) != self._hs_sent
            or self._applied < min(self._commit, self._durable)
            or self._reads_out
            or self._copy_out
            or self._current_soft() != self._soft_sent
            or self._ready_reads_possible()
        )

    def ready(self) -> Ready:
        """Collect the outputs accumulated since the last call (see types.Ready)."""
        hs = HardState(self._term, self._voted_for)
        hard_state = None
        if hs != self._hs_sent:
            hard_state = hs
            self._hs_sent = hs
        entries: tuple[Entry, ...] = ()
        if self._unstable_from is not None:
            entries = tuple(self._log[self._unstable_from - self._snap_index - 1 :])
            assert entries, "truncation without new entries"
            self._unstable_from = None
        committed: tuple[Entry, ...] = ()
        upto = min(self._commit, self._durable)
        if upto > self._applied:
            committed = tuple(self._log[self._applied - self._snap_index : upto - self._snap_index])
            assert committed[0].index == self._applied + 1 and committed[-1].index == upto
            self._applied = upto
        self._release_reads()
        soft = self._current_soft()
        soft_state = None
        if soft != self._soft_sent:
            soft_state = soft
            self._soft_sent = soft
        ready = Ready(
            hard_state=hard_state,
            entries=entries,
            messages=tuple(self._msgs),
            committed_entries=committed,
            soft_state=soft_state,
            reads=tuple(self._reads_out),
            copy_requests=tuple(self._copy_out),
        )
        self._msgs.clear()
        self._reads_out.clear()
        self._copy_out.clear()
        return ready

    # ------------------------------------------------------------------ roles

    def _new_timeout(self) -> int:
        t = self._opts.election_timeout_ticks
        k = min(self._leaderless_timeouts, self._opts.election_backoff_doublings_max)
        return t + self._rng.randrange(t << k)

    def _current_soft(self) -> SoftState:
        return SoftState(self._role, self._leader, self._term)

    def _in_lease(self) -> bool:
        return (
            self._opts.check_quorum
            and self._leader is not None
            and self._election_elapsed < self._opts.election_timeout_ticks
        )

    def _reset_leader_state(self) -> None:
        self._probed = None
        self._progress.clear()
        self._recent_active.clear()
        self._transfer_target = None
        self._read_acks.clear()
        for r in self._pending_reads:
            self._reads_out.append(
                ReadResult(r.request_id, ProposalStatus.NOT_LEADER, leader_hint=self._leader)
            )
        self._pending_reads.clear()

    def _become_follower(self, term: int, leader: str | None) -> None:
        assert term >= self._term
        if term > self._term:
            self._term = term
            self._voted_for = None
        self._role = Role.FOLLOWER
        self._leader = leader
        self._quiesced = False
        self._reset_leader_state()
        self._votes.clear()
        self._election_elapsed = 0
        if leader is not None:
            self._leaderless_timeouts = 0
            self._gated = False
        self._randomized_timeout = self._new_timeout()

    def campaign_soon(self) -> bool:
        """The driver has room for one more election again: a follower whose last timeout
        was deferred for want of it (`set_campaign_gate`), and that has heard from no live
        leader since, times out at its next tick instead of a whole timeout later. True
        when it will. At a restart of 10,000 replicas the survivors deferred 5,000-7,000
        elections this way, each a whole timeout, while places stood free."""
        if (
            not self._gated
            or self._role is not Role.FOLLOWER
            or self._quiesced
            or self._held
            or (self._leader is not None and self._leader not in self._peers_down)
        ):
            self._gated = False
            return False
        self._gated = False
        self._election_elapsed = max(self._election_elapsed, self._randomized_timeout)
        return True

    def _campaign(self, skip_pre_vote: bool, transfer: bool) -> None:
        if self._term >= TERM_MAX:
            # Unreachable through messages (TERM_JUMP_MAX); a term this high can only come
            # from a hand-edited file. Never send a term the fields cannot hold.
            self._election_elapsed = 0
            self.last_refusal = f"term {self._term} is at the limit: no election"
            return
        self._election_elapsed = 0
        self._randomized_timeout = self._new_timeout()
        self._gated = False
        self._leader = None
        self._votes = {self.uuid: True}
        pre = self._opts.pre_vote and not (skip_pre_vote or transfer)
        if pre:
            self._role = Role.PRE_CANDIDATE
            term = self._term + 1
        else:
            self._role = Role.CANDIDATE
            self._term += 1
            self._voted_for = self.uuid
            term = self._term
        if self._tally() is True:
            self._won_election()
            return
        for v in self._config.voters:
            if v != self.uuid:
                self._send(
                    VoteRequest(
                        self.tablet_id,
                        self.uuid,
                        v,
                        term,
                        self.last_term,
                        self.last_index,
                        pre_vote=pre,
                        leadership_transfer=transfer,
                    )
                )

    def _tally(self) -> bool | None:
        voters = self._config.voters
        granted = sum(1 for v in voters if self._votes.get(v) is True)
        refused = sum(1 for v in voters if self._votes.get(v) is False)
        if granted >= self._config.majority():
            return True
        if refused >= self._config.majority():
            return False
        return None

    def _won_election(self) -> None:
        if self._role is Role.PRE_CANDIDATE:
            self._campaign(skip_pre_vote=True, transfer=False)  # the real election
            return
        assert self._role is Role.CANDIDATE
        self._become_leader()

    def _become_leader(self) -> None:
        self._quorum_windows = 0
        self._role = Role.LEADER
        self._leader = self.uuid
        self._leaderless_timeouts = 0
        self._votes.clear()
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._progress = {
            u: _Progress(self.last_index + 1) for u in self._config.uuids if u != self.uuid
        }
        self._recent_active = set()
        self._read_acks = {}
        self._leader_since_tick = self._leader_ticks
        logger.debug("%s/%s leader of term %d", self.tablet_id, self.uuid, self._term)
        self._append_as_leader(EntryType.NOOP, b"", None)

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._leader_ticks += 1
        if self._transfer_target is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= self._opts.election_timeout_ticks:
                self._transfer_target = None
        if self._election_elapsed >= self._opts.election_timeout_ticks:
            self._election_elapsed = 0  # (the leader's own lease: `_in_lease`)
            self._quorum_windows += 1
            if self._opts.check_quorum and self._quorum_windows >= self._opts.check_quorum_timeouts:
                self._quorum_windows = 0
                active = sum(
                    1 for v in self._config.voters if v == self.uuid or v in self._recent_active
                )
                self._recent_active = set()
                if active < self._config.majority():
                    logger.debug("%s/%s lost quorum", self.tablet_id, self.uuid)
                    self._become_follower(self._term, None)
                    return
        if self._heartbeat_elapsed >= self._opts.heartbeat_interval_ticks:
            self._heartbeat_round(quiesce=self._may_quiesce())

    def _heartbeat_round(self, quiesce: bool = False) -> None:
        self._heartbeat_elapsed = 0
        for peer, pr in self._progress.items():
            if not pr.probing and not pr.acked and pr.match < self.last_index:
                pr.next = pr.match + 1  # nothing acknowledged: resend what may be lost
            pr.acked = False
            pr.answered = False
            pr.probe_inflight = False
            self._send_append(peer, heartbeat=True, quiesce=quiesce)
        if quiesce:
            logger.debug("%s/%s quiet at %d", self.tablet_id, self.uuid, self.last_index)
            self._quiesced = True

    # ------------------------------------------------------------------ quiet groups

    def _may_quiesce(self) -> bool:
        """A leader may go quiet when nothing is moving: every entry of its log committed
        (one of its own term among them) and durable, every peer answered the last
        heartbeat round holding the whole log, no read, transfer or config change pending,
        and it stays a voter. The quiesce heartbeat then carries the commit index to all.
        Peers on servers declared dead (`peer_down`) are not waited for, as long as the
        others make a majority of the voters with this one: a leader heartbeating a dead
        follower five times a second, in each of thousands of groups, is what loaded the
        surviving servers of a restart into an election storm (design/consensus.md, Quiet
        groups); `peer_up` wakes it to catch the follower up when its server is back."""
        if not self._opts.quiesce or not self._progress:
            return False  # a lone voter has nothing due anyway
        last = self.last_index
        if (
            self._pending_reads
            or self._transfer_target is not None
            or self._commit != last
            or self._durable != last
            or not self._committed_in_term()
            or not self._config.is_voter(self.uuid)
        ):
            return False
        down = self._peers_down
        if not all(
            pr.answered and pr.match == last and not pr.probing and not pr.needs_copy
            for u, pr in self._progress.items()
            if u not in down
        ):
            return False
        return not down or self._live_voters() >= self._config.majority()

    def _live_voters(self) -> int:
        """Voters not on a server declared dead, this one included."""
        return sum(1 for v in self._config.voters if v not in self._peers_down)

    def _keeps_quiet(self, msg: Message) -> bool:
        """A message that leaves a quiet replica quiet: at the leader, a peer's answer of
        this term saying it holds the whole log (the answer to the quiesce heartbeat).
        Everything else wakes it; a follower goes quiet again on its leader's next
        quiesce heartbeat (see _handle_append)."""
        return (
            self._role is Role.LEADER
            and isinstance(msg, AppendResponse)
            and msg.term == self._term
            and msg.success
            and msg.match_index == self.last_index
            and msg.status is ReplicaStatus.OK
        )

    def _unquiesce(self, heartbeat: bool = True) -> None:
        """Wake: clocks run again from zero (a follower's election timer with a new random
        timeout; a leader's check-quorum counts peers heard from now on) and a leader
        heartbeats at once unless the caller sends to every peer itself."""
        if not self._quiesced:
            return
        self._quiesced = False
        self._election_elapsed = 0
        if self._role is Role.LEADER:
            # Answers from before the quiet spell prove nothing about now: check-quorum
            # and the next quiet both want peers heard from after waking.
            self._recent_active = set()
            for pr in self._progress.values():
                pr.answered = False
            if heartbeat:
                self._heartbeat_round()
        else:
            self._randomized_timeout = self._new_timeout()

    def peer_down(self, uuid: str) -> None:
        """The driver declared the server `uuid` dead (not heard from for an election
        timeout). A quiet follower whose leader it was wakes: its election timer restarts
        (pre-vote as usual). A quiet leader wakes only when the voters left alive are no
        longer a majority (it heartbeats and lets check-quorum work); one dead follower
        leaves it quiet (`_may_quiesce`). Other quiet replicas have nothing to do."""
        if uuid == self.uuid or uuid in self._peers_down:
            return
        self._peers_down = self._peers_down | {uuid}
        if self._role is Role.LEADER:
            if (
                self._quiesced
                and self._config.is_voter(uuid)
                and self._live_voters() < self._config.majority()
            ):
                self._unquiesce()
        elif uuid == self._leader and self._role is Role.FOLLOWER:
            self._unquiesce()
            self._election_elapsed = 0
            self._randomized_timeout = self._successor_timeout(uuid)

    def successor(self, dead: str) -> str | None:
        """The voter that should replace the leader `dead` (declared down): of the voters
        not declared down, the first by a hash of the tablet id and the voter's uuid. Every
        replica of the group computes the same one from the same config and the same
        declarations, and the choice spreads a dead server's groups evenly over the others."""
        live = [v for v in self._config.voters if v != dead and v not in self._peers_down]
        if not live:
            return None
        return min(live, key=lambda v: (zlib.crc32(f"{self.tablet_id}/{v}".encode()), v))

    def _successor_timeout(self, dead: str) -> int:
        """A follower's election timeout once its leader is declared down: the successor
        (`successor`) times out in [1.5T, 2T), the others in [2.5T, 3.5T), so that one
        candidate runs alone instead of two at once splitting the votes or refusing each
        other's pre-vote by the lease (after a kill -9 of a server leading 3,333 groups,
        each of its groups elected 2-4 times over before this, design/consensus.md,
        "Restart without a storm"). From [1.5T: the other followers were told of the death
        at about the same moment, and their lease of the dead leader (T from then) must be
        over when the successor's pre-vote comes. Backoff (`_new_timeout`) is not added:
        this is the first timeout after a leader was heard."""
        t = self._opts.election_timeout_ticks
        if self.successor(dead) == self.uuid:
            return t + t // 2 + self._rng.randrange(max(1, t - t // 2))
        return 2 * t + t // 2 + self._rng.randrange(t)

    def peer_up(self, uuid: str, restarted: bool = True) -> bool:
        """The server `uuid`, declared dead, is heard from again. A quiet leader whose
        config names it sends it the quiesce heartbeat it missed (`probe`) and stays quiet:
        a restarted follower whose log matches learns its leader and term from it and goes
        quiet too; one that is behind (or in an older term) answers with a rejection, which
        wakes the leader to catch it up; one not open yet answers nothing and, once open,
        wakes its leader by its pre-vote. Waking every such leader instead made thousands
        heartbeat the restarted server five times a second while it was still opening its
        replicas (the restart of 3,000 replicas, design/consensus.md). A follower whose
        leader it was, and that has heard no other since, gives that server's replica the
        first election when the server `restarted` (its pings said it was opening), and
        goes back to quiet when it did not (the silence was a stall: the leader leads on).
        True when it sent something or changed its timers (the driver must then process
        the group)."""
        if uuid not in self._peers_down:
            return False
        self._peers_down = self._peers_down - {uuid}
        if self._role is Role.FOLLOWER and not self._quiesced and uuid == self._leader:
            if not restarted:
                # Silent for a while, never restarted (its pings never said it was
                # opening): our leader most likely leads still, quiet. Back to quiet, as
                # before the alarm: an election now would only depose it. A false
                # declaration on a starved machine woke 2,742 groups of 10,000 this way.
                # If it does not lead any more, its next silence wakes us again.
                self._quiesced = True
                return True
            # Our leader's server is back (it restarted and opened its replicas) before any
            # other leader was heard: its replica, holding the whole log and asking through
            # our lease (`step`), gets the group back in one election, as its election
            # timeout from its release is [T, 2T). Ours starts again a timeout later, so
            # that one candidate runs, not it and the successor at once (seen at 3,000
            # replicas: a restart of 1.5 s, and both ran in most of its groups).
            self._election_elapsed = 0
            self._randomized_timeout = (
                self._successor_timeout(uuid) + self._opts.election_timeout_ticks
            )
            return True
        return self._quiesced and self.probe(uuid)

    def probe(self, uuid: str, *, repeat: bool = False) -> bool:
        """A heartbeat to the member `uuid` only, leaving the group as it is (quiet or
        not): `peer_up`'s, and the driver's probe of a server declared dead. Any answer,
        even one saying the replica is missing, tells the driver the server is back
        (`peer_up` follows); a server that came back holding no replica of a group with
        this one would otherwise never be heard from. False when this replica does not
        lead or `uuid` is no member. `repeat`: the driver's repeat of a probe of a server
        heard from again (its replica may have been still opening, or the probe lost):
        nothing is sent when `uuid` answered since the last probe (at a restart of
        10,000 replicas the repeats were a tenth of each survivor's busy samples)."""
        if self._role is not Role.LEADER or uuid not in self._progress:
            return False
        if repeat and self._probed is not None and self._probed.get(uuid):
            return False
        if self._probed is None:
            self._probed = {}
        self._probed[uuid] = False
        # A quiet leader's heartbeat is the quiesce heartbeat it sent when it went quiet
        # (its whole log committed): a follower that matches goes quiet on it.
        self._send_append(uuid, heartbeat=True, quiesce=self._quiesced)
        return True

    def stop_campaigning(self) -> None:
        """The server is stopping: this replica starts no election from now on (its
        groups' leadership is being handed to the others, `transfer_leadership`; a
        follower here that won an election would lead for the moment it has left, and its
        group would elect again once it is gone). It still votes and follows."""
        self._leaving = True

    def set_campaign_gate(self, gate: Callable[[str], bool] | None) -> None:
        """`gate(tablet_id)` is asked before each election an election timeout starts (not
        one a leader's TimeoutNow asks for, nor a lone voter's): False defers it by a new
        randomized timeout. The driver bounds the elections its server runs at once."""
        self._gate = gate

    def hold_elections(self) -> None:
        """Start no election on a timeout until `release_elections` (votes, appends and a
        leader's TimeoutNow work as always). The driver holds the replicas it opens at
        start-up: a restarted server's replicas, each timing out 1-2 s after its own open,
        pre-voted in thousands while their leaders' probes had not reached them yet, and
        every pre-vote woke a quiet leader and follower on the other servers
        (design/consensus.md, "Restart without a storm")."""
        self._held = True

    def release_elections(self) -> None:
        """End `hold_elections`. A follower that has not heard from a leader meanwhile
        times out a whole randomized timeout from now, not at once: its peers' leaders
        probe this server once it says its replicas are open, and that answer should
        come first."""
        if not self._held:
            return
        self._held = False
        if self._role is not Role.LEADER and not self._quiesced:
            self._election_elapsed = 0
            self._randomized_timeout = self._new_timeout()

    @property
    def elections_held(self) -> bool:
        return self._held

    def wake(self) -> None:
        """Wake a quiet replica (a leader heartbeats at once): the driver's word that
        something changed that the core does not see, e.g. the replica is about to stop."""
        if self._role is Role.LEADER and not self._quiesced:
            self._heartbeat_round()  # so that quiet followers wake too
        self._unquiesce()

    # ------------------------------------------------------------------ votes

    def _reply_vote(self, msg: VoteRequest, granted: bool) -> None:
        term = msg.term if (granted and msg.pre_vote) else self._term
        self._send(
            VoteResponse(
                self.tablet_id, self.uuid, msg.sender, term, granted, pre_vote=msg.pre_vote
            )
        )

    def _log_up_to_date(self, msg: VoteRequest) -> bool:
        return (msg.last_log_term, msg.last_log_index) >= (self.last_term, self.last_index)

    def _handle_vote_request(self, msg: VoteRequest) -> None:
        can_vote = (
            self._voted_for == msg.sender
            or (self._voted_for is None and self._leader is None)
            or (msg.pre_vote and msg.term > self._term)
        )
        if can_vote and self._log_up_to_date(msg):
            if not msg.pre_vote:
                self._voted_for = msg.sender
                self._election_elapsed = 0
            self._reply_vote(msg, granted=True)
        else:
            self._reply_vote(msg, granted=False)
            if (
                not msg.pre_vote
                and self._role is Role.CANDIDATE
                and msg.term == self._term
                and self._voted_for == self.uuid
            ):
                self._split_vote(msg.sender)

    def _split_vote(self, rival: str) -> None:
        """`rival`, a candidate of our term, asked for our vote: we both voted for
        ourselves. Where no other voter answers (a group of three whose third server is
        down) neither can win, and both would wait out a timeout with its backoff: at a
        kill -9 restart of a server of 10,000 replicas, 180 of the 3,380 elections of its
        groups on the other two servers split so, and took 3-8 s more (issue 28). The
        candidates rank each other alike (`split_rank`: both sides compute the same order,
        a different one per group and term); the first runs again after at most half a
        timeout, without backoff; the others keep their timeout. A leader of this term
        heard meanwhile (a third voter chose it) ends the candidacy as always."""
        if split_rank(self.tablet_id, self._term, self.uuid) <= split_rank(
            self.tablet_id, self._term, rival
        ):
            return
        soon = (
            self._election_elapsed
            + 1
            + self._rng.randrange(max(1, self._opts.election_timeout_ticks // 2))
        )
        if soon < self._randomized_timeout:
            self._randomized_timeout = soon
            self.split_votes_shortened += 1

    def _handle_vote_response(self, msg: VoteResponse) -> None:
        expected = Role.PRE_CANDIDATE if msg.pre_vote else Role.CANDIDATE
        if self._role is not expected or not self._config.is_voter(msg.sender):
            return
        self._votes.setdefault(msg.sender, msg.granted)
        outcome = self._tally()
        if outcome is True:
            self._won_election()
        elif outcome is False:
            self._become_follower(self._term, None)

    def _handle_timeout_now(self, msg: TimeoutNow) -> None:
        if msg.sender != self._leader:
            self._refuse(msg, "TimeoutNow from a server that is not our leader")
            return
        if self._role is Role.LEADER or not self._may_campaign():
            return
        self._campaign(skip_pre_vote=True, transfer=True)

    def _step_vote_only(self, msg: Message) -> None:
        if msg.term > self._term:
            refusal = self._higher_term_refusal(msg)
            if refusal is not None:
                if (
                    isinstance(msg, AppendRequest)
                    and msg.term <= TERM_MAX
                    and msg.term - self._term <= TERM_JUMP_MAX
                ):
                    # A leader this tombstone's old config does not name (the tablet moved
                    # on while it was deleted): tell it, in its term, that the replica is
                    # deleted, so that it copies the tablet back here; nothing adopted.
                    self._send(
                        AppendResponse(
                            self.tablet_id,
                            self.uuid,
                            msg.sender,
                            msg.term,
                            success=False,
                            reject_index=msg.prev_log_index,
                            read_seq=msg.read_seq,
                            status=ReplicaStatus.TABLET_DELETED,
                        )
                    )
                self._refuse(msg, refusal)
                return
        if msg.term < self._term:
            if isinstance(msg, AppendRequest):
                self._send(
                    AppendResponse(
                        self.tablet_id,
                        self.uuid,
                        msg.sender,
                        self._term,
                        success=False,
                        reject_index=msg.prev_log_index,
                    )
                )
            elif isinstance(msg, VoteRequest):
                self._reply_vote(msg, granted=False)
            return
        if isinstance(msg, VoteRequest):
            if msg.term > self._term and not msg.pre_vote:
                self._term, self._voted_for = msg.term, None
            self._handle_vote_request(msg)
        elif isinstance(msg, AppendRequest):
            if msg.term > self._term:
                self._term, self._voted_for = msg.term, None
            self._send(
                AppendResponse(
                    self.tablet_id,
                    self.uuid,
                    msg.sender,
                    self._term,
                    success=False,
                    reject_index=msg.prev_log_index,
                    read_seq=msg.read_seq,
                    status=ReplicaStatus.TABLET_DELETED,
                )
            )

    # ------------------------------------------------------------------ replication

    def _send(self, msg: Message) -> None:
        self._msgs.append(msg)

    def _committed_in_term(self) -> bool:
        return self.term_at(self._commit) == self._term

    def _refuse_proposal(self) -> ProposeResult | None:
        if self._role is not Role.LEADER:
            return ProposeResult(ProposalStatus.NOT_LEADER, leader_hint=self._leader)
        if not self._config.is_voter(self.uuid):
            return ProposeResult(ProposalStatus.UNAVAILABLE, message="leader is leaving the config")
        if self._transfer_target is not None:
            return ProposeResult(ProposalStatus.UNAVAILABLE, message="leadership transfer running")
        if self.last_index - self._commit >= self._opts.uncommitted_entries_max:
            return ProposeResult(ProposalStatus.THROTTLED, message="too many uncommitted entries")
        return None

    def _append_as_leader(
        self, entry_type: EntryType, payload: bytes, config: RaftConfig | None
    ) -> Entry:
        assert self._role is Role.LEADER
        e = Entry(self._term, self.last_index + 1, entry_type, payload, config)
        self._log_append(e)
        if self._unstable_from is None:
            self._unstable_from = e.index
        if config is not None:
            self._config_indexes.append(e.index)
            self._apply_config_change()
        for peer in self._progress:
            self._send_append(peer)
        self._maybe_commit()  # a lone voter still waits for persisted()
        return e

    def _tail_config(self) -> tuple[RaftConfig, int]:
        if self._config_indexes:
            idx = self._config_indexes[-1]
            cfg = self.entry(idx).config
            assert cfg is not None
            return cfg, idx
        return self._base_config, self._base_config_index

    def _apply_config_change(self) -> None:
        """The newest config in the log is in force at once, committed or not."""
        self._config, self._config_index = self._tail_config()
        if self._role is not Role.LEADER:
            return
        # A leader never removes or demotes itself (change_config refuses it), but it may
        # have been elected while an uncommitted entry had already demoted it; it then
        # steps down once that entry is committed (see _maybe_commit).
        for u in self._config.uuids:
            if u != self.uuid and u not in self._progress:
                self._progress[u] = _Progress(self.last_index + 1)
        for u in list(self._progress):
            if self._config.member(u) is None:
                del self._progress[u]
                self._read_acks.pop(u, None)
        if self._transfer_target is not None and not self._config.is_voter(self._transfer_target):
            self._transfer_target = None

    def _send_append(self, peer: str, heartbeat: bool = False, quiesce: bool = False) -> None:
        pr = self._progress[peer]
        if pr.next <= self._snap_index:
            # The peer needs entries this replica no longer has: only a tablet copy helps.
            pr.needs_copy = True
            self._copy_out.append(
                TabletCopyRequest(self.tablet_id, peer, self._term, CopyReason.LOG_COMPACTED)
            )
            if not heartbeat:
                return
            # Probe at the snapshot point on every heartbeat: once a copy has given the
            # peer this log, the probe succeeds and normal replication resumes.
            pr.next = self._snap_index + 1
            pr.probing = True
        if pr.probing and pr.probe_inflight and not heartbeat:
            return
        opts = self._opts
        capped = not pr.probing and (
            pr.next > self.last_index
            or pr.next - pr.match - 1 >= opts.inflight_entries_max
            or self._bytes_through(pr.next - 1)
            - self._bytes_through(max(pr.match, self._snap_index))
            >= opts.inflight_bytes_max
        )
        if capped:
            if not heartbeat or pr.match < self._snap_index:
                return
            # A pure heartbeat at a point the peer is known to have: confirms leadership
            # and carries the commit index without disturbing the pipeline.
            prev, entries = pr.match, ()
        else:
            prev = pr.next - 1
            stop = min(self.last_index, pr.next + opts.append_entries_max - 1)
            limit = self._bytes_through(prev) + opts.append_bytes_max
            if self._bytes_through(stop) > limit:
                # Position p holds index snap + 1 + p: the first entry past the byte budget.
                over = bisect.bisect_left(
                    self._cum, limit + 1, pr.next - self._snap_index - 1, stop - self._snap_index
                )
                stop = max(pr.next, over + self._snap_index)
            entries = tuple(self._log[pr.next - self._snap_index - 1 : stop - self._snap_index])
        prev_term = self.term_at(prev)
        assert prev_term is not None, (prev, self._snap_index, self.last_index)
        self._send(
            AppendRequest(
                self.tablet_id,
                self.uuid,
                peer,
                self._term,
                prev,
                prev_term,
                entries,
                self._commit,
                read_seq=self._read_seq,
                quiesce=quiesce and not entries and prev == self.last_index,
            )
        )
        if pr.probing:
            pr.probe_inflight = True
        elif entries:
            pr.next = entries[-1].index + 1

    def _handle_append(self, msg: AppendRequest) -> None:
        if self._role is Role.LEADER or (self._leader is not None and self._leader != msg.sender):
            # One leader per term: a second one in our term is forged or broken. Dropped
            # (it used to be an assertion, and failed the tablet).
            self._refuse(msg, f"a second leader in the term of {self._leader}")
            return
        if self._role is not Role.FOLLOWER:
            self._become_follower(msg.term, msg.sender)
        self._leader = msg.sender
        self._election_elapsed = 0
        if self._leaderless_timeouts:  # a leader at last: timeouts of normal length again
            self._leaderless_timeouts = 0
            self._randomized_timeout = self._new_timeout()
        prev, prev_term, entries = msg.prev_log_index, msg.prev_log_term, msg.entries
        if prev < self._commit:
            # Everything up to our commit index matches any leader's log: skip it.
            skip = self._commit - prev
            entries = entries[skip:]
            prev = self._commit
            prev_term = self.term_at(prev)
            if entries:
                assert entries[0].index == prev + 1
        elif self.term_at(prev) != prev_term:
            hint = min(prev - 1, self.last_index)
            while hint > self._commit and (self.term_at(hint) or 0) > msg.prev_log_term:
                hint -= 1
            self._send(
                AppendResponse(
                    self.tablet_id,
                    self.uuid,
                    msg.sender,
                    self._term,
                    success=False,
                    reject_index=msg.prev_log_index,
                    hint_index=hint,
                    read_seq=msg.read_seq,
                )
            )
            return
        for e in entries:
            have = self.term_at(e.index)
            if have == e.term:
                continue
            if have is not None:
                self._truncate_from(e.index)
            assert e.index == self.last_index + 1
            self._log_append(e)
            if self._unstable_from is None or e.index < self._unstable_from:
                self._unstable_from = e.index
            if e.entry_type is EntryType.CONFIG:
                self._config_indexes.append(e.index)
                self._apply_config_change()
        last_new = msg.prev_log_index + len(msg.entries)
        new_commit = min(msg.leader_commit, max(last_new, prev))
        if new_commit > self._commit:
            self._commit = new_commit
        if (
            msg.quiesce
            and self._opts.quiesce
            and not msg.entries
            and msg.prev_log_index == self.last_index == self._commit
        ):
            # The leader goes quiet with the whole log committed, and ours matches it: no
            # election timer until another message or the leader's server is declared dead.
            logger.debug("%s/%s quiet, following %s", self.tablet_id, self.uuid, msg.sender)
            self._quiesced = True
        self._send(
            AppendResponse(
                self.tablet_id,
                self.uuid,
                msg.sender,
                self._term,
                success=True,
                match_index=max(last_new, prev),
                read_seq=msg.read_seq,
            )
        )

    def _truncate_from(self, index: int) -> None:
        assert index > self._commit, f"truncating committed entry {index} <= {self._commit}"
        assert index > self._snap_index
        del self._log[index - self._snap_index - 1 :]
        del self._cum[index - self._snap_index - 1 :]
        if self._unstable_from is not None and self._unstable_from > index:
            self._unstable_from = index
        self._durable = min(self._durable, index - 1)
        self._config_indexes = [i for i in self._config_indexes if i < index]
        self._apply_config_change()

    def _handle_append_response(self, msg: AppendResponse) -> None:
        if self._role is not Role.LEADER:
            return
        if self._probed is not None and msg.sender in self._probed:
            self._probed[msg.sender] = True
        pr = self._progress.get(msg.sender)
        if pr is None:
            return
        if (
            msg.match_index > self.last_index
            or msg.reject_index > self.last_index
            or msg.read_seq > self._read_seq
        ):
            # Answers echo what this leader sent in this term: never past its log or its
            # read sequence. Taking one would move `next` past the log (an assertion) or
            # confirm reads nobody confirmed.
            self._refuse(msg, "an answer naming an index or read sequence never sent")
            return
        if msg.status is ReplicaStatus.TABLET_FAILED:
            return  # as good as unreachable: the coordinator replaces it (no copy over it)
        if msg.status is not ReplicaStatus.OK:
            pr.needs_copy = True
            reason = (
                CopyReason.TABLET_DELETED
                if msg.status is ReplicaStatus.TABLET_DELETED
                else CopyReason.TABLET_NOT_FOUND
            )
            self._copy_out.append(TabletCopyRequest(self.tablet_id, msg.sender, self._term, reason))
            return
        self._recent_active.add(msg.sender)
        pr.heard_tick = self._leader_ticks
        pr.answered = True
        if self._config.is_voter(msg.sender) and msg.read_seq > self._read_acks.get(msg.sender, 0):
            self._read_acks[msg.sender] = msg.read_seq
        pr.probe_inflight = False
        if msg.success:
            pr.needs_copy = False
            if msg.match_index > pr.match:
                pr.match = msg.match_index
                pr.acked = True  # progress since the last heartbeat: no need to resend
            pr.next = max(pr.next, pr.match + 1)
            pr.probing = False
            self._maybe_commit()
            if self._role is not Role.LEADER:
                return
            self._maybe_promote(msg.sender)
            self._maybe_timeout_now(msg.sender)
            if pr.next <= self.last_index:
                self._send_append(msg.sender)
        else:
            if msg.reject_index <= pr.match:
                return  # stale rejection
            pr.next = max(pr.match + 1, min(msg.reject_index, msg.hint_index + 1))
            pr.probing = True
            self._send_append(msg.sender)

    def _maybe_commit(self) -> None:
        if self._role is not Role.LEADER:
            return
        voters = self._config.voters
        matches = sorted(
            (self._durable if v == self.uuid else self._progress[v].match for v in voters),
            reverse=True,
        )
        n = matches[self._config.majority() - 1]
        if n > self._commit and self.term_at(n) == self._term:
            self._commit = n
            for r in self._pending_reads:
                if r.index is None:
                    r.index = n
            if not self._config.is_voter(self.uuid):
                self._hand_over_and_step_down()
                return
            for peer in list(self._progress):
                self._maybe_promote(peer)

    def _may_campaign(self) -> bool:
        """Voters of the newest config campaign, and so does a replica that an uncommitted
        entry demotes or removes: it may be the only one holding that entry, and then only
        it can be elected to commit it (Raft dissertation 4.2.2: a server outside its
        newest config may still lead; votes are counted in the newest config). Found by the
        simulator: seed 6 of 1500 steps deadlocked without this.
        Never on a server that is stopping (`stop_campaigning`)."""
        if self._leaving:
            return False
        if self._config.is_voter(self.uuid):
            return True
        # Any config this replica cannot rule out as the committed one: those above its
        # commit index, and the newest at or below it.
        for idx in reversed(self._config_indexes):
            cfg = self.entry(idx).config
            assert cfg is not None
            if cfg.is_voter(self.uuid):
                return True
            if idx <= self._commit:
                return False
        return self._base_config.is_voter(self.uuid)

    def _hand_over_and_step_down(self) -> None:
        """A leader outside its committed config: wake the most caught-up voter, leave."""
        caught_up = [
            v
            for v in self._config.voters
            if v in self._progress and self._progress[v].match == self.last_index
        ]
        if caught_up:
            self._send(TimeoutNow(self.tablet_id, self.uuid, max(caught_up), self._term))
        self._become_follower(self._term, None)

    def _maybe_promote(self, peer: str) -> None:
        m = self._config.member(peer)
        if m is None or not m.promote or m.member_type is not MemberType.NON_VOTER:
            return
        pr = self._progress[peer]
        if (
            pr.match >= self._commit
            and self._committed_in_term()
            and self._config_index <= self._commit
            and self._transfer_target is None
        ):
            new_cfg = self._config.with_member(Member(peer, MemberType.VOTER))
            if not self._config_keeps_quorum(new_cfg):
                return
            logger.debug("%s/%s promoting %s", self.tablet_id, self.uuid, peer)
            self._append_as_leader(EntryType.CONFIG, b"", new_cfg)

    def _healthy(self, uuid: str) -> bool:
        """Self, or a peer that answered OK within an election timeout and needs no copy."""
        if uuid == self.uuid:
            return True
        pr = self._progress.get(uuid)
        return (
            pr is not None
            and not pr.needs_copy
            and self._leader_ticks - pr.heard_tick <= self._opts.election_timeout_ticks
        )

    def _config_keeps_quorum(self, new_cfg: RaftConfig) -> bool:
        """etcd's strict reconfig check: a change is refused when the voters of the new
        config that are healthy now would not form its majority (adding a voter that does
        not exist yet while another is down would make the tablet unavailable)."""
        healthy = sum(1 for v in new_cfg.voters if self._healthy(v))
        return healthy >= new_cfg.majority()

    def _maybe_timeout_now(self, peer: str) -> None:
        if self._transfer_target != peer:
            return
        if self._progress[peer].match == self.last_index:
            self._send(TimeoutNow(self.tablet_id, self.uuid, peer, self._term))

    def _transfer_before_leaving(self) -> ProposeResult:
        candidates = [v for v in self._config.voters if v != self.uuid]
        if not candidates:
            return ProposeResult(
                ProposalStatus.ILLEGAL_STATE, message="the leader is the only voter"
            )
        best = max(
            candidates,
            key=lambda v: (v in self._recent_active, self._progress[v].match, v),
        )
        self.transfer_leadership(best)
        return ProposeResult(
            ProposalStatus.UNAVAILABLE,
            leader_hint=best,
            message=f"transferring leadership to {best} before removing the leader; retry there",
        )

    # ------------------------------------------------------------------ reads

    def _ready_reads_possible(self) -> bool:
        if not self._pending_reads:
            return False
        confirmed = self._confirmed_seq()
        return any(
            r.seq <= confirmed and r.index is not None and r.index <= self._applied
            for r in self._pending_reads
        )

    def _confirmed_seq(self) -> int:
        acks = sorted(
            (
                _INFINITE_SEQ if v == self.uuid else self._read_acks.get(v, 0)
                for v in self._config.voters
            ),
            reverse=True,
        )
        return acks[self._config.majority() - 1]

    def _release_reads(self) -> None:
        if not self._pending_reads:
            return
        confirmed = self._confirmed_seq()
        keep = []
        for r in self._pending_reads:
            if r.seq <= confirmed and r.index is not None and r.index <= self._applied:
                self._reads_out.append(ReadResult(r.request_id, ProposalStatus.OK, r.index))
            else:
                keep.append(r)
        self._pending_reads = keep
