"""Protobuf mapping of the per-tablet Raft values (tservers/consensus/types.py).

Pure functions, no state: log entries <-> LogEntryPB (the WAL record and the wire format are
the same message), configs <-> RaftConfigPB, and the five Raft messages <-> ConsensusMessagePB
(design/consensus.md, "Wire format"). A WRITE entry's payload is a serialized WriteOpPB.

This is also the edge of consensus: `decode_request` range-checks every field of every
message of a TServer.Consensus batch (ids, addresses, terms, indexes, counts, entries and
their configs) before anything reaches the driver, so that nothing out of bounds reaches the
core, the WAL or the consensus metadata (design/consensus.md, "Bounds"). `check_uuid`,
`check_address` and `check_config_pb` serve the other consensus and tablet copy handlers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rpc.addresses import PORT_MAX
from rpc.protocols.tserver_pb2 import (
    AppendRequestPB,
    AppendResponsePB,
    ConsensusMessagePB,
    ConsensusMetaPB,
    ConsensusRequest,
    LogEntryPB,
    OpType,
    RaftConfigPB,
    ReplicaStatusPB,
    TimeoutNowPB,
    VoteRequestPB,
    VoteResponsePB,
    WriteOpPB,
)
from rpc.protocols.tserver_pb2 import EntryType as EntryTypePB
from rpc.protocols.tserver_pb2 import MemberType as MemberTypePB
from tservers.consensus.types import (
    INDEX_MAX,
    TERM_MAX,
    AppendRequest,
    AppendResponse,
    Entry,
    EntryType,
    HardState,
    Member,
    MemberType,
    Message,
    RaftConfig,
    ReplicaStatus,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)


class WireError(ValueError):
    """A message that does not decode into a valid Raft value (answered BAD_REQUEST)."""


# ------------------------------------------------------------------ bounds of the wire
# Terms and indexes: TERM_MAX and INDEX_MAX (tservers/consensus/types.py).
READ_SEQ_MAX = INDEX_MAX
# Messages in one TServer.Consensus batch: the driver sends at most 256.
BATCH_MESSAGES_MAX = 1024
# Entries in one AppendRequest: the core sends at most RaftOptions.append_entries_max (64).
APPEND_ENTRIES_MAX = 4096
CONFIG_PEERS_MAX = 64  # members of one config (replication factors are single digits)
WRITE_BLOCKS_MAX = 64  # row blocks of one replicated write (TServer.Write takes 64)
ID_CHARS_MAX = 64
ADDRESS_CHARS_MAX = 255
# Server uuids: `tserver fs format` makes 32 hex digits; --uuid may name any of these.
UUID_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
TABLET_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")  # as tservers.tablet.replica_files
_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9_.\-]{1,253})$")


def check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise WireError(f"{what} {value} out of range {low}..{high}")


def check_uuid(what: str, uuid: str) -> None:
    """A server uuid: 1-64 of A-Z a-z 0-9 _ . -"""
    if not UUID_RE.match(uuid):
        raise WireError(f"{what} {uuid[: ID_CHARS_MAX + 1]!r} is not a server uuid")


def check_tablet_id(tablet_id: str) -> None:
    if not TABLET_ID_RE.match(tablet_id):
        raise WireError(f"tablet id {tablet_id[: ID_CHARS_MAX + 1]!r} is not one")


def check_address(what: str, address: str) -> None:
    """host:port (or tcp://host:port) with a real port, as rpc.addresses takes it."""
    text = address.removeprefix("tcp://")
    host, sep, port = text.rpartition(":")
    if (
        len(address) > ADDRESS_CHARS_MAX
        or not sep
        or not _HOST_RE.match(host)
        or not port.isdigit()
        or len(port) > 5
        or not 1 <= int(port) <= PORT_MAX
    ):
        raise WireError(f"{what} {address[: ADDRESS_CHARS_MAX + 1]!r} is not host:port")


def check_config_pb(pb: RaftConfigPB, what: str = "config") -> None:
    """Every field of a config from the wire: its index, peer count, ids, addresses, types."""
    check_range(f"{what} opid_index", pb.opid_index, -1, INDEX_MAX)
    if len(pb.peers) > CONFIG_PEERS_MAX:
        raise WireError(f"{what} has {len(pb.peers)} peers, at most {CONFIG_PEERS_MAX}")
    for p in pb.peers:
        check_uuid(f"{what} peer", p.uuid)
        if p.address:
            check_address(f"{what} peer {p.uuid} address", p.address)
        if p.member_type not in _MEMBER_FROM_PB:
            raise WireError(f"{what} peer {p.uuid} has member type {p.member_type}")


_MEMBER_TO_PB = {MemberType.VOTER: MemberTypePB.VOTER, MemberType.NON_VOTER: MemberTypePB.NON_VOTER}
_MEMBER_FROM_PB = {v: k for k, v in _MEMBER_TO_PB.items()}
_STATUS_TO_PB = {
    ReplicaStatus.OK: ReplicaStatusPB.REPLICA_OK,
    ReplicaStatus.TABLET_NOT_FOUND: ReplicaStatusPB.REPLICA_TABLET_NOT_FOUND,
    ReplicaStatus.TABLET_DELETED: ReplicaStatusPB.REPLICA_TABLET_DELETED,
    ReplicaStatus.TABLET_FAILED: ReplicaStatusPB.REPLICA_TABLET_FAILED,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}


# ------------------------------------------------------------------ configs


def config_to_pb(config: RaftConfig, opid_index: int, addresses: Mapping[str, str]) -> RaftConfigPB:
    pb = RaftConfigPB(opid_index=opid_index)
    for m in config.members:
        pb.peers.add(
            uuid=m.uuid,
            address=addresses.get(m.uuid, ""),
            member_type=_MEMBER_TO_PB[m.member_type],
            promote=m.promote,
        )
    return pb


def config_from_pb(pb: RaftConfigPB) -> RaftConfig:
    members = []
    for p in pb.peers:
        if not p.uuid:
            raise WireError("config peer without uuid")
        mt = _MEMBER_FROM_PB.get(p.member_type)
        if mt is None:
            raise WireError(f"config peer {p.uuid} has no member type")
        if p.promote and mt is not MemberType.NON_VOTER:
            raise WireError(f"config peer {p.uuid}: promote needs NON_VOTER")
        members.append(Member(p.uuid, mt, p.promote))
    if len({m.uuid for m in members}) != len(members):
        raise WireError("config names a peer twice")
    return RaftConfig(tuple(sorted(members, key=lambda m: m.uuid)))


def peer_addresses(pb: RaftConfigPB) -> dict[str, str]:
    return {p.uuid: p.address for p in pb.peers if p.address}


# ------------------------------------------------------------------ entries


def entry_to_pb(e: Entry, addresses: Mapping[str, str] | None = None) -> LogEntryPB:
    pb = LogEntryPB(term=e.term, index=e.index)
    if e.entry_type is EntryType.WRITE:
        pb.type = EntryTypePB.WRITE
        pb.write.ParseFromString(e.payload)
    elif e.entry_type is EntryType.NOOP:
        pb.type = EntryTypePB.NO_OP
    else:
        assert e.config is not None
        pb.type = EntryTypePB.CONFIG_CHANGE
        pb.config.CopyFrom(config_to_pb(e.config, e.index, addresses or {}))
    return pb


def entry_from_pb(pb: LogEntryPB) -> Entry:
    if pb.term < 1 or pb.index < 1:
        raise WireError(f"log entry with op id {pb.term}.{pb.index}")
    if pb.type == EntryTypePB.WRITE:
        return Entry(pb.term, pb.index, EntryType.WRITE, pb.write.SerializeToString())
    if pb.type == EntryTypePB.NO_OP:
        return Entry(pb.term, pb.index, EntryType.NOOP)
    if pb.type == EntryTypePB.CONFIG_CHANGE:
        return Entry(pb.term, pb.index, EntryType.CONFIG, b"", config_from_pb(pb.config))
    raise WireError(f"log entry {pb.term}.{pb.index} has unknown type {pb.type}")


def write_payload(op: WriteOpPB) -> bytes:
    return op.SerializeToString()


# ------------------------------------------------------------------ the edge
def _check_entry_pb(pb: LogEntryPB, term: int) -> None:
    """An entry of an AppendRequest of `term`: op id in range and no newer than the
    leader's term; its body of its type and nothing else."""
    check_range("entry term", pb.term, 1, term)
    check_range("entry index", pb.index, 1, INDEX_MAX)
    has_write, has_config = pb.HasField("write"), pb.HasField("config")
    if pb.type == EntryTypePB.WRITE:
        if has_config or not has_write:
            raise WireError(f"WRITE entry {pb.term}.{pb.index} without a write or with a config")
        if len(pb.write.blocks) > WRITE_BLOCKS_MAX:
            raise WireError(
                f"WRITE entry {pb.term}.{pb.index} has {len(pb.write.blocks)} blocks, "
                f"at most {WRITE_BLOCKS_MAX}"
            )
        for b in pb.write.blocks:
            if b.op not in (OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE):
                raise WireError(f"WRITE entry {pb.term}.{pb.index}: unknown operation {b.op}")
    elif pb.type == EntryTypePB.NO_OP:
        if has_write or has_config:
            raise WireError(f"NO_OP entry {pb.term}.{pb.index} has a body")
    elif pb.type == EntryTypePB.CONFIG_CHANGE:
        if has_write or not has_config:
            raise WireError(f"CONFIG entry {pb.term}.{pb.index} without a config or with a write")
        check_config_pb(pb.config, f"config of entry {pb.term}.{pb.index}")
        if not any(p.member_type == MemberTypePB.VOTER for p in pb.config.peers):
            raise WireError(f"config of entry {pb.term}.{pb.index} has no voter")
    else:
        raise WireError(f"log entry {pb.term}.{pb.index} has unknown type {pb.type}")


def check_message_pb(pb: ConsensusMessagePB) -> None:
    """Range-check every field of one Raft message from the wire (design/consensus.md,
    "Bounds"); raises WireError naming the first bad one."""
    check_tablet_id(pb.tablet_id)
    check_uuid("sender", pb.sender)
    check_uuid("recipient", pb.recipient)
    if pb.sender == pb.recipient:
        raise WireError(f"message from {pb.sender} to itself")
    if pb.sender_address:
        check_address("sender_address", pb.sender_address)
    kind = pb.WhichOneof("kind")
    # Requests carry the sender's term (at least 1); answers may carry 0 (a server without
    # the replica answers a vote with term 0).
    low = 0 if kind in ("vote_response", "append_response") else 1
    check_range("term", pb.term, low, TERM_MAX)
    if kind == "vote_request":
        v = pb.vote_request
        check_range("last_log_term", v.last_log_term, 0, pb.term)
        check_range("last_log_index", v.last_log_index, 0, INDEX_MAX)
    elif kind == "vote_response":
        if pb.vote_response.status not in _STATUS_FROM_PB:
            raise WireError(f"vote response status {pb.vote_response.status}")
    elif kind == "append_request":
        a = pb.append_request
        check_range("prev_log_index", a.prev_log_index, 0, INDEX_MAX)
        check_range("prev_log_term", a.prev_log_term, 0, pb.term)
        if len(a.entries) > APPEND_ENTRIES_MAX:
            raise WireError(f"{len(a.entries)} entries, at most {APPEND_ENTRIES_MAX}")
        check_range("last entry index", a.prev_log_index + len(a.entries), 0, INDEX_MAX)
        check_range("leader_commit", a.leader_commit, 0, INDEX_MAX)
        check_range("read_seq", a.read_seq, 0, READ_SEQ_MAX)
        if a.quiesce and a.entries:
            raise WireError("a quiesce heartbeat with entries")
        last_term = a.prev_log_term
        for e in a.entries:
            _check_entry_pb(e, pb.term)
            if e.term < last_term:  # a log's terms never go down
                raise WireError(f"entry {e.term}.{e.index} after an entry of term {last_term}")
            last_term = e.term
    elif kind == "append_response":
        a = pb.append_response
        check_range("match_index", a.match_index, 0, INDEX_MAX)
        check_range("reject_index", a.reject_index, 0, INDEX_MAX)
        check_range("hint_index", a.hint_index, 0, INDEX_MAX)
        check_range("read_seq", a.read_seq, 0, READ_SEQ_MAX)
        if a.status not in _STATUS_FROM_PB:
            raise WireError(f"append response status {a.status}")
        if a.success and a.status != ReplicaStatusPB.REPLICA_OK:
            raise WireError("a successful append response with a replica status")
    elif kind != "timeout_now":
        raise WireError(f"consensus message of unknown kind {kind!r}")


def decode_request(req: ConsensusRequest) -> tuple[list[Message], dict[str, str]]:
    """The messages of a TServer.Consensus batch and their senders' addresses, every field
    checked. Raises WireError (BAD_REQUEST: nothing is delivered) for a batch too long or
    any bad message; a message for another server is the caller's check (INVALID_NAME)."""
    if len(req.messages) > BATCH_MESSAGES_MAX:
        raise WireError(f"{len(req.messages)} messages in one batch, at most {BATCH_MESSAGES_MAX}")
    msgs: list[Message] = []
    addresses: dict[str, str] = {}
    for pb in req.messages:
        check_message_pb(pb)
        msgs.append(message_from_pb(pb))
        if pb.sender_address:
            addresses[pb.sender] = pb.sender_address
    return msgs, addresses


# ------------------------------------------------------------------ messages


def message_to_pb(msg: Message, sender_address: str) -> ConsensusMessagePB:
    pb = ConsensusMessagePB(
        tablet_id=msg.tablet_id,
        sender=msg.sender,
        recipient=msg.recipient,
        term=msg.term,
        sender_address=sender_address,
    )
    if isinstance(msg, AppendRequest):
        pb.append_request.CopyFrom(
            AppendRequestPB(
                prev_log_index=msg.prev_log_index,
                prev_log_term=msg.prev_log_term,
                entries=[entry_to_pb(e) for e in msg.entries],
                leader_commit=msg.leader_commit,
                read_seq=msg.read_seq,
                quiesce=msg.quiesce,
            )
        )
    elif isinstance(msg, AppendResponse):
        pb.append_response.CopyFrom(
            AppendResponsePB(
                success=msg.success,
                match_index=msg.match_index,
                reject_index=msg.reject_index,
                hint_index=msg.hint_index,
                read_seq=msg.read_seq,
                status=_STATUS_TO_PB[msg.status],
            )
        )
    elif isinstance(msg, VoteRequest):
        pb.vote_request.CopyFrom(
            VoteRequestPB(
                last_log_term=msg.last_log_term,
                last_log_index=msg.last_log_index,
                pre_vote=msg.pre_vote,
                leadership_transfer=msg.leadership_transfer,
            )
        )
    elif isinstance(msg, VoteResponse):
        pb.vote_response.CopyFrom(
            VoteResponsePB(
                granted=msg.granted, pre_vote=msg.pre_vote, status=_STATUS_TO_PB[msg.status]
            )
        )
    elif isinstance(msg, TimeoutNow):
        pb.timeout_now.CopyFrom(TimeoutNowPB())
    else:  # pragma: no cover - exhaustive
        raise AssertionError(f"unknown message {msg!r}")
    return pb


def message_from_pb(pb: ConsensusMessagePB) -> Message:
    if not pb.tablet_id or not pb.sender or not pb.recipient:
        raise WireError("consensus message without tablet, sender or recipient")
    head = (pb.tablet_id, pb.sender, pb.recipient, pb.term)
    kind = pb.WhichOneof("kind")

    def status(value: int, _default: ReplicaStatus) -> ReplicaStatus:
        st = _STATUS_FROM_PB.get(value)
        if st is None:
            raise WireError(f"unknown replica status {value}")
        return st

    if kind == "append_request":
        a = pb.append_request
        entries = tuple(entry_from_pb(e) for e in a.entries)
        for i, e in enumerate(entries):
            if e.index != a.prev_log_index + 1 + i:
                raise WireError("append request entries are not contiguous after prev_log_index")
        return AppendRequest(
            *head,
            prev_log_index=a.prev_log_index,
            prev_log_term=a.prev_log_term,
            entries=entries,
            leader_commit=a.leader_commit,
            read_seq=a.read_seq,
            quiesce=a.quiesce,
        )
    if kind == "append_response":
        a = pb.append_response
        return AppendResponse(
            *head,
            success=a.success,
            match_index=a.match_index,
            reject_index=a.reject_index,
            hint_index=a.hint_index,
            read_seq=a.read_seq,
            status=status(a.status, ReplicaStatus.OK),
        )
    if kind == "vote_request":
        v = pb.vote_request
        return VoteRequest(
            *head,
            last_log_term=v.last_log_term,
            last_log_index=v.last_log_index,
            pre_vote=v.pre_vote,
            leadership_transfer=v.leadership_transfer,
        )
    if kind == "vote_response":
        v = pb.vote_response
        return VoteResponse(
            *head, granted=v.granted, pre_vote=v.pre_vote, status=status(v.status, ReplicaStatus.OK)
        )
    if kind == "timeout_now":
        return TimeoutNow(*head)
    raise WireError(f"consensus message of unknown kind {kind!r}")


def hard_state_meta(cmeta: ConsensusMetaPB, hs: HardState) -> ConsensusMetaPB:
    """`cmeta` with the term and vote of `hs` (a copy)."""
    cm = ConsensusMetaPB()
    cm.CopyFrom(cmeta)
    cm.current_term = hs.term
    cm.voted_for = hs.voted_for or ""
    return cm
