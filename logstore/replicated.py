"""The replicated logstore: a pysyncobj (Raft) replica whose state machine holds the logs.

`ReplicatedLogStore` implements the LogStore protocol (logstore/api.py) for code that embeds
a replica (the coordinator's default) and for `logstore serve`. Inside:

- `_RaftNode`, a SyncObj subclass. Its replicated methods apply appends to a pure
  `LogState` (logstore/state.py) in log order on every replica. pysyncobj forwards a command
  submitted at a follower to the leader and calls back on the submitting replica once that
  replica has applied it, so an append sent to any replica reaches the leader and returns
  only when the local state already holds it.
- Durability (design/logstore.md, "durability"): pysyncobj gets logstore's DurableJournal
  instead of its own file journal, a transport that fsyncs the journal before sending any
  message, and a tick that fsyncs before the leader counts its own log toward a commit.
  Snapshots use logstore's codec through pysyncobj's serializer hooks, written off the
  tick thread from a copy-on-write capture (BackgroundSerializer, logstore/snapshot.py).
- Latency: commands wake the tick thread through a pipe, and the leader sends AppendEntries
  as soon as a batch of new entries is durable (and again when the commit index moves), so
  neither pysyncobj's 100 ms batching period nor its tick period is on the append path.
- Throughput: appends are queued and the tick thread turns everything queued since its last
  tick into ONE Raft command (`_ls_batch`), applied sub-append by sub-append with the exact
  semantics of single appends; callers wait on a bare lock, not a threading.Event.

This module relies on pysyncobj 0.3.17 internals named in design/logstore.md (the
`createJournal` hook, `_checkCommandsToApply`, `_onTick`, `_applyCommand` and the private
`__sendAppendEntries`); pyproject pins pysyncobj below 0.4.
"""

from __future__ import annotations

import _thread
import errno
import logging
import os
import pickle
import socket
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pysyncobj.pickle as _pso_pickle
import pysyncobj.syncobj as _pso
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from logstore.api import (
    ENTRY_BYTES_MAX,
    INVALIDATES_MAX,
    LOG_NAME_BYTES_MAX,
    READ_LIMIT_MAX,
    Entry,
)
from logstore.auth import FrameCipher, InvalidFrame
from logstore.journal import DurableJournal
from logstore.snapshot import BackgroundSerializer, SnapshotHooks
from logstore.state import AppendOutcome, LogState, check_append_request, outcome_id
from rpc.dirlock import lock_server_dir
from rpc.errors import (
    BadRequest,
    IllegalState,
    LeaderHintValue,
    NotLeader,
    RpcError,
    TimedOut,
    Unavailable,
)
from rpc.observe import LatencyHistogram

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "snapshot"
CLOSE_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
RETRY_BACKOFF_S_MAX = 0.05
# After applying at most this many appends in a tick, the leader's tick thread yields the GIL
# to the answered callers before its commit-only AppendEntries (latency when lightly loaded).
LATENCY_YIELD_APPENDS_MAX = 4
# A chain of woken callers (_WakeChain) not finished after this long wakes the rest at once.
WAKE_CHAIN_STALL_S = 0.003


def _install_journal_hook() -> None:
    """pysyncobj builds its journal with the module-level `createJournal(conf.journalFile)`
    and reads `conf.journalFile` nowhere else. logstore passes its DurableJournal object as
    `journalFile`; this wrapper hands it back unchanged and leaves every other caller's
    behaviour (None or a path) as it was."""
    current = _pso.createJournal
    if getattr(current, "_logstore_hook", False):
        return

    def create_journal(journal_file=None):
        if isinstance(journal_file, DurableJournal):
            return journal_file
        return current(journal_file)

    create_journal._logstore_hook = True  # type: ignore[attr-defined]
    _pso.createJournal = create_journal


_install_journal_hook()


def _install_serializer_hook() -> None:
    """pysyncobj builds its snapshot serializer with the module-level `Serializer(...)`;
    for a logstore replica (its serializer callback is a SnapshotHooks method) this builds
    a BackgroundSerializer instead, which compacts off the tick thread (logstore/
    snapshot.py). Every other SyncObj gets pysyncobj's own."""
    current = _pso.Serializer
    if getattr(current, "_logstore_hook", False):
        return

    def create_serializer(
        fileName, transmissionBatchSize, tryUseFork, serializer, deserializer, serializeChecker
    ):
        hooks = getattr(serializer, "__self__", None)
        if isinstance(hooks, SnapshotHooks) and fileName is not None and serializeChecker is None:
            return BackgroundSerializer(
                hooks, fileName, transmissionBatchSize, serializer, deserializer
            )
        return current(
            fileName, transmissionBatchSize, tryUseFork, serializer, deserializer, serializeChecker
        )

    create_serializer._logstore_hook = True  # type: ignore[attr-defined]
    _pso.Serializer = create_serializer


_install_serializer_hook()


class _WireCodec:
    """Stands in for the `zlib` module inside pysyncobj.tcp_connection, which zlib-compresses
    (level 3) every message it sends and decompresses every message it receives. For
    logstore's small, mostly incompressible frames that costs more CPU on the tick thread
    than anything else per message (zlib sets up ~256 KiB of state per call), and each call
    releases and retakes the GIL. On a logstore tick thread messages go out as the raw
    pickle instead; receiving accepts both forms: a pysyncobj pickle (protocol 2) starts
    with 0x80, a zlib stream never does (its first byte's low nibble is 8). Other SyncObjs
    in the process (their own tick threads) keep compressing. Frames are decrypted and authenticated
    before this runs. Wire change: a replica older than this cannot read these frames."""

    def __init__(self, real) -> None:
        self._real = real
        self.local = threading.local()

    def compress(self, data, level=-1):
        if getattr(self.local, "raw", False):
            return data
        return self._real.compress(data, level)

    def decompress(self, data):
        if data[:1] == b"\x80":
            return data
        return self._real.decompress(data)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _install_wire_codec() -> _WireCodec:
    import pysyncobj.tcp_connection as tcp

    current = tcp.zlib
    if isinstance(current, _WireCodec):
        return current
    codec = _WireCodec(current)
    tcp.zlib = codec
    return codec


_WIRE = _install_wire_codec()

# --- Bounds of Raft frames (design/logstore.md, "Frame bounds") ------------------------------
#
# pysyncobj's connection buffers a frame of whatever length its 4-byte header announces
# before it authenticates the frame: one unauthenticated connection announcing 1 GiB took a
# leader from 78 MB to 1.9 GB and cost it its leadership. logstore's connections
# (_BoundedConnection) check the announced length before buffering, against:
#
# - FRAME_BYTES_UNTRUSTED_MAX until the peer has proven that it holds the password AND this
#   connection's random key (a frame carrying our key passed authentication): the frames of
#   pysyncobj's handshake (a 32-byte key, a node address) are far smaller;
# - FRAME_BYTES_MAX afterwards: the largest frame a replica ever sends, derived below from
#   the limits on an append. Senders check every frame against it (_BoundedConnection.send).
#
# A command's pickle (protocol 2, pysyncobj's journal encoding, unchanged) stores bytes as
# latin-1 text in UTF-8: up to 2 bytes per data byte. Ints of magnitude < 2**64 take at most
# 11 bytes. So one append (log, data, expected_id, invalidates) pickles to at most
# 2*len(data) + len(log in UTF-8) + APPEND_INT_PICKLE_BYTES_MAX*(1 + len(invalidates))
# + APPEND_PICKLE_OVERHEAD_BYTES (tuple, memo and codec opcodes; tests/logstore/
# test_frame_bound.py pickles the worst cases).
APPEND_INT_PICKLE_BYTES_MAX = 12
APPEND_PICKLE_OVERHEAD_BYTES = 128
COMMAND_OVERHEAD_BYTES = 64  # type byte, (method id, args) tuple, protocol header
COMMAND_BYTES_MAX = (
    COMMAND_OVERHEAD_BYTES
    + 2 * ENTRY_BYTES_MAX
    + LOG_NAME_BYTES_MAX
    + APPEND_INT_PICKLE_BYTES_MAX * (1 + INVALIDATES_MAX)
    + APPEND_PICKLE_OVERHEAD_BYTES
)
# Frames go out as a protocol-4 pickle (bytes as bytes), not compressed, encrypted (AEAD,
# logstore/auth.py): a command travels at its own size plus this much per entry (bytes
# header, index, term, tuple) and once per frame (the message dict, the connection key,
# pickle framing, the AEAD's FRAME_OVERHEAD_BYTES: header, timestamp and tag). The largest
# frame is one entry or forwarded command of COMMAND_BYTES_MAX; AppendEntries with several
# entries and snapshot chunks are smaller (ReplicaConfig.check bounds their settings by
# COMMAND_BYTES_MAX).
ENTRY_WIRE_OVERHEAD_BYTES = 64
FRAME_ENVELOPE_BYTES_MAX = 64 << 10
FRAME_BYTES_MAX = COMMAND_BYTES_MAX + ENTRY_WIRE_OVERHEAD_BYTES + FRAME_ENVELOPE_BYTES_MAX
FRAME_BYTES_UNTRUSTED_MAX = 4096
WIRE_PICKLE_PROTOCOL = 4
# Incoming connections that have not yet named an authenticated member: at most this many
# (the oldest is dropped for a new one), each for at most UNTRUSTED_CONNECTION_S.
UNTRUSTED_CONNECTIONS_MAX = 64
UNTRUSTED_CONNECTION_S = 10.0
# Dropped connections are logged at most this many times per window per replica.
DROPS_LOGGED_MAX = 10
DROPS_LOG_WINDOW_S = 10.0
_FRAME_HEAD = struct.Struct("i")  # pysyncobj's frame header: the length, native int


