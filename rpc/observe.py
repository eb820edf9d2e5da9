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

import argparse
import base64
import binascii
import bisect
import hmac
import ipaddress
import json
import logging
import os
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
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rpc.addresses import address_arg, parse_host_port
from rpc.errors import BadRequest
from rpc.keys import private_file_problem

log = logging.getLogger(__name__)

REQUESTS_MAX = 16
REQUEST_TIMEOUT_S = 10.0
PAGE_BYTES_MAX = 16 << 20
# Paths served without credentials in every mode: load balancers and Kubernetes probes
# call them. Their bodies name no table, key, principal or address (see _route).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PASSWORD_FILE_BYTES_MAX = 64 << 10
PASSWORD_USERS_MAX = 64
AUTH_HEADER_BYTES_MAX = 4096
# Refused requests (401) logged at most this many per window, as the rpc server's refusals.
REFUSALS_LOGGED_MAX = 5
REFUSALS_LOG_WINDOW_S = 60.0
HTTP_FLAGS_HELP = "design/security.md section 8"
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


def new_registry() -> CollectorRegistry:
    """A daemon's registry, with the process's RSS, CPU and open files."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    return registry


class HttpConfigError(ValueError):
    """An HTTP endpoint that may not start as asked: a public bind without an access mode,
    a password or key file that is missing, malformed or readable by others, a bad cert."""


@dataclass(frozen=True, slots=True)
class HttpAccess:
    """Who may read an endpoint's pages (the `--http-*` flags).

    - nothing set: loopback binds only, no credentials (what `local-cluster up` uses);
    - `password_file`: HTTP Basic auth on every path but /healthz and /readyz, on any bind.
      The file holds `user:password` lines (the password is everything after the first
      colon; blank lines and lines starting with `#` are ignored); it must be private
      (mode 0600), as secret key files are. Read once at start;
    - `tls_cert` + `tls_key` (PEM): HTTPS; with a password file, strongly recommended
      beyond loopback (Basic auth sends the password in every request);
    - `public`: any bind, no credentials; logged as a WARNING at start.
    """

    password_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    public: bool = False


@dataclass(frozen=True, slots=True)
class _Guard:
    """What an endpoint enforces, made from an HttpAccess by `prepare_access`."""

    users: tuple[tuple[bytes, bytes], ...]  # (user, password); empty: no auth
    tls: ssl.SSLContext | None
    public: bool
    loopback: bool


def is_loopback_host(host: str) -> bool:
    """True when every address `host` names is a loopback one ("", "*", 0.0.0.0 and :: are
    every interface: not loopback). A name that does not resolve is not loopback."""
    host = host.strip("[]")
    if host in ("", "*"):
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def read_password_file(path: str) -> tuple[tuple[bytes, bytes], ...]:
    """The (user, password) pairs of a password file (see HttpAccess); HttpConfigError when
    it is missing, not private, too big, or holds no valid line."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise HttpConfigError(f"--http-password-file {path}: {e.strerror or e}") from None
    problem = private_file_problem(st, path, "--http-password-file", "change its passwords")
    if problem:
        raise HttpConfigError(problem)
    if st.st_size > PASSWORD_FILE_BYTES_MAX:
        raise HttpConfigError(f"--http-password-file {path}: above {PASSWORD_FILE_BYTES_MAX} bytes")
    try:
        with open(path, "rb") as f:
            text = f.read(PASSWORD_FILE_BYTES_MAX + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HttpConfigError(f"--http-password-file {path}: cannot read it: {e}") from None
    users: dict[bytes, bytes] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            # Never echo the line: it may hold a password.
            raise HttpConfigError(
                f"--http-password-file {path}: line {number} is not user:password "
                "(a non-empty user, a colon, a non-empty password)"
            )
        users[user.encode()] = password.encode()
    if not users:
        raise HttpConfigError(f"--http-password-file {path}: no user:password line")
    if len(users) > PASSWORD_USERS_MAX:
        raise HttpConfigError(f"--http-password-file {path}: above {PASSWORD_USERS_MAX} users")
    return tuple(users.items())


def _tls_context(cert: str, key: str) -> ssl.SSLContext:
    if bool(cert) != bool(key):
        raise HttpConfigError("--http-tls-cert and --http-tls-key go together: give both")
    try:
        st = os.stat(key)
    except OSError as e:
        raise HttpConfigError(f"--http-tls-key {key}: {e.strerror or e}") from None
    problem = private_file_problem(st, key, "--http-tls-key", "make a new key and certificate")
    if problem:
        raise HttpConfigError(problem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        raise HttpConfigError(f"--http-tls-cert {cert} / --http-tls-key {key}: {e}") from None
    return context


def prepare_access(bind: str, access: HttpAccess) -> _Guard:
    """Check `access` for an endpoint on `bind` and load its files; HttpConfigError (one
    line, saying what to do) when it may not start so."""
    try:
        host, _port = parse_host_port(bind)
    except BadRequest as e:
        raise HttpConfigError(e.message) from None
    if access.public and access.password_file:
        raise HttpConfigError(
            "--http-public and --http-password-file contradict each other: give one"
        )
    loopback = is_loopback_host(host)
    if not loopback and not access.public and not access.password_file:
        raise HttpConfigError(
            f"--http {bind} is not a loopback address and its pages show the cluster's "
            "tables, schemas, placement and principals: give --http-password-file FILE "
            "(HTTP Basic auth; with --http-tls-cert and --http-tls-key for HTTPS), or "
            f"--http-public to serve them to anyone who reaches the port ({HTTP_FLAGS_HELP})"
        )
    users = read_password_file(access.password_file) if access.password_file else ()
    tls = (
        _tls_context(access.tls_cert, access.tls_key) if access.tls_cert or access.tls_key else None
    )
    return _Guard(users=users, tls=tls, public=access.public, loopback=loopback)


def add_http_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """`--http HOST:PORT` and its access flags (HttpAccess) on a daemon's start command."""
    parser.add_argument(
        "--http",
        type=lambda text: address_arg(text) if text.strip() else "",  # "" (default): off
        default="",
        help=f"{what} on HOST:PORT (port 0: any; default off). Beyond a loopback address "
        "it needs --http-password-file or --http-public",
    )
    parser.add_argument(
        "--http-password-file",
        default="",
        metavar="FILE",
        help="HTTP Basic auth on every page and /metrics (not /healthz, /readyz): FILE holds "
        "user:password lines and must be private (chmod 600)",
    )
    parser.add_argument(
        "--http-tls-cert",
        default="",
        metavar="PEM",
        help="serve HTTPS with this certificate (chain); strongly recommended with "
        "--http-password-file beyond loopback",
    )
    parser.add_argument(
        "--http-tls-key", default="", metavar="PEM", help="the certificate's private key (0600)"
    )
    parser.add_argument(
        "--http-public",
        action="store_true",
        help="serve the pages without credentials on any address (a WARNING at start)",
    )


def http_access_of(args: argparse.Namespace) -> HttpAccess:
    """The HttpAccess the flags of add_http_arguments ask for, checked against `--http`
    (HttpConfigError when the daemon may not start so; nothing is bound)."""
    access = HttpAccess(
        password_file=args.http_password_file,
        tls_cert=args.http_tls_cert,
        tls_key=args.http_tls_key,
        public=args.http_public,
    )
    if args.http:
        prepare_access(args.http, access)
    elif access != HttpAccess():
        raise HttpConfigError("--http-password-file, --http-tls-* and --http-public need --http")
    return access


class _RefusalLog:
    """Warnings of refused requests, at most `burst` per `window_s` (a scanner or a wrong
    password in a dashboard must not fill the log)."""

    def __init__(self, burst: int = REFUSALS_LOGGED_MAX, window_s: float = REFUSALS_LOG_WINDOW_S):
        assert burst >= 1 and window_s > 0
        self._burst = burst
        self._window_s = window_s
        self._lock = threading.Lock()
        self._window_start = -window_s
        self._logged = 0
        self._unlogged = 0

    def warning(self, msg: str, *args) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._window_start >= self._window_s:
                unlogged, self._unlogged = self._unlogged, 0
                self._window_start, self._logged = now, 0
                if unlogged:
                    log.warning(
                        "%d more refused HTTP requests were not logged (at most %d per %.0f s)",
                        unlogged,
                        self._burst,
                        self._window_s,
                    )
            if self._logged >= self._burst:
                self._unlogged += 1
                return
            self._logged += 1
        log.warning(msg, *args)


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
        self._refusals = _RefusalLog()
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

    def _authorized(self, req: BaseHTTPRequestHandler) -> bool:
        """Whether the request's Basic credentials match a user of the password file. Every
        user is compared, each in constant time, so the time taken says nothing."""
        header = req.headers.get("Authorization") or ""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic" or len(value) > AUTH_HEADER_BYTES_MAX:
            return False
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        found = False
        for u, p in self._guard.users:
            found |= hmac.compare_digest(u, user) & hmac.compare_digest(p, password)
        return found and bool(sep)

    def _serve(self, req: BaseHTTPRequestHandler, head: bool = False) -> None:
        if self._guard.users and urlsplit(req.path).path not in OPEN_PATHS:
            if not self._authorized(req):
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
