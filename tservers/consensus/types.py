"""Values exchanged with the pure per-tablet Raft core (tservers/consensus/raft_core.py).

Everything here is a frozen slotted dataclass or an enum: log entries, member configs,
the five Raft messages (each naming its tablet, sender and recipient UUID), and the Ready
value the core hands to its driver. The driver contract is in design/consensus.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

# Bounds of every term and index a replica holds, sends or accepts (design/consensus.md,
# "Bounds"). Below 2^62: far below what the uint64 fields of the wire and of the WAL and
# consensus metadata hold (and int64, for tools that read them as signed), so that
# `TERM_MAX + 1` and sums of an index and a count never overflow anything.
TERM_MAX = (1 << 62) - 1
INDEX_MAX = (1 << 62) - 1
# A replica adopts a higher term only from a voter of a config it knows, and at most this
# far above its own term: a term that far ahead is no plausible Raft term (it takes one
# election per term, at least an election timeout each: 2^20 terms is 12 days of elections
# every second), but it is what a member gone wrong sends. With this step, reaching
# TERM_MAX would take 2^42 adopted (fsynced) jumps.
TERM_JUMP_MAX = 1 << 20


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    # A tombstoned (DELETED) replica: no log, votes using its last op id, never campaigns.
    VOTE_ONLY = "VOTE_ONLY"


class MemberType(enum.Enum):
    VOTER = "VOTER"
    NON_VOTER = "NON_VOTER"


class EntryType(enum.Enum):
    NOOP = "NOOP"
    WRITE = "WRITE"
    CONFIG = "CONFIG"


class ReplicaStatus(enum.Enum):
    """What a recipient replica is; TABLET_NOT_FOUND and TABLET_DELETED answers make the
    leader ask for a tablet copy."""

    OK = "OK"
    TABLET_NOT_FOUND = "TABLET_NOT_FOUND"  # DOES_NOT_EXIST: no superblock
    TABLET_DELETED = "TABLET_DELETED"  # tombstoned
    # READY but FAILED (bootstrap or runtime): no copy is asked for. Its log cannot be
    # trusted to vote, so it is not deleted or copied over by the leader; the coordinator
    # replaces it like a replica on a dead server, then deletes it.
    TABLET_FAILED = "TABLET_FAILED"


class ProposalStatus(enum.Enum):
    """Outcome of a proposal / config change / transfer request; names match rpc StatusCode."""

    OK = "OK"
    NOT_LEADER = "NOT_LEADER"
    CAS_FAILED = "CAS_FAILED"
    ALREADY_IN_PROGRESS = "ALREADY_IN_PROGRESS"  # another config change is pending
    ILLEGAL_STATE = "ILLEGAL_STATE"
    UNAVAILABLE = "UNAVAILABLE"  # retry later: no commit in own term yet, transfer running
    THROTTLED = "THROTTLED"  # too many uncommitted entries
    BAD_REQUEST = "BAD_REQUEST"


class ConfigChangeType(enum.Enum):
    ADD_MEMBER = "ADD_MEMBER"
    REMOVE_MEMBER = "REMOVE_MEMBER"
    CHANGE_MEMBER_TYPE = "CHANGE_MEMBER_TYPE"


class CopyReason(enum.Enum):
    TABLET_NOT_FOUND = "TABLET_NOT_FOUND"
    TABLET_DELETED = "TABLET_DELETED"
    LOG_COMPACTED = "LOG_COMPACTED"  # the peer needs entries below the leader's first index


@dataclass(frozen=True, slots=True)
class OpId:
    term: int
    index: int


@dataclass(frozen=True, slots=True)
class Member:
    uuid: str
    member_type: MemberType
    # The seed's PRE_VOTER: a NON_VOTER the leader promotes once it has caught up.
    promote: bool = False


@dataclass(frozen=True, slots=True)
class RaftConfig:
    members: tuple[Member, ...]

    def __post_init__(self) -> None:
        uuids = [m.uuid for m in self.members]
        assert len(uuids) == len(set(uuids)), f"duplicate member in {uuids}"
        for m in self.members:
            assert not (m.promote and m.member_type is MemberType.VOTER), m

    @staticmethod
    def of_voters(*uuids: str) -> RaftConfig:
        return RaftConfig(tuple(Member(u, MemberType.VOTER) for u in uuids))

    def member(self, uuid: str) -> Member | None:
        for m in self.members:
            if m.uuid == uuid:
                return m
        return None

    def is_voter(self, uuid: str) -> bool:
        m = self.member(uuid)
        return m is not None and m.member_type is MemberType.VOTER

    @property
    def voters(self) -> tuple[str, ...]:
        return tuple(m.uuid for m in self.members if m.member_type is MemberType.VOTER)

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(m.uuid for m in self.members)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def with_member(self, member: Member) -> RaftConfig:
        rest = tuple(m for m in self.members if m.uuid != member.uuid)
        return RaftConfig(tuple(sorted(rest + (member,), key=lambda m: m.uuid)))

    def without(self, uuid: str) -> RaftConfig:
        return RaftConfig(tuple(m for m in self.members if m.uuid != uuid))


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    entry_type: EntryType
    payload: bytes = b""
    config: RaftConfig | None = None  # set exactly for CONFIG entries

    def __post_init__(self) -> None:
        assert self.term >= 1 and self.index >= 1, (self.term, self.index)
        assert (self.config is not None) == (self.entry_type is EntryType.CONFIG), self

    @property
    def op_id(self) -> OpId:
        return OpId(self.term, self.index)


@dataclass(frozen=True, slots=True)
class HardState:
    """Consensus metadata that must be durable before any message depending on it is sent."""

    term: int
    voted_for: str | None


@dataclass(frozen=True, slots=True)
class ConfigChange:
    change_type: ConfigChangeType
    uuid: str
    member_type: MemberType = MemberType.VOTER  # for ADD_MEMBER / CHANGE_MEMBER_TYPE
    promote: bool = False


# --- messages: every one names the tablet, the sender and the recipient server UUID ---


@dataclass(frozen=True, slots=True)
class VoteRequest:
    tablet_id: str
    sender: str
    recipient: str
    term: int  # the term the candidate will use (pre-vote: current term + 1, not adopted yet)
    last_log_term: int
    last_log_index: int
    pre_vote: bool = False
    leadership_transfer: bool = False  # sent after TimeoutNow: ignores leader stickiness


@dataclass(frozen=True, slots=True)
class VoteResponse:
    tablet_id: str
    sender: str
    recipient: str
    term: int
    granted: bool
    pre_vote: bool = False
    status: ReplicaStatus = ReplicaStatus.OK


@dataclass(frozen=True, slots=True)
class AppendRequest:
    tablet_id: str
    sender: str
    recipient: str
    term: int
    prev_log_index: int
    prev_log_term: int
    entries: tuple[Entry, ...]
    leader_commit: int
    read_seq: int = 0  # echoed back; confirms leadership for read-index
    # The leader's last heartbeat before it goes quiet (design/consensus.md, "Quiet
    # groups"): a follower whose log ends at prev_log_index = leader_commit stops its
    # election timer until any other message or its leader's server is declared dead.
    quiesce: bool = False


@dataclass(frozen=True, slots=True)
class AppendResponse:
    tablet_id: str
    sender: str
    recipient: str
    term: int
    success: bool
    # success: the follower's log matches the leader's up to match_index (and is durable
    # once this response is sent). failure: the request's prev_log_index that did not match
    # (reject_index) and the follower's hint of its last possibly matching index.
    match_index: int = 0
    reject_index: int = 0
    hint_index: int = 0
    read_seq: int = 0
    status: ReplicaStatus = ReplicaStatus.OK


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the recipient campaigns at once (no pre-vote, no stickiness)."""

    tablet_id: str
    sender: str
    recipient: str
    term: int


