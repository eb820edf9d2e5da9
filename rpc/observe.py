"""A daemon's HTTP endpoint: Prometheus `/metrics`, `/healthz`, `/readyz` and its pages.

Every daemon (coordinator node, tablet server, `logstore serve`) owns one `HttpEndpoint` with
its own `prometheus_client.CollectorRegistry` (never the library's global one: a test process
runs many servers). Hot paths keep plain counters and `LatencyHistogram`s of their own; a
`ScrapeCollector` turns them into metric families when `/metrics` is scraped, so a call pays
no lock and no metric lookup (design/operability.md).

The server is stdlib `ThreadingHTTPServer`: one thread per request, at most
`REQUESTS_MAX` at once (others get 503 at once), each with a socket deadline.

Access (design/security.md section 8): the pages show the cluster's tables, schemas,
placement and principals, so an endpoint serves as before only on a loopback address. Any
other bind needs an `HttpAccess` mode: a password file (HTTP Basic auth on every path but
/healthz and /readyz, optionally HTTPS) or `public` (no auth, a WARNING at start). Without
one the endpoint refuses to start (`HttpConfigError`, one line).
"""

from __future__ import annotations

import bisect
import gc
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from rpc.addresses import parse_host_port
from rpc.http_access import (
    HTTP_FLAGS_HELP,
    OPEN_PATHS,
    HttpAccess,
    HttpConfigError,
    authorized,
    prepare_access,
    refusal_log,
)

log = logging.getLogger(__name__)

REQUESTS_MAX = 16
REQUEST_TIMEOUT_S = 10.0
PAGE_BYTES_MAX = 16 << 20
# Latency buckets (seconds) shared by every histogram: 50 us to 10 s.
LATENCY_BUCKETS_S = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

Readiness = Callable[[], tuple[bool, list[str]]]


@dataclass(frozen=True, slots=True)
class Page:
    """What a page handler answers: status, content type and body."""

    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"


# A page handler gets the path and the query (name -> values); None means "not mine" (404).
PageHandler = Callable[[str, dict[str, list[str]]], "Page | None"]


class LatencyHistogram:
    """Counts of observations per bucket and their sum, written without a lock.

    Meant for one writer thread, or for several where an increment lost to a race now and
    then does not matter (a metric, never a decision): the counts only ever grow."""

    __slots__ = ("counts", "sum_s", "_bounds")

    def __init__(self, bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        assert list(bounds_s) == sorted(bounds_s) and bounds_s, "bucket bounds ascend"
        self._bounds = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)  # the last one is +Inf
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self.sum_s += seconds

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs as Prometheus wants them."""
        out, total = [], 0
        for bound, n in zip((*self._bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out


def histogram_family(
    name: str, doc: str, labels: list[str], histograms: Iterable[tuple[list[str], LatencyHistogram]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in histograms:
        family.add_metric(values, h.buckets(), sum_value=h.sum_s)
    return family


class ScrapeCollector(Collector):
    """A collector whose metric families a function makes at scrape time."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return list(self._collect())


# A collection at least this long is logged (WARNING): no thread ran meanwhile, and at a
# tablet server of 10,000 replicas a full one takes ~1 s, as long as the peers' liveness
# silence (design/consensus.md, "Session 22").
GC_PAUSE_LOG_S = 0.5


