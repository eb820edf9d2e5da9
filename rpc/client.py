"""The rpc client: DEALER sockets owned by one I/O thread, many calls in flight.

`Transport` owns an I/O thread and one DEALER socket per server address. Any thread may
call; each call gets a call id. A call uses a DEALER owned by the calling thread: a
synchronous one waits on it in one blocking receive, and pipelined calls (`call_async`) are
sent on it at once and collected from it by the same thread, answers of other calls kept
until theirs are collected (no hand-off either way). The I/O thread takes what that path
cannot (no live connection yet, signed calls, past DIRECT_SOCKETS_MAX threads): the request
is handed to it, and the caller waits for the answer with that id until its deadline. All
Transports of a process share one zmq context, so one zmq I/O thread carries every
connection and concurrent calls share its wake-ups. Sockets use ZMQ_IMMEDIATE, so a request is
only written to a live connection: while a server is down its requests wait (bounded by their
deadline) and are sent, with the time they have left, once it is back. A socket monitor tells
the I/O thread when a connection drops; calls already written to it fail with UNAVAILABLE
("connection lost"), and `call(..., idempotent=True)` retries them with backoff and jitter
until the deadline. Non-idempotent calls are never resent by this layer.

`RpcClient` is a handle on one address (with its own Transport unless given a shared one).

CURVE (design/security.md §2): a Transport with a `ClientCurve` connects as a CURVE client,
to a server that must prove it holds the public key of the UUID a call names; a handshake
that fails (key refused, wrong server key, CURVE on one side only) fails the waiting calls
at once with HandshakeFailed, saying why. Without one it talks plaintext, as before.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import zmq
import zmq.utils.monitor
from google.protobuf.message import DecodeError, Message

from rpc import errors, privileged
from rpc.addresses import endpoint
from rpc.frames import (
    ZERO_COPY_BYTES_MIN,
    _send,
    recv_frames,
    request_header,
    send_frames,
    varint,
)
from rpc.keys import ClientCurve, KeyPair
from rpc.rpc_pb2 import PingRequest, PingResponse, RequestHeader, ResponseHeader, StatusCode
from rpc.server import MESSAGE_BYTES_MAX_DEFAULT, PING_METHOD

INFLIGHT_CALLS_MAX = 8192
# How long a request may wait for a connection to its server before failing (never sent).
CONNECT_TIMEOUT_S_DEFAULT = 0.5
# Sockets owned by calling threads for synchronous calls; past this, calls share the I/O thread.
DIRECT_SOCKETS_MAX = 256
DIRECT_HEADERS_MAX = 64
REFUSALS_QUEUED_MAX = 64  # a Poster's unread refusals
DIRECT_POLL_SLICE_S = 0.1
# A synchronous call first waits this long in one blocking receive on its socket alone; only a
# slower answer is also watched for a dropped connection (so a drop is noticed within this).
DIRECT_FAST_WAIT_S = 0.02
DIRECT_FAST_WAIT_MS = 20
assert DIRECT_FAST_WAIT_MS == int(DIRECT_FAST_WAIT_S * 1000)
RETRY_ATTEMPTS_MAX = 20
RETRY_BACKOFF_INITIAL_S = 0.01
RETRY_BACKOFF_MAX_S = 1.0
POLL_INTERVAL_MS = 50

_OK = int(StatusCode.OK)
_parse_response_header = ResponseHeader.FromString
_NOBLOCK = int(zmq.NOBLOCK)
_RCVTIMEO = int(zmq.RCVTIMEO)
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_monotonic = time.monotonic
_get_ident = threading.get_ident

log = logging.getLogger(__name__)


def _call_id_prefix(call_id: int) -> bytes:
    """A request's or answer's header field 1 (call_id), as protobuf writes it first: the
    tag and the varint (the call ids of a long-lived transport take 3 bytes, spelled out
    here: varint's loop costs more than the rest of a header)."""
    if call_id < 0x80:
        return bytes((0x08, call_id)) if call_id else b""
    if call_id < 0x4000:
        return bytes((0x08, (call_id & 0x7F) | 0x80, call_id >> 7))
    if call_id < 0x200000:
        return bytes((0x08, (call_id & 0x7F) | 0x80, ((call_id >> 7) & 0x7F) | 0x80, call_id >> 14))
    return b"\x08" + varint(call_id)


_context_lock = threading.Lock()
_context: zmq.Context | None = None
_context_pid = 0
_context_users = 0
_context_leaked = False
_transport_ids = itertools.count(1)


def _acquire_context() -> zmq.Context:
    """The process's zmq context, shared by every Transport: one zmq I/O thread serves all
    their connections, so the calls of many threads share its wake-ups. A forked child gets
    a context of its own."""
    global _context, _context_pid, _context_users, _context_leaked
    with _context_lock:
        if _context is None or _context_pid != os.getpid():
            _context, _context_pid, _context_users = zmq.Context(), os.getpid(), 0
            _context_leaked = False
        _context_users += 1
        return _context


def _release_context(ctx: zmq.Context, *, terminate: bool = True) -> None:
    """Terminate the shared context with its last Transport. With a socket left open (a
    call that would not end) termination would wait for it forever: the context is then
    left to the process, and the next Transport gets a new one."""
    global _context, _context_users, _context_leaked
    with _context_lock:
        if ctx is not _context:
            return  # inherited across a fork, or already given up: not ours to terminate
        _context_leaked |= not terminate
        _context_users -= 1
        if _context_users > 0:
            return
        _context = None
        if _context_leaked:
            _context_leaked = False
            return
    ctx.term()


class ConnectionLost(errors.Unavailable):
    """The connection dropped after the request was written: it may or may not have run."""


class NotConnected(errors.Unavailable):
    """No connection to the server within the connect grace: the request was never sent."""


class HandshakeFailed(errors.Unauthenticated):
    """The connection's handshake failed (a key refused, a server without the expected key,
    CURVE on one side only): the request was never sent. Not retried: it is configuration."""


class KeyRefused(HandshakeFailed):
    """The server refused this client's own key at the handshake (ZAP): unknown there or
    revoked. Unlike the other handshake failures (a server that does not hold the key
    expected for it: maybe another identity at that address now), not a stale location."""


def _handshake_error(dealer: _Dealer, text: str) -> HandshakeFailed:
    return (KeyRefused if dealer.handshake_refused else HandshakeFailed)(text)


class NoServerKey(errors.Unauthenticated):
    """A CURVE transport knows no public key for the server: nothing was sent."""


_HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)
_MONITOR_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED | _HANDSHAKE_EVENTS
_MECHANISM_MISMATCH = 0x11000002  # ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
# A handshake that fails without detail (the peer closed the connection while greeting) is
# what a server that does not hold the expected key does, every time; a server going down
# mid-handshake does it once. So it counts as a failure only this many times in a row
# (without a handshake that succeeded in between): a CURVE client, and a plaintext one.
_NO_DETAIL_FAILURES_CURVE = 2
_NO_DETAIL_FAILURES_PLAIN = 3