class _DropLog:
    """Warnings about dropped Raft connections, at most `burst` per window (a hostile peer
    can open thousands a second); the rest are counted and reported once."""

    def __init__(self, burst: int = DROPS_LOGGED_MAX, window_s: float = DROPS_LOG_WINDOW_S):
        self._burst = burst
        self._window_s = window_s
        self._window_start = -window_s
        self._logged = 0
        self._unlogged = 0
        self.dropped = 0

    def warning(self, msg: str, *args) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._window_start >= self._window_s:
            if self._unlogged:
                logger.warning("%d more dropped Raft connections not logged", self._unlogged)
            self._window_start, self._logged, self._unlogged = now, 0, 0
        if self._logged >= self._burst:
            self._unlogged += 1
            return
        self._logged += 1
        logger.warning(msg, *args)


class _BoundedConnection(TcpConnection):
    """pysyncobj's TcpConnection with bounded frames (see "Bounds of Raft frames" above).

    Installed by `_DurableTransport` on every connection of a logstore replica (the class of
    the connection pysyncobj built is swapped in place: pysyncobj constructs them in
    tcp_server and transport). Receiving: the announced length of the next frame is checked
    as soon as its header is in, and the connection is dropped on a length out of bounds;
    no more is read while a whole frame is buffered, so a connection holds at most one
    frame plus one read. pysyncobj itself drops the connection on the first frame whose
    AEAD tag, timestamp, pickle or connection key is bad; this class logs it. Sending: the
    raw pickle (protocol 4), encrypted, checked against FRAME_BYTES_MAX.

    Runs on the tick thread only, as pysyncobj's connection does."""

    _ls_trusted = False  # a frame carrying this connection's key passed authentication
    _ls_peer = "?"
    _ls_drops: _DropLog | None = None
    _ls_accepted_at = 0.0

    def ls_adopt(self, peer: str, drops: _DropLog) -> None:
        self._ls_peer = peer
        self._ls_drops = drops
        self._ls_accepted_at = time.monotonic()

    def _ls_frame_limit(self) -> int:
        return FRAME_BYTES_MAX if self._ls_trusted else FRAME_BYTES_UNTRUSTED_MAX

    def _ls_drop(self, why: str, *args) -> None:
        if self._ls_drops is not None:
            self._ls_drops.warning("Raft connection with %s dropped: " + why, self._ls_peer, *args)
        self.disconnect()

    def connect(self, host, port):
        self._ls_trusted = False
        return super().connect(host, port)

    def disconnect(self) -> None:
        self._ls_trusted = False
        super().disconnect()

    def _ls_head_missing(self) -> int | None:
        """Bytes still missing for the next whole frame (0: one is buffered), or None when
        its announced length is out of bounds (the connection is dropped then)."""
        buf = self._TcpConnection__readBuffer
        if len(buf) < _FRAME_HEAD.size:
            return _FRAME_HEAD.size - len(buf)
        (length,) = _FRAME_HEAD.unpack_from(buf)
        limit = self._ls_frame_limit()
        if not 0 < length <= limit:
            self._ls_drop(
                "a frame of %d bytes announced (%s limit %d)",
                length,
                "authenticated" if self._ls_trusted else "unauthenticated",
                limit,
            )
            return None
        return max(0, _FRAME_HEAD.size + length - len(buf))

    # pysyncobj's private reader: `while self.__processRead(): pass`.
    def _TcpConnection__processRead(self) -> bool:
        missing = self._ls_head_missing()
        if not missing:  # None: dropped; 0: parse (and authenticate) the buffered frame first
            return False
        sock = self._TcpConnection__socket
        size = self._TcpConnection__recvBufferSize
        if not self._ls_trusted:
            size = min(size, max(missing, _FRAME_HEAD.size))
        try:
            incoming = sock.recv(size)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.disconnect()
            return False
        self._TcpConnection__readBuffer += incoming
        return self._ls_head_missing() is not None

    def _TcpConnection__processParseMessage(self):
        missing = self._ls_head_missing()
        if missing is None or missing > 0:  # dropped, or no whole frame yet
            return None
        keyed = bool(self.recvRandKey)
        message = TcpConnection._TcpConnection__processParseMessage(self)
        if message is not None:
            if keyed:
                self._ls_trusted = True
        elif self.state == CONNECTION_STATE.DISCONNECTED:
            # pysyncobj dropped it: bad AEAD tag, old timestamp, wrong key or no pickle.
            self._ls_drop("a frame failed authentication or decoding")
        return message

    def send(self, message) -> None:
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = pickle.dumps(message, WIRE_PICKLE_PROTOCOL)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(time.monotonic()))
        if len(data) > FRAME_BYTES_MAX:
            # Unreachable by construction (the bounds above); sending it would only make the
            # peer drop the connection, again and again.
            body = message[1] if isinstance(message, tuple) else message
            kind = body.get("type") if isinstance(body, dict) else type(body).__name__
            logger.error(
                "Raft frame of %d bytes (%s) to %s not sent: above FRAME_BYTES_MAX %d",
                len(data),
                kind,
                self._ls_peer,
                FRAME_BYTES_MAX,
            )
            return
        self._TcpConnection__writeBuffer += _FRAME_HEAD.pack(len(data)) + data
        self._TcpConnection__trySendBuffer()


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Tuning of one replica (design/logstore.md, "tuning"). Defaults work on one machine."""

    # Heartbeat period; also bounds how long one tick drains the command queue.
    append_entries_period_s: float = 0.05
    raft_min_timeout_s: float = 0.4
    raft_max_timeout_s: float = 1.2
    # A leader that heard from no majority for this long steps down.
    leader_fallback_timeout_s: float = 3.0
    connection_timeout_s: float = 3.5
    connection_retry_s: float = 0.5
    auto_tick_period_s: float = 0.05
    send_buffer_bytes: int = 2 << 20
    recv_buffer_bytes: int = 2 << 20
    append_entries_batch_bytes: int = 1 << 20
    commands_queue_max: int = 20_000
    compaction_min_entries: int = 20_000
    compaction_min_time_s: float = 60.0
    snapshot_batch_bytes: int = 1 << 20
    # Appends submitted at this replica are coalesced: at each tick, everything queued (up
    # to these bounds) becomes ONE Raft command (design/logstore.md, "batching").
    append_batch_max: int = 1024
    append_batch_bytes_max: int = 512 << 10
    # Appends waiting for the next tick; beyond this, QUEUE_FULL (retried by `append`).
    append_pending_max: int = 20_000
    # Heavy load (design/logstore.md, "batching under load"): once a batch of at least
    # `append_linger_batch_min` appends was proposed, the leader proposes the next batch only
    # after that one committed, and then waits up to `append_linger_s` for the callers it
    # just answered to queue their next appends, so each Raft round carries them all.
    # append_linger_batch_min = 0 turns this off (every tick proposes what is queued).
    append_linger_batch_min: int = 16
    append_linger_s: float = 0.001
    # Safety bound on waiting for an uncommitted batch before proposing the next anyway.
    append_inflight_wait_max_s: float = 0.02

    def __post_init__(self) -> None:
        # Every frame a replica sends must stay within FRAME_BYTES_MAX, which peers enforce
        # (see "Bounds of Raft frames"): AppendEntries and snapshot chunks by these settings,
        # a batch of appends by its size estimate (real pickle <= 2 * estimate + the
        # per-append constant, see _RaftNode._ls_propose_pending).
        per_append = LOG_NAME_BYTES_MAX + APPEND_INT_PICKLE_BYTES_MAX + APPEND_PICKLE_OVERHEAD_BYTES
        batch_bound = (
            COMMAND_OVERHEAD_BYTES
            + 2 * self.append_batch_bytes_max
            + per_append * self.append_batch_max
        )
        if not (
            0 < self.append_entries_batch_bytes <= COMMAND_BYTES_MAX
            and 0 < self.snapshot_batch_bytes <= COMMAND_BYTES_MAX
            and self.append_batch_max >= 1
            and self.append_batch_bytes_max >= 1
            and batch_bound <= COMMAND_BYTES_MAX
        ):
            raise ValueError(
                "append_entries_batch_bytes, snapshot_batch_bytes and a batch of appends "
                f"must stay within a Raft command's bound of {COMMAND_BYTES_MAX} bytes"
            )


class _Waker:
    """A pipe registered with pysyncobj's poller so another thread can end its poll wait."""

    def __init__(self, poller) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        poller.subscribe(self._r, self._drain, POLL_EVENT_TYPE.READ)

    def notify(self) -> None:
        try:
            os.write(self._w, b"w")
        except BlockingIOError:
            pass  # the pipe is full, so the poller is about to wake anyway
        except OSError:
            pass  # closed during shutdown

    def _drain(self, _fd, _mask) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


