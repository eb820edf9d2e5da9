"""Raft frames between logstore replicas are bounded before they are buffered (issue 27).

pysyncobj buffered a frame of any announced length before authenticating it: one
unauthenticated connection announcing 1 GiB took a leader from 78 MB to 1.9 GB RSS and cost
it its leadership. Now a frame's length is checked against FRAME_BYTES_UNTRUSTED_MAX until
the peer proved it holds the password and the connection's key, against FRAME_BYTES_MAX
(the largest frame a replica sends, derived from the limits on an append) afterwards, and
the connection is dropped on the first bad frame.

The unit tests pickle the worst legitimate commands and frames against the bounds; the
integration test attacks the leader of a real `logstore serve` group over raw TCP.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time

import pysyncobj.pickle as pso_pickle
import pytest

from logstore.api import ENTRY_BYTES_MAX, INVALIDATES_MAX, LOG_NAME_BYTES_MAX
from logstore.auth import FrameCipher
from logstore.remote import RemoteLogStore
from logstore.replicated import (
    APPEND_INT_PICKLE_BYTES_MAX,
    APPEND_PICKLE_OVERHEAD_BYTES,
    COMMAND_BYTES_MAX,
    COMMAND_OVERHEAD_BYTES,
    FRAME_BYTES_MAX,
    FRAME_BYTES_UNTRUSTED_MAX,
    WIRE_PICKLE_PROTOCOL,
    ReplicaConfig,
)
from logstore.state import check_append_request
from rpc.errors import BadRequest

from .helpers import PASSWORD, wait_for
from .procs import make_replicas, remote

ID_MAX = (1 << 64) - 1
# pysyncobj's command: one type byte, then the pickled (method id, args); method 0 is
# _ls_append, 2 is _ls_batch (design/logstore.md, "Command encoding").
REGULAR = b"\x00"


def _worst_append(k: int = 0) -> tuple:
    """The largest append check_append_request lets through: every data byte and every
    log-name character costs the most in a protocol-2 pickle, every id has 64 bits."""
    log = "\u00ff" * (LOG_NAME_BYTES_MAX // 2)  # 2 UTF-8 bytes each
    data = b"\xff" * ENTRY_BYTES_MAX  # latin-1 text in UTF-8: 2 bytes each
    invalidates = tuple(ID_MAX - k - i for i in range(INVALIDATES_MAX))
    check_append_request(log, data, ID_MAX, invalidates)
    return (log, data, ID_MAX, invalidates)


def _frame(message, key: bytes = b"k" * 32) -> bytes:
    """A frame as a replica sends it (logstore.replicated._BoundedConnection.send)."""
    data = pickle.dumps((key, message), WIRE_PICKLE_PROTOCOL)
    return FrameCipher(PASSWORD).encrypt_at_time(data, int(time.monotonic()))


def test_the_worst_append_fits_a_command_and_a_frame():
    command = REGULAR + pso_pickle.dumps((0, _worst_append()))
    assert len(command) <= COMMAND_BYTES_MAX
    big = 2**63
    entries = [(command, big, big)]
    append_entries = {
        "type": "append_entries",
        "term": big,
        "commit_index": big,
        "entries": entries,
        "prevLogIdx": big,
        "prevLogTerm": big,
    }
    forwarded = {"type": "apply_command", "command": command, "request_id": big}
    for message in (append_entries, forwarded):
        assert len(_frame(message)) <= FRAME_BYTES_MAX
    # The bound is not loose by more than the envelope: the frame is most of it.
    assert len(_frame(forwarded)) > FRAME_BYTES_MAX - (128 << 10)


def test_a_full_batch_of_appends_fits_the_configured_bound():
    """_ls_propose_pending cuts a batch when its size estimate (len(data) + len(log) +
    8 per invalidation + 16 per append) passes append_batch_bytes_max; ReplicaConfig
    promises that the real pickle stays within 2 * estimate + a constant per append."""
    cfg = ReplicaConfig()
    log = "\u00ff" * (LOG_NAME_BYTES_MAX // 2)
    per_append_estimate = cfg.append_batch_bytes_max // cfg.append_batch_max
    data_len = per_append_estimate - len(log) - 8 - 16
    items = tuple(
        (log, b"\xff" * data_len, ID_MAX - i, (ID_MAX - i - 1,))
        for i in range(cfg.append_batch_max)
    )
    command = REGULAR + pso_pickle.dumps((2, (items,)))
    bound = (
        COMMAND_OVERHEAD_BYTES
        + 2 * cfg.append_batch_bytes_max
        + (LOG_NAME_BYTES_MAX + APPEND_INT_PICKLE_BYTES_MAX + APPEND_PICKLE_OVERHEAD_BYTES)
        * cfg.append_batch_max
    )
    assert len(command) <= bound <= COMMAND_BYTES_MAX


def test_appends_beyond_the_bounds_are_refused_before_they_are_proposed():
    with pytest.raises(BadRequest, match="at most"):
        check_append_request("l", b"x", None, tuple(range(1, INVALIDATES_MAX + 2)))
    with pytest.raises(BadRequest, match="out of range"):
        check_append_request("l", b"x", 1 << 64, ())
    with pytest.raises(BadRequest, match="out of range"):
        check_append_request("l", b"x", None, (10**30,))
    with pytest.raises(BadRequest):
        check_append_request("l", b"x" * (ENTRY_BYTES_MAX + 1), None, ())
    with pytest.raises(ValueError, match="bound"):
        ReplicaConfig(append_entries_batch_bytes=COMMAND_BYTES_MAX + 1)
    with pytest.raises(ValueError, match="bound"):
        ReplicaConfig(append_batch_bytes_max=COMMAND_BYTES_MAX)


# --- a real group under attack -----------------------------------------------------------

ANNOUNCED_BYTES = 1 << 30
STREAM_BYTES_MAX = 256 << 20  # stop streaming here: the leader must have hung up long before
CHUNK_BYTES = 1 << 20
RSS_GROWTH_BYTES_MAX = 100 << 20


def _proc_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _stream(address: str, head: bytes, total_bytes: int) -> tuple[int, bool]:
    """Connect, send `head`, then zeros up to `total_bytes`. Returns (bytes sent, whether
    the peer hung up before all were sent)."""
    host, port = address.rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.settimeout(60)  # a peer that neither reads nor hangs up ends the test
        chunk = bytes(CHUNK_BYTES)
        try:
            conn.sendall(head)
            sent = len(head)
            while sent < total_bytes:
                conn.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
        except TimeoutError:
            return sent, False
        # Everything went out (the kernel buffered it): the peer may still hang up.
        try:
            return sent, conn.recv(1) == b""
        except ConnectionResetError:
            return sent, True
        except TimeoutError:
            return sent, False


def _hung_up(address: str, payload: bytes, timeout_s: float = 30.0) -> bool:
    """Send one whole frame and wait for the peer to close the connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(payload)
        conn.settimeout(timeout_s)
        try:
            return conn.recv(4096) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def _leader(stores: RemoteLogStore, replicas) -> tuple[str, int]:
    """(leader's Raft address, term), once every replica names the same leader."""

    def agreed():
        views = {(s.leader, s.term) for s in (stores.status(r.rpc_address) for r in replicas)}
        if len(views) == 1:
            (view,) = views
            return view if view[0] else None
        return None

    return wait_for(agreed, timeout_s=60, what="replicas agreeing on one leader")


