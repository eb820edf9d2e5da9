"""Protobuf mapping of the per-tablet Raft values (tservers/consensus/types.py).

Pure functions, no state: log entries <-> LogEntryPB (the WAL record and the wire format are
the same message), configs <-> RaftConfigPB, and the five Raft messages <-> ConsensusMessagePB
(design/consensus.md, "Wire format"). A WRITE entry's payload is a serialized WriteOpPB.
"""

from __future__ import annotations

from collections.abc import Mapping

from rpc.protocols.tserver_pb2 import (
    AppendRequestPB,
    AppendResponsePB,
    ConsensusMessagePB,
    LogEntryPB,
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
    AppendRequest,
    AppendResponse,
    Entry,
    EntryType,
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
    status = _STATUS_FROM_PB.get
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