def _handshake_failure(event: int, value: int, address: str, server_key: str) -> str:
    """Why a handshake with `address` failed, for the caller (from a monitor event)."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"{address} refused this client's key at the CURVE handshake (ZAP status {value}): "
            "the key is not admitted there (unknown or revoked)"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == _MECHANISM_MISMATCH:
        if server_key:
            return f"{address} does not use CURVE: it serves plaintext; refusing to talk to it"
        return (
            f"{address} requires CURVE (encrypted, authenticated connections): this client has "
            "no key pair and no public key for it"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return f"the handshake with {address} failed: protocol error {value:#x}"
    if server_key:
        return (
            f"the CURVE handshake with {address} failed: the server there does not hold the "
            f"key expected for it ({server_key[:8]}...), does not use CURVE, or dropped the "
            "connection"
        )
    return (
        f"the handshake with {address} failed: the server there may require CURVE "
        "(encrypted, authenticated connections), and this client has no key pair for it"
    )


class _Done:
    """A one-shot completion flag; a held lock is much cheaper than threading.Event."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=max(0.0, timeout_s)):
            self._lock.release()
            return True
        return self._set


@dataclass(slots=True)
class _Call:
    call_id: int
    address: str
    header: RequestHeader
    frames: list  # [body, *sidecars]
    deadline: float
    server_key: str = ""  # CURVE: the public key the server must prove it holds
    done: _Done = field(default_factory=_Done)
    reply: list | None = None
    error: errors.RpcError | None = None
    sent: bool = False
    queued_at: float = 0.0


def _set_curve(sock: zmq.Socket, keypair: KeyPair | None, server_key: str) -> None:
    """Make `sock` a CURVE client of the server holding `server_key` ("" for plaintext)."""
    if not server_key:
        return
    assert keypair is not None and keypair.secret
    sock.curve_publickey = keypair.public.encode("ascii")
    sock.curve_secretkey = keypair.secret.encode("ascii")
    sock.curve_serverkey = server_key.encode("ascii")


class _Dealer:
    """A DEALER socket to one server address with a monitor of its connection; a CURVE
    client of the server holding `server_key` unless that is empty."""

    __slots__ = (
        "address",
        "server_key",
        "socket",
        "monitor",
        "connected",
        "handshake_error",
        "handshake_refused",
        "_no_detail_failures",
        "drops",
    )

    def __init__(
        self,
        ctx: zmq.Context,
        address: str,
        frame_bytes_max: int,
        keypair: KeyPair | None = None,
        server_key: str = "",
    ) -> None:
        self.address = address
        self.server_key = server_key
        self.socket = ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IMMEDIATE, 1)
        self.socket.setsockopt(zmq.MAXMSGSIZE, frame_bytes_max)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 20)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        _set_curve(self.socket, keypair, server_key)
        self.monitor = self.socket.get_monitor_socket(_MONITOR_EVENTS)
        self.socket.connect(endpoint(address))
        self.connected = False
        # Why the last handshake failed, until one succeeds: a refused key, a server that
        # does not hold `server_key`, CURVE on one side only. Calls that could not be sent
        # fail with it at once (HandshakeFailed) instead of waiting for their deadline.
        self.handshake_error = ""
        self.handshake_refused = False  # the failure was the server's ZAP refusing our key
        self._no_detail_failures = 0
        self.drops = 0  # connections dropped so far, as drain_monitor learned them

    def drain_monitor(self) -> bool:
        """Apply pending connection events; True if the connection dropped."""
        dropped = False
        while True:
            try:
                event = zmq.utils.monitor.recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return dropped
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:
                self.connected = True
            elif kind == zmq.EVENT_DISCONNECTED:
                self.connected = False
                dropped = True
                self.drops += 1
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.handshake_error = ""
                self.handshake_refused = False
                self._no_detail_failures = 0
            elif kind & _HANDSHAKE_EVENTS:
                self.connected = False
                value = int(event["value"])
                if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                    self._no_detail_failures += 1
                    limit = (
                        _NO_DETAIL_FAILURES_CURVE if self.server_key else _NO_DETAIL_FAILURES_PLAIN
                    )
                    if self._no_detail_failures < limit:
                        continue  # maybe a server going down: zmq reconnects as before
                elif (
                    kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    and not self.server_key
                    and value != _MECHANISM_MISMATCH
                ):
                    continue  # plaintext: only a server that requires CURVE is news
                self.handshake_error = _handshake_failure(
                    kind, value, self.address, self.server_key
                )
                self.handshake_refused = kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH

    def close(self) -> None:
        self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=0)


class _Peer(_Dealer):
    """The I/O thread's socket to one address and the calls waiting to be written to it."""

    __slots__ = ("backlog", "written")

    def __init__(
        self,
        ctx: zmq.Context,
        address: str,
        frame_bytes_max: int,
        keypair: KeyPair | None = None,
        server_key: str = "",
    ) -> None:
        super().__init__(ctx, address, frame_bytes_max, keypair, server_key)
        self.backlog: deque[_Call] = deque()
        self.written: dict[int, _Call] = {}


