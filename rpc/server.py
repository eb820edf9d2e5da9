"""The rpc server: one ROUTER socket, registered methods, handlers on a bounded pool.

Wire format (design/wire-protocol.md): a request is [RequestHeader, body, *sidecars]; the
answer is [ResponseHeader, body, *sidecars]. One I/O thread owns the ROUTER socket: it reads
requests, rejects what is malformed, misaddressed, unknown or oversized (BAD_REQUEST or
INVALID_NAME, counted and logged, never fatal), and hands the rest to a worker pool whose
queue is bounded (THROTTLED when full). Workers never touch the ROUTER socket: they queue
answers on a deque that the I/O thread forwards, waking it (an eventfd) only when it may be
asleep. Handlers registered `inline` run on the I/O thread itself (no hand-off); a handler
may return a `Serialized` body it keeps ready (e.g. a cached answer), sent without building
a message. Methods registered `deferred` (inline too) may answer later, from any thread
(`ctx.later()`: e.g. the Raft thread that commits an append), with no thread waiting for it.
Methods registered `one_way` (inline too) also take one-way messages
(RequestHeader.one_way): the handler runs and only a refusal is answered (an error status),
never a success.

Metrics (design/operability.md): per method, answers by status and a latency histogram
(from receipt on the I/O thread to the answer built), kept in one shard per thread that
answers calls (the I/O thread and each worker): every shard has one writer, so a call pays
no lock, one clock read and a few list increments. `collect_metrics()` adds the shards up
into prometheus-client metric families when a daemon's `/metrics` is scraped.

CURVE (design/security.md §2, `curve=ServerCurve(...)`): the ROUTER is a CURVE server behind
zmq.auth's ZAP handler, which admits the keys the authorizer knows; every call is checked
again with the key the handshake proved (ZAP's User-Id on the header frame), so a revoked
key's next call is refused on a connection that is already open. Until the curve is `ready`
(the keys it admits loaded), an unknown key is let through and its calls are answered
UNAVAILABLE rather than refused (`_ZapKeys`). Plaintext without it.
"""

from __future__ import annotations

import logging
import operator
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq
from google.protobuf.message import DecodeError, Message
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from zmq.auth.thread import ThreadAuthenticator

from rpc import errors, privileged
from rpc.addresses import bind_endpoint, host_port_of
from rpc.frames import ZERO_COPY_BYTES_MIN, ok_header, recv_frames, send_frames
from rpc.handshakes import HandshakeLog
from rpc.keys import ServerCurve
from rpc.observe import LatencyHistogram, histogram_family
from rpc.refusals import RefusalLog
from rpc.rpc_pb2 import PingRequest, PingResponse, RequestHeader, ResponseHeader, StatusCode

PING_METHOD = "rpc.Ping"
ZAP_DOMAIN = "logcentric"
MESSAGE_BYTES_MAX_DEFAULT = 64 << 20
# Frames far past the message limit are not even buffered: zmq drops the connection instead.
FRAME_BYTES_HARD_FACTOR = 2
CALL_TIMEOUT_MS_DEFAULT = 30_000
CALL_TIMEOUT_MS_MAX = 600_000
POLL_INTERVAL_MS = 50
# The pool (design/wire-protocol.md, "One worker awake"): calls of a method whose handler
# returned within QUICK_HANDLER_S its last QUICK_CALLS_MIN times are queued for the worker
# already awake, which takes them one after the other (one wake-up per burst, not one per
# call); any other call wakes a worker of its own, as before. When the oldest queued call
# has not been taken for STALL_MS (the awake workers block after all, or wait for a CPU),
# one more worker is woken, and so on every STALL_MS: a quick method's call that blocks
# holds up the calls queued behind it by about STALL_MS.
QUICK_HANDLER_S = 0.001
QUICK_CALLS_MIN = 8
STALL_MS = 2
DRAIN_BATCH_MAX = 256
# Requests read (and answered when inline) in one go before their answers are sent, in one
# burst: zmq's I/O thread is woken once per burst rather than once per answer. Bounds the
# wait of the first answer of a burst (some 64 x 15 us of Python).
READ_BATCH_MAX = 64

_OK = int(StatusCode.OK)
_THROTTLED = int(StatusCode.THROTTLED)
_TIMED_OUT = int(StatusCode.TIMED_OUT)
_STATUS_CODES = max(StatusCode.values()) + 1
_NO_ANSWER: list = []  # _invoke's result for a one-way message that succeeded
_LATER: list = []  # _invoke's result for a deferred call (its Later answers)
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_STAT_KEYS = (
    "requests",
    "ok",
    "errors",
    "bad_request",
    "invalid_name",
    "throttled",
    "timed_out",
    "internal",
    "unauthenticated",
)

# Refusals are logged at most REFUSALS_LOGGED_MAX per REFUSALS_LOG_WINDOW_S per server (a
# misconfigured or hostile peer can send thousands a second); the rest are counted, in
# stats() and in one line when the next window opens.
REFUSALS_LOGGED_MAX = 20
REFUSALS_LOG_WINDOW_S = 10.0

log = logging.getLogger(__name__)
_parse_request_header = RequestHeader.FromString
_frame_buffer = operator.attrgetter("buffer")  # a received frame's bytes, not copied


