"""Client side of the coordinator protocol: leader discovery, request ids, bounded retries.

Knows every coordinator address. A call goes to the node believed to lead; NOT_LEADER with
a hint moves to the hinted address, NOT_LEADER without one (or an unreachable node) moves
to the next address; UNAVAILABLE / THROTTLED / TIMED_OUT back off with jitter. Everything
under one total deadline and a bounded number of attempts. A node that refuses this
client's key at the CURVE handshake (KeyRefused) may only lag behind the log (a follower
that has not replayed the principal's record yet): the call moves on to the nodes that have
not refused it, and fails with KeyRefused, naming the nodes, only once every node has
refused the key or not answered in this call (a revoked key is refused by every node).
Mutating requests carry a request id (this client's id, a sequence number) that stays the
same across retries, so a retry after a lost answer or a failover returns the first
execution's result.

A node that stops answering while its connection stays up (a hung or SIGSTOPped process)
is given up after its *patience* (`attempt_patience_s`): no answer and no answer to a ping
for that long. A node that answers pings is working, and is waited for up to the attempt's
whole timeout. `SilenceWatch` does this; the tablet-server client uses it too.

Imports no server code: only the rpc client and the protocol messages. It lives in the wire
layer because the user package (`logcentric.meta` is its public name there) and the server
tools (`tserver` asking the coordinators for a server's key) both call the coordinators, and
no server package may import the user package (design/architecture.md).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rpc.client import (
    RETRY_ATTEMPTS_MAX,
    RETRY_BACKOFF_INITIAL_S,
    RETRY_BACKOFF_MAX_S,
    KeyRefused,
    RpcClient,
)
from rpc.client import RETRYABLE as RPC_RETRYABLE
from rpc.credentials import Credentials
from rpc.errors import (
    BadRequest,
    IllegalState,
    NotLeader,
    RpcError,
    Throttled,
    TimedOut,
    Unavailable,
)
from rpc.protocols import coordinator_pb2 as pb

logger = logging.getLogger(__name__)

ATTEMPTS_MAX = 200
BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 0.25
HINT_HOPS_AT_ONCE = 2  # NOT_LEADER hints followed without a pause, in a row
# A node that failed to answer is not tried again on a hint for this long.
SUSPECT_S = 2.0
PING_TIMEOUT_S = 1.0
RETRYABLE = (Unavailable, Throttled, TimedOut)

# How long a server may stay silent (no answer, and no answer to a ping) before an attempt
# at it is given up, by attempt: the first attempts are short, so that a hung leader costs
# about 2 x 1 s (the wait, then a ping as long) before the next node or replica is asked,
# not the whole deadline; each later attempt doubles it, so that a server that is alive but
# slow to answer even a ping (a GIL-bound process on a loaded machine: the ping is answered
# in the rpc server's own I/O loop, but that loop needs the GIL) is not judged hung time
# after time. The bound is on silence, not on work: a server that answers pings is waited
# for up to the attempt's whole timeout, so a large write or a slow scan batch is never cut
# by it. Capped: past a few rounds a longer patience only delays the failover.
PATIENCE_INITIAL_S = 1.0
PATIENCE_MAX_S = 8.0
# How often the watch looks at the calls in flight: a silent server is found this much
# after its patience at most (a tenth of the shortest patience).
WATCH_INTERVAL_S = 0.1
WATCH_JOIN_S = PATIENCE_MAX_S + 2.0  # close() waits out a ping in progress


def attempt_patience_s(attempt: int) -> float:
    """The patience of attempt number `attempt` (0 for the first; for tablet servers, the
    round of attempts): PATIENCE_INITIAL_S doubled each time, at most PATIENCE_MAX_S.
    Callers also cap it by the attempt's own timeout (no wait beyond the deadline)."""
    assert attempt >= 0
    return min(PATIENCE_MAX_S, PATIENCE_INITIAL_S * 2 ** min(attempt, 32))


@dataclass(slots=True, eq=False)
class _Watched:
    """A call in flight under a SilenceWatch."""

    rpc: RpcClient
    patience_s: float
    detach: Callable[[RpcClient], bool]
    quiet_since: float  # when the call began, or the server last answered a ping
    silent: bool = False  # the server was found silent: its rpc client is being closed