class _DirectSocket(_Dealer):
    """A socket owned by one calling thread, for synchronous calls without hand-offs.

    Only its owner uses it; `lock` is held for the whole of a call so that Transport.close()
    can wait for a call in progress (calls poll in short slices and notice the close)."""

    __slots__ = (
        "poller",
        "lock",
        "headers",
        "tails",
        "ok_rest",
        "rcvtimeo_ms",
        "pending",
        "answers",
    )

    def __init__(
        self,
        ctx: zmq.Context,
        address: str,
        frame_bytes_max: int,
        keypair: KeyPair | None = None,
        server_key: str = "",
    ) -> None:
        super().__init__(ctx, address, frame_bytes_max, keypair, server_key)
        self.poller = zmq.Poller()
        self.poller.register(self.socket, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.lock = threading.Lock()
        # (method, recipient, caller) -> those fields serialized, reused for every call
        # (frames.request_header adds the call id and the time left)
        self.headers: dict[tuple[str, str, str], bytes] = {}
        # (method, recipient, caller, timeout_ms) -> fields 2-5 serialized: a request header
        # sent at once is its call id (`_call_id_prefix`) and this.
        self.tails: dict[tuple[str, str, str, int], bytes] = {}
        # An OK answer's header from this server but for its call id (field 1, first on the
        # wire: the server writes it so, rpc/frames.ok_header): an answer whose header is the
        # awaited call's id prefix and these bytes is that call's OK answer, recognized
        # without decoding it. Learned from the first OK answer decoded; None before.
        self.ok_rest: bytes | None = None
        self.rcvtimeo_ms = -1
        # Pipelined calls sent on this socket and not collected yet (call id -> deadline),
        # and the answers read for them while another call was waited for.
        self.pending: dict[int, float] = {}
        self.answers: dict[int, tuple[ResponseHeader, list]] = {}

    def prune(self, now: float) -> None:
        """Forget pipelined calls whose deadline passed (never collected: given up)."""
        for call_id, deadline in list(self.pending.items()):
            if deadline <= now:
                del self.pending[call_id]
                self.answers.pop(call_id, None)

    def header(self, method: str, recipient_uuid: str, caller_uuid: str) -> bytes:
        """The fields of a request header that stay the same from call to call, serialized."""
        key = (method, recipient_uuid, caller_uuid)
        header = self.headers.get(key)
        if header is None:
            if len(self.headers) >= DIRECT_HEADERS_MAX:
                self.headers.clear()
            header = self.headers[key] = RequestHeader(
                method=method, recipient_uuid=recipient_uuid, caller_uuid=caller_uuid
            ).SerializeToString()
        return header

    def tail(self, key: tuple[str, str, str, int]) -> bytes:
        """The serialized fields 2-5 (method, recipient, caller, timeout_ms) of `key`."""
        tail = self.tails.get(key)
        if tail is None:
            if len(self.tails) >= DIRECT_HEADERS_MAX:
                self.tails.clear()
            method, recipient_uuid, caller_uuid, timeout_ms = key
            tail = self.tails[key] = request_header(
                0, self.header(method, recipient_uuid, caller_uuid), timeout_ms
            )
        return tail

    def learn_ok(self, head: bytes, prefix: bytes) -> None:
        """Keep the rest of `head`, an OK answer's header decoded for the call whose id
        prefix is `prefix`, as this server's OK header (see `ok_rest`); only if the rest
        names no call id of its own (so prefix + rest always means that prefix's call)."""
        if not head.startswith(prefix):
            return
        rest = head[len(prefix) :]
        try:
            parsed = _parse_response_header(rest)
        except (DecodeError, ValueError):
            return
        # Re-serialized alike: no field of its own beyond protobuf's canonical ones (an
        # explicit call id 0 would override the prefix's).
        if parsed.status == _OK and parsed.call_id == 0 and parsed.SerializeToString() == rest:
            self.ok_rest = rest

    def recv_reply(self, first: zmq.Frame) -> list:
        """The rest of an answer whose first frame was received: header and body as bytes
        (small, parsed at once), sidecars zero-copy. Frames say whether more follow, so no
        socket option is read (each read costs more than the frame)."""
        sock = self.socket
        parts: list = [first.bytes]
        frame = first
        while frame.more:
            frame = sock.recv(_NOBLOCK, copy=False)
            parts.append(frame.bytes if len(parts) < 2 else frame.buffer)
        return parts


class Transport:
    """An I/O thread with a DEALER socket per address. Thread-safe; a context manager.

    Synchronous calls (`call_frames`) use a socket owned by the calling thread instead, so a
    blocking call costs no thread hand-off; `start_call`/`call_async` go through the I/O
    thread (started by the first such call), which keeps many calls in flight for one
    caller."""

    def __init__(
        self,
        *,
        message_bytes_max: int = MESSAGE_BYTES_MAX_DEFAULT,
        name: str = "rpc-client",
        connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT,
        curve: ClientCurve | None = None,
    ) -> None:
        """`curve` (rpc.keys.ClientCurve): every connection is a CURVE client with its key
        pair, to a server that must prove it holds the public key of the UUID a call names
        (or the key a call gives). None: plaintext."""
        assert connect_timeout_s > 0
        self.curve = curve
        self.message_bytes_max = message_bytes_max
        self.connect_timeout_s = connect_timeout_s
        self._ctx = _acquire_context()
        self._call_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._submitted: deque[_Call] = deque()
        self._calls: dict[int, _Call] = {}
        self._wake_addr = f"inproc://rpc-client-wake-{os.getpid()}-{next(_transport_ids)}"
        self._wake_pull = self._ctx.socket(zmq.PULL)
        self._wake_pull.setsockopt(zmq.LINGER, 0)
        self._wake_pull.bind(self._wake_addr)
        self._wake_push = self._ctx.socket(zmq.PUSH)
        self._wake_push.setsockopt(zmq.LINGER, 0)
        self._wake_push.setsockopt(zmq.SNDHWM, 1)
        self._wake_push.connect(self._wake_addr)
        # Set once by close(); read by every call (a plain attribute: the cheapest read).
        self._closed = False
        self._local = threading.local()
        self._direct: list[_DirectSocket] = []  # every thread's sockets, for close()
        self._posters: set[Poster] = set()  # open ones: their owners close them
        # Started by the first call through it (synchronous calls never need it).
        self._name = name
        self._thread: threading.Thread | None = None

    # -- caller side -------------------------------------------------------------------

    def start_call(
        self,
        address: str,
        recipient_uuid: str,
        caller_uuid: str,
        method: str,
        body: bytes,
        sidecars,
        timeout_s: float,
        auth_tag: bytes = b"",
        server_key: str = "",
    ) -> _Call:
        """Hand a request to the I/O thread; `finish_call` waits for its answer."""
        if self._closed:
            raise errors.Unavailable("the rpc transport is closed")
        assert timeout_s > 0, "every call needs a deadline"
        link_key = self.link_key(address, recipient_uuid, server_key)
        size = len(body) + sum(len(s) for s in sidecars)
        if size > self.message_bytes_max:
            raise errors.BadRequest(
                f"request of {size} bytes exceeds the limit of {self.message_bytes_max}"
            )
        call = _Call(
            call_id=next(self._call_ids),
            address=address,
            header=RequestHeader(
                method=method,
                recipient_uuid=recipient_uuid,
                caller_uuid=caller_uuid,
                auth_tag=auth_tag,
            ),
            frames=[body, *sidecars],
            deadline=time.monotonic() + timeout_s,
            server_key=link_key,
        )
        call.header.call_id = call.call_id
        with self._lock:
            if self._closed:
                raise errors.Unavailable("the rpc transport is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._io_loop, name=f"{self._name}-io", daemon=True
                )
                self._thread.start()
            if len(self._calls) >= INFLIGHT_CALLS_MAX:
                raise errors.Throttled(f"{len(self._calls)} calls already in flight")
            self._calls[call.call_id] = call
            # One wake-up per batch: the I/O thread takes everything queued when it wakes.
            wake = not self._submitted
            self._submitted.append(call)
        if wake:
            self._wake()
        return call

    def finish_call(self, call: _Call) -> tuple[ResponseHeader, list]:
        """Wait until the call's deadline; raises RpcError for a non-OK status."""
        finished = call.done.wait(max(0.0, call.deadline - time.monotonic()))
        with self._lock:
            self._calls.pop(call.call_id, None)
        method, address = call.header.method, call.address
        if not finished:
            where = "waiting for its answer" if call.sent else f"not connected to {address}"
            raise errors.TimedOut(f"{method} to {address} timed out ({where})")
        if call.error is not None:
            raise call.error
        assert call.reply is not None
        header = ResponseHeader()
        try:
            header.ParseFromString(call.reply[0].buffer)
        except (DecodeError, ValueError) as exc:
            raise errors.Internal(f"malformed answer header from {address}: {exc}") from None
        rest = call.reply[1:]
        body_bytes = rest[0].bytes if rest else b""
        if header.status != _OK:
            raise errors.error_from_header(header, body_bytes)
        return header, [body_bytes, *(f.buffer for f in rest[1:])]

    def call_frames(
        self,
        address,
        recipient_uuid,
        caller_uuid,
        method,
        body,
        sidecars,
        timeout_s,
        auth_tag: bytes = b"",
        server_key: str = "",
    ):
        """One attempt: send, wait for the answer; raises RpcError for a non-OK status."""
        link_key = self.link_key(address, recipient_uuid, server_key) if self.curve else ""
        direct = self._direct_socket(address, link_key)
        if direct is None or auth_tag:
            # Signed (privileged) calls are rare: through the I/O thread, so that the direct
            # sockets' reused headers never carry a tag.
            call = self.start_call(
                address,
                recipient_uuid,
                caller_uuid,
                method,
                body,
                sidecars,
                timeout_s,
                auth_tag,
                link_key,
            )
            return self.finish_call(call)
        with direct.lock:
            # close() sets `_closed` before it takes this lock to close the socket: a call
            # racing with it (the socket was cached before) fails as a closed transport.
            if self._closed:
                raise errors.Unavailable("the rpc transport is closed")
            try:
                return self._direct_call(
                    direct, recipient_uuid, caller_uuid, method, body, sidecars, timeout_s
                )
            except HandshakeFailed:
                # A fresh socket for the next call: libzmq may not retry a refused handshake.
                self._drop_direct(direct)
                raise

    def link_key(self, address: str, recipient_uuid: str, server_key: str = "") -> str:
        """The public key a call to `recipient_uuid` at `address` must find there: the key
        of that UUID in the transport's ClientCurve, else `server_key` (an RpcClient's key
        for its address, e.g. for a Ping that names no UUID). "" for plaintext."""
        if self.curve is None:
            if server_key:
                raise errors.BadRequest(
                    f"a public key was given for {address} but this transport has no key pair "
                    "(Transport(curve=...))"
                )
            return ""
        key = self.curve.server_key(recipient_uuid) or server_key
        if not key:
            raise NoServerKey(
                f"no public key known for {recipient_uuid or 'the server'} at {address}: "
                "a CURVE client calls only servers whose key it has"
            )
        return key

    def _direct_socket(self, address: str, server_key: str = "") -> _DirectSocket | None:
        sockets = getattr(self._local, "sockets", None)
        if sockets is None:
            sockets = self._local.sockets = {}
        cache_key = (address, server_key) if server_key else address
        direct = sockets.get(cache_key)
        if direct is None:
            with self._lock:
                if self._closed:
                    raise errors.Unavailable("the rpc transport is closed")
                if len(self._direct) >= DIRECT_SOCKETS_MAX:
                    return None  # many short-lived threads: share the I/O thread instead
                direct = _DirectSocket(
                    self._ctx,
                    address,
                    self.message_bytes_max * 2,
                    self.curve.keypair if self.curve else None,
                    server_key,
                )
                self._direct.append(direct)
            sockets[cache_key] = direct
        return direct

    def _drop_direct(self, direct: _DirectSocket) -> None:
        """Close the calling thread's socket `direct` (held locked by the caller)."""
        sockets = self._local.sockets
        for key, sock in list(sockets.items()):
            if sock is direct:
                del sockets[key]
        with self._lock:
            if direct in self._direct:
                self._direct.remove(direct)
        direct.close()

    def _direct_send_slow(
        self, d: _DirectSocket, call_id: int, method: str, header: bytes, frames, deadline, start
    ) -> None:
        """Wait for a connection to write the request to (bounded by the connect grace);
        `header`: d.header() of the call."""
        connect_deadline = start + self.connect_timeout_s
        while True:
            if self._closed:
                raise errors.Unavailable("the rpc transport closed")
            d.drain_monitor()
            if d.handshake_error:
                raise _handshake_error(d, f"{method}: {d.handshake_error} (not sent)")
            now = time.monotonic()
            if now >= deadline:
                raise errors.TimedOut(f"{method} to {d.address} timed out (not connected)")
            if not d.connected and now >= connect_deadline:
                raise NotConnected(
                    f"not connected to {d.address} within {self.connect_timeout_s:.1f}s"
                )
            wait_ms = max(1, int(min(deadline - now, DIRECT_POLL_SLICE_S) * 1000))
            zmq.select([d.monitor], [d.socket], [], wait_ms / 1000.0)
            now = time.monotonic()
            timeout_ms = max(1, int((deadline - now) * 1000))
            try:
                send_frames(d.socket, [request_header(call_id, header, timeout_ms), *frames])
                return
            except zmq.Again:
                pass

    def _direct_call(
        self, d: _DirectSocket, recipient_uuid, caller_uuid, method, body, sidecars, timeout_s
    ) -> tuple[ResponseHeader | None, list]:
        assert timeout_s > 0, "every call needs a deadline"
        frames = [body, *sidecars]
        size = sum(map(len, frames))
        if size > self.message_bytes_max:
            raise errors.BadRequest(
                f"request of {size} bytes exceeds the limit of {self.message_bytes_max}"
            )
        now = _monotonic()
        deadline = now + timeout_s
        call_id = next(self._call_ids)
        prefix = _call_id_prefix(call_id)
        timeout_ms = int(timeout_s * 1000) or 1
        tail = d.tails.get((method, recipient_uuid, caller_uuid, timeout_ms))
        if tail is None:
            tail = d.tail((method, recipient_uuid, caller_uuid, timeout_ms))
        drops = d.drops
        # Send: only to a live connection (IMMEDIATE); fail fast when nobody is there.
        sock = d.socket
        try:
            _send(sock, prefix + tail, _MORE, True)
            send_frames(sock, frames)  # the rest
        except zmq.Again:
            # Nothing was sent: no live connection for the first frame, or the connection
            # went away mid-message (libzmq rolls the message back: frames/send_frames).
            header = d.header(method, recipient_uuid, caller_uuid)
            self._direct_send_slow(d, call_id, method, header, frames, deadline, now)
        answer, reply = self._direct_receive(d, call_id, deadline, drops, method, timeout_s, prefix)
        return self._direct_result(answer, reply)

    def _direct_receive(
        self,
        d: _DirectSocket,
        call_id: int,
        deadline: float,
        drops: int,
        method,
        timeout_s,
        prefix: bytes = b"",
    ) -> tuple[ResponseHeader | None, list]:
        """The answer to `call_id` on `d` (owned by the calling thread, locked), waited for
        until `deadline`: (its header, [header bytes, body, *sidecars]), the header None for
        an OK answer recognized by its bytes (`prefix`: the call's id prefix, see
        _DirectSocket.ok_rest). Answers to pipelined calls still pending on `d` are kept for
        them; others are late answers to given-up calls, dropped. `drops`: d.drops at the
        send."""
        if d.answers:
            kept = d.answers.pop(call_id, None)
            if kept is not None:
                return kept
        sock = d.socket
        expected = prefix + d.ok_rest if prefix and d.ok_rest is not None else None
        # First one blocking receive on the socket alone (the common, quick answer) ...
        first = None
        left_s = deadline - _monotonic()
        wait_ms = DIRECT_FAST_WAIT_MS if left_s >= DIRECT_FAST_WAIT_S else int(left_s * 1000)
        if wait_ms > 0:
            if wait_ms != d.rcvtimeo_ms:
                sock.set(_RCVTIMEO, wait_ms)
                d.rcvtimeo_ms = wait_ms
            try:
                first = sock.recv(copy=False)
            except zmq.Again:
                pass
        while True:
            if first is not None:
                reply = d.recv_reply(first)
                first = None
                head = reply[0]
                if head == expected:
                    return None, reply
                try:
                    answer = _parse_response_header(head)
                except (DecodeError, ValueError):
                    log.warning("dropped a malformed answer from %s", d.address)
                    continue
                if answer.call_id == call_id:
                    if prefix and answer.status == _OK:
                        d.learn_ok(head, prefix)
                    return answer, reply
                if answer.call_id in d.pending:
                    d.answers[answer.call_id] = (answer, reply)
                continue  # another call's answer: wait on
            # ... then slices that also watch the connection and the transport's close.
            now = _monotonic()
            if now >= deadline:
                raise errors.TimedOut(
                    f"{method} to {d.address} timed out after {timeout_s:.3f}s "
                    "(waiting for its answer)"
                )
            if self._closed:
                raise errors.Unavailable("the rpc transport closed")
            ready = dict(
                d.poller.poll(max(1, int(min(deadline - now, DIRECT_POLL_SLICE_S) * 1000)))
            )
            # The monitor is read only here, off the fast path, so a drop it shows may be
            # older than this send: the call is given up only if the connection is down
            # now (an answer can only come back over a live connection); a drop followed
            # by a reconnect leaves the call to its deadline.
            if d.monitor in ready:
                d.drain_monitor()
            if d.drops != drops and not d.connected:
                raise ConnectionLost(f"connection to {d.address} lost")
            if d.socket in ready:
                try:
                    first = sock.recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    pass

    @staticmethod
    def _direct_result(
        answer: ResponseHeader | None, reply: list
    ) -> tuple[ResponseHeader | None, list]:
        """(header, [body, *sidecars]); raises RpcError for a non-OK status. `answer` None:
        an OK answer recognized by its bytes (`_direct_receive`)."""
        body_bytes = reply[1] if len(reply) > 1 else b""
        if answer is not None and answer.status != _OK:
            raise errors.error_from_header(answer, body_bytes)
        return answer, [body_bytes, *reply[2:]]

    def send_call(
        self,
        address: str,
        recipient_uuid: str,
        caller_uuid: str,
        method: str,
        body: bytes,
        sidecars,
        timeout_s: float,
        response_type: type,
        auth_tag: bytes = b"",
        server_key: str = "",
    ) -> PendingCall:
        """Send a pipelined call now on the calling thread's own socket (collected by this
        thread), so that one thread's calls reach the server in order; before its first
        connection is up (or while zmq's queue for it is full) this waits for it as a
        synchronous call does, and a failure to send (NotConnected, a failed handshake, the
        deadline) is raised by the result. Signed calls, and threads past
        DIRECT_SOCKETS_MAX, go through the I/O thread.

        One function for the whole of a send on the caller's socket: each Python call
        level costs the pipelined caller a few percent of its CPU."""
        if self._closed:
            raise errors.Unavailable("the rpc transport is closed")
        assert timeout_s > 0, "every call needs a deadline"
        link_key = (
            self.link_key(address, recipient_uuid, server_key)
            if self.curve is not None or server_key
            else ""
        )
        d = None
        if not auth_tag:
            try:  # the calling thread's socket, when it has one already
                d = self._local.sockets[(address, link_key) if link_key else address]
            except (AttributeError, KeyError):
                d = self._direct_socket(address, link_key)
        if d is None:
            call = self.start_call(
                address,
                recipient_uuid,
                caller_uuid,
                method,
                body,
                sidecars,
                timeout_s,
                auth_tag,
                link_key,
            )
            return PendingCall(self, call, response_type)
        frames = [body, *sidecars]
        size = sum(map(len, frames))
        if size > self.message_bytes_max:
            raise errors.BadRequest(
                f"request of {size} bytes exceeds the limit of {self.message_bytes_max}"
            )
        timeout_ms = int(timeout_s * 1000) or 1
        tail = d.tails.get((method, recipient_uuid, caller_uuid, timeout_ms))
        if tail is None:
            tail = d.tail((method, recipient_uuid, caller_uuid, timeout_ms))
        with d.lock:
            if self._closed:
                raise errors.Unavailable("the rpc transport is closed")
            now = _monotonic()
            pending = d.pending
            if len(pending) >= INFLIGHT_CALLS_MAX:
                d.prune(now)
                if len(pending) >= INFLIGHT_CALLS_MAX:
                    raise errors.Throttled(f"{len(pending)} calls already in flight")
            call_id = next(self._call_ids)
            prefix = _call_id_prefix(call_id)
            deadline = now + timeout_s
            call = _DirectPending(
                self, response_type, call_id, prefix, d, method, deadline, d.drops, _get_ident()
            )
            sock = d.socket
            try:
                _send(sock, prefix + tail, _MORE, True)
                if len(frames) == 2:  # a body and one sidecar, the common case: spelled out
                    _send(sock, body, _MORE, len(body) < ZERO_COPY_BYTES_MIN)
                    last = frames[1]
                    _send(sock, last, _NOBLOCK, len(last) < ZERO_COPY_BYTES_MIN)
                else:
                    send_frames(sock, frames)  # the rest
            except zmq.Again:  # nothing sent (as in _direct_call)
                try:
                    header = d.header(method, recipient_uuid, caller_uuid)
                    self._direct_send_slow(d, call_id, method, header, frames, deadline, now)
                except HandshakeFailed as err:
                    # A fresh socket for the next call: libzmq may not retry a refused
                    # handshake (as call_frames).
                    self._drop_direct(d)
                    call.error = err
                    return call
                except errors.RpcError as err:
                    call.error = err
                    return call
            pending[call_id] = deadline
        return call

    def finish_direct(self, call: _DirectPending) -> list:
        """Wait for a call sent on the caller's socket (until its deadline), on the thread
        that sent it: its answer's frames [header, body, *sidecars]; raises RpcError for a
        non-OK status."""
        assert call.owner == _get_ident(), (
            "a pipelined call is collected by the thread that made it (its socket's owner)"
        )
        if call.error is not None:
            raise call.error
        answer = call.answer
        if answer is None:
            d = call.direct
            call_id = call.call_id
            with d.lock:
                try:
                    if self._closed:
                        raise errors.Unavailable("the rpc transport closed")
                    if d.socket.closed:  # dropped after a failed handshake (see send_call)
                        raise ConnectionLost(f"connection to {d.address} lost")
                    deadline = call.deadline
                    answer = call.answer = self._direct_receive(
                        d,
                        call_id,
                        deadline,
                        call.drops,
                        call.method,
                        max(0.0, deadline - _monotonic()),
                        call.prefix,
                    )
                except errors.RpcError as err:
                    call.error = err
                    raise
                finally:
                    d.pending.pop(call_id, None)
                    if d.answers:
                        d.answers.pop(call_id, None)
        header, reply = answer
        if header is not None and header.status != _OK:
            raise errors.error_from_header(header, reply[1] if len(reply) > 1 else b"")
        return reply

    def direct_done(self, call: _DirectPending) -> bool:
        """True once `call`'s answer is in (read without waiting), or its deadline passed."""
        assert call.owner == _get_ident(), "asked by the thread that made the call"
        d = call.direct
        if call.error is not None or call.answer is not None:
            return True
        with d.lock:
            if call.call_id in d.answers or self._closed or d.socket.closed:
                return True
            while True:
                try:
                    first = d.socket.recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    break
                reply = d.recv_reply(first)
                try:
                    answer = _parse_response_header(reply[0])
                except (DecodeError, ValueError):
                    continue
                if answer.call_id in d.pending:
                    d.answers[answer.call_id] = (answer, reply)
            return call.call_id in d.answers or _monotonic() >= call.deadline

    def _wake(self) -> None:
        try:
            self._wake_push.send(b"", zmq.NOBLOCK)
        except zmq.Again:
            pass  # a wake-up is already pending; one is enough
        except zmq.ZMQError:
            pass  # closing

    def close(self, timeout_s: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        with self._lock:
            calls = list(self._calls.values())
        for call in calls:
            call.error = errors.Unavailable("the rpc transport closed")
            call.done.set()
        with self._lock:
            direct, self._direct = self._direct, []
        left_open = False
        for d in direct:
            # A call in progress notices the close within one poll slice and lets go.
            if d.lock.acquire(timeout=timeout_s):
                d.close()
                d.lock.release()
            else:
                log.warning("a call to %s did not end; its socket is left open", d.address)
                left_open = True
        with self._lock:
            posters = len(self._posters)
        if posters:
            # Owned by threads that did not stop: closing them here could race with a post.
            log.warning("%d one-way sockets were not closed by their owners", posters)
            left_open = True
        self._wake_push.close(linger=0)
        self._wake_pull.close(linger=0)
        _release_context(self._ctx, terminate=not left_open)

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- I/O thread --------------------------------------------------------------------

    def _io_loop(self) -> None:
        peers: dict[str, _Peer] = {}
        by_socket: dict[zmq.Socket, _Peer] = {}
        by_monitor: dict[zmq.Socket, _Peer] = {}
        poller = zmq.Poller()
        poller.register(self._wake_pull, zmq.POLLIN)
        frame_max = self.message_bytes_max * 2
        next_expiry = 0.0
        try:
            while not self._closed:
                # Take new calls from callers.
                with self._lock:
                    submitted, self._submitted = self._submitted, deque()
                for call in submitted:
                    peer_key = (call.address, call.server_key)
                    peer = peers.get(peer_key)
                    if peer is None:
                        peer = _Peer(
                            self._ctx,
                            call.address,
                            frame_max,
                            self.curve.keypair if self.curve else None,
                            call.server_key,
                        )
                        peers[peer_key] = peer
                        by_socket[peer.socket] = peer
                        by_monitor[peer.monitor] = peer
                        poller.register(peer.monitor, zmq.POLLIN)
                    call.queued_at = time.monotonic()
                    peer.backlog.append(call)
                now = time.monotonic()
                for peer in peers.values():
                    self._flush(peer, now)
                    flags = zmq.POLLIN | (zmq.POLLOUT if peer.backlog else 0)
                    poller.register(peer.socket, flags)
                try:
                    ready = dict(poller.poll(POLL_INTERVAL_MS))
                except zmq.ZMQError:
                    continue
                for sock, events in ready.items():
                    if sock is self._wake_pull:
                        self._drain_wake()
                    elif sock in by_monitor:
                        peer = by_monitor[sock]
                        if self._on_monitor(peer):
                            # Its handshake failed: a fresh socket for the next call.
                            del peers[(peer.address, peer.server_key)]
                            del by_socket[peer.socket], by_monitor[peer.monitor]
                            poller.unregister(peer.socket)
                            poller.unregister(peer.monitor)
                            peer.close()
                    elif events & zmq.POLLIN:
                        self._on_replies(by_socket[sock])
                now = time.monotonic()
                if now >= next_expiry:
                    self._expire(peers.values(), now)
                    next_expiry = now + POLL_INTERVAL_MS / 1000.0
        finally:
            for peer in peers.values():
                peer.close()

    def _drain_wake(self) -> None:
        while True:
            try:
                self._wake_pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    def _flush(self, peer: _Peer, now: float) -> None:
        while peer.backlog:
            call = peer.backlog[0]
            if call.done.is_set() or now >= call.deadline:
                peer.backlog.popleft()
                continue
            # The server's deadline is what is left now, not what was asked at submit time.
            call.header.timeout_ms = max(1, int((call.deadline - now) * 1000))
            try:
                send_frames(peer.socket, [call.header.SerializeToString(), *call.frames])
            except zmq.Again:
                # No live connection (IMMEDIATE) or a full pipe: wait for POLLOUT. A server
                # that is not there at all fails the calls fast instead of at their deadline,
                # so that callers can go elsewhere; nothing was sent, so any call may retry.
                if not peer.connected:
                    self._fail_unconnected(peer, now)
                return
            peer.backlog.popleft()
            call.sent = True
            call.frames = []  # the bytes are zmq's now
            peer.written[call.call_id] = call

    def _fail_unconnected(self, peer: _Peer, now: float) -> None:
        while peer.backlog and now - peer.backlog[0].queued_at >= self.connect_timeout_s:
            call = peer.backlog.popleft()
            call.error = NotConnected(
                f"not connected to {peer.address} within {self.connect_timeout_s:.1f}s"
            )
            call.done.set()

    def _on_replies(self, peer: _Peer) -> None:
        for _ in range(256):
            try:
                frames = recv_frames(peer.socket)
            except zmq.Again:
                return
            header = ResponseHeader()
            try:
                header.ParseFromString(frames[0].buffer)
            except (DecodeError, ValueError):
                log.warning("dropped a malformed answer from %s", peer.address)
                continue
            call = peer.written.pop(header.call_id, None)
            if call is None:
                continue  # its caller gave up already
            call.reply = frames
            call.done.set()

    def _on_monitor(self, peer: _Peer) -> bool:
        """Apply `peer`'s connection events; True if its handshake failed (the calls waiting
        for it have failed with the reason, and the peer is to be closed)."""
        dropped = peer.drain_monitor()
        if peer.handshake_error and not peer.connected:
            failed = [*peer.backlog, *peer.written.values()]
            for call in failed:
                call.error = _handshake_error(peer, f"{call.header.method}: {peer.handshake_error}")
                call.done.set()
            if failed:
                log.info("%s: %d call(s) failed", peer.handshake_error, len(failed))
            return True
        if dropped and peer.written:
            log.info(
                "connection to %s lost with %d call(s) in flight", peer.address, len(peer.written)
            )
            for call in peer.written.values():
                call.error = ConnectionLost(f"connection to {peer.address} lost")
                call.done.set()
            peer.written.clear()
        return False

    def _expire(self, peers, now: float) -> None:
        for peer in peers:
            expired = [
                cid for cid, c in peer.written.items() if c.done.is_set() or now >= c.deadline
            ]
            for cid in expired:
                del peer.written[cid]


RETRYABLE = (ConnectionLost, NotConnected, errors.Throttled, errors.Unavailable)


# libzmq does not reconnect a connection whose handshake failed for authentication (ZAP
# refused the key) or protocol (CURVE on one side only): the session ends. A Poster then
# opens a new socket, at most this often.
_POSTER_REOPEN_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
POSTER_REOPEN_INTERVAL_S = 0.5


class Poster:
    """One-way messages to one server (RequestHeader.one_way): queued on a DEALER socket of
    its own without blocking; the server runs the handler and answers only a refusal
    (`refusals()` reads those). Only for messages whose loss does not matter (Raft's: it
    resends). Its owner closes it before the transport (else the transport leaves the zmq
    context open rather than wait for it forever).

    A handshake refused (a CURVE server that does not admit the key yet: a peer started
    again before its principals table came) is not retried by libzmq, so the next `post`
    after one opens a new socket (at most every POSTER_REOPEN_INTERVAL_S; `reopened` counts
    them): a peer that admits the key later gets the messages from then on.

    For one owning thread (zmq sockets are not thread-safe).
    `post` returns False when the message was not queued: no live connection (IMMEDIATE:
    nothing piles up for a peer that is down) or `queue_max` messages already waiting for
    the wire (a slow peer)."""

    def __init__(
        self,
        transport: Transport,
        address: str,
        caller_uuid: str,
        *,
        queue_max: int = 16,
        recipient_uuid: str = "",
        server_key: str = "",
    ) -> None:
        """On a CURVE transport the socket is a CURVE client of the key of `recipient_uuid`
        (or of `server_key`), as a call's (Transport.link_key)."""
        assert queue_max >= 1
        self._link_key = transport.link_key(address, recipient_uuid, server_key)
        self.address = address
        self.message_bytes_max = transport.message_bytes_max
        self._queue_max = queue_max
        self._transport = transport
        self.socket, self._monitor = self._open()
        self._refused = False  # a handshake failed since the socket was opened
        self._opened_at = time.monotonic()
        self.reopened = 0
        with transport._lock:
            transport._posters.add(self)
        self._header = RequestHeader(caller_uuid=caller_uuid, one_way=True)
        self._ids = itertools.count(1)

    def _open(self) -> tuple[zmq.Socket, zmq.Socket]:
        transport = self._transport
        sock = transport._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.SNDHWM, self._queue_max)
        sock.setsockopt(zmq.RCVHWM, REFUSALS_QUEUED_MAX)  # beyond, zmq drops them
        sock.setsockopt(zmq.RECONNECT_IVL, 20)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        _set_curve(sock, transport.curve.keypair if transport.curve else None, self._link_key)
        monitor = sock.get_monitor_socket(_POSTER_REOPEN_EVENTS)
        sock.connect(endpoint(self.address))
        return sock, monitor

    def _close_socket(self) -> None:
        self.socket.disable_monitor()
        self._monitor.close(linger=0)
        self.socket.close(linger=0)

    def _reopen_if_refused(self) -> None:
        # Per post, on the Raft path: a flag read, not a failing recv (an exception) each time.
        while self._monitor.get(zmq.EVENTS) & zmq.POLLIN:
            zmq.utils.monitor.recv_monitor_message(self._monitor, zmq.NOBLOCK)
            self._refused = True
        now = time.monotonic()
        if not self._refused or now - self._opened_at < POSTER_REOPEN_INTERVAL_S:
            return
        self._close_socket()
        self.socket, self._monitor = self._open()
        self._refused = False
        self._opened_at = now
        self.reopened += 1

    def post(self, recipient_uuid: str, method: str, body: bytes, timeout_s: float) -> bool:
        """Queue one message for `method` at `recipient_uuid`; the server drops it unread
        once `timeout_s` has passed since it arrived (its clock, like any call's)."""
        assert timeout_s > 0
        if len(body) > self.message_bytes_max:
            raise errors.BadRequest(
                f"message of {len(body)} bytes exceeds the limit of {self.message_bytes_max}"
            )
        header = self._header
        header.call_id = next(self._ids)
        header.method = method
        header.recipient_uuid = recipient_uuid
        header.timeout_ms = max(1, int(timeout_s * 1000))
        self._reopen_if_refused()
        try:
            send_frames(self.socket, [header.SerializeToString(), body])
        except zmq.Again:
            return False
        return True

    def refusals(self) -> list[errors.RpcError]:
        """The refusals answered since the last look (without waiting), as the errors a
        call would raise: INVALID_NAME from a server that is not the recipient, ..."""
        out: list[errors.RpcError] = []
        while True:
            try:
                frames = recv_frames(self.socket)
            except zmq.Again:
                return out
            header = ResponseHeader()
            try:
                header.ParseFromString(frames[0].bytes)
            except (DecodeError, ValueError):
                continue  # not an answer of this protocol: nothing to learn from it
            if header.status != _OK:
                out.append(errors.error_from_header(header))

    def close(self) -> None:
        """Close the socket; what is still queued is dropped."""
        self._close_socket()
        with self._transport._lock:
            self._transport._posters.discard(self)


class PendingCall:
    """A call in flight; `result()` waits for it (until the call's own deadline)."""

    __slots__ = ("_transport", "_call", "_response_type")

    def __init__(self, transport: Transport, call: _Call | None, response_type: type) -> None:
        self._transport = transport
        self._call = call
        self._response_type = response_type

    def done(self) -> bool:
        return self._call.done.is_set()

    def result(self):
        return self.result_with_sidecars()[0]

    def result_with_sidecars(self):
        """(response, [sidecar memoryviews]) once the answer is in."""
        call = self._call
        _, frames = self._transport.finish_call(call)
        return self._response(frames, call.address)

    def _response(self, frames: list, address: str):
        try:
            response = self._response_type.FromString(frames[0])
        except (DecodeError, ValueError) as exc:
            raise errors.Internal(f"malformed answer from {address}: {exc}") from None
        return response, frames[1:]


class _DirectPending(PendingCall):
    """A pipelined call sent on its caller's own socket; collected by that thread."""

    __slots__ = (
        "call_id",
        "prefix",
        "direct",
        "method",
        "deadline",
        "drops",
        "owner",
        "error",
        "answer",
    )

    def __init__(
        self,
        transport: Transport,
        response_type: type,
        call_id: int,
        prefix: bytes,
        direct: _DirectSocket,
        method: str,
        deadline: float,
        drops: int,
        owner: int,
    ) -> None:
        # (PendingCall's _call is not used: this is the call.)
        self._transport = transport
        self._response_type = response_type
        self.call_id = call_id
        self.prefix = prefix  # the call id as the header's first field (_call_id_prefix)
        self.direct = direct
        self.method = method
        self.deadline = deadline
        self.drops = drops  # the socket's drop count when it was sent
        self.owner = owner  # threading.get_ident() of the caller
        # Not sent, or failed when collected: raised by the result (again, if asked again).
        self.error: errors.RpcError | None = None
        # (ResponseHeader, or None for an OK answer recognized by its bytes; its frames)
        self.answer: tuple | None = None

    def done(self) -> bool:
        return self._transport.direct_done(self)

    def result(self):
        # (result_with_sidecars but for the sidecars, without the call through it)
        reply = self._transport.finish_direct(self)
        try:
            return self._response_type.FromString(reply[1] if len(reply) > 1 else b"")
        except (DecodeError, ValueError) as exc:
            raise errors.Internal(f"malformed answer from {self.direct.address}: {exc}") from None

    def result_with_sidecars(self):
        """(response, [sidecar memoryviews]) once the answer is in."""
        reply = self._transport.finish_direct(self)
        try:
            response = self._response_type.FromString(reply[1] if len(reply) > 1 else b"")
        except (DecodeError, ValueError) as exc:
            raise errors.Internal(f"malformed answer from {self.direct.address}: {exc}") from None
        return response, reply[2:]


class RpcClient:
    """Calls to one server address. Thread-safe; a context manager."""

    def __init__(
        self,
        address: str,
        caller_uuid: str = "",
        *,
        transport: Transport | None = None,
        privileged_key: bytes | None = None,
        curve: ClientCurve | None = None,
        server_key: str = "",
    ) -> None:
        """`privileged_key` (rpc.privileged.derive_key of the cluster's secret): every call
        is signed with it, so that the server runs its privileged methods.

        `curve` (for the transport this client makes; a shared transport has its own):
        CURVE with its key pair. `server_key`: the public key of the server at `address`,
        for calls whose UUID the ClientCurve has no key for (a Ping names none)."""
        endpoint(address)  # validates
        assert transport is None or curve is None, "a shared transport has its own keys"
        self.address = address
        self.caller_uuid = caller_uuid
        self.privileged_key = privileged_key
        self.server_key = server_key
        self._owns_transport = transport is None
        self._transport = transport or Transport(curve=curve)
        if server_key:
            self._transport.link_key(address, "", server_key)  # refuses it without a key pair

    def call(
        self,
        recipient_uuid: str,
        method: str,
        request: Message,
        response_type: type,
        *,
        timeout_s: float = 5.0,
        idempotent: bool = False,
        sidecars=(),
    ):
        response, _ = self.call_with_sidecars(
            recipient_uuid,
            method,
            request,
            response_type,
            timeout_s=timeout_s,
            idempotent=idempotent,
            sidecars=sidecars,
        )
        return response

    def call_with_sidecars(
        self,
        recipient_uuid: str,
        method: str,
        request: Message,
        response_type: type,
        *,
        timeout_s: float = 5.0,
        idempotent: bool = False,
        sidecars=(),
    ):
        """Returns (response, [sidecar memoryviews]); raises rpc.errors.* on failure."""
        started = time.monotonic()
        deadline = started + timeout_s
        body = request.SerializeToString()
        auth_tag = (
            privileged.tag(self.privileged_key, method, recipient_uuid, self.caller_uuid, body)
            if self.privileged_key
            else b""
        )
        backoff_s = RETRY_BACKOFF_INITIAL_S
        for attempt in range(1, RETRY_ATTEMPTS_MAX + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.TimedOut(
                    f"{method} to {self.address}: no time left after {attempt - 1} attempt(s)"
                )
            try:
                _, frames = self._transport.call_frames(
                    self.address,
                    recipient_uuid,
                    self.caller_uuid,
                    method,
                    body,
                    sidecars,
                    remaining,
                    auth_tag,
                    self.server_key,
                )
                break
            except RETRYABLE as err:
                if not idempotent:
                    raise
                pause = max(backoff_s, err.retry_after_ms / 1000.0) * random.uniform(0.5, 1.5)
                if attempt == RETRY_ATTEMPTS_MAX or time.monotonic() + pause >= deadline:
                    if attempt > 1:  # the last attempt's message alone would understate it
                        elapsed = time.monotonic() - started
                        err.message += f" (gave up after {attempt} attempts in {elapsed:.1f}s)"
                    raise
                log.debug("%s to %s: %s; retrying in %.3fs", method, self.address, err, pause)
                time.sleep(pause)
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)
        response = response_type()
        try:
            response.ParseFromString(frames[0])
        except (DecodeError, ValueError) as exc:
            raise errors.Internal(f"malformed {method} answer from {self.address}: {exc}") from None
        return response, frames[1:]

    def call_async(
        self,
        recipient_uuid: str,
        method: str,
        request: Message,
        response_type: type,
        *,
        timeout_s: float = 5.0,
        sidecars=(),
    ) -> PendingCall:
        """Send now, collect later with `.result()`: many calls in flight from one thread
        (which collects them: the call may be on that thread's own socket).

        No retries: a pending call is one attempt."""
        body = request.SerializeToString()
        auth_tag = (
            privileged.tag(self.privileged_key, method, recipient_uuid, self.caller_uuid, body)
            if self.privileged_key
            else b""
        )
        return self._transport.send_call(
            self.address,
            recipient_uuid,
            self.caller_uuid,
            method,
            body,
            sidecars,
            timeout_s,
            response_type,
            auth_tag,
            self.server_key,
        )

    def ping(self, timeout_s: float = 2.0, *, idempotent: bool = True) -> PingResponse:
        """Learn who serves this address (the one call allowed without a recipient UUID)."""
        return self.call(
            "", PING_METHOD, PingRequest(), PingResponse, timeout_s=timeout_s, idempotent=idempotent
        )

    def close(self) -> None:
        if self._owns_transport:
            self._transport.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
