"""Privileged methods: proof that the caller holds the cluster's secret.

Until the security issue's CURVE keys and roles land (design/security.md), the methods that
change membership or delete replicas (Coordinator.AddNode/RemoveNode, LogStore.AddMember/
RemoveMember, TServer.DeleteTablet/ChangeConfig/StartTabletCopy) must not be callable by anyone
who merely reaches a port. Every process of a cluster already holds one secret, the cluster
password of the coordinator log's Raft traffic; a caller proves it holds it by sending, in the
request header, an HMAC-SHA256 tag over the method, the recipient's and the caller's UUIDs
and the body, under a key derived from the password for this purpose alone (so a tag can
never be mistaken for a Raft frame's signature). A server that holds the secret refuses a
privileged call without a valid tag (UNAUTHENTICATED) before the handler runs.

What it does not do: encrypt (an eavesdropper on the network sees requests, and could replay
a captured privileged request to the same server; the requests are idempotent), or tell
users apart. Both are the security issue's CURVE/ZAP and roles.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os

from rpc.addresses import parse_host_port

TAG_BYTES = 32
# The cluster's password for tools and servers that have no flag of their own for it.
PASSWORD_ENV = "LOGCENTRIC_PASSWORD"
PASSWORD_BYTES_MAX = 4096
_KEY_LABEL = b"logcentric rpc privileged v1"


def derive_key(secret: str | bytes) -> bytes:
    """The tag key of a cluster secret (a password); never the password itself."""
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    assert raw, "an empty secret authenticates nothing"
    return hmac.new(raw, _KEY_LABEL, hashlib.sha256).digest()


def _message(method: str, recipient_uuid: str, caller_uuid: str) -> bytes:
    parts = (method.encode(), recipient_uuid.encode(), caller_uuid.encode())
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def tag(key: bytes, method: str, recipient_uuid: str, caller_uuid: str, body) -> bytes:
    """The header tag of one request (body: bytes or a buffer)."""
    mac = hmac.new(key, _message(method, recipient_uuid, caller_uuid), hashlib.sha256)
    mac.update(body)
    return mac.digest()


def read_password(path: str | None, env: str, tool: str) -> str | None:
    """The password in `path` (stripped), else in the environment variable `env`, else None.
    An unreadable, empty or oversized file is a one-line SystemExit naming it."""
    if not path:
        return os.environ.get(env) or None
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read(PASSWORD_BYTES_MAX + 1).strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"{tool}: cannot read password file {path}: {e}") from None
    if not value:
        raise SystemExit(f"{tool}: password file {path} is empty")
    if len(value) > PASSWORD_BYTES_MAX:
        raise SystemExit(f"{tool}: password file {path} is larger than {PASSWORD_BYTES_MAX} bytes")
    return value


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT binds only the loopback interface (where running without the
    cluster's secret is allowed: only this machine's processes reach it)."""
    host, _port = parse_host_port(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost, or a wildcard: not known to be local


def verify(key: bytes, method: str, recipient_uuid: str, caller_uuid: str, body, got) -> bool:
    if len(got) != TAG_BYTES:
        return False
    return hmac.compare_digest(tag(key, method, recipient_uuid, caller_uuid, body), bytes(got))