class GcPauses(Collector):
    """How long the cyclic garbage collector held the interpreter, per generation: a
    `gc.callbacks` hook, one per process (`gc_pauses`). Each call is a clock read and three
    list updates, under the GIL the collection holds (collections never nest)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0

    def hook(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        g = min(2, max(0, int(info.get("generation", 2))))
        self.count[g] += 1
        self.seconds[g] += took
        if took > self.longest[g]:
            self.longest[g] = took
        if took >= GC_PAUSE_LOG_S:
            log.warning(
                "garbage collection of generation %d held the interpreter %.2f s (%d objects "
                "collected): no thread ran meanwhile, and peers may have counted this process "
                "silent",
                g,
                took,
                info.get("collected", 0),
            )

    def collect(self) -> Iterable[Metric]:
        seconds = CounterMetricFamily(
            "logcentric_gc_pause_seconds",
            "Seconds the cyclic garbage collector held the interpreter",
            labels=["generation"],
        )
        count = CounterMetricFamily(
            "logcentric_gc_pauses", "Collections of the cyclic garbage collector",
            labels=["generation"],
        )  # fmt: skip
        longest = GaugeMetricFamily(
            "logcentric_gc_pause_longest_seconds",
            "The longest collection so far, in seconds",
            labels=["generation"],
        )
        threshold = GaugeMetricFamily(
            "logcentric_gc_threshold",
            "The collector's thresholds (gc.get_threshold): allocations for generation 0, "
            "collections of the one below for 1 and 2 (a daemon sets 2 to GC_OLD_EVERY)",
            labels=["generation"],
        )
        for g, limit in enumerate(gc.get_threshold()):
            threshold.add_metric([str(g)], limit)
        for g in range(3):
            seconds.add_metric([str(g)], self.seconds[g])
            count.add_metric([str(g)], self.count[g])
            longest.add_metric([str(g)], self.longest[g])
        return [seconds, count, longest, threshold]


# CPython collects its old generation once 10 middle-generation collections have run and a
# quarter of the old generation is new since its last collection. A tablet server of 10,000
# replicas (about 1M objects that live as long as the process) met that every 20-35 s, idle
# or not, and each such collection held the interpreter 0.5-1.2 s and collected nothing
# (session 22, its log's "garbage collection of generation 2 held ..."). The coordinator of
# 10,000 tables did it every few hundred creates, 80-110 ms each, the slowest creates of
# the bench (session 23). Every daemon (tserver start, coordinator start, logstore serve)
# waits for this many instead (`quiet_old_generation`): the young and middle generations,
# where short-lived cycles die, are collected as before.
GC_OLD_EVERY = 1000


def quiet_old_generation() -> None:
    """Collect the old generation only every GC_OLD_EVERY middle-generation collections
    (CPython's default: 10). Process-wide; for a daemon's `main`."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_OLD_EVERY)


_gc_pauses: GcPauses | None = None
_gc_pauses_lock = threading.Lock()


def gc_pauses() -> GcPauses:
    """The process's one `GcPauses`, its hook installed on first use."""
    global _gc_pauses
    with _gc_pauses_lock:
        if _gc_pauses is None:
            _gc_pauses = GcPauses()
            gc.callbacks.append(_gc_pauses.hook)
        return _gc_pauses


def new_registry() -> CollectorRegistry:
    """A daemon's registry, with the process's RSS, CPU and open files and its garbage
    collector's pauses."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(gc_pauses())
    return registry


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer on IPv4 or IPv6, with TLS handshakes in the request's thread
    (under its socket deadline), never in the accepting one."""

    daemon_threads = True

    def __init__(self, address, handler, tls: ssl.SSLContext | None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._tls = tls
        super().__init__(address, handler)

    def finish_request(self, request, client_address) -> None:
        if self._tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            wrapped = self._tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:  # plain HTTP on the HTTPS port, a scanner
            log.debug("http %s: TLS handshake failed: %s", client_address[0], e)
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class HttpEndpoint:
    """Serves /metrics, /healthz, /readyz and the daemon's pages. A context manager."""

    def __init__(
        self,
        bind: str,
        registry: CollectorRegistry,
        *,
        name: str = "daemon",
        ready: Readiness | None = None,
        pages: list[PageHandler] | None = None,
        access: HttpAccess | None = None,
    ) -> None:
        host, port = parse_host_port(bind)
        self._guard = prepare_access(bind, access or HttpAccess())  # before any bind
        self._refusals = refusal_log(log)
        self.name = name
        self.registry = registry
        self._ready = ready or (lambda: (True, []))
        self._pages = list(pages or [])
        self._slots = threading.BoundedSemaphore(REQUESTS_MAX)
        self._started_at = time.monotonic()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S  # socket deadline for reading a request
            server_version = f"logcentric-{name}"

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                endpoint._serve(self)

            def do_HEAD(self) -> None:  # noqa: N802
                endpoint._serve(self, head=True)

            def log_message(self, fmt: str, *args) -> None:
                log.debug("http %s: " + fmt, self.address_string(), *args)

        bind_host = "0.0.0.0" if host in ("", "*") else host
        self._server = _Server((bind_host, port), Handler, self._guard.tls)
        try:
            # A name resolved once to check it, again to bind: check what was bound.
            bound = self._server.server_address[0]
            g = self._guard
            if not (ipaddress.ip_address(bound).is_loopback or g.public or g.users):
                raise HttpConfigError(f"--http {bind} bound {bound}: not a loopback address")
        except BaseException:
            self._server.server_close()
            raise
        if self._guard.public and not self._guard.loopback:
            log.warning(
                "%s HTTP endpoint on %s is PUBLIC (--http-public): its pages and /metrics "
                "show the cluster's tables, schemas, placement and principals to anyone who "
                "reaches the port; give --http-password-file instead on an untrusted "
                "network (%s)",
                name,
                self.address,
                HTTP_FLAGS_HELP,
            )
        elif self._guard.users and self._guard.tls is None and not self._guard.loopback:
            log.warning(
                "%s HTTP endpoint on %s asks for passwords over plain HTTP: anyone on the "
                "path can read them; give --http-tls-cert and --http-tls-key (%s)",
                name,
                self.address,
                HTTP_FLAGS_HELP,
            )
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def scheme(self) -> str:
        return "https" if self._guard.tls is not None else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"

    @property
    def advertised(self) -> str:
        """What others are told to link to (Lease records, heartbeats, Status): HOST:PORT
        for HTTP, https://HOST:PORT for HTTPS; this host's name for a bind on every
        interface (0.0.0.0 is no address to link to)."""
        host, port = self._server.server_address[:2]
        if ipaddress.ip_address(host).is_unspecified:
            host = socket.gethostname()
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return f"https://{address}" if self._guard.tls is not None else address

    def add_page(self, handler: PageHandler) -> None:
        self._pages.append(handler)

    def start(self) -> HttpEndpoint:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"{self.name}-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout_s)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> HttpEndpoint:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------

    def _serve(self, req: BaseHTTPRequestHandler, head: bool = False) -> None:
        if self._guard.users and urlsplit(req.path).path not in OPEN_PATHS:
            if not authorized(req.headers.get("Authorization") or "", self._guard.users):
                self._refusals.warning(
                    "%s HTTP endpoint refused %s from %s: %s",
                    self.name,
                    req.command,
                    req.client_address[0],
                    "wrong credentials" if req.headers.get("Authorization") else "no credentials",
                )
                realm = f'Basic realm="logcentric {self.name}", charset="UTF-8"'
                page = Page(401, b"authentication required\n", "text/plain")
                self._send(req, page, head, {"WWW-Authenticate": realm})
                return
        if not self._slots.acquire(blocking=False):
            self._send(req, Page(503, b"busy\n", "text/plain"), head)
            return
        try:
            page = self._route(req.path)
        except Exception:  # a page's bug must not take the daemon down: say so, log it
            log.exception("http %s failed", req.path)
            page = Page(500, b"internal error (see the daemon's log)\n", "text/plain")
        finally:
            self._slots.release()
        self._send(req, page, head)

    def _route(self, raw_path: str) -> Page:
        parts = urlsplit(raw_path)
        path, query = parts.path, parse_qs(parts.query)
        if path == "/metrics":
            return Page(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            uptime_s = round(time.monotonic() - self._started_at, 3)
            return _json(200, {"ok": True, "daemon": self.name, "uptime_s": uptime_s})
        if path == "/readyz":
            ready, why = self._ready()
            return _json(200 if ready else 503, {"ready": ready, "why": list(why)})
        for handler in self._pages:
            page = handler(path, query)
            if page is not None:
                return page
        return Page(404, f"no page {path}\n".encode(), "text/plain")

    @staticmethod
    def _send(
        req: BaseHTTPRequestHandler, page: Page, head: bool, headers: dict[str, str] | None = None
    ) -> None:
        body = page.body[:PAGE_BYTES_MAX]
        try:
            req.send_response(page.status)
            for name, value in (headers or {}).items():
                req.send_header(name, value)
            req.send_header("Content-Type", page.content_type)
            req.send_header("Content-Length", str(len(body)))
            req.send_header("Cache-Control", "no-store")
            req.end_headers()
            if not head:
                req.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader went away


def _json(status: int, value) -> Page:
    return Page(status, (json.dumps(value, sort_keys=True) + "\n").encode(), "application/json")