class _ZapKeys:
    """The ZAP handler's credentials provider: a CURVE client key is admitted if the
    server's authorizer gives it a principal (zmq.auth hands it the key in z85). Refusals
    are logged by rpc.handshakes: a WARNING only for a key still refused after the
    admission window.

    While the server's curve is not `ready` (the keys it admits are not loaded yet: a
    coordinator node that started again and has not replayed its log), a key the authorizer
    does not know is not refused (a refusal is final for the client: `KeyRefused`) but
    admitted for now: every call on that connection is then checked as always, and answered
    UNAVAILABLE while the server is not ready, UNAUTHENTICATED once it is and the key is
    still unknown (`RpcServer._dispatch`). ZAP's own "try later" (status 300) is no way
    out: libzmq then drops the connection without telling the client why, and a second
    connection of the same client hung in its handshake (pyzmq 27.3, libzmq 4.3.5)."""

    def __init__(self, server: RpcServer) -> None:
        self._server = server
        self._handshakes = HandshakeLog(server.service, server._refusals.warning)
        self._not_ready_keys: set[str] = set()  # keys let in while not ready (logged once)

    def callback(self, domain: str, key: bytes) -> bool:
        text = key.decode("ascii", "replace")
        server = self._server
        if server._authorize(text) is not None:
            self._handshakes.admitted(text)
            return True
        if server._not_ready():
            server._io_stats["handshakes_not_ready"] += 1  # this thread's key alone
            if text not in self._not_ready_keys and len(self._not_ready_keys) < 1024:
                self._not_ready_keys.add(text)
                log.info(
                    "%s let key %s through the CURVE handshake without knowing it: the keys "
                    "it admits are not loaded yet, so its calls are answered UNAVAILABLE "
                    "until they are (then UNAUTHENTICATED if it is still unknown)",
                    server.service or "rpc server",
                    text,
                )
            return True
        self._handshakes.refused(text)
        return False


def _refusal_log(
    burst: int = REFUSALS_LOGGED_MAX, window_s: float = REFUSALS_LOG_WINDOW_S
) -> RefusalLog:
    """Warnings of refused calls, at most `burst` per `window_s`."""
    return RefusalLog(
        log, "refused calls", burst, window_s, "; all are counted in the server's stats"
    )


@dataclass(slots=True)
class CallContext:
    """What a handler knows about the call besides its request body."""

    method: str
    caller_uuid: str
    deadline: float  # time.monotonic() value after which nobody waits for the answer
    sidecars: list[memoryview] = field(default_factory=list)
    one_way: bool = False  # nobody waits for the answer (RequestHeader.one_way)
    received: float = 0.0  # time.monotonic() when the I/O thread read the request
    # With CURVE (RpcServer(curve=...)): the caller's public key (z85), as the handshake
    # proved it, and what the server's authorizer answered for it at this call.
    peer_key: str = ""
    principal: Any = None
    # Set for methods registered `deferred`: (server, identity, call_id, method); and the
    # Later that later() made, if any.
    _call: tuple | None = None
    _later: Later | None = None

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def later(self) -> Later:
        """The handle of an answer given later (the handler returns it): for methods
        registered `deferred` only, once per call, from the handler (on the I/O thread)."""
        assert self._call is not None, f"{self.method} is not registered deferred=True"
        assert self._later is None, "later() called twice"
        server, identity, call_id, method = self._call
        self._later = server._defer(identity, call_id, method, self)
        return self._later


class Later:
    """A call answered later by `reply` or `fail`, from any thread, at most once (what
    comes after the first, or after the call's deadline, is dropped: the deadline passed,
    the caller was answered TIMED_OUT). Made by CallContext.later()."""

    __slots__ = ("_server", "_key", "_identity", "_call_id", "_method", "_ctx")

    def __init__(self, server: RpcServer, key: int, identity, call_id: int, method, ctx) -> None:
        self._server = server
        self._key = key
        self._identity = identity
        self._call_id = call_id
        self._method = method
        self._ctx = ctx

    def reply(self, result: Message | Serialized | Reply) -> bool:
        """Answer the call (as a handler's return value would); False if it was answered
        already or its deadline passed."""
        if self._server._deferred.pop(self._key, None) is None:  # atomic: one claim wins
            return False
        server, ctx = self._server, self._ctx
        status, frames, stat = server._result_frames(self._call_id, ctx, result)
        server._queue_reply((self._identity, frames, self._method, status, ctx.received, (stat,)))
        return True

    def run(self, fn: Callable[[], Message | Serialized | Reply]) -> None:
        """Finish the call on the worker pool: a worker calls `fn()` and answers with what
        it returns or raises, as a pool handler's (for the rare path that must block, e.g.
        a retry with backoff). Any thread; the call stays counted in flight meanwhile."""
        server = self._server
        server._work_items.append(_LaterWork(self, fn))
        server._work.put(True)  # a worker of its own (it may well block)
        # The I/O thread looks again at the queue (answers held back while this one waits
        # are forwarded after STALL_MS: see _io_loop).
        server._wake_io()

    def fail(self, err: errors.RpcError) -> bool:
        """Answer the call with `err`'s status; False if it was answered already or its
        deadline passed."""
        if self._server._deferred.pop(self._key, None) is None:
            return False
        server = self._server
        if isinstance(err, errors.Internal):
            stat: tuple[str, ...] = ("internal",)
        elif isinstance(err, errors.BadRequest):
            stat = ("errors", "bad_request")
        else:
            stat = ("errors",)
        log.debug("call %d to %s answered %s", self._call_id, self._ctx.method, err)
        frames = server._error_frames(self._call_id, err)
        server._queue_reply(
            (self._identity, frames, self._method, int(err.status), self._ctx.received, stat)
        )
        return True


class Serialized(bytes):
    """A body already serialized by the handler (e.g. an answer it keeps cached): sent as is.
    The handler vouches that these are the bytes of its method's response message."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class _LaterWork:
    """A deferred call finished on the pool (Later.run)."""

    later: Later
    fn: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer with sidecar frames of bulk bytes."""

    body: Message | Serialized
    sidecars: Sequence[bytes | memoryview] = ()


Handler = Callable[[Any, CallContext], "Message | Serialized | Reply"]


@dataclass(frozen=True, slots=True)
class _Method:
    request_type: type
    handler: Handler
    anonymous: bool
    inline: bool
    one_way: bool
    privileged: bool = False
    index: int = 0  # its place in every metrics shard
    deferred: bool = False


class _MethodStats:
    """One method's answers by status code and their latency, as one thread saw them."""

    __slots__ = ("statuses", "latency")

    def __init__(self) -> None:
        self.statuses = [0] * _STATUS_CODES
        self.latency = LatencyHistogram()