Message = VoteRequest | VoteResponse | AppendRequest | AppendResponse | TimeoutNow


# --- outputs ---


@dataclass(frozen=True, slots=True)
class SoftState:
    role: Role
    leader_uuid: str | None
    term: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A read-index request is done: serve the read once `read_index` has been applied
    (the core only releases it after handing out the committed entries up to it)."""

    request_id: int
    status: ProposalStatus
    read_index: int = 0
    leader_hint: str | None = None


@dataclass(frozen=True, slots=True)
class TabletCopyRequest:
    """Start (or retry) a tablet copy onto `peer_uuid`; the driver sends StartTabletCopy
    with backoff. `leader_term` is the caller term the seed's follower check needs."""

    tablet_id: str
    peer_uuid: str
    leader_term: int
    reason: CopyReason


@dataclass(frozen=True, slots=True)
class ProposeResult:
    status: ProposalStatus
    index: int = 0
    term: int = 0
    leader_hint: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Ready:
    """What the driver must do, in this order (see design/consensus.md):
    1. persist hard_state (if not None) and fsync it;
    2. drop every stored log entry with index >= entries[0].index, then append entries, durably;
    3. only then send messages (they may depend on 1 and 2), and call core.persisted();
    4. apply committed_entries in order, then serve reads;
    5. start/retry copy_requests. Readies are handled strictly in the order they were made.
    The one allowed shortcut (a leader's AppendRequests before its own entries are durable,
    once every hard state so far is durable) is described in design/consensus.md.
    """

    hard_state: HardState | None = None
    entries: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    committed_entries: tuple[Entry, ...] = ()
    soft_state: SoftState | None = None
    reads: tuple[ReadResult, ...] = ()
    copy_requests: tuple[TabletCopyRequest, ...] = ()

    def is_empty(self) -> bool:
        return not (
            self.hard_state
            or self.entries
            or self.messages
            or self.committed_entries
            or self.soft_state
            or self.reads
            or self.copy_requests
        )


@dataclass(frozen=True, slots=True)
class PeerProgress:
    uuid: str
    match_index: int
    next_index: int
    needs_copy: bool


@dataclass(frozen=True, slots=True)
class CoreStatus:
    """A snapshot for tablet reports and the driver (WAL retention, metrics)."""

    uuid: str
    tablet_id: str
    role: Role
    term: int
    voted_for: str | None
    leader_uuid: str | None
    commit_index: int
    applied_index: int
    first_index: int
    last_op_id: OpId
    config: RaftConfig
    config_index: int
    committed_config: RaftConfig
    committed_config_index: int
    peers: tuple[PeerProgress, ...] = field(default=())
