"""Client side of the coordinator protocol: leader discovery, request ids, bounded retries.

Knows every coordinator address. A call goes to the node believed to lead; NOT_LEADER with
a hint moves to the hinted address, NOT_LEADER without one (or an unreachable node) moves
to the next address; UNAVAILABLE / THROTTLED / TIMED_OUT back off with jitter. Everything
under one total deadline and a bounded number of attempts. Mutating requests carry a
request id (this client's id, a sequence number) that stays the same across retries, so a
retry after a lost answer or a failover returns the first execution's result.

Imports no server code: only the rpc client and the protocol messages.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Sequence

from coordinator import coordinator_pb2 as pb
from rpc.client import RpcClient, Transport
from rpc.errors import (
    BadRequest,
    IllegalState,
    NotLeader,
    RpcError,
    Throttled,
    TimedOut,
    Unavailable,
)

logger = logging.getLogger(__name__)

ATTEMPTS_MAX = 200
BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 0.25
HINT_HOPS_AT_ONCE = 2  # NOT_LEADER hints followed without a pause, in a row
# A node that failed to answer is not tried again on a hint for this long.
SUSPECT_S = 2.0
PING_TIMEOUT_S = 1.0
RETRYABLE = (Unavailable, Throttled, TimedOut)


class CoordinatorClient:
    """Thread-safe; a context manager."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        client_id: str = "",
        timeout_s: float = 30.0,
        call_timeout_s: float = 10.0,
    ) -> None:
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not addresses:
            raise ValueError("at least one coordinator address is needed")
        self.addresses = list(addresses)
        self.client_id = client_id or f"client-{uuidlib.uuid4().hex}"
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        self._transport = Transport()
        self._closed = False
        self._lock = threading.Lock()
        self._clients: dict[str, RpcClient] = {}
        self._uuids: dict[str, str] = {}
        self._leader = self.addresses[0]
        self._seq = 0
        self._suspect: dict[str, float] = {}  # address -> when it last failed to answer

    def close(self) -> None:
        self._closed = True
        self._transport.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalState("the coordinator client is closed")

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ requests

    def next_request_id(self) -> pb.RequestId:
        with self._lock:
            self._seq += 1
            return pb.RequestId(client_id=self.client_id, seq=self._seq)

    def create_table(
        self, name: str, schema: pb.Schema, num_tablets: int, replication_factor: int = 1
    ) -> str:
        request = pb.CreateTableRequest(
            request_id=self.next_request_id(),
            name=name,
            schema=schema,
            num_tablets=num_tablets,
            replication_factor=replication_factor,
        )
        return self.call("CreateTable", request, pb.CreateTableResponse).table_id

    def drop_table(self, name: str) -> str:
        request = pb.DropTableRequest(request_id=self.next_request_id(), name=name)
        return self.call("DropTable", request, pb.DropTableResponse).table_id

    def alter_table(
        self,
        name: str,
        *,
        new_name: str = "",
        add_columns: Sequence[pb.ColumnSchema] = (),
        drop_columns: Sequence[str] = (),
    ) -> pb.AlterTableResponse:
        request = pb.AlterTableRequest(
            request_id=self.next_request_id(),
            name=name,
            new_name=new_name,
            add_columns=list(add_columns),
            drop_columns=list(drop_columns),
        )
        return self.call("AlterTable", request, pb.AlterTableResponse)

    def list_tables(self) -> list[pb.TableSummary]:
        return list(self.call("ListTables", pb.ListTablesRequest(), pb.ListTablesResponse).tables)

    def describe_table(self, name: str) -> pb.DescribeTableResponse:
        return self.call(
            "DescribeTable", pb.DescribeTableRequest(name=name), pb.DescribeTableResponse
        )

    def get_tablet_locations(
        self, name: str = "", table_id: str = ""
    ) -> pb.GetTabletLocationsResponse:
        return self.call(
            "GetTabletLocations",
            pb.GetTabletLocationsRequest(name=name, table_id=table_id),
            pb.GetTabletLocationsResponse,
        )

    def list_servers(self) -> list[pb.ServerSummary]:
        return list(
            self.call("ListServers", pb.ListServersRequest(), pb.ListServersResponse).servers
        )

    def enlist_server(self, server_uuid: str, address: str) -> None:
        self.call(
            "EnlistServer",
            pb.EnlistServerRequest(server_uuid=server_uuid, address=address),
            pb.EnlistServerResponse,
        )

    def remove_server(self, server_uuid: str) -> None:
        request = pb.RemoveServerRequest(request_id=self.next_request_id(), server_uuid=server_uuid)
        self.call("RemoveServer", request, pb.RemoveServerResponse)

    def retire_server(self, server_uuid: str, *, cancel: bool = False) -> int:
        """Retire a tablet server (logged; `cancel`: end its retirement); returns the
        replicas still on it. Asking again (the same state) logs nothing."""
        request = pb.RetireServerRequest(
            request_id=self.next_request_id(), server_uuid=server_uuid, cancel=cancel
        )
        return self.call("RetireServer", request, pb.RetireServerResponse).replicas

    def heartbeat_all(self, request: pb.HeartbeatRequest, timeout_s: float = 1.0) -> bool:
        """Heartbeat to every node (architecture 4.5); True if the leader asks to enlist."""
        needs_enlist = False
        for address in self.addresses:
            try:
                response = self.call_at(
                    address, "Heartbeat", request, pb.HeartbeatResponse, timeout_s
                )
            except RpcError as e:
                logger.debug("heartbeat to %s failed: %s", address, e)
                continue
            needs_enlist |= response.is_leader and response.needs_enlist
        return needs_enlist

    def status(self, address: str, timeout_s: float = 2.0) -> pb.StatusResponse:
        return self.call_at(address, "Status", pb.StatusRequest(), pb.StatusResponse, timeout_s)

    def get_leader(self, address: str, timeout_s: float = 2.0) -> pb.GetLeaderResponse:
        return self.call_at(
            address, "GetLeader", pb.GetLeaderRequest(), pb.GetLeaderResponse, timeout_s
        )

    # ------------------------------------------------------------ the retry loop

    def call(self, method: str, request, response_type, timeout_s: float | None = None):
        """Call the leader, following hints and retrying under one total deadline."""
        self._check_open()  # not retried until the deadline: it stays closed
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        backoff_s = BACKOFF_INITIAL_S
        last: RpcError | None = None
        hops = 0  # hints followed at once since the last pause
        for _attempt in range(ATTEMPTS_MAX):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            address = self._leader  # one attribute read: no lock needed
            try:
                response = self.call_at(
                    address, method, request, response_type, min(remaining, self.call_timeout_s)
                )
                if self._suspect:
                    with self._lock:
                        self._suspect.pop(address, None)
                return response
            except NotLeader as e:
                last = e
                hinted = e.leader_hint.address
                with self._lock:
                    if hinted and hinted != address and not self._is_suspect(hinted):
                        self._leader = hinted
                        if hinted not in self.addresses:
                            self.addresses.append(hinted)
                        hops += 1
                        if hops <= HINT_HOPS_AT_ONCE:
                            continue  # follow the hint at once
                        # Nodes naming each other while an election settles: follow it
                        # after a pause, not round and round until the attempts run out.
                    else:
                        # No hint, or a hint at a node that just failed us (the followers
                        # still name the old leader until someone takes over): ask another.
                        self._rotate(address)
            except RETRYABLE as e:
                last = e
                with self._lock:
                    if not isinstance(e, Unavailable) or not e.retry_after_ms:
                        self._suspect[address] = time.monotonic()
                        self._rotate(address)  # unreachable: try another node
                self._forget(address)
            pause = max(backoff_s, (getattr(last, "retry_after_ms", 0) or 0) / 1000.0)
            pause *= random.uniform(0.5, 1.5)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
            hops = 0
            backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
        if last is None:  # the deadline passed before a first attempt could be made
            raise TimedOut(f"Coordinator.{method}: no time left for a first attempt")
        raise TimedOut(f"Coordinator.{method}: no leader answered in time (last error: {last})")

    def call_at(self, address: str, method: str, request, response_type, timeout_s: float):
        self._check_open()
        client, uuid = self._client(address, timeout_s)
        return client.call(
            uuid, f"Coordinator.{method}", request, response_type, timeout_s=timeout_s
        )

    def _client(self, address: str, timeout_s: float) -> tuple[RpcClient, str]:
        # The common case reads two dicts without the lock (single reads are atomic).
        client = self._clients.get(address)
        uuid = self._uuids.get(address)
        if client is not None and uuid is not None:
            return client, uuid
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = RpcClient(address, self.client_id, transport=self._transport)
                self._clients[address] = client
            uuid = self._uuids.get(address)
        if uuid is None:
            pong = client.ping(timeout_s=min(timeout_s, PING_TIMEOUT_S))
            if pong.service != "coordinator":
                raise BadRequest(
                    f"{address} is a {pong.service or 'unknown'} server, not a coordinator "
                    "node: give the coordinators' addresses"
                )
            uuid = pong.uuid
            with self._lock:
                self._uuids[address] = uuid
        return client, uuid

    def _forget(self, address: str) -> None:
        """A node that did not answer may have restarted with a new UUID."""
        with self._lock:
            self._uuids.pop(address, None)

    def _is_suspect(self, address: str) -> bool:
        failed_at = self._suspect.get(address)
        return failed_at is not None and time.monotonic() - failed_at < SUSPECT_S

    def _rotate(self, address: str) -> None:
        """Move to the next address, preferring nodes that have not just failed."""
        i = self.addresses.index(address) if address in self.addresses else -1
        n = len(self.addresses)
        candidates = [self.addresses[(i + k) % n] for k in range(1, n + 1)]
        fresh = [a for a in candidates if not self._is_suspect(a)]
        self._leader = (fresh or candidates)[0]