class _DurableTransport(TCPTransport):
    """pysyncobj's TCP transport, but no message leaves while the journal holds unsynced
    records (a follower's acknowledgement, a vote, a forwarded command...), with one
    exception: the leader's own AppendEntries. Raft lets a leader write its log in parallel
    with replicating it, as long as it counts itself toward a commit only once its copy is
    durable, which `_RaftNode._onTick` ensures; so the leader's fdatasync overlaps the
    followers' instead of preceding it."""

    def __init__(self, syncObj, selfNode, otherNodes, before_send, on_message) -> None:
        self._before_send = before_send
        self._filter_message = on_message
        # Acknowledgements held back until the end of the current poll round: a follower
        # that received several AppendEntries in one round syncs once and answers all.
        self._deferred: list[tuple[object, dict]] = []
        self._ls_drops = _DropLog()
        super().__init__(syncObj, selfNode, otherNodes)

    # --- bounded connections (see "Bounds of Raft frames") ----------------------------------

    def addNode(self, node):
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and not isinstance(conn, _BoundedConnection):
            conn.__class__ = _BoundedConnection
            conn.ls_adopt(node.id, self._ls_drops)

    def _onNewIncomingConnection(self, conn):
        conn.__class__ = _BoundedConnection
        try:
            host, port = conn._TcpConnection__socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except (OSError, AttributeError, ValueError):
            peer = "?"
        conn.ls_adopt(f"incoming {peer}", self._ls_drops)
        if len(self._unknownConnections) >= UNTRUSTED_CONNECTIONS_MAX:
            oldest = min(self._unknownConnections, key=lambda c: c._ls_accepted_at)
            oldest._ls_drop(
                "more than %d connections not yet authenticated", UNTRUSTED_CONNECTIONS_MAX
            )
        super()._onNewIncomingConnection(conn)

    def _onTick(self):
        super()._onTick()
        if self._unknownConnections:
            stale = time.monotonic() - UNTRUSTED_CONNECTION_S
            for conn in [c for c in self._unknownConnections if c._ls_accepted_at < stale]:
                conn._ls_drop("not authenticated within %.0f s", UNTRUSTED_CONNECTION_S)

    def dropped_connections(self) -> int:
        return self._ls_drops.dropped

    def send(self, node, message):
        kind = message.get("type")
        if kind == "append_entries" and self._syncObj._isLeader():
            return super().send(node, message)
        if kind == "next_node_idx":
            self._deferred.append((node, message))
            return True
        self.flush()
        return super().send(node, message)

    def flush(self) -> None:
        """Sync the journal, then send the held-back acknowledgements (tick thread)."""
        self._before_send()
        if self._deferred:
            pending, self._deferred = self._deferred, []
            for node, message in pending:
                super().send(node, message)

    def _onMessageReceived(self, node, message):
        message, after = self._filter_message(node, message)
        if message is not None:
            super()._onMessageReceived(node, message)
        if after is not None:
            after()