class SilenceWatch:
    """Gives up the calls to a server that falls silent: a hung process (SIGSTOPped, say)
    whose connection stays up, on which a call would otherwise wait until its deadline.

    Calls stay synchronous rpc calls with their whole timeout (the fast path: no thread
    hand-off, nothing added to a call answered in time); each is registered here with its
    patience while it runs. One thread looks at the calls in flight every WATCH_INTERVAL_S.
    When a call has had no answer for its patience, the thread pings its server (on a
    connection of its own, so the ping is not queued behind the call); the server's rpc
    layer answers pings itself, whatever its handlers are doing. An answer means the server
    is alive and at work: its calls wait on, however long they take, up to their timeout
    (and are looked at again a patience later). No answer within the patience either: the
    server is silent. Its owner is asked to `detach(rpc)` (stop using that rpc client and
    open another for later calls); then every call in flight on it is marked silent and the
    rpc client is closed, which ends them at once (an rpc call cannot be cancelled
    otherwise). `call` turns their UNAVAILABLE into TIMED_OUT, saying why: the outcome of a
    write is unknown, as after any timeout.

    A silent server costs its callers about twice the patience plus WATCH_INTERVAL_S. Pings
    are sent one at a time: a second silent server is found a patience later.
    Thread-safe; the thread starts with the first call and stops in close()."""

    def __init__(self, name: str = "silence-watch") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._calls: set[_Watched] = set()
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits for a call (and is woken by the next one)
        self._closed = False

    def call(
        self,
        rpc_of: Callable[[], RpcClient],
        detach: Callable[[RpcClient], bool],
        recipient_uuid: str,
        method: str,
        request,
        response_type,
        *,
        timeout_s: float,
        patience_s: float,
        idempotent: bool = False,
        sidecars=(),
    ):
        """(response, [sidecars]) of a call on `rpc_of()`, given up as TIMED_OUT when its
        server stays silent for `patience_s` (see the class). An idempotent call is retried
        as the rpc layer retries it (lost or no connection, THROTTLED, UNAVAILABLE: with
        backoff, until its timeout), on `rpc_of()` again each time; a silent one is not."""
        assert timeout_s > 0 and patience_s > 0
        deadline = time.monotonic() + timeout_s
        backoff_s = RETRY_BACKOFF_INITIAL_S
        for attempt in range(1, RETRY_ATTEMPTS_MAX + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut(f"{method}: no time left after {attempt - 1} attempt(s)")
            rpc = rpc_of()
            watched = self._begin(rpc, patience_s, detach)
            try:
                return rpc.call_with_sidecars(
                    recipient_uuid,
                    method,
                    request,
                    response_type,
                    timeout_s=left,
                    sidecars=sidecars,
                )  # not idempotent for the rpc layer: retried here, which knows of silence
            except RPC_RETRYABLE as err:
                if watched.silent:
                    raise TimedOut(
                        f"{method} to {rpc.address}: no answer within {patience_s:.1f}s, nor "
                        "to a ping: the server is hung or cut off; the call was given up "
                        "(its outcome is unknown)"
                    ) from None
                if not idempotent:
                    raise
                pause = max(backoff_s, err.retry_after_ms / 1000.0) * random.uniform(0.5, 1.5)
                if attempt == RETRY_ATTEMPTS_MAX or time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)
            finally:
                self._end(watched)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def in_flight(self) -> int:
        with self._cond:
            return len(self._calls)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(WATCH_JOIN_S)

    def _begin(self, rpc: RpcClient, patience_s: float, detach) -> _Watched:
        watched = _Watched(rpc, patience_s, detach, time.monotonic())
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            if self._idle:  # only then: a wake-up per call would cost every call
                self._idle = False
                self._cond.notify_all()
            self._calls.add(watched)
        return watched

    def _end(self, watched: _Watched) -> None:
        with self._cond:
            self._calls.discard(watched)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._calls:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if self._closed:
                    return
                self._cond.wait(WATCH_INTERVAL_S)  # woken early only by close()
                if self._closed:
                    return
                calls = [w for w in self._calls if not w.silent]
            now = time.monotonic()
            due: dict[int, list[_Watched]] = {}  # id(rpc) -> its calls silent for long enough
            for w in calls:
                if now - w.quiet_since >= w.patience_s:
                    due.setdefault(id(w.rpc), []).append(w)
            for group in due.values():
                self._check(group[0].rpc, group)

    @staticmethod
    def _answered(due: list[_Watched]) -> None:
        answered = time.monotonic()
        for w in due:
            w.quiet_since = answered

    def _check(self, rpc: RpcClient, due: list[_Watched]) -> None:
        """Ping the server of calls that have waited their patience: wait on, or give up."""
        patience_s = min(w.patience_s for w in due)
        try:
            rpc.ping(timeout_s=patience_s)
        except (TimedOut, Unavailable) as err:
            logger.info("%s: no answer to a ping within %.1fs (%s)", rpc.address, patience_s, err)
        except RpcError as err:
            # Refused (a CURVE server started again that does not admit our key yet, say):
            # that is an answer, not silence; the call gets its own. Raising here would end
            # this thread, and no later call of the client would be watched.
            logger.info("%s: ping refused (%s): not silent", rpc.address, err)
            self._answered(due)
            return
        else:  # alive (at work): look again a patience later
            self._answered(due)
            return
        # The owner first stops using the client (a call made from now on opens another);
        # false if it no longer did (closed, or replaced meanwhile): nothing to give up then.
        if not due[0].detach(rpc):
            return
        with self._cond:
            for w in self._calls:
                if w.rpc is rpc:
                    w.silent = True
        rpc.close()  # ends the calls in flight on it (each notices within 0.1 s)


