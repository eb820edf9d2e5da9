"""`logstore serve`: one ReplicatedLogStore replica behind the project's zmq RPC layer.

Methods (logstore/logstore.proto): LogStore.Append, Read, LastId, Barrier, Status,
AddMember, RemoveMember. An append sent to any replica reaches the Raft leader (the replica
forwards it) and is answered once the serving replica has applied it. CONDITION_FAILED
answers carry a ConditionFailedDetail body with the log's current last id.

The server's UUID is created once and kept in `<data_dir>/uuid`, so a replica keeps its
name across restarts and a wiped data directory gets a new one (INVALID_NAME for callers
that still use the old name).
"""

from __future__ import annotations

import logging
import os
import uuid as uuidlib
from dataclasses import dataclass

from logstore import logstore_pb2 as pb
from logstore.api import LogConditionFailed
from logstore.journal import write_file_atomically
from logstore.replicated import ReplicaConfig, ReplicatedLogStore
from rpc.errors import BadRequest
from rpc.server import CallContext, RpcServer

logger = logging.getLogger(__name__)

SERVICE = "logstore"
UUID_FILE = "uuid"
# Handlers wait on Raft; leave the rpc layer a little time to send the answer.
DEADLINE_MARGIN_S = 0.05


def load_or_create_uuid(data_dir: str) -> str:
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, UUID_FILE)
    if os.path.exists(path):
        with open(path, encoding="ascii") as f:
            value = f.read().strip()
        if value:
            return value
    value = uuidlib.uuid4().hex
    write_file_atomically(path, value.encode("ascii") + b"\n")
    return value


@dataclass(frozen=True, slots=True)
class ServeConfig:
    raft_address: str
    peers: tuple[str, ...]
    data_dir: str
    rpc_bind: str = "127.0.0.1:0"
    password: str | None = None
    allow_insecure_dev: bool = False
    workers: int = 64
    queue_max: int = 1024
    replica: ReplicaConfig = ReplicaConfig()


def _timeout(ctx: CallContext) -> float:
    return max(0.01, ctx.remaining_s() - DEADLINE_MARGIN_S)


def _entry_pb(e) -> pb.EntryPB:
    return pb.EntryPB(id=e.id, data=e.data, invalidates=e.invalidates)


class LogStoreService:
    """The RPC handlers bound to one replica."""

    def __init__(self, store: ReplicatedLogStore, uuid: str) -> None:
        self.store = store
        self.uuid = uuid
        self.rpc_address = ""

    def register(self, server: RpcServer) -> None:
        server.register("LogStore.Append", pb.AppendRequest, self.append)
        server.register("LogStore.Read", pb.ReadRequest, self.read)
        server.register("LogStore.LastId", pb.LastIdRequest, self.last_id)
        server.register("LogStore.Barrier", pb.BarrierRequest, self.barrier)
        server.register("LogStore.Status", pb.StatusRequest, self.status)
        server.register("LogStore.AddMember", pb.MemberRequest, self.add_member)
        server.register("LogStore.RemoveMember", pb.MemberRequest, self.remove_member)
        server.register(
            "LogStore.TransferLeadership", pb.TransferLeadershipRequest, self.transfer_leadership
        )

    def append(self, req: pb.AppendRequest, ctx: CallContext) -> pb.AppendResponse:
        expected = req.expected_id if req.HasField("expected_id") else None
        try:
            new_id = self.store.append(
                req.log, req.data, expected, tuple(req.invalidates), timeout_s=_timeout(ctx)
            )
        except LogConditionFailed as err:
            raise LogConditionFailed(
                err.message,
                last_id=err.last_id,
                body=pb.ConditionFailedDetail(last_id=err.last_id).SerializeToString(),
            ) from None
        return pb.AppendResponse(id=new_id)

    def read(self, req: pb.ReadRequest, ctx: CallContext) -> pb.ReadResponse:
        entries = self.store.read(req.log, max(1, req.from_id), req.limit or 1000)
        return pb.ReadResponse(entries=[_entry_pb(e) for e in entries])

    def last_id(self, req: pb.LastIdRequest, ctx: CallContext) -> pb.LastIdResponse:
        return pb.LastIdResponse(last_id=self.store.last_id(req.log))

    def barrier(self, req: pb.BarrierRequest, ctx: CallContext) -> pb.BarrierResponse:
        self.store.barrier(timeout_s=_timeout(ctx))
        return pb.BarrierResponse()

    def status(self, req: pb.StatusRequest, ctx: CallContext) -> pb.StatusResponse:
        s = self.store.status()
        return pb.StatusResponse(
            uuid=self.uuid,
            rpc_address=self.rpc_address,
            raft_address=s["address"],
            role=s["role"],
            leader=s["leader"] or "",
            term=s["term"],
            commit_index=s["commit_index"],
            applied_index=s["applied_index"],
            members=s["members"],
            connected=s["connected"],
            last_log_index=s["last_log_index"],
            last_log_term=s["last_log_term"],
            journal_entries=s["journal_entries"],
            journal_first_index=s["journal_first_index"],
            journal_bytes=s["journal_bytes"],
            journal_syncs=s["journal_syncs"],
            snapshot_bytes=s["snapshot_bytes"],
            snapshots_loaded=s["snapshots_loaded"],
            live_entries=s["live_entries"],
            live_bytes=s["live_bytes"],
            logs=[pb.LogLastId(log=k, last_id=v) for k, v in s["logs"].items()],
        )

    def add_member(self, req: pb.MemberRequest, ctx: CallContext) -> pb.MemberResponse:
        if not req.raft_address:
            raise BadRequest("raft_address is required")
        self.store.add_member(req.raft_address, timeout_s=_timeout(ctx))
        return pb.MemberResponse()

    def remove_member(self, req: pb.MemberRequest, ctx: CallContext) -> pb.MemberResponse:
        if not req.raft_address:
            raise BadRequest("raft_address is required")
        self.store.remove_member(req.raft_address, timeout_s=_timeout(ctx))
        return pb.MemberResponse()

    def transfer_leadership(
        self, req: pb.TransferLeadershipRequest, ctx: CallContext
    ) -> pb.TransferLeadershipResponse:
        leader = self.store.transfer_leadership(req.raft_address or None, timeout_s=_timeout(ctx))
        return pb.TransferLeadershipResponse(leader=leader)


class LogStoreServer:
    """A replica plus its RPC server; a context manager. Create it on the main thread."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.uuid = load_or_create_uuid(config.data_dir)
        self.store = ReplicatedLogStore(
            config.raft_address,
            list(config.peers),
            config.data_dir,
            config.password,
            allow_insecure_dev=config.allow_insecure_dev,
            config=config.replica,
        )
        try:
            self.service = LogStoreService(self.store, self.uuid)
            self.rpc = RpcServer(
                self.uuid,
                bind=config.rpc_bind,
                service=SERVICE,
                workers=config.workers,
                queue_max=config.queue_max,
            )
            self.service.register(self.rpc)
            self.rpc.start()
            self.service.rpc_address = self.rpc.address
        except BaseException:
            self.store.close()
            raise

    @property
    def address(self) -> str:
        return self.rpc.address

    def close(self) -> None:
        try:
            self.rpc.close()
        finally:
            self.store.close()

    def __enter__(self) -> LogStoreServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