class _RaftNode(SyncObj):
    def __init__(
        self,
        self_address: str,
        peers: Sequence[str],
        conf: SyncObjConf,
        state: LogState,
        lock: threading.Lock,
        journal: DurableJournal,
        authenticator: FrameCipher | None,
        batch_max: int = 1024,
        batch_bytes_max: int = 512 << 10,
        pending_max: int = 20_000,
        linger_batch_min: int = 16,
        linger_s: float = 0.001,
        inflight_wait_max_s: float = 0.02,
        compaction_min_appends: int = 20_000,
        snapshots_written: Callable[[], int] = lambda: 0,
        append_entries_bytes: int = 1 << 20,
    ) -> None:
        # Set before SyncObj.__init__: it starts the tick thread and calls _make_transport.
        self._ls_state = state
        self._ls_lock = lock
        self._ls_journal = journal
        self._ls_auth = authenticator
        self._ls_waker: _Waker | None = None
        self._ls_transport: _DurableTransport | None = None
        self._ls_commit_sent = 0
        # Work that must run on the tick thread (pysyncobj state is not thread-safe).
        self._ls_tasks: deque[Callable[[], None]] = deque(maxlen=1024)
        # Appends waiting to be coalesced into one Raft command by the tick thread:
        # ((log, data, expected_id, invalidates), callback). deque append/popleft are atomic.
        self._ls_pending: deque[tuple[tuple, Callable[[Any, int], None]]] = deque()
        self._ls_batch_max = batch_max
        self._ls_batch_bytes_max = batch_bytes_max
        self._ls_pending_max = pending_max
        self._ls_batches = 0
        self._ls_batched_appends = 0
        # Batching under load (leader, tick thread): see _ls_hold.
        self._ls_linger_batch_min = linger_batch_min
        self._ls_linger_s = linger_s
        self._ls_inflight_wait_max_s = inflight_wait_max_s
        self._ls_heavy = False  # the last proposed batch had >= linger_batch_min appends
        self._ls_last_proposed = 0  # journal index of the last proposed batch
        self._ls_answered = 0  # appends answered since the last proposal
        self._ls_answered_at = 0.0
        # Answered batches whose callers are woken one by one, starting before the next poll.
        self._ls_wake_chains: deque[_WakeChain] = deque()
        self._ls_active_chains: list[tuple[float, _WakeChain]] = []
        self._ls_hold_until: float | None = None  # the poll of a holding tick ends by then
        self._ls_inflight_since: float | None = None
        self._ls_holds = 0
        # pysyncobj compacts after N Raft entries; a batch entry holds many appends, so
        # logstore also asks for a compaction after N applied appends (tick thread only).
        self._ls_compaction_min_appends = compaction_min_appends
        self._ls_snapshots_written = snapshots_written
        self._ls_applied_appends = 0
        self._ls_snapshot_seen = 0
        self._ls_applied_total = 0
        self._ls_applied_seen = 0
        self._ls_append_entries_bytes = append_entries_bytes
        super().__init__(self_address, list(peers), conf, transportClass=self._make_transport)
        self._ls_batch_method_id = self._methodToID["_ls_batch_v0"]
        self._ls_append_method_id = self._methodToID["_ls_append_v0"]

    def _make_transport(self, syncObj, selfNode, otherNodes):
        self._ls_waker = _Waker(self._poller)
        # While appends are held back (_ls_hold), the poll at the end of the tick must not
        # sleep past the end of the hold: appends queued meanwhile do not wake this thread.
        poll = self._poller.poll

        def poll_until_hold_ends(timeout):
            until = self._ls_advance_wake_chains()
            hold = self._ls_hold_until
            if hold is not None:
                until = hold if until is None else min(until, hold)
            if until is not None:
                timeout = min(timeout, max(0.0, until - time.monotonic()))
            return poll(timeout)

        self._poller.poll = poll_until_hold_ends
        self._ls_transport = _DurableTransport(
            syncObj, selfNode, otherNodes, self._ls_journal.sync, self._ls_filter_message
        )
        return self._ls_transport

    def _ls_filter_message(self, node, message):
        """Make a follower's handling of AppendEntries follow Raft (paper, fig. 2, rule 3):
        delete local entries only from the first one that CONFLICTS with the leader's.

        pysyncobj deletes every local entry after the message's range, even entries that
        match the leader's log. A leader that lowers its next index for a follower (it does
        on every out-of-order acknowledgement) then resends an old range, and the follower
        drops entries it has already acknowledged: the leader may count them toward a commit
        while the follower no longer has them. Here a message's entries that are already
        present (same index and term) are skipped; a message that brings nothing new
        becomes a plain heartbeat, with the commit index limited to what it vouched for,
        and its acknowledgement is sent here.
        """
        if not isinstance(message, dict):
            return message, None
        if message.get("type") == "next_node_idx":
            return message, self._ls_keep_next_index(node, message)
        if message.get("type") == "append_entries" and message.get("serialized") is not None:
            return self._ls_follower_snapshot(node, message), None
        return self._ls_follower_append_entries(node, message), None

    def _ls_follower_snapshot(self, node, message):
        """Follower, last piece of a snapshot from the leader: ignore a snapshot that does
        not go past what this replica has applied (Raft, fig. 13: a snapshot describing a
        prefix of the follower's log must not undo it).

        pysyncobj renames every snapshot it receives over the local one, loads it into the
        state and clears the journal. A leader sends its snapshot again on every `reset`
        answer it gets, and answers to AppendEntries sent before the first snapshot went out
        arrive after it: the follower installed the same snapshot twice, in between took the
        entries after it and applied them (a barrier returned), and the second install put
        the state back to the snapshot point (a read right after the barrier missed entries
        until the leader resent them) and dropped those entries, durable and acknowledged,
        from the journal ("raftCommitIndex ... exceeds journal end" warning). Here such a
        snapshot is dropped before pysyncobj renames it, and the leader is told to go on
        from the entry after the last applied one (a reset: the entries between the
        snapshot and that one are committed, so they match the leader's)."""
        data = message["serialized"]
        if not data[2] or message.get("term", -1) < self.raftCurrentTerm:
            return message  # not the last piece, or a stale leader's (pysyncobj ignores it)
        serializer = self._SyncObj__serializer
        if not isinstance(serializer, BackgroundSerializer):
            return message
        last_index = serializer.incoming_last_index()
        applied = self.raftLastApplied
        if last_index is None or last_index > applied:
            return message
        serializer.discard_incoming()
        logger.info(
            "snapshot at index %d from the leader ignored: index %d is applied already",
            last_index,
            applied,
        )
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=applied + 1, success=False, reset=True)
        heartbeat = {k: v for k, v in message.items() if k != "serialized"}
        heartbeat["commit_index"] = min(message["commit_index"], applied)
        return heartbeat

    def _ls_keep_next_index(self, node, message):
        """Leader side: pysyncobj sets a follower's next index to the one in every success
        acknowledgement, even an old one, and then resends everything after it. Entries
        already sent on the (ordered) connection need no resend: keep the higher next
        index. A reset (the follower lacks the previous entry) still takes effect."""
        if not message.get("success") or message.get("reset") or not self._isLeader():
            return None
        next_index = self._SyncObj__raftNextIndex
        before = next_index.get(node)
        if before is None:
            return None

        def restore() -> None:
            if next_index.get(node, before) < before:
                next_index[node] = before

        return restore

    def _ls_follower_append_entries(self, node, message):
        if (
            message.get("type") != "append_entries"
            or "prevLogIdx" not in message
            or "transmission" in message
        ):
            return message
        if message.get("term", -1) < self.raftCurrentTerm:
            return message
        log = self._ls_journal
        if len(log) == 0:
            return message
        first_idx, last_idx = log[0][1], log[-1][1]
        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        if prev_idx is None or prev_idx < first_idx or prev_idx > last_idx:
            return message
        if log[prev_idx - first_idx][2] != prev_term:
            return message  # pysyncobj answers with a reset
        entries = message.get("entries") or []
        k = 0
        while k < len(entries) and prev_idx + 1 + k <= last_idx:
            if log[prev_idx + 1 + k - first_idx][2] != entries[k][2]:
                break  # conflict: pysyncobj truncates from here, as Raft says
            k += 1
        if k < len(entries):
            if k == 0:
                return message
            trimmed = dict(message)
            trimmed["prevLogIdx"] = entries[k - 1][1]
            trimmed["prevLogTerm"] = entries[k - 1][2]
            trimmed["entries"] = entries[k:]
            return trimmed
        covered = prev_idx + len(entries)
        if covered == last_idx and not entries:
            return message  # a heartbeat at our end: nothing to delete
        heartbeat = {
            k2: v for k2, v in message.items() if k2 not in ("prevLogIdx", "prevLogTerm", "entries")
        }
        heartbeat["commit_index"] = min(message["commit_index"], covered)
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=covered + 1, success=True)
        return heartbeat

    @property
    def encryptor(self):  # read by pysyncobj's transport for every connection
        return self._ls_auth

    def _SyncObj__getEntries(self, fromIDx, count=None, maxSizeBytes=None):
        """pysyncobj's entry getter; with a size (AppendEntries only) the entries to send.

        pysyncobj counts only the commands' bytes and includes the entry that crosses the
        size, so a frame could hold the size plus the largest command, and with tiny entries
        (barriers) several times the size in per-entry encoding. Here the entries fit in
        `append_entries_bytes` counting ENTRY_WIRE_OVERHEAD_BYTES each, or one entry goes
        alone. pysyncobj splits a lone entry of at least its batch size into "transmission"
        chunks, whose end it detects wrongly (it compares with the command's length, not the
        pickled entry's: a follower failed to unpickle entries of ~1 MiB in its tick); its
        batch size is set above COMMAND_BYTES_MAX so that it never chunks: an entry of
        COMMAND_BYTES_MAX fits one frame."""
        entries = SyncObj._SyncObj__getEntries(self, fromIDx, count)
        if maxSizeBytes is None:
            return entries
        total = 0
        for i, entry in enumerate(entries):
            total += len(entry[0]) + ENTRY_WIRE_OVERHEAD_BYTES
            if total > self._ls_append_entries_bytes and i > 0:
                return entries[:i]
        return entries

    # --- replicated state machine -----------------------------------------------------------

    @replicated
    def _ls_append(
        self, log: str, data: bytes, expected_id: int | None, invalidates: tuple[int, ...]
    ) -> int | AppendOutcome:
        """One append: its new id, or an AppendOutcome carrying the error."""
        self._ls_applied_appends += 1
        self._ls_applied_total += 1
        with self._ls_lock:
            return self._ls_state.apply_many(((log, data, expected_id, invalidates),))[0]

    @replicated
    def _ls_barrier(self) -> None:
        return None

    # Method ids are given in name order: _ls_append 0, _ls_barrier 1, _ls_batch 2
    # ("_ls_bar" < "_ls_bat"); test_command_encoding_is_stable pins them.
    @replicated
    def _ls_batch(self, appends: tuple[tuple, ...]) -> list[int | AppendOutcome]:
        """Several appends in one Raft command, applied in order: each gets its own id and
        sees the state left by the ones before it; a failed one changes nothing. One
        outcome per append: the new id, or an AppendOutcome carrying the error."""
        self._ls_applied_appends += len(appends)
        self._ls_applied_total += len(appends)
        with self._ls_lock:
            return self._ls_state.apply_many(appends)

    # --- coalescing of appends (any thread -> tick thread) ----------------------------------

    def ls_enqueue_append(self, args: tuple, callback: Callable[[Any, int], None]) -> None:
        """Queue one append (log, data, expected_id, invalidates); the tick thread puts all
        queued appends into one Raft command. `callback(outcome | None, fail_reason)`
        runs on the tick thread, as for a pysyncobj command."""
        pending = self._ls_pending
        if len(pending) >= self._ls_pending_max:
            callback(None, FAIL_REASON.QUEUE_FULL)
            return
        pending.append((args, callback))
        if len(pending) == 1 and self._ls_waker is not None:
            # The queue was empty: the tick thread may be in poll. (If it is draining right
            # now it takes this one too, or leaves it and notifies itself.)
            self._ls_waker.notify()

    def _ls_hold(self, queued: int) -> bool:
        """Tick thread, leader under heavy load: True to keep the queued appends for a later
        tick (design/logstore.md, "batching under load"). Each Raft round costs the leader
        and every follower about the same (messages, a fdatasync, a tick) however many
        appends it carries, and under load that per-round part dominates. Proposing on
        every tick splits N closed-loop callers into two groups of ~N/2 (one batch
        committing while the next is on the wire). Instead, while a batch is uncommitted
        nothing new is proposed, and once its callers are answered the leader waits (at
        most linger_s) until as many appends are queued as it answered: one batch of ~N
        per round. After a small batch (light load) nothing is held."""
        if not self._ls_heavy or queued >= self._ls_batch_max or not self._isLeader():
            self._ls_hold_until = self._ls_inflight_since = None
            return False
        now = time.monotonic()
        if self._ls_last_proposed > self.raftCommitIndex:
            # The acknowledgements that commit it wake this thread.
            if self._ls_inflight_since is None:
                self._ls_inflight_since = now
            until = self._ls_inflight_since + self._ls_inflight_wait_max_s
        elif queued < self._ls_answered:
            until = self._ls_answered_at + self._ls_linger_s
        else:
            until = now
        if now < until:
            self._ls_hold_until = until
            self._ls_holds += 1
            return True
        self._ls_hold_until = self._ls_inflight_since = None
        return False

    def _ls_lingering(self) -> bool:
        """Heavy load, nothing queued, callers just answered: their next appends (and with
        them the commit index, in the next AppendEntries) are expected within linger_s."""
        if not self._ls_heavy or not self._ls_answered:
            return False
        until = self._ls_answered_at + self._ls_linger_s
        if time.monotonic() >= until:
            return False
        self._ls_hold_until = until
        return True

    def _ls_propose_pending(self) -> None:
        """Tick thread: turn the queued appends into one command for pysyncobj's queue."""
        pending = self._ls_pending
        self._ls_hold_until = None
        if not pending:
            return
        if self._ls_hold(len(pending)):
            return
        self._ls_answered = 0
        items: list[tuple] = []
        callbacks: list[Callable[[Any, int], None]] = []
        size = 0
        while pending and len(items) < self._ls_batch_max:
            args, cb = pending[0]
            size += len(args[1]) + len(args[0]) + 8 * len(args[3]) + 16
            if items and size > self._ls_batch_bytes_max:
                break
            pending.popleft()
            items.append(args)
            callbacks.append(cb)
        if pending and self._ls_waker is not None:
            self._ls_waker.notify()  # the rest goes in the next tick's command
        self._ls_batches += 1
        self._ls_batched_appends += len(items)
        self._ls_heavy = 0 < self._ls_linger_batch_min <= len(items)
        if len(items) == 1:
            # A lone append keeps the plain append encoding (method 0).
            command = _pso_pickle.dumps((self._ls_append_method_id, items[0]))
            assert len(command) < COMMAND_BYTES_MAX, len(command)  # check_append_request
            SyncObj._applyCommand(self, command, callbacks[0], _pso._COMMAND_TYPE.REGULAR)
            return

        def done(result, error) -> None:
            self._ls_answered += len(callbacks)
            self._ls_answered_at = time.monotonic()
            if error == FAIL_REASON.SUCCESS and (
                not isinstance(result, list) or len(result) != len(callbacks)
            ):
                logger.error("append batch returned %r for %d appends", result, len(callbacks))
                result, error = None, FAIL_REASON.UNKNOWN_OUTCOME
            ok = error == FAIL_REASON.SUCCESS
            # A large batch (as large as the heavy-load threshold) is answered by a chain;
            # a smaller one directly, so that its few callers run at once.
            chain = len(callbacks) >= max(self._ls_linger_batch_min, LATENCY_YIELD_APPENDS_MAX + 1)
            chained: list[_Waiter] = []
            for k, cb in enumerate(callbacks):
                waiter = getattr(cb, "__self__", None)
                if chain and type(waiter) is _Waiter:
                    waiter.result = result[k] if ok else None
                    waiter.error = error
                    chained.append(waiter)
                    continue
                try:
                    cb(result[k] if ok else None, error)
                except Exception:  # noqa: BLE001 - one caller's callback must not stop the rest
                    logger.exception("append callback failed")
            if chained:
                # Woken right before this thread next sleeps in poll (see _Waiter).
                self._ls_wake_chains.append(_WakeChain(chained))

        command = _pso_pickle.dumps((self._ls_batch_method_id, (tuple(items),)))
        # ReplicaConfig bounds a batch (<= 2 * its size estimate + a constant per append).
        assert len(command) < COMMAND_BYTES_MAX, len(command)
        SyncObj._applyCommand(self, command, done, _pso._COMMAND_TYPE.REGULAR)

    def _ls_advance_wake_chains(self) -> float | None:
        """Tick thread, before it sleeps in poll: start the chains of the batches answered
        in this tick. A chain moves as fast as the OS runs each woken caller in turn; on a
        machine short of CPU that can take long, so a chain still unfinished after
        WAKE_CHAIN_STALL_S wakes all its remaining callers at once. Returns when the poll
        must end to check that (None: no chain is running)."""
        now = time.monotonic()
        chains = self._ls_wake_chains
        active = self._ls_active_chains
        while chains:
            chain = chains.popleft()
            chain.wake_next()
            active.append((now, chain))
        if not active:
            return None
        running = []
        for started, chain in active:
            if not chain.pending():
                continue
            if now - started >= WAKE_CHAIN_STALL_S:
                chain.wake_all()
                continue
            running.append((started, chain))
        self._ls_active_chains = running
        return running[0][0] + WAKE_CHAIN_STALL_S if running else None

    def ls_fail_pending(self, reason: int) -> None:
        """close(): answer the appends that never reached pysyncobj (and wake the callers
        of answered batches the tick thread had not started to wake)."""
        while self._ls_wake_chains:
            self._ls_wake_chains.popleft().wake_all()
        for _started, chain in self._ls_active_chains:
            chain.wake_all()
        while self._ls_pending:
            _args, cb = self._ls_pending.popleft()
            try:
                cb(None, reason)
            except Exception:  # noqa: BLE001
                logger.exception("append callback failed")

    # --- hooks into pysyncobj's tick -------------------------------------------------------

    def _applyCommand(self, command, callback, commandType=None):
        super()._applyCommand(command, callback, commandType)
        if self._ls_waker is not None:
            self._ls_waker.notify()

    def _onTick(self, timeToWait=0.0):
        _WIRE.local.raw = True  # this is a logstore tick thread: uncompressed frames
        # The leader counts its own log toward the commit index at the start of a tick:
        # whatever it appended in the previous tick must be durable by then. A follower
        # answers here, after one sync, every AppendEntries of the last poll round.
        if self._ls_transport is not None:
            self._ls_transport.flush()
        else:
            self._ls_journal.sync()
        super()._onTick(timeToWait)

    def _checkCommandsToApply(self):
        while self._ls_tasks:
            self._ls_tasks.popleft()()
        self._ls_maybe_compact()
        self._ls_propose_pending()
        before = self._ls_journal.last_index()
        super()._checkCommandsToApply()
        if not self._isLeader():
            return
        grew = self._ls_journal.last_index() != before
        if grew:
            self._ls_last_proposed = self._ls_journal.last_index()
        applied = self._ls_applied_total - self._ls_applied_seen
        self._ls_applied_seen = self._ls_applied_total
        if not grew and self.raftCommitIndex != self._ls_commit_sent:
            if 0 < applied <= LATENCY_YIELD_APPENDS_MAX:
                # A few outcomes were just handed to waiting callers: let them take the
                # GIL before this thread tells the followers about the commit. (Under
                # load the tick thread is the bottleneck and keeps the GIL instead.)
                time.sleep(0)
            if self._ls_pending or self._ls_lingering():
                # New appends are queued (or, under heavy load, about to be): the next
                # AppendEntries carries them and this commit index, saving each follower
                # one message (and one tick) per batch under load. A lingering tick's poll
                # ends with the linger, and the commit index goes out then at the latest.
                return
        if grew or self.raftCommitIndex != self._ls_commit_sent:
            # Send at once instead of at the next heartbeat (pysyncobj's batching period),
            # then group commit: one fdatasync for every entry added in this tick, while
            # the followers write theirs.
            self._ls_commit_sent = self.raftCommitIndex
            self._SyncObj__sendAppendEntries()
            self._ls_journal.sync()
            if grew and self._ls_waker is not None and not self.otherNodes:
                # A lone leader commits on its next tick; do not wait for a poll timeout.
                # (With followers, their acknowledgements wake the tick thread.)
                self._ls_waker.notify()

    def _ls_maybe_compact(self) -> None:
        written = self._ls_snapshots_written()
        if written != self._ls_snapshot_seen:
            self._ls_snapshot_seen = written
            self._ls_applied_appends = 0
        elif self._ls_applied_appends >= self._ls_compaction_min_appends:
            self._ls_applied_appends = 0  # ask once per threshold; pysyncobj may decline
            self.forceLogCompaction()

    def ls_run_on_tick(self, task: Callable[[], None]) -> None:
        self._ls_tasks.append(task)
        if self._ls_waker is not None:
            self._ls_waker.notify()

    def ls_started(self) -> bool:
        """True once the first tick loaded the snapshot (if any) into the state."""
        return not self._SyncObj__needLoadDumpFile

    def ls_close_waker(self) -> None:
        if self._ls_waker is not None:
            self._ls_waker.close()

    def ls_join(self, timeout_s: float) -> bool:
        thread = self._SyncObj__thread
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()


