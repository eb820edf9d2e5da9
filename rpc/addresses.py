"""Addresses: users write host:port; zmq wants tcp://host:port."""

from __future__ import annotations

import argparse
import os
import random
import socket
import threading

from rpc.errors import BadRequest

# Ports handed out for servers to bind later lie below the kernel's ephemeral range, so that
# no outgoing connection can take one between the choice and the bind.
SERVER_PORTS = range(20000, 32000)
# LO-HI (inclusive): where free_port picks instead, so that several test workers (or local
# clusters) on one machine never pick the same port between the choice and the bind.
PORT_RANGE_ENV = "LOGCENTRIC_PORT_RANGE"


def server_ports() -> range:
    """SERVER_PORTS, or the range $LOGCENTRIC_PORT_RANGE gives (LO-HI, 1024 <= LO <= HI)."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return SERVER_PORTS
    try:
        lo, hi = (int(x) for x in value.split("-"))
    except ValueError:
        raise BadRequest(f"{PORT_RANGE_ENV}={value!r}: give LO-HI, e.g. 20000-25999") from None
    if not 1024 <= lo <= hi <= 65535:
        raise BadRequest(f"{PORT_RANGE_ENV}={value!r}: need 1024 <= LO <= HI <= 65535")
    return range(lo, hi + 1)


# Ports this process handed out, per range: free_port walks its range from a random start and
# never hands the same port out twice until the whole range is used. Picking at random with
# only a bind test could return one port twice before anything binds it (a local cluster
# asks for all its ports first, then starts its daemons): one CI run lost a tablet server to
# "Address already in use" that way.
_handed_out: dict[range, tuple[int, set[int]]] = {}
_handed_out_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (for local clusters and tests), and
    that this process has not handed out before (until its whole range has been used)."""
    ports = server_ports()
    with _handed_out_lock:
        start = random.SystemRandom().randrange(len(ports))
        cursor, given = _handed_out.get(ports) or (start, set())
        tried = 0
        while tried < len(ports):
            if len(given) >= len(ports):
                given.clear()  # every port handed out once: the oldest clusters are long gone
            port = ports[cursor]
            cursor = (cursor + 1) % len(ports)
            tried += 1
            if port in given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            given.add(port)
            _handed_out[ports] = (cursor, given)
            return port
        _handed_out[ports] = (cursor, given)
    raise OSError(f"no free port in {ports} on {host}")


PORT_MAX = 65535


def parse_host_port(address: str) -> tuple[str, int]:
    """Split "host:port" (or "tcp://host:port"); raises BadRequest on anything else, saying
    what is wrong: no port, a port that is not a number, or one out of range."""
    text = address.removeprefix("tcp://").strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text or host.endswith(":") and not host.endswith("]"):
        raise BadRequest(f"not a host:port address: {address!r} (a port is needed)")
    if not port_text.isdigit():
        raise BadRequest(f"not a host:port address: {address!r} (the port must be a number)")
    if not 0 <= int(port_text) <= PORT_MAX:
        raise BadRequest(
            f"not a host:port address: {address!r} (port {int(port_text)} is out of range "
            f"0..{PORT_MAX})"
        )
    return host.strip("[]"), int(port_text)


def endpoint(address: str) -> str:
    """zmq endpoint for connecting to a host:port."""
    host, port = parse_host_port(address)
    return f"tcp://{host}:{port}"


def bind_endpoint(address: str) -> str:
    """zmq endpoint for binding; port 0 asks the system for a free port."""
    host, port = parse_host_port(address)
    return f"tcp://{host}:{port or '*'}" if port else f"tcp://{host}:*"


def host_port_of(zmq_endpoint: str) -> str:
    host, port = parse_host_port(zmq_endpoint)
    return f"{host}:{port}"


def address_arg(text: str, *, port_zero_ok: bool = True) -> str:
    """argparse type of a HOST:PORT flag: checked when parsed, not first when a socket is
    opened. Without `port_zero_ok`, port 0 (any free port: fine to bind) is refused."""
    try:
        _host, port = parse_host_port(text)
    except BadRequest as e:
        raise argparse.ArgumentTypeError(e.message) from None
    if port == 0 and not port_zero_ok:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} needs a real port, not 0")
    return text.strip()


def address_list_arg(text: str, *, empty_ok: bool = False) -> tuple[str, ...]:
    """argparse type of a comma-separated HOST:PORT list (empty items skipped), each with
    a real port; at least one unless `empty_ok`."""
    out = tuple(address_arg(a, port_zero_ok=False) for a in text.split(",") if a.strip())
    if not out and not empty_ok:
        raise argparse.ArgumentTypeError("at least one HOST:PORT address is needed")
    return out