class RpcServer:
    """Serves registered methods on one ROUTER socket. Use as a context manager."""

    def __init__(
        self,
        uuid: str,
        bind: str = "127.0.0.1:0",
        *,
        service: str = "",
        workers: int = 8,
        queue_max: int = 256,
        message_bytes_max: int = MESSAGE_BYTES_MAX_DEFAULT,
        privileged_key: bytes | None = None,
        metrics: bool = True,
        curve: ServerCurve | None = None,
    ) -> None:
        """`privileged_key` (rpc.privileged.derive_key of the cluster's secret): privileged
        methods answer only requests signed with it. None leaves them open: only for a
        development server that anyone who can reach it may manage (its owner's choice).

        `metrics` False keeps no per-method counts or latencies (for benchmarks comparing
        the cost); `stats()` and the server-wide counters are kept either way.

        `curve` (rpc.keys.ServerCurve): every connection is CURVE-encrypted and
        authenticated with the server's key pair; a ZAP handler admits only the keys its
        authorizer knows, and every call is checked again with the key the handshake proved
        (CallContext.peer_key, .principal). None: plaintext, anyone may connect."""
        assert uuid, "a server needs a UUID"
        assert workers >= 1 and queue_max >= 1 and message_bytes_max >= 1024
        self.uuid = uuid
        self.service = service
        self._bind = bind
        self._workers = workers
        self._queue_max = queue_max
        self.message_bytes_max = message_bytes_max
        self._methods: dict[str, _Method] = {}
        self._privileged_key = privileged_key
        self._curve = curve
        self._authorizer = curve.authorizer if curve else None
        self._ready = curve.ready if curve else None
        self._zap: ThreadAuthenticator | None = None
        self._ctx = zmq.Context()
        self._router: zmq.Socket | None = None
        # Answers for the I/O thread to send: a worker's [identity, *frames]; a deferred
        # call's (identity, frames, method, status, received, stats keys); None (a worker
        # that answered nothing: only counted). deque.append/popleft are atomic, so no
        # lock. A thread that queues one wakes the I/O thread (eventfd) only if it takes
        # the token in `_wake_armed`, which the I/O thread puts back before it looks at the
        # deque and sleeps: one wake-up per batch, none while it is awake anyway.
        self._replies: deque = deque()
        # Answers of the I/O thread's current turn, sent together at its end (_flush).
        self._outbox: list[list] = []
        self._wake_armed: list[bool] = []
        self._wake_lock = threading.Lock()  # against close() closing the eventfd
        self._wake_fd = -1
        # Deferred calls not answered yet, by key (dict.pop is the atomic claim of the one
        # that answers: the Later, or the I/O thread when the deadline passes).
        self._deferred: dict[int, Later] = {}
        self._deferred_keys = 0
        # Work for the pool; its length is bounded by the in-flight count checked at dispatch.
        self._work_items: deque = deque()
        # Wake tokens for sleeping workers (True; None: stop). The I/O thread puts one per
        # call not known to be quick, and one per turn that queued quick calls while no
        # worker was busy (see _wake_workers).
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        # Per worker: taking calls (written by that worker alone).
        self._busy: list[bool] = []
        # Per method (its index): how many of its last calls returned within QUICK_HANDLER_S
        # in a row (written by the workers; a lost update only makes a call wake a worker).
        self._quick_calls: list[int] = []
        # The I/O thread's: workers to wake at the end of this turn (calls not known to be
        # quick), whether it queued quick calls, and the stall check's oldest queued call.
        self._wake_for = 0
        self._queued_quick = False
        self._stall_head: Any = None
        self._stall_since = 0.0
        self._pool: list[threading.Thread] = []
        self._io_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Counters of the I/O thread and of each worker: each dict has one writer (no
        # lock); stats() adds them up.
        self._io_stats: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self._io_stats["pool_wakeups"] = 0  # workers woken by the I/O thread
        # Handshakes of unknown keys let through while not ready (_ZapKeys' thread), and the
        # calls answered UNAVAILABLE for it (the I/O thread's).
        self._io_stats["handshakes_not_ready"] = 0
        self._io_stats["not_ready"] = 0
        self._worker_stats: list[dict[str, int]] = []
        # An OK answer's header as protobuf serializes it, but for its call id (frames.py).
        self._ok_header_rest = ResponseHeader(status=_OK, server_uuid=uuid).SerializeToString()
        # Calls handed to the pool or deferred and not forwarded yet: only the I/O thread
        # writes it (up at dispatch, down when it forwards the answer).
        self._inflight = 0
        self._address = ""
        self._refusals = _refusal_log()
        self._metrics = metrics
        # Per-method metrics: shard 0 is the I/O thread's, shard 1 + i worker i's (made at
        # start(), once every method is registered).
        self._shards: list[list[_MethodStats]] = []
        self.register(PING_METHOD, PingRequest, self._ping, anonymous=True, inline=True)

    # -- setup -------------------------------------------------------------------------

    def register(
        self,
        method: str,
        request_type: type,
        handler: Handler,
        *,
        anonymous: bool = False,
        inline: bool = False,
        one_way: bool = False,
        privileged: bool = False,
        deferred: bool = False,
    ) -> None:
        """Serve `method`. `anonymous` methods also accept an empty recipient UUID.

        `privileged` methods (membership changes, replica deletion) run only for requests
        signed with the server's `privileged_key` (rpc/privileged.py).

        `inline` handlers run on the I/O thread, saving two thread hand-offs per call; only
        for handlers that never block (no locks held by slow code, no I/O, no waiting).
        `one_way` methods (inline only) also accept messages that want no answer.
        `deferred` handlers (inline, never blocking) may answer later from any thread:
        they return `ctx.later()` and call its `reply` or `fail` (e.g. from the callback of
        work they started); no thread waits meanwhile. Such calls count against the pool's
        limit (THROTTLED past `queue_max + workers` calls in progress) and are answered
        TIMED_OUT once their deadline passes unanswered.
        """
        assert self._io_thread is None, "register methods before start()"
        assert method not in self._methods, f"method {method} registered twice"
        assert inline or not one_way, "one-way methods run inline"
        assert inline or not deferred, "deferred methods run inline"
        assert not (deferred and one_way), "a one-way message has no answer to defer"
        assert not (privileged and (anonymous or one_way)), "a privileged call names its server"
        self._methods[method] = _Method(
            request_type,
            handler,
            anonymous,
            inline,
            one_way,
            privileged,
            len(self._methods),
            deferred,
        )

    @property
    def address(self) -> str:
        """host:port actually bound (resolves port 0)."""
        return self._address

    def start(self) -> RpcServer:
        """Bind and start serving. A bad address raises BadRequest, a failed bind (address
        in use, no such interface) OSError; either way nothing is left open, so close()
        still returns promptly (zmq's Context.term() waits for every open socket)."""
        assert self._io_thread is None, "start() called twice"
        assert not self._stopping.is_set(), "start() after close()"
        endpoint = bind_endpoint(self._bind)  # BadRequest before any socket exists
        try:
            self._open_sockets(endpoint)
        except BaseException:
            self._close_sockets()
            raise
        if self._metrics:
            self._shards = [
                [_MethodStats() for _ in self._methods] for _ in range(self._workers + 1)
            ]
        self._worker_stats = [dict.fromkeys(_STAT_KEYS, 0) for _ in range(self._workers)]
        self._busy = [False] * self._workers
        self._quick_calls = [0] * len(self._methods)
        self._pool = [
            threading.Thread(
                target=self._worker_loop,
                args=(i, self._shards[i + 1] if self._shards else None, self._worker_stats[i]),
                name=f"rpc-{self.service or 'server'}-worker-{i}",
                daemon=True,
            )
            for i in range(self._workers)
        ]
        for thread in self._pool:
            thread.start()
        self._io_thread = threading.Thread(
            target=self._io_loop, name=f"rpc-{self.service or 'server'}-io", daemon=True
        )
        self._io_thread.start()
        log.info("%s %s serving on %s", self.service or "rpc server", self.uuid, self._address)
        return self

    def _open_sockets(self, endpoint: str) -> None:
        if self._curve is not None:
            self._start_zap()
        self._router = router = self._ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        if self._curve is not None:
            router.curve_server = True
            router.curve_publickey = self._curve.keypair.public.encode("ascii")
            router.curve_secretkey = self._curve.keypair.secret.encode("ascii")
            router.zap_domain = ZAP_DOMAIN.encode("ascii")
        router.setsockopt(zmq.MAXMSGSIZE, self.message_bytes_max * FRAME_BYTES_HARD_FACTOR)
        router.setsockopt(zmq.RCVHWM, 10_000)
        router.setsockopt(zmq.SNDHWM, 10_000)
        try:
            router.bind(endpoint)
        except zmq.ZMQError as exc:
            # An operating error (the address is taken, or not this host's): say which
            # address, without zmq's traceback. OSError, as a plain socket bind raises.
            err = OSError(f"cannot bind {self._bind}: {zmq.strerror(exc.errno)}")
            err.errno = exc.errno
            raise err from None
        self._address = host_port_of(router.getsockopt_string(zmq.LAST_ENDPOINT))
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def _start_zap(self) -> None:
        """The ZAP handler of this server's context (zmq.auth's, on a thread of its own): it
        admits a CURVE client whose key the authorizer knows. It is bound before the ROUTER
        so that no connection is ever accepted without it (libzmq lets every CURVE client
        in when no ZAP handler is bound)."""
        self._zap = ThreadAuthenticator(self._ctx, log=logging.getLogger(__name__ + ".zap"))
        self._zap.start()
        self._zap.configure_curve_callback(ZAP_DOMAIN, _ZapKeys(self))

    def _close_sockets(self) -> None:
        # Closing twice (a failed start(), then close()) is harmless: zmq ignores it.
        if self._router is not None:
            self._router.close(linger=0)
        with self._wake_lock:
            if self._wake_fd >= 0:
                os.close(self._wake_fd)
                self._wake_fd = -1
        if self._zap is not None:
            zap, self._zap = self._zap, None
            zap.stop()

    def stats(self) -> dict[str, int]:
        out = dict(self._io_stats)
        for stats in self._worker_stats:
            for key, n in list(stats.items()):
                out[key] += n
        out["inflight"] = self._inflight
        return out

    def method_stats(self) -> dict[str, tuple[dict[str, int], LatencyHistogram]]:
        """Per method called at least once: answers by status name and the latency
        histogram, the shards added up (empty when metrics are off)."""
        out: dict[str, tuple[dict[str, int], LatencyHistogram]] = {}
        if not self._shards:
            return out
        for name, method in list(self._methods.items()):
            statuses = [0] * _STATUS_CODES
            latency = LatencyHistogram()
            for shard in self._shards:
                s = shard[method.index]
                statuses = [a + b for a, b in zip(statuses, s.statuses, strict=True)]
                latency.counts = [
                    a + b for a, b in zip(latency.counts, s.latency.counts, strict=True)
                ]
                latency.sum_s += s.latency.sum_s
            if any(statuses):
                by_name = {StatusCode.Name(code): n for code, n in enumerate(statuses) if n}
                out[name] = (by_name, latency)
        return out

    def collect_metrics(self) -> list[Metric]:
        """This server's metric families (a daemon registers them through a
        rpc.observe.ScrapeCollector): calls by method and status, latency by method,
        requests received, refusals, THROTTLED, calls in flight and queued."""
        service = self.service or "rpc"
        calls = CounterMetricFamily(
            "logcentric_rpc_calls",
            "Calls answered, by method and status (one-way messages answered or not)",
            labels=["service", "method", "status"],
        )
        per_method = self.method_stats()
        for name, (statuses, _latency) in sorted(per_method.items()):
            for status, n in sorted(statuses.items()):
                calls.add_metric([service, name, status], n)
        latency = histogram_family(
            "logcentric_rpc_call_latency_seconds",
            "From receipt by the I/O thread to the answer built (queueing included)",
            ["service", "method"],
            [([service, name], h) for name, (_s, h) in sorted(per_method.items())],
        )
        stats = self.stats()
        requests = CounterMetricFamily(
            "logcentric_rpc_requests",
            "Requests and one-way messages read from the socket",
            labels=["service"],
        )
        requests.add_metric([service], stats["requests"])
        rejected = CounterMetricFamily(
            "logcentric_rpc_rejected",
            "Calls refused before or by their handler as malformed (bad_request), sent "
            "to another server (invalid_name) or from a key not admitted (unauthenticated)",
            labels=["service", "reason"],
        )
        rejected.add_metric([service, "bad_request"], stats["bad_request"])
        rejected.add_metric([service, "invalid_name"], stats["invalid_name"])
        rejected.add_metric([service, "unauthenticated"], stats["unauthenticated"])
        throttled = CounterMetricFamily(
            "logcentric_rpc_throttled",
            "Calls answered THROTTLED: the worker pool's queue was full",
            labels=["service"],
        )
        throttled.add_metric([service], stats["throttled"])
        inflight = GaugeMetricFamily(
            "logcentric_rpc_inflight_calls",
            "Calls handed to the worker pool and not answered yet (queued or running)",
            labels=["service"],
        )
        inflight.add_metric([service], stats["inflight"])
        queued = GaugeMetricFamily(
            "logcentric_rpc_queue_depth_calls",
            "Calls waiting for a free worker",
            labels=["service"],
        )
        queued.add_metric([service], len(self._work_items))
        workers = GaugeMetricFamily(
            "logcentric_rpc_workers", "Threads of the worker pool", labels=["service"]
        )
        workers.add_metric([service], self._workers)
        return [calls, latency, requests, rejected, throttled, inflight, queued, workers]

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reading, let running handlers finish (bounded), close sockets."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._wake_lock:  # the I/O thread may wait with no timeout (_io_loop)
            if self._wake_fd >= 0:
                os.eventfd_write(self._wake_fd, 1)
        if self._io_thread is not None:
            self._io_thread.join(timeout_s)
            if self._io_thread.is_alive():
                log.warning("rpc io thread did not stop within %.1fs", timeout_s)
        for _ in self._pool:
            self._work.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in self._pool:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("%s did not stop within %.1fs", thread.name, timeout_s)
        self._close_sockets()
        self._ctx.term()

    def __enter__(self) -> RpcServer:
        if self._io_thread is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- I/O thread --------------------------------------------------------------------

    def _io_loop(self) -> None:
        assert self._router is not None and self._wake_fd >= 0
        router = self._router
        wake_fd = self._wake_fd
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(wake_fd, zmq.POLLIN)
        replies = self._replies
        armed = self._wake_armed
        work_items = self._work_items
        next_expiry = 0.0
        while not self._stopping.is_set():
            if not self._inflight:
                # Nothing on the pool or deferred, so no answer can come until this thread
                # hands out work (an answer is counted out only when forwarded): wait for a
                # request, or for close() (it writes the wake fd), with no timeout, then
                # receive it. A wait with a timeout (a blocking receive, RCVTIMEO 50 ms)
                # woke an idle server 20 times a second, about 100 us of CPU each on this
                # VM: 0.2% of a core for nothing (issue 28).
                try:
                    ready = poller.poll()
                except zmq.ZMQError as exc:  # interrupted system call and the like
                    log.debug("poll interrupted: %s", exc)
                    continue
                for sock, _event in ready:
                    if sock is not router:
                        try:
                            os.eventfd_read(wake_fd)  # a stale wake-up, or close()
                        except BlockingIOError:
                            pass
                try:
                    frame = router.recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    continue  # the wake fd alone: look at the stop flag
                except zmq.ZMQError as exc:
                    log.debug("receive interrupted: %s", exc)
                    continue
                frames = [frame]
                while frame.more:
                    frame = router.recv(_NOBLOCK, copy=False)
                    frames.append(frame)
                self._handle(frames)
                self._read_requests()  # what else came meanwhile, answered in one burst
                self._flush()
                if self._wake_for or self._queued_quick:
                    self._wake_workers()
                continue
            if not armed:
                armed.append(True)  # before looking at the deque: see _replies
            # Calls queued for the pool are looked at before answers: an answer a worker
            # held back (_worker_loop) was queued while calls were, and only this thread
            # queues calls; so either it is seen here, or calls are queued and this thread
            # wakes after STALL_MS.
            timeout_ms = STALL_MS if work_items else POLL_INTERVAL_MS
            try:
                ready = poller.poll(0 if replies else timeout_ms)
            except zmq.ZMQError as exc:  # interrupted system call and the like
                log.debug("poll interrupted: %s", exc)
                continue
            readable = False
            for sock, _event in ready:
                if sock is router:
                    readable = True
                else:
                    try:
                        os.eventfd_read(wake_fd)
                    except BlockingIOError:
                        pass
            if replies:
                # Sent at once, a burst of their own: they need not wait for this turn's
                # requests to be read.
                self._forward_replies()
                self._flush()
            if readable:
                self._read_requests()
            if self._deferred:
                now = time.monotonic()
                if now >= next_expiry:
                    self._expire_deferred(now)
                    next_expiry = now + POLL_INTERVAL_MS / 1000.0
            if self._outbox:
                self._flush()
            if work_items or self._wake_for or self._queued_quick:
                self._wake_workers()
        # Answers computed after the stop are dropped: their callers see a lost connection.

    def _forward_replies(self) -> None:
        """Send the queued answers (at most DRAIN_BATCH_MAX: requests get their turn)."""
        replies = self._replies
        shard = self._io_shard()
        io_stats = self._io_stats
        for _ in range(DRAIN_BATCH_MAX):
            if not replies:  # only this thread takes from it
                return
            item = replies.popleft()
            self._inflight -= 1
            if type(item) is list:  # a worker's answer, counted by the worker
                self._send(item)
            elif item is not None:  # a deferred call's, counted here
                identity, frames, method, status, received, stat_keys = item
                for key in stat_keys:
                    io_stats[key] += 1
                if shard is not None:
                    stats = shard[method.index]
                    stats.statuses[status] += 1
                    stats.latency.observe(time.monotonic() - received)
                self._send([identity, *frames])

    def _wake_workers(self) -> None:
        """I/O thread, at the end of a turn with calls queued for the pool: wake a worker
        for each call this turn queued that is not known to be quick, one for its quick
        calls if no worker is busy (a busy one takes them when done), and one more if the
        oldest call queued has waited STALL_MS for a worker (those awake are blocked)."""
        wake = self._wake_for
        self._wake_for = 0
        queued_quick, self._queued_quick = self._queued_quick, False
        try:
            head = self._work_items[0]
        except IndexError:
            self._stall_head = None
            return  # busy workers took every call meanwhile
        busy = self._busy
        tokens = self._work
        if queued_quick and not wake and True not in busy and not tokens.qsize():
            wake = 1
        if head is not self._stall_head:
            self._stall_head, self._stall_since = head, time.monotonic()
        else:
            now = time.monotonic()
            if now - self._stall_since >= STALL_MS / 1000.0:
                self._stall_since = now
                wake += 1
        if wake:
            # Tokens past the sleeping workers would only pile up.
            wake = min(wake, busy.count(False) - tokens.qsize())
            self._io_stats["pool_wakeups"] += max(0, wake)
            for _ in range(wake):
                tokens.put(True)

    def _queue_reply(self, item) -> None:
        """Any thread: hand an answer to the I/O thread, waking it if it may sleep."""
        self._replies.append(item)
        self._wake_io()

    def _wake_io(self) -> None:
        """Any thread, after queueing answers: wake the I/O thread if it may sleep."""
        armed = self._wake_armed
        if not armed:  # the common case under load, tested first: no exception raised
            return  # the I/O thread is awake, or another answer of this batch woke it
        try:
            armed.pop()
        except IndexError:
            return  # another thread took the token since
        with self._wake_lock:
            if self._wake_fd >= 0:
                os.eventfd_write(self._wake_fd, 1)

    def _defer(self, identity, call_id: int, method: _Method, ctx: CallContext) -> Later:
        """I/O thread (CallContext.later()): a call to be answered later."""
        self._deferred_keys += 1
        key = self._deferred_keys
        later = Later(self, key, identity, call_id, method, ctx)
        self._deferred[key] = later
        self._inflight += 1
        return later

    def _expire_deferred(self, now: float) -> None:
        """Answer TIMED_OUT the deferred calls whose deadline passed (the caller gave up)."""
        deferred = self._deferred
        for key, later in list(deferred.items()):
            if later._ctx.deadline > now or deferred.pop(key, None) is None:
                continue
            self._inflight -= 1
            self._io_stats["timed_out"] += 1
            shard = self._io_shard()
            if shard is not None:
                shard[later._method.index].statuses[_TIMED_OUT] += 1
            err = errors.TimedOut("deadline passed before the call was answered")
            self._send([later._identity, *self._error_frames(later._call_id, err)])

    def _send(self, frames: list) -> None:
        """I/O thread: an answer to send at the end of this turn of the loop (_flush)."""
        self._outbox.append(frames)

    def _flush(self) -> None:
        """I/O thread: send the answers of this turn, one burst."""
        router = self._router
        assert router is not None
        for frames in self._outbox:
            try:
                send_frames(router, frames)
            except zmq.Again:
                # The caller's pipe is full (it stopped reading); its call will time out.
                log.warning("dropped an answer: the caller's queue is full")
            except zmq.ZMQError as exc:
                log.warning("dropped an answer: %s", exc)
        self._outbox.clear()

    def _read_requests(self) -> None:
        """Read and dispatch the requests queued now (at most READ_BATCH_MAX). Whether one
        is there is asked first (ZMQ_EVENTS, ~1 us): a receive that finds none raises
        zmq.Again (~5 us), which a turn of one request (a synchronous call) would pay."""
        router = self._router
        assert router is not None
        events = router.get
        for _ in range(READ_BATCH_MAX):
            if not events(_EVENTS) & _POLLIN:
                return
            try:
                frames = recv_frames(router)
            except zmq.Again:
                return
            self._handle(frames)

    def _handle(self, frames: list) -> None:
        try:
            self._dispatch(frames, time.monotonic())
        except errors.RpcError as err:
            # Rejected before reaching a handler: answered from this thread (a one-way
            # message too: refusals are the one answer it gets).
            call_id = getattr(err, "call_id", 0)
            self._send([frames[0], *self._error_frames(call_id, err)])

    def _dispatch(self, frames: list, received: float) -> None:
        # The hot path of every call: each field of the header is read once (a protobuf
        # attribute read builds a new object), and the common case (addressed to this
        # server, known method) is tested first; refusals keep their order and wording.
        io_stats = self._io_stats
        io_stats["requests"] += 1
        if len(frames) < 3:
            raise self._reject(
                errors.BadRequest(
                    f"expected [header, body, *sidecars], got {len(frames) - 1} frame(s)"
                )
            )
        identity = frames[0]
        try:
            header = _parse_request_header(frames[1].bytes)  # small: a copy costs least
        except (DecodeError, ValueError) as exc:
            raise self._reject(errors.BadRequest(f"malformed request header: {exc}")) from None
        call_id = header.call_id
        one_way = header.one_way
        size = sum(map(len, frames)) - len(identity)
        if size > self.message_bytes_max:
            raise self._reject(
                errors.BadRequest(
                    f"message of {size} bytes exceeds the limit of {self.message_bytes_max}"
                ),
                call_id,
                one_way,
            )
        name = header.method
        recipient = header.recipient_uuid
        method = self._methods.get(name)
        if recipient != self.uuid:
            if not recipient:
                if not (method and method.anonymous):
                    raise self._reject(
                        errors.InvalidName("request names no recipient UUID"), call_id, one_way
                    )
            else:
                raise self._reject(
                    errors.InvalidName(f"this server is {self.uuid}, not {recipient}"),
                    call_id,
                    one_way,
                )
        if method is None:
            raise self._reject(errors.BadRequest(f"unknown method {name!r}"), call_id, one_way)
        if one_way and not method.one_way:
            raise self._reject(
                errors.BadRequest(f"{name} takes no one-way messages"), call_id, True
            )
        peer_key = ""
        principal = None
        if self._authorizer is not None:
            # The key the CURVE handshake proved (ZAP's User-Id, on every frame it delivers),
            # checked at every call: an answer that changed since the connection was admitted
            # (a revoked key) holds from the next call on.
            try:
                peer_key = frames[1].get("User-Id")
            except zmq.ZMQError:  # no User-Id: not admitted by ZAP (cannot happen with CURVE)
                peer_key = ""
            principal = self._authorize(peer_key)
            if principal is None:
                if self._not_ready():
                    # Not refused: this server cannot tell yet (see _ZapKeys). UNAVAILABLE
                    # without a retry hint: a client of a group asks another node.
                    io_stats["not_ready"] += 1
                    err = errors.Unavailable(
                        f"{self.service or 'this server'} is starting: the keys it admits are "
                        "not loaded yet (try again, or another node)"
                    )
                    err.call_id = call_id  # type: ignore[attr-defined]
                    raise err
                raise self._reject(
                    errors.Unauthenticated(
                        f"the key {peer_key} is not admitted by {self.service or 'this server'}"
                        " (unknown or revoked)"
                    ),
                    call_id,
                    one_way,
                )
        if method.privileged and self._privileged_key is not None:
            if not privileged.verify(
                self._privileged_key,
                name,
                recipient,
                header.caller_uuid,
                frames[2].buffer,
                header.auth_tag,
            ):
                raise self._reject(
                    errors.Unauthenticated(
                        f"{name} is privileged: the request must be signed with the "
                        "cluster's secret (--password-file)"
                    ),
                    call_id,
                    one_way,
                )
        timeout_ms = header.timeout_ms or CALL_TIMEOUT_MS_DEFAULT
        deadline = received + min(timeout_ms, CALL_TIMEOUT_MS_MAX) / 1000.0
        ctx = CallContext(
            name,
            header.caller_uuid,
            deadline,
            list(map(_frame_buffer, frames[3:])) if len(frames) > 3 else [],
            one_way,
            received,
            peer_key,
            principal,
        )
        inline = method.inline
        if (method.deferred or not inline) and (self._inflight >= self._queue_max + self._workers):
            io_stats["throttled"] += 1
            if self._shards:
                self._shards[0][method.index].statuses[_THROTTLED] += 1
            err = errors.Throttled(
                f"{self._inflight} calls in progress; try again", retry_after_ms=10
            )
            err.call_id = call_id  # type: ignore[attr-defined]
            raise err
        if inline:
            if method.deferred:
                ctx._call = (self, identity, call_id, method)
            answer = self._invoke(call_id, method, frames[2], ctx, io_stats, self._io_shard())
            later = ctx._later
            if later is not None:
                if answer is _LATER:
                    return  # answered by the Later
                # Answered now after all (an error raised after later()): the Later is void,
                # unless it answered first.
                if self._deferred.pop(later._key, None) is None:
                    return
                self._inflight -= 1
            if answer is not _NO_ANSWER:
                answer.insert(0, identity)
                self._send(answer)
            return
        self._inflight += 1
        self._work_items.append((identity, call_id, method, frames[2], ctx))
        if self._quick_calls[method.index] >= QUICK_CALLS_MIN:
            self._queued_quick = True
        else:
            self._wake_for += 1

    def _reject(
        self, err: errors.RpcError, call_id: int = 0, one_way: bool = False
    ) -> errors.RpcError:
        if isinstance(err, errors.InvalidName):
            key = "invalid_name"
        elif isinstance(err, errors.Unauthenticated):
            key = "unauthenticated"
        else:
            key = "bad_request"
        self._io_stats[key] += 1
        what = "a one-way message" if one_way else "a request"
        self._refusals.warning("rejected %s (call %d): %s", what, call_id, err)
        err.call_id = call_id  # type: ignore[attr-defined]
        return err

    def _not_ready(self) -> bool:
        """Whether the keys this server admits are not loaded yet (ServerCurve.ready)."""
        ready = self._ready
        if ready is None:
            return False
        try:
            return not ready()
        except Exception:  # a failing check is "ready": keys are judged as loaded
            log.exception("the curve's ready() failed: taken as ready")
            return False

    def _authorize(self, key: str):
        """The authorizer's principal for `key`, None to refuse (also when it fails)."""
        assert self._authorizer is not None
        try:
            return self._authorizer(key) if key else None
        except Exception:  # an authorizer bug refuses, it does not admit
            log.exception("the authorizer failed on key %s: refused", key)
            return None

    # -- workers -----------------------------------------------------------------------

    def _io_shard(self) -> list[_MethodStats] | None:
        return self._shards[0] if self._shards else None

    def _worker_loop(
        self, index: int, shard: list[_MethodStats] | None, stats: dict[str, int]
    ) -> None:
        get = self._work.get
        items = self._work_items
        busy = self._busy
        quick_calls = self._quick_calls
        replies = self._replies
        queue_reply = self._queue_reply
        wake_io = self._wake_io
        stopping = self._stopping
        invoke = self._invoke
        clock = time.monotonic
        while True:
            if get() is None:  # a wake token (True), or None from close()
                return
            busy[index] = True
            while not stopping.is_set():
                try:
                    item = items.popleft()
                except IndexError:
                    # Idle, unless a call was queued since: the I/O thread wakes nobody for
                    # a quick call while it sees a worker busy, and it looks after queueing.
                    busy[index] = False
                    if not items:
                        break
                    busy[index] = True
                    continue
                if type(item) is _LaterWork:
                    self._run_later(item)
                    continue
                identity, call_id, method, body_frame, ctx = item
                start = clock()
                try:
                    answer = [identity, *invoke(call_id, method, body_frame, ctx, stats, shard)]
                except BaseException:
                    queue_reply(None)  # not answered, but counted out all the same
                    raise
                # Not held by this frame once handed over: a worker's locals would keep its
                # last call and answer (a scan's answer: up to 16 MiB of buffers) alive until
                # it took another call, with 8 workers up to 128 MiB of an idle server's heap.
                item = body_frame = ctx = None
                if clock() - start < QUICK_HANDLER_S:
                    quick_calls[method.index] += 1
                    replies.append(answer)
                    answer = None
                    if items:
                        # Held back while calls are queued (looked at after the append):
                        # it goes with the answer that wakes the I/O thread, or at the
                        # latest STALL_MS later (see _io_loop).
                        continue
                    wake_io()
                else:
                    quick_calls[method.index] = 0
                    queue_reply(answer)
                    answer = None
            else:
                return

    @staticmethod
    def _run_later(work: _LaterWork) -> None:
        later = work.later
        try:
            result = work.fn()
        except errors.RpcError as err:
            later.fail(err)
        except Exception as exc:  # a bug: answer INTERNAL, keep serving
            log.exception("call %d to %s failed", later._call_id, later._ctx.method)
            later.fail(errors.Internal(f"{type(exc).__name__}: {exc}"))
        else:
            later.reply(result)

    def _invoke(
        self,
        call_id: int,
        method: _Method,
        body_frame,
        ctx: CallContext,
        stats: dict[str, int],
        shard: list[_MethodStats] | None,
    ) -> list:
        """The answer's frames ([] for a one-way message that succeeded, _LATER for a
        deferred one); the call is counted in `stats` and `shard` (the calling thread's
        own) by its status, with its latency (a deferred call when it is answered)."""
        status, frames = self._answer(call_id, method, body_frame, ctx, stats)
        if shard is not None and frames is not _LATER:
            method_stats = shard[method.index]
            method_stats.statuses[status] += 1
            method_stats.latency.observe(time.monotonic() - ctx.received)
        return frames

    def _answer(
        self,
        call_id: int,
        method: _Method,
        body_frame,
        ctx: CallContext,
        stats: dict[str, int],
    ) -> tuple[int, list]:
        if time.monotonic() >= ctx.deadline:
            stats["timed_out"] += 1
            return self._error(call_id, errors.TimedOut("deadline passed before the call ran"))
        try:
            # A small body is parsed from a copy (cheaper than a memoryview of the frame).
            request = method.request_type.FromString(
                body_frame.bytes if len(body_frame) < ZERO_COPY_BYTES_MIN else body_frame.buffer
            )
        except (DecodeError, ValueError) as exc:
            stats["bad_request"] += 1
            self._refusals.warning("call %d to %s: malformed body: %s", call_id, ctx.method, exc)
            return self._error(
                call_id, errors.BadRequest(f"malformed body for {ctx.method}: {exc}")
            )
        try:
            result = method.handler(request, ctx)
        except errors.RpcError as err:
            stats["errors"] += 1
            if isinstance(err, errors.BadRequest):
                stats["bad_request"] += 1
            # A one-way caller may not read the refusal: it is logged here too.
            (self._refusals.warning if ctx.one_way else log.debug)(
                "call %d to %s answered %s", call_id, ctx.method, err
            )
            return self._error(call_id, err)
        except Exception as exc:  # a handler bug: answer INTERNAL, keep serving
            stats["internal"] += 1
            log.exception("call %d to %s failed", call_id, ctx.method)
            return self._error(call_id, errors.Internal(f"{type(exc).__name__}: {exc}"))
        if ctx.one_way:
            stats["ok"] += 1
            return _OK, _NO_ANSWER  # a one-way message is answered only when refused
        if result is not None and result is ctx._later:
            return _OK, _LATER
        status, frames, stat = self._result_frames(call_id, ctx, result)
        stats[stat] += 1
        return status, frames

    def _result_frames(self, call_id: int, ctx: CallContext, result) -> tuple[int, list, str]:
        """(status, frames, stats key) of a handler's result."""
        kind = type(result)
        if kind is Reply:
            body, sidecars = result.body, result.sidecars
        else:
            body, sidecars = result, ()
        if isinstance(body, Message):
            body = body.SerializeToString()
        elif not isinstance(body, Serialized):  # a handler bug, like an exception
            log.error("call %d to %s: handler returned %s", call_id, ctx.method, type(body))
            status, frames = self._error(
                call_id, errors.Internal(f"{ctx.method} handler returned {type(body).__name__}")
            )
            return status, frames, "internal"
        # The OK header, precomputed but for its call id (field 1, first on the wire as
        # protobuf writes it): rpc/frames.ok_header; tests compare it with protobuf's.
        return _OK, [ok_header(call_id, self._ok_header_rest), body, *sidecars], "ok"

    def _error(self, call_id: int, err: errors.RpcError) -> tuple[int, list]:
        return int(err.status), self._error_frames(call_id, err)

    def _error_frames(self, call_id: int, err: errors.RpcError) -> list:
        header = ResponseHeader(
            call_id=call_id,
            status=err.status,
            message=err.message,
            retry_after_ms=err.retry_after_ms,
            server_uuid=self.uuid,
        )
        if err.leader_hint:
            header.leader_hint.uuid = err.leader_hint.uuid
            header.leader_hint.address = err.leader_hint.address
            header.leader_hint.epoch = err.leader_hint.epoch
        return [header.SerializeToString(), err.body or b""]

    def _ping(self, _request: PingRequest, _ctx: CallContext) -> PingResponse:
        return PingResponse(uuid=self.uuid, service=self.service, methods=sorted(self._methods))