class _Waiter:
    """One command's outcome, handed from the tick thread to the waiting caller.

    A bare lock (held until the outcome arrives) instead of a threading.Event: an Event is a
    Condition built in Python, and creating, waiting on and setting one cost more CPU per
    append than the rest of the caller's path (design/logstore.md, "batching").

    Outcomes of a large batch are handed over as a chain (`_WakeChain`): the tick thread
    sets every waiter's outcome, then wakes only the first, right before it sleeps in poll;
    each caller wakes the next as soon as it runs. One caller at a time wants the GIL, so
    a woken caller rarely finds it taken (waking 60 at once made each of them sleep again
    on the GIL: ~1.5 extra context switches per append)."""

    __slots__ = ("_lock", "result", "error", "_token", "chain")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self.result: Any = None
        self.error: int = FAIL_REASON.SUCCESS
        # Claimed (popped) exactly once: by the chain that wakes this waiter, or by the
        # waiter itself when it gives up; list.pop is atomic, so never by both.
        self._token = [True]
        self.chain: _WakeChain | None = None

    def done(self, result, error) -> None:
        self.result = result
        self.error = error
        try:
            self._lock.release()
        except RuntimeError:
            logger.error("a command's outcome was delivered twice")

    def claim(self) -> bool:
        """True for the one caller that may release this waiter's lock."""
        try:
            self._token.pop()
        except IndexError:
            return False
        return True

    def wait(self, timeout_s: float) -> bool:
        """True once the outcome is in; False after timeout_s."""
        if not self._lock.acquire(True, max(0.0, timeout_s)):
            if self.claim():
                return False  # given up: a chain reaching this waiter skips it
            # A chain claimed this waiter just now and is releasing it.
            self._lock.acquire()
        chain = self.chain
        if chain is not None:
            chain.wake_next()
        return True


