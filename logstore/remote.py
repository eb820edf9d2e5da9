"""RemoteLogStore: the LogStore protocol over zmq to `logstore serve` replicas.

The same interface as an embedded ReplicatedLogStore (logstore/api.py). Any replica accepts
appends (it forwards them to the Raft leader). Given several replica addresses, the client
moves to the next one when a replica is unreachable; it retries only what is safe to retry
(reads, last_id, barrier, and calls that surely never reached a replica). An append whose
outcome is unknown raises Unavailable/TimedOut: the caller decides (for example by reading
the log), because an unconditional append retried blindly could land twice.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence

from logstore import logstore_pb2 as pb
from logstore.api import READ_LIMIT_MAX, Entry, LogConditionFailed
from logstore.state import check_append_request
from rpc.client import NotConnected, RpcClient
from rpc.errors import (
    BadRequest,
    ConditionFailed,
    InvalidName,
    NotLeader,
    TimedOut,
    Unavailable,
)
from rpc.keys import ClientCurve

logger = logging.getLogger(__name__)

# Learning a replica's UUID is one ping that acts on nothing: each try gets a share of the
# call's deadline (at least this much), so that a dead or paused replica first in the list
# costs one share, not the whole deadline, before the next one is asked.
PING_ATTEMPT_MIN_S = 0.5


class RemoteLogStore:
    """Thread-safe; a context manager."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        caller_uuid: str = "",
        connect_timeout_s: float = 5.0,
        privileged_key: bytes | None = None,
        curve: ClientCurve | None = None,
        server_keys: Mapping[str, str] | None = None,
    ) -> None:
        """`privileged_key` (from the group's password) signs every call, as membership
        changes need (rpc/privileged.py). `curve` (a caller's key pair): CURVE to each
        address with its key in `server_keys` (address -> z85; none for an address: the
        call is refused unsent, NoServerKey)."""
        if isinstance(addresses, str):
            addresses = [a for a in addresses.split(",") if a]
        if not addresses:
            raise ValueError("RemoteLogStore needs at least one replica address")
        self._addresses = list(addresses)
        self._caller = caller_uuid or f"logstore-client-{uuidlib.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._clients: dict[str, RpcClient] = {}
        self._uuids: dict[str, str] = {}
        self._current = 0
        self._connect_timeout_s = connect_timeout_s
        self._privileged_key = privileged_key
        self._curve = curve
        self._server_keys = dict(server_keys or {})
        self._closed = False

    # --- LogStore protocol ----------------------------------------------------------------

    def append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
        timeout_s: float = 5.0,
    ) -> int:
        inv = [int(i) for i in invalidates]
        check_append_request(log, data, expected_id, inv)
        if any(i < 1 for i in inv):
            raise BadRequest("cannot invalidate an id below 1: no such entry")
        req = pb.AppendRequest(log=log, data=bytes(data), invalidates=inv)
        if expected_id is not None:
            if expected_id < 1:
                # No log ever has last_id + 1 < 1; answer like the store would.
                raise LogConditionFailed(
                    f"expected id {expected_id} is never the next id",
                    last_id=self.last_id(log, timeout_s),
                )
            req.expected_id = int(expected_id)
        try:
            resp = self._call("LogStore.Append", req, pb.AppendResponse, timeout_s, False)
        except ConditionFailed as err:
            detail = err.decode_body(pb.ConditionFailedDetail)
            raise LogConditionFailed(err.message, last_id=detail.last_id) from None
        return resp.id

    def read(
        self, log: str, from_id: int = 1, limit: int = 1000, timeout_s: float = 5.0
    ) -> list[Entry]:
        if limit <= 0 or limit > READ_LIMIT_MAX:
            raise BadRequest(f"limit must be 1..{READ_LIMIT_MAX}")
        req = pb.ReadRequest(log=log, from_id=max(1, int(from_id)), limit=limit)
        resp = self._call("LogStore.Read", req, pb.ReadResponse, timeout_s, True)
        return [Entry(e.id, bytes(e.data), tuple(e.invalidates)) for e in resp.entries]

    def last_id(self, log: str, timeout_s: float = 5.0) -> int:
        resp = self._call(
            "LogStore.LastId", pb.LastIdRequest(log=log), pb.LastIdResponse, timeout_s, True
        )
        return resp.last_id

    def barrier(self, timeout_s: float = 5.0) -> None:
        self._call("LogStore.Barrier", pb.BarrierRequest(), pb.BarrierResponse, timeout_s, True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
        for c in clients:
            c.close()

    def __enter__(self) -> RemoteLogStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- operations -----------------------------------------------------------------------

    def status(self, address: str | None = None, timeout_s: float = 5.0) -> pb.StatusResponse:
        """Status of one replica (the current one unless `address` names another)."""
        if address is None:
            return self._call(
                "LogStore.Status", pb.StatusRequest(), pb.StatusResponse, timeout_s, True
            )
        return self._call_at(
            address, "LogStore.Status", pb.StatusRequest(), pb.StatusResponse, timeout_s, True
        )

    def add_member(self, raft_address: str, timeout_s: float = 10.0) -> None:
        self._call(
            "LogStore.AddMember",
            pb.MemberRequest(raft_address=raft_address),
            pb.MemberResponse,
            timeout_s,
            False,
        )

    def remove_member(self, raft_address: str, timeout_s: float = 10.0) -> None:
        self._call(
            "LogStore.RemoveMember",
            pb.MemberRequest(raft_address=raft_address),
            pb.MemberResponse,
            timeout_s,
            False,
        )

    def transfer_leadership(self, raft_address: str | None = None, timeout_s: float = 10.0) -> str:
        """Ask every known replica in turn; the leader hands over. Returns the new leader's
        Raft address."""
        req = pb.TransferLeadershipRequest(raft_address=raft_address or "")
        last_err: Exception | None = None
        for address in self._addresses:
            try:
                resp = self._call_at(
                    address,
                    "LogStore.TransferLeadership",
                    req,
                    pb.TransferLeadershipResponse,
                    timeout_s,
                    False,
                )
                return resp.leader
            except (NotLeader, Unavailable, TimedOut) as err:
                last_err = err
        assert last_err is not None
        raise last_err

    # --- internals ------------------------------------------------------------------------

    def _client(self, address: str, timeout_s: float) -> tuple[RpcClient, str]:
        with self._lock:
            if self._closed:
                raise Unavailable("RemoteLogStore is closed")
            client = self._clients.get(address)
            if client is None:
                client = RpcClient(
                    address,
                    caller_uuid=self._caller,
                    privileged_key=self._privileged_key,
                    curve=ClientCurve(self._curve.keypair) if self._curve else None,
                    server_key=self._server_keys.get(address, "") if self._curve else "",
                )
                self._clients[address] = client
            uuid = self._uuids.get(address)
        if uuid is None:
            share_s = max(PING_ATTEMPT_MIN_S, timeout_s / len(self._addresses))
            ping_s = min(self._connect_timeout_s, timeout_s, share_s)
            # One attempt: the caller moves on to the next replica and comes back.
            uuid = client.ping(timeout_s=ping_s, idempotent=False).uuid
            with self._lock:
                self._uuids[address] = uuid
        return client, uuid

    def _call_at(self, address, method, req, resp_type, timeout_s, idempotent):
        client, uuid = self._client(address, timeout_s)
        try:
            return client.call(
                uuid, method, req, resp_type, timeout_s=timeout_s, idempotent=idempotent
            )
        except InvalidName:
            # The replica at this address was re-created with a new UUID; learn it again.
            with self._lock:
                self._uuids.pop(address, None)
            raise

    def _rotate_from(self, address: str) -> None:
        with self._lock:
            if self._addresses[self._current % len(self._addresses)] == address:
                self._current += 1

    def _call(self, method, req, resp_type, timeout_s: float, idempotent: bool):
        deadline = time.monotonic() + timeout_s
        last_err: Exception | None = None
        for _ in range(2 * len(self._addresses) + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with self._lock:
                address = self._addresses[self._current % len(self._addresses)]
            try:
                # Learning the UUID sends nothing that acts: always safe to move on.
                self._client(address, remaining)
            except (Unavailable, TimedOut) as err:
                last_err = err
                self._rotate_from(address)
                continue
            try:
                return self._call_at(address, method, req, resp_type, remaining, idempotent)
            except InvalidName as err:
                last_err = err  # refused unread: safe to send again
                continue
            except NotConnected as err:
                last_err = err  # never sent: safe at any replica, an append too
                self._rotate_from(address)
                logger.debug("%s: %s; trying the next replica", method, err)
            except (Unavailable, TimedOut) as err:
                # The next call starts at the next replica either way: this one may be dead.
                self._rotate_from(address)
                if not idempotent:
                    raise  # the append may have reached the replica
                last_err = err
                logger.debug("%s at %s failed (%s); trying the next replica", method, address, err)
        if last_err is not None:
            raise last_err
        raise TimedOut(f"{method}: no replica answered within {timeout_s}s")
