"""Who may read a daemon's HTTP endpoint (rpc/observe.py): the `--http-*` flags.

The pages show the cluster's tables, schemas, placement and principals, so an endpoint
serves without credentials only on a loopback address. Beyond loopback it needs a mode:
`--http-password-file` (HTTP Basic auth on every path but /healthz and /readyz, with
`--http-tls-cert`/`--http-tls-key` for HTTPS) or `--http-public` (no auth, a WARNING).
Kept apart from rpc/observe.py so that the command-line tools check the flags without
importing prometheus-client. design/security.md section 8.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import ipaddress
import logging
import os
import socket
import ssl
from dataclasses import dataclass

from rpc.addresses import address_arg, parse_host_port
from rpc.errors import BadRequest
from rpc.keys import private_file_problem
from rpc.refusals import RefusalLog

# Paths served without credentials in every mode: load balancers and Kubernetes probes
# call them. Their bodies name no table, key, principal or address (rpc/observe.py).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PASSWORD_FILE_BYTES_MAX = 64 << 10
PASSWORD_USERS_MAX = 64
AUTH_HEADER_BYTES_MAX = 4096
# Refused requests (401) logged at most this many per window, as the rpc server's refusals.
REFUSALS_LOGGED_MAX = 5
REFUSALS_LOG_WINDOW_S = 60.0
HTTP_FLAGS_HELP = "design/security.md section 8"


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
class Guard:
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


def prepare_access(bind: str, access: HttpAccess) -> Guard:
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
    return Guard(users=users, tls=tls, public=access.public, loopback=loopback)


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


def refusal_log(
    logger: logging.Logger,
    burst: int = REFUSALS_LOGGED_MAX,
    window_s: float = REFUSALS_LOG_WINDOW_S,
) -> RefusalLog:
    """Warnings of refused HTTP requests on `logger`, at most `burst` per `window_s` (a
    scanner or a wrong password in a dashboard must not fill the log)."""
    return RefusalLog(logger, "refused HTTP requests", burst, window_s)


def authorized(header: str, users: tuple[tuple[bytes, bytes], ...]) -> bool:
    """Whether an Authorization header's Basic credentials match one of `users`. Every user
    is compared, each in constant time, so the time taken says nothing about which part
    was wrong."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or len(value) > AUTH_HEADER_BYTES_MAX:
        return False
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).partition(b":")
    except (binascii.Error, ValueError):
        return False
    found = False
    for u, p in users:
        found |= hmac.compare_digest(u, user) & hmac.compare_digest(p, password)
    return found and bool(sep)