class _WakeChain:
    """Waiters of one batch, outcomes already set, woken one after the other."""

    __slots__ = ("_waiters",)

    def __init__(self, waiters: list[_Waiter]) -> None:
        self._waiters = deque(waiters)
        for w in waiters:
            w.chain = self

    def wake_next(self) -> None:
        waiters = self._waiters
        while True:
            try:
                w = waiters.popleft()
            except IndexError:
                return
            if w.claim():
                w._lock.release()
                return
            # That caller gave up waiting: on to the next.

    def pending(self) -> bool:
        return bool(self._waiters)

    def wake_all(self) -> None:
        """Wake every caller not woken yet (a stalled chain; shutdown)."""
        while self._waiters:
            self.wake_next()


_RETRYABLE = (
    FAIL_REASON.QUEUE_FULL,
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.DISCARDED,
)
_UNKNOWN = (FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME)


def _host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


def _check_bindable(address: str) -> None:
    """Fail at once, with the reason, when the Raft address cannot be bound (another
    process listens on it, or no interface has it): pysyncobj would retry binding in its
    tick thread, silently, until the start timeout. SO_REUSEADDR as pysyncobj binds, so a
    connection of a previous run in TIME_WAIT does not count. A host that does not resolve
    here is left to pysyncobj."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return
    family, kind, proto, _name, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
            probe.listen(1)
        except OSError as e:
            err = OSError(f"cannot bind Raft address {address}: {e.strerror}")
            err.errno = e.errno
            raise err from None


class ReplicatedLogStore:
    """One logstore replica. Thread-safe; a context manager.

    Create it on a thread that outlives it: pysyncobj's tick thread stops when the thread
    that created its SyncObj exits.
    """

    def __init__(
        self,
        self_address: str,
        peer_addresses: Sequence[str],
        data_dir: str,
        password: str | None = None,
        *,
        allow_insecure_dev: bool = False,
        config: ReplicaConfig | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        peers = [p for p in peer_addresses if p != self_address]
        if not password:
            if peers or _host_of(self_address) != "127.0.0.1" or not allow_insecure_dev:
                raise IllegalState(
                    "a logstore replica needs a cluster password; only a single-node "
                    "development store bound on 127.0.0.1 may run without one, and only "
                    "when asked explicitly (allow_insecure_dev)"
                )
            logger.warning("logstore %s runs WITHOUT a password (development only)", self_address)
        self._insecure = not password
        _check_bindable(self_address)
        self.config = config or ReplicaConfig()
        self.self_address = self_address
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        # One process per replica dir: a second one on it rewrote this one's term and vote
        # under it. Held until close(), or the process's death.
        self._dir_lock = lock_server_dir(self.data_dir, f"logstore {self_address}", "that replica")
        try:
            self._open(self_address, peers, password, start_timeout_s)
        except BaseException:
            self._dir_lock.release()
            raise

    def _open(
        self, self_address: str, peers: list[str], password: str | None, start_timeout_s: float
    ) -> None:
        """The rest of __init__, once the replica's dir is locked."""
        self._state = LogState()
        self._lock = threading.Lock()
        self.append_latency = LatencyHistogram()  # append(), submit to outcome (metrics)
        self._append_latency_lock = threading.Lock()
        self._journal = DurableJournal(self.data_dir)
        self._snapshots = SnapshotHooks(
            self._state, self._lock, journal=self._journal, name=self_address
        )
        # Decoded while the rest starts (the first tick takes it): a reopen of 1M live
        # entries no longer waits for the key derivation and pysyncobj's start, then the load.
        self._snapshots.preload(os.path.join(self.data_dir, SNAPSHOT_FILE))
        c = self.config
        conf = SyncObjConf(
            journalFile=self._journal,
            fullDumpFile=os.path.join(self.data_dir, SNAPSHOT_FILE),
            serializer=self._snapshots.serialize,
            deserializer=self._snapshots.deserialize,
            appendEntriesUseBatch=True,
            appendEntriesPeriod=c.append_entries_period_s,
            raftMinTimeout=c.raft_min_timeout_s,
            raftMaxTimeout=c.raft_max_timeout_s,
            leaderFallbackTimeout=c.leader_fallback_timeout_s,
            connectionTimeout=c.connection_timeout_s,
            connectionRetryTime=c.connection_retry_s,
            autoTickPeriod=c.auto_tick_period_s,
            sendBufferSize=c.send_buffer_bytes,
            recvBufferSize=c.recv_buffer_bytes,
            # Never reached: pysyncobj would chunk an entry this large (_SyncObj__getEntries
            # applies c.append_entries_batch_bytes instead).
            appendEntriesBatchSizeBytes=COMMAND_BYTES_MAX + 1,
            commandsQueueSize=c.commands_queue_max,
            logCompactionMinEntries=c.compaction_min_entries,
            logCompactionMinTime=c.compaction_min_time_s,
            logCompactionBatchSize=c.snapshot_batch_bytes,
            dynamicMembershipChange=True,
            useFork=False,
        )
        auth = FrameCipher(password) if password else None
        self._node = _RaftNode(
            self_address,
            peers,
            conf,
            self._state,
            self._lock,
            self._journal,
            auth,
            batch_max=c.append_batch_max,
            batch_bytes_max=c.append_batch_bytes_max,
            pending_max=c.append_pending_max,
            linger_batch_min=c.append_linger_batch_min,
            linger_s=c.append_linger_s,
            inflight_wait_max_s=c.append_inflight_wait_max_s,
            compaction_min_appends=c.compaction_min_entries,
            snapshots_written=lambda: self._snapshots.snapshots_written,
            append_entries_bytes=c.append_entries_batch_bytes,
        )
        self._closed = False
        try:
            self._node._SyncObj__thread.name = f"logstore-raft-{self_address}"
        except AttributeError:
            pass
        deadline = time.monotonic() + start_timeout_s
        while not self._node.ls_started():
            if time.monotonic() > deadline:
                self.close()
                raise Unavailable(f"logstore replica {self_address} did not start (bind?)")
            time.sleep(0.005)

    # --- LogStore protocol ----------------------------------------------------------------

    def append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
        timeout_s: float = 5.0,
    ) -> int:
        inv = tuple(int(i) for i in invalidates) if invalidates else ()
        if expected_id is not None:
            expected_id = int(expected_id)
        check_append_request(log, data, expected_id, inv)
        started = time.monotonic()
        try:
            outcome = self._submit(
                self._enqueue_append, ((log, bytes(data), expected_id, inv),), timeout_s, False
            )
        finally:  # every outcome, failures included (metrics, design/operability.md)
            with self._append_latency_lock:
                self.append_latency.observe(time.monotonic() - started)
        return outcome_id(outcome)

    def append_async(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
    ) -> Future:
        """Submit one append without waiting: a Future that ends with the new id or the
        error `append` would raise. Many appends can be in flight; they enter the log in
        submission order while one leader lasts. No retries: on a leader change the
        Future fails (Unavailable), and the outcome of that append is unknown."""
        inv = tuple(int(i) for i in invalidates) if invalidates else ()
        exp = None if expected_id is None else int(expected_id)
        check_append_request(log, data, exp, inv)
        self._check_open()
        future: Future = Future()
        future.set_running_or_notify_cancel()

        def done(result, error) -> None:
            if error == FAIL_REASON.SUCCESS:
                try:
                    future.set_result(outcome_id(result))
                except RpcError as err:
                    future.set_exception(err)
            else:
                future.set_exception(Unavailable(f"append failed (pysyncobj reason {error})"))

        self._node.ls_enqueue_append((log, bytes(data), exp, inv), done)
        return future

    def read(
        self, log: str, from_id: int = 1, limit: int = 1000, timeout_s: float = 5.0
    ) -> list[Entry]:
        if limit <= 0 or limit > READ_LIMIT_MAX:
            raise BadRequest(f"limit must be 1..{READ_LIMIT_MAX}")
        self._check_open()
        with self._lock:
            return self._state.read(log, from_id, limit)

    def last_id(self, log: str, timeout_s: float = 5.0) -> int:
        self._check_open()
        with self._lock:
            return self._state.last_id(log)

    def barrier(self, timeout_s: float = 5.0) -> None:
        """A no-op through the log; returns once this replica applied it, hence everything
        acknowledged before the call."""
        self._submit(self._node._ls_barrier, (), timeout_s, True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._node.destroy()
        if not self._node.ls_join(CLOSE_TIMEOUT_S):
            logger.error("logstore replica %s: tick thread did not stop", self.self_address)
        self._node.ls_close_waker()
        self._node.ls_fail_pending(FAIL_REASON.MISSING_LEADER)
        # A background snapshot write ends before the directory is released (its rename
        # must not land in a directory another process has opened since).
        self._snapshots.close()
        self._dir_lock.release()

    def __enter__(self) -> ReplicatedLogStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- operations -----------------------------------------------------------------------

    def add_member(self, address: str, timeout_s: float = 10.0) -> None:
        """Add one voting replica; start it first with the current members as peers.

        Refused (ILLEGAL_STATE, nothing changed) when nothing accepts a connection at
        `address` within half the timeout (10 s at most): pysyncobj makes a new member a
        voter at once, so a member that is not running would raise the majority the group
        needs without adding a vote.

        Refused too (ILLEGAL_STATE, nothing changed) on a replica that runs without a
        password: a group of several replicas always authenticates its Raft traffic (it is
        pickled), so a development store stays a single node."""
        self._check_open()
        if self._insecure:
            raise IllegalState(
                f"{self.self_address} runs without a password (development only): a group of "
                "several replicas needs one; restart this replica with a password first, "
                "then add members (started with the same password)"
            )
        members = self._members()
        if address in members:
            raise IllegalState(f"{address} is a member already (members: {', '.join(members)})")
        deadline = time.monotonic() + timeout_s
        _probe(address, min(MEMBER_PROBE_S, timeout_s / 2), self._node.encryptor)
        remaining = max(0.0, deadline - time.monotonic())
        self._membership(self._node.addNodeToCluster, address, remaining)

    def remove_member(self, address: str, timeout_s: float = 10.0) -> None:
        """Remove one replica (not the Raft leader: pysyncobj refuses that; stop it first,
        another member takes over, then remove it)."""
        self._check_open()
        members = self._members()
        if address not in members:
            raise IllegalState(f"{address} is not a member (members: {', '.join(members)})")
        if address == self.leader():
            raise IllegalState(
                f"{address} leads the log now, and a Raft leader cannot be removed: stop it "
                "(another member takes over within seconds), then remove it"
            )
        self._membership(self._node.removeNodeFromCluster, address, timeout_s)

    def _members(self) -> list[str]:
        return sorted([self.self_address, *(n.id for n in self._node.otherNodes)])

    def transfer_leadership(self, to: str | None = None, timeout_s: float = 10.0) -> str:
        """Hand leadership from this replica (the leader) to `to`, or to the most caught-up
        follower; returns the new leader's address once this replica sees it lead.

        pysyncobj refuses while the target lags behind the leader's last entry; under
        load the request is repeated until the deadline."""
        self._check_open()
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.is_leader():
                leader = self.leader() or ""
                if to is not None and leader == to:
                    return leader
                raise NotLeader(
                    f"{self.self_address} is not the leader",
                    leader_hint=LeaderHintValue(address=leader),
                )
            waiter = _Waiter()
            self._node.ls_run_on_tick(
                lambda w=waiter: self._node.transferLeadership(to, callback=w.done)
            )
            if not waiter.wait(max(0.0, deadline - time.monotonic())):
                raise TimedOut("leadership transfer not started in time")
            if waiter.error == FAIL_REASON.SUCCESS:
                end = min(deadline, time.monotonic() + 2 * self.config.raft_max_timeout_s)
                while time.monotonic() < end:
                    leader = self.leader()
                    if leader and leader != self.self_address and (to is None or leader == to):
                        return leader
                    time.sleep(0.005)
            if time.monotonic() >= deadline:
                raise TimedOut(f"leadership did not move to {to or 'a follower'} in time")
            time.sleep(0.01)

    def force_compaction(self) -> None:
        """Ask for a snapshot and journal trim at the next tick (tests, operators)."""
        self._node.forceLogCompaction()
        if self._node._ls_waker is not None:
            self._node._ls_waker.notify()

    def is_leader(self) -> bool:
        return self._node._isLeader()

    def leader(self) -> str | None:
        leader = self._node._getLeader()
        return None if leader is None else leader.id

    def status(self) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        for _ in range(5):  # getStatus iterates dicts the tick thread may be resizing
            try:
                raw = self._node.getStatus()
                break
            except RuntimeError:
                continue
        roles = {0: "follower", 1: "candidate", 2: "leader"}
        js = self._journal.stats()
        snap_path = os.path.join(self.data_dir, SNAPSHOT_FILE)
        others = list(self._node.otherNodes)
        members = sorted([self.self_address] + [n.id for n in others])
        connected = sorted(n.id for n in others if self._node.isNodeConnected(n))
        try:
            _cmd, last_index, last_term = self._journal[-1]
        except IndexError:
            last_index = last_term = 0
        with self._lock:
            logs = {n: self._state.last_id(n) for n in self._state.log_names()}
            live_entries = self._state.live_entries
            live_bytes = self._state.live_bytes
        return {
            "address": self.self_address,
            "role": roles.get(raw.get("state"), "unknown"),
            "leader": self.leader(),
            "term": raw.get("raft_term", 0),
            "commit_index": raw.get("commit_idx", 0),
            "applied_index": raw.get("last_applied", 0),
            "members": members,
            "connected": connected,
            "last_log_index": last_index,
            "last_log_term": last_term,
            "journal_entries": js.entries,
            "journal_first_index": js.first_index,
            "journal_bytes": js.file_bytes,
            "journal_syncs": js.syncs,
            "snapshot_bytes": os.path.getsize(snap_path) if os.path.exists(snap_path) else 0,
            "snapshots_written": self._snapshots.snapshots_written,
            "snapshots_loaded": self._snapshots.snapshots_loaded,
            "live_entries": live_entries,
            "live_bytes": live_bytes,
            "logs": logs,
        }

    # --- internals ------------------------------------------------------------------------

    def _enqueue_append(self, args: tuple, callback) -> None:
        self._node.ls_enqueue_append(args, callback)

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("logstore replica is closed")

    def _membership(self, fn, address: str, timeout_s: float) -> None:
        self._check_open()
        waiter = _Waiter()
        fn(address, callback=waiter.done)
        if not waiter.wait(timeout_s):
            raise TimedOut(f"membership change for {address} not committed in {timeout_s}s")
        if waiter.error == FAIL_REASON.REQUEST_DENIED:
            raise IllegalState(
                f"membership change for {address} refused: another change is in progress, "
                "the leader has not committed in its term yet, or the member list already "
                "says so"
            )
        if waiter.error != FAIL_REASON.SUCCESS:
            raise Unavailable(f"membership change for {address} failed ({waiter.error})")

    def _submit(self, fn, args: tuple, timeout_s: float, retry_unknown: bool) -> Any:
        """Run one replicated command; retry only while it surely is not in the log."""
        self._check_open()
        deadline = time.monotonic() + timeout_s
        backoff_s = 0.002
        while True:
            self._check_open()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimedOut("no leader accepted the command in time")
            waiter = _Waiter()
            fn(*args, callback=waiter.done)
            if not waiter.wait(remaining):
                raise TimedOut(
                    f"no outcome within {timeout_s}s (the command may still be committed)"
                )
            if waiter.error == FAIL_REASON.SUCCESS:
                return waiter.result
            if waiter.error in _RETRYABLE or (retry_unknown and waiter.error in _UNKNOWN):
                time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_S_MAX)
                continue
            if waiter.error in _UNKNOWN:
                raise Unavailable(
                    "leader changed before the command's outcome was known; "
                    "read the log to learn whether it was committed"
                )
            raise Unavailable(f"command failed (pysyncobj reason {waiter.error})")