@pytest.mark.integration
def test_a_huge_unauthenticated_frame_is_dropped_before_it_is_buffered(tmp_path):
    # Election timeouts of seconds: on a loaded machine leadership stays put unless the
    # leader really stops answering.
    replicas = make_replicas(
        tmp_path, 3, ["--election-min-s", "3", "--election-max-s", "6"], secure=True
    )
    for r in replicas:
        r.start()
    try:
        with remote(replicas) as store:
            store.barrier(timeout_s=30)
            assert store.append("before", b"x", timeout_s=30) == 1
            leader, term = _leader(store, replicas)
            (target,) = [r for r in replicas if r.raft_address == leader]
            pid = target.proc.pid
            rss0, hwm0 = _proc_kib(pid, "VmRSS"), _proc_kib(pid, "VmHWM")

            # 1. A frame announcing 1 GiB, then a stream of bytes: hung up on at once.
            head = struct.pack("i", ANNOUNCED_BYTES)
            sent, hung_up = _stream(leader, head, STREAM_BYTES_MAX)
            rss1, hwm1 = _proc_kib(pid, "VmRSS"), _proc_kib(pid, "VmHWM")
            print(f"sent {sent} bytes; leader RSS {rss0} -> {rss1} KiB, peak {hwm0} -> {hwm1}")
            assert hung_up, f"the leader read all {sent} bytes of a frame announcing 1 GiB"
            assert sent < STREAM_BYTES_MAX
            assert (rss1 - rss0) * 1024 < RSS_GROWTH_BYTES_MAX
            assert (hwm1 - hwm0) * 1024 < RSS_GROWTH_BYTES_MAX

            # 2. Frames of lengths that are never legitimate before authentication, and a
            # small frame with a bad tag: each connection is dropped at its first frame.
            for length in (FRAME_BYTES_UNTRUSTED_MAX + 1, FRAME_BYTES_MAX, 0, -1, -(2**31)):
                assert _hung_up(leader, struct.pack("i", length) + bytes(64)), length
            junk = os.urandom(200)
            assert _hung_up(leader, struct.pack("i", len(junk)) + junk)
            signed_by_another = FrameCipher("another password").encrypt_at_time(
                pickle.dumps(os.urandom(32), 2), int(time.monotonic())
            )
            assert _hung_up(leader, struct.pack("i", len(signed_by_another)) + signed_by_another)

            # 3. Leadership did not move, and the group keeps committing, large entries too
            # (an entry of ~1 MiB or more used to be split into chunks whose end the
            # follower detected wrongly).
            assert _leader(store, replicas) == (leader, term)
            ids = [store.append("after", bytes([i % 256]) * 100, timeout_s=30) for i in range(20)]
            assert ids == list(range(1, 21))
            big = b"\xff" * ENTRY_BYTES_MAX
            assert store.append("big", big, timeout_s=60) == 1
            store.barrier(timeout_s=30)
            for r in replicas:
                wait_for(
                    lambda r=r: (
                        {e.log: e.last_id for e in store.status(r.rpc_address).logs}.get("big") == 1
                    ),
                    timeout_s=60,
                    what=f"the big entry on {r.raft_address}",
                )
            assert _leader(store, replicas) == (leader, term)
    finally:
        for r in replicas:
            r.stop()
    logs = {
        r.raft_address: open(r.log_path, encoding="utf-8", errors="replace").read()
        for r in replicas
    }
    assert "dropped" in logs[leader], logs[leader][-3000:]
    for address, text in logs.items():
        assert "failed _onTick" not in text, (address, text[-3000:])
        assert "Traceback" not in text, (address, text[-3000:])