class CoordinatorClient:
    """Thread-safe; a context manager."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        client_id: str = "",
        timeout_s: float = 30.0,
        call_timeout_s: float = 10.0,
        watch: SilenceWatch | None = None,
        privileged_key: bytes | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """`watch`: the SilenceWatch of the owner's calls (the Client's), or one of its own.
        `privileged_key` (an operator tool's, from the cluster's password): every call is
        signed with it, as membership changes need (rpc/privileged.py). `credentials`
        (rpc/credentials.py): every call goes with CURVE, as that principal, to a node that
        proves it holds the key the file lists for its address; an address the file has no
        key for is never called (nor followed as a leader hint). None: plaintext."""
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not addresses and credentials is not None:
            addresses = list(credentials.addresses)
        if not addresses:
            raise ValueError("at least one coordinator address is needed")
        self.credentials = credentials
        self.addresses = list(addresses)
        self.client_id = client_id or f"client-{uuidlib.uuid4().hex}"
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        self._closed = False
        self._owns_watch = watch is None
        self._watch = watch or SilenceWatch("coordinator-client-watch")
        self._lock = threading.Lock()
        self._clients: dict[str, RpcClient] = {}
        self._uuids: dict[str, str] = {}
        self._leader = self.addresses[0]
        self._seq = 0
        self._suspect: dict[str, float] = {}  # address -> when it last failed to answer
        self._privileged_key = privileged_key

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        if self._owns_watch:
            self._watch.close()

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
        timeouts = 0  # attempts of this call that timed out: each doubles the patience
        refused: dict[str, KeyRefused] = {}  # nodes that refused this client's key
        silent: set[str] = set()  # nodes that did not answer in this call (unreachable)
        for _attempt in range(ATTEMPTS_MAX):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            address = self._leader  # one attribute read: no lock needed
            # The attempt may work up to call_timeout_s (a CreateTable waits for its
            # operation), but a node silent for its patience (hung: a SIGSTOPped leader
            # whose connection stays up) is left for the next node after about twice that.
            # The request (and its request id) is the same in every attempt: a retry of an
            # operation the silent node did log returns that operation's result.
            timeout_s = min(remaining, self.call_timeout_s)
            try:
                response = self.call_at(
                    address,
                    method,
                    request,
                    response_type,
                    timeout_s,
                    patience_s=min(timeout_s, attempt_patience_s(timeouts)),
                )
                if self._suspect:
                    with self._lock:
                        self._suspect.pop(address, None)
                return response
            except KeyRefused as e:
                # Maybe a node behind the others (see the module docstring): the next node
                # that has neither refused nor failed to answer, at once; none: refused.
                last = e
                refused[address] = e
                silent.discard(address)
                self._forget(address)
                with self._lock:
                    following = self._next_address(address, {*refused, *silent})
                    if following is not None:
                        self._leader = following
                if following is None:
                    raise self._refused_everywhere(method, refused, silent) from None
                continue
            except NotLeader as e:
                last = e
                silent.discard(address)
                hinted = e.leader_hint.address
                with self._lock:
                    if (
                        hinted
                        and hinted != address
                        and hinted not in refused
                        and not self._is_suspect(hinted)
                        and self._may_call(hinted)
                    ):
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
                        self._rotate(address, refused)
            except RETRYABLE as e:
                last = e
                if isinstance(e, TimedOut):
                    timeouts += 1
                with self._lock:
                    if not isinstance(e, Unavailable) or not e.retry_after_ms:
                        self._suspect[address] = time.monotonic()
                        silent.add(address)
                        self._rotate(address, refused)  # unreachable: try another node
                    else:
                        silent.discard(address)
                self._forget(address)
                if refused and self._next_address(address, {*refused, *silent}) is None:
                    raise self._refused_everywhere(method, refused, silent) from None
            pause = max(backoff_s, (getattr(last, "retry_after_ms", 0) or 0) / 1000.0)
            pause *= random.uniform(0.5, 1.5)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
            hops = 0
            backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
        if last is None:  # the deadline passed before a first attempt could be made
            raise TimedOut(f"Coordinator.{method}: no time left for a first attempt")
        if isinstance(last, Unavailable) and last.retry_after_ms:
            # The leader answered, but could not do it yet (e.g. the tablet servers it needs
            # are down): say that, not that no leader answered.
            raise TimedOut(
                f"Coordinator.{method}: the leader could not do it before the deadline: {last}"
            )
        hinted = getattr(getattr(last, "leader_hint", None), "address", "")
        if isinstance(last, NotLeader) and hinted and not self._may_call(hinted):
            raise TimedOut(
                f"Coordinator.{method}: the leader is at {hinted}, which the credentials file "
                f"({self.credentials.path}) lists no public key for: add that node "
                "(its `coordinator show-key`) to the file's coordinators"
            )
        raise TimedOut(f"Coordinator.{method}: no leader answered in time (last error: {last})")

    def call_at(
        self,
        address: str,
        method: str,
        request,
        response_type,
        timeout_s: float,
        *,
        patience_s: float | None = None,
    ):
        """One call at one node. With `patience_s`, a node silent that long (and to a ping
        as long) is given up before `timeout_s` (see SilenceWatch)."""
        self._check_open()
        client, uuid = self._client(address, timeout_s if patience_s is None else patience_s)
        if patience_s is None:
            return client.call(
                uuid, f"Coordinator.{method}", request, response_type, timeout_s=timeout_s
            )
        response, _ = self._watch.call(
            lambda: client,  # not retried within the call: one client is enough
            lambda rpc: self._detach(address, rpc),
            uuid,
            f"Coordinator.{method}",
            request,
            response_type,
            timeout_s=timeout_s,
            patience_s=patience_s,
        )
        return response

    def _client(self, address: str, timeout_s: float) -> tuple[RpcClient, str]:
        # The common case reads two dicts without the lock (single reads are atomic).
        client = self._clients.get(address)
        uuid = self._uuids.get(address)
        if client is not None and uuid is not None:
            return client, uuid
        with self._lock:
            if self._closed:
                raise IllegalState("the coordinator client is closed")
            client = self._clients.get(address)
            if client is None:
                # A transport of its own per node: closing it (a silent node: SilenceWatch)
                # ends the calls to that node alone.
                creds = self.credentials
                client = RpcClient(
                    address,
                    self.client_id,
                    privileged_key=self._privileged_key,
                    curve=creds.client_curve() if creds is not None else None,
                    server_key=creds.server_key(address) if creds is not None else "",
                )
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

    def _may_call(self, address: str) -> bool:
        """With credentials, only nodes whose key the file lists (a hint naming another
        node is not followed: its key is unknown, so it could be anyone)."""
        creds = self.credentials
        return creds is None or bool(creds.coordinator_keys().get(address))

    def _detach(self, address: str, client: RpcClient) -> bool:
        """A silent node's rpc client is dropped (SilenceWatch closes it): the next call
        to the node opens another and asks for its UUID again."""
        with self._lock:
            if self._closed or self._clients.get(address) is not client:
                return False
            del self._clients[address]
            self._uuids.pop(address, None)
            return True

    def _forget(self, address: str) -> None:
        """A node that did not answer may have restarted with a new UUID."""
        with self._lock:
            self._uuids.pop(address, None)

    def _is_suspect(self, address: str) -> bool:
        failed_at = self._suspect.get(address)
        return failed_at is not None and time.monotonic() - failed_at < SUSPECT_S

    def _rotate(self, address: str, refused=()) -> None:
        """Move to the next address, preferring nodes that have not just failed, and
        never to one in `refused` (nodes that refused this call's key) while another is
        left."""
        candidates = self._after(address)
        candidates = [a for a in candidates if a not in refused] or candidates
        fresh = [a for a in candidates if not self._is_suspect(a)]
        self._leader = (fresh or candidates)[0]

    def _after(self, address: str) -> list[str]:
        """Every address, starting with the one after `address` (`address` last)."""
        i = self.addresses.index(address) if address in self.addresses else -1
        n = len(self.addresses)
        return [self.addresses[(i + k) % n] for k in range(1, n + 1)]

    def _next_address(self, address: str, avoid) -> str | None:
        """The address after `address` that is not in `avoid` and may be called,
        preferring nodes that have not just failed; None when there is none."""
        candidates = [a for a in self._after(address) if a not in avoid and self._may_call(a)]
        fresh = [a for a in candidates if not self._is_suspect(a)]
        return (fresh or candidates or [None])[0]

    @staticmethod
    def _refused_everywhere(
        method: str, refused: dict[str, KeyRefused], silent: set[str]
    ) -> KeyRefused:
        """The KeyRefused of a call every node refused (or did not answer)."""
        text = (
            f"Coordinator.{method}: this client's key was refused at the CURVE handshake by "
            f"every coordinator node that answered: {', '.join(refused)}"
        )
        if silent:
            text += f" (no answer from {', '.join(sorted(silent))}: down, hung or starting)"
        return KeyRefused(f"{text}; the key is not admitted there (unknown or revoked)")