MEMBER_PROBE_S = 10.0  # how long add_member waits for a new replica to listen, at most
PROBE_ATTEMPT_S = 1.0
PROBE_PAUSE_S = 0.2


def _probe(address: str, timeout_s: float, auth: FrameCipher | None = None) -> None:
    """Connect to a replica's Raft address, again until `timeout_s` has passed (a replica
    started a moment ago binds its port during its first second or so); raise IllegalState
    if nothing accepted by then (refused, unreachable or silent).

    With `auth`, also open pysyncobj's handshake as a replica does: send a random key in a
    frame encrypted under the group's password and wait for the answer, which a replica of
    the group encrypts under the same password. A replica with another password, or anything but a
    replica (a client rpc port given for the Raft one), hangs up or answers otherwise: it
    could never join, and adding it would raise the majority the group needs without adding
    a vote (a one-node group lost its leader so). The answer is only decrypted (which
    authenticates it): nothing received here is unpickled."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"not a HOST:PORT Raft address: {address!r}")
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection(
                (host, int(port)), timeout=max(0.05, min(PROBE_ATTEMPT_S, remaining))
            ) as conn:
                if auth is not None:
                    _handshake(conn, auth, address, max(0.5, min(HANDSHAKE_S, remaining)))
                return
        except OSError as e:
            if time.monotonic() + PROBE_PAUSE_S >= deadline:
                # Not UNAVAILABLE: callers would retry it, and the member is not coming.
                raise IllegalState(
                    f"nothing accepts connections at {address} ({e}): start the new "
                    "replica first, with the current members as its peers"
                ) from None
            time.sleep(PROBE_PAUSE_S)


HANDSHAKE_S = 3.0  # how long a replica may take to answer the handshake's first frame
_FRAME_LEN = _FRAME_HEAD


def _handshake(conn: socket.socket, auth: FrameCipher, address: str, timeout_s: float):
    key = os.urandom(32)
    frame = auth.encrypt_at_time(zlib.compress(_pso_pickle.dumps(key), 3), int(time.monotonic()))
    conn.settimeout(timeout_s)
    conn.sendall(_FRAME_LEN.pack(len(frame)) + frame)
    refused = IllegalState(
        f"{address} does not answer as a replica of this group (a different password, or not "
        "a coordinator-log/logstore Raft address): it could never join; start it with the "
        "group's password and the current members as its peers"
    )
    try:
        head = _recv_exactly(conn, _FRAME_LEN.size)
        (length,) = _FRAME_LEN.unpack(head)
        if not 0 < length <= HANDSHAKE_FRAME_BYTES_MAX:
            raise refused
        auth.decrypt(_recv_exactly(conn, length))  # InvalidFrame unless the same password
    except (InvalidFrame, ConnectionError, TimeoutError) as e:
        raise refused from e


HANDSHAKE_FRAME_BYTES_MAX = FRAME_BYTES_UNTRUSTED_MAX  # the answer: two 32-byte keys, pickled


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the peer")
        buf += chunk
    return bytes(buf)
