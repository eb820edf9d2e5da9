"""Fuzz every rpc method of every service of a real cluster (issue 27, "Proof").

A real cluster (3 coordinator nodes and 3 tablet servers from optools.localcluster, secure
as a local cluster is by default, plus one plaintext `logstore serve` group of 3 replicas)
gets requests built from the .proto descriptors with
random and boundary values in every field: ints at 0, -1 and their type's limits, strings
empty, huge, malformed or the real ids of tables, tablets, servers and logs of the cluster
(so that calls reach past the first lookup), repeated fields empty and long, nested
messages recursively (depth-bounded), random Arrow-like sidecars. Each request goes to a
server of its service, with that server's UUID (sometimes a wrong one), signed with the
cluster's secret for privileged methods (sometimes not). The cluster's own processes are
called with CURVE as its admin (the key of every server from the cluster's folder): what is
fuzzed is what an authenticated caller can send; an unauthenticated one gets no connection
at all (tests/cli/test_local_cluster_secure.py).

Asserted: every answer is OK or a typed error (never INTERNAL, never no answer), no process
dies, no tablet becomes FAILED; afterwards the cluster still creates, writes to and reads
a table and the logstore group still commits.

Methods come from each server's own table (rpc.Ping lists what it registered); request
types from the protocol modules by name (`<Method>Request`, a few named below). Methods
that destroy legitimately (drop a table, delete a replica, remove a server or a member) run
only against objects created for the purpose (victims) or made-up ones.

Deterministic in what it sends: a seeded RNG (FUZZ_SEED, else random; printed) and a bounded
number of calls (FUZZ_CALLS_PER_METHOD, default 20; raise it to run longer). A tenth of the
bodies are also mangled (bytes flipped or cut): those must be refused as BAD_REQUEST.
"""

from __future__ import annotations

import math
import os
import random
import struct
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
import zmq
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from logstore import logstore_pb2 as lspb
from rpc import privileged
from rpc.addresses import endpoint
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols import tserver_pb2 as tpb
from rpc.rpc_pb2 import PingRequest, PingResponse, RequestHeader, ResponseHeader, StatusCode
from tests.logstore.helpers import PASSWORD as LOGSTORE_PASSWORD
from tests.logstore.procs import make_replicas
from tests.support.cluster import local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]

CALLS_PER_METHOD = int(os.environ.get("FUZZ_CALLS_PER_METHOD", "20"))
CALL_TIMEOUT_MS = 5_000
# How long past the call's own deadline we wait for an answer before calling it lost.
ANSWER_GRACE_S = 25.0
SEND_TIMEOUT_MS = 10_000
DEPTH_MAX = 3
REPEATED_LONG = 40
HUGE_STRING_CHARS = 300_000

MODULES = {"Coordinator": cpb, "TServer": tpb, "LogStore": lspb}
# Request types not named `<Method>Request`.
REQUEST_TYPES = {
    "LogStore.AddMember": lspb.MemberRequest,
    "LogStore.RemoveMember": lspb.MemberRequest,
    "rpc.Ping": PingRequest,
}
# Methods that destroy legitimately: the ids they get are victims' or made up, never the
# cluster's real tables, servers, nodes or members.
ON_VICTIMS = {
    "Coordinator.DropTable",
    "Coordinator.SetReplication",
    "Coordinator.MoveReplica",
    "Coordinator.RemoveServer",
    "Coordinator.RetireServer",
    "Coordinator.EnlistServer",
    "Coordinator.RemoveNode",
    "Coordinator.AddNode",
    "Coordinator.JoinServer",  # a real server's uuid with another key: fake uuids only
    "TServer.DeleteTablet",
    "TServer.ChangeConfig",
    "TServer.StartTabletCopy",
    "TServer.AlterSchema",
    "LogStore.RemoveMember",
    "LogStore.AddMember",
}

# Methods only the cluster's own processes may call (rpc/authz.py): called also as a member
# gone wrong, with a tablet server's key pair from its fs root (the server role, as the
# coordinator's keys hold it too), or a fresh join token's for JoinServer (the join role).
# As the admin alone they are refused by the role table before their handlers run.
SERVER_ROLE = {
    "TServer.Consensus",
    "TServer.CreateTablet",
    "TServer.DeleteTablet",
    "TServer.ChangeConfig",
    "TServer.AlterSchema",
    "TServer.StartTabletCopy",
    "TServer.BeginCopySession",
    "TServer.FetchCopyChunk",
    "TServer.EndCopySession",
    "Coordinator.Heartbeat",
    "Coordinator.EnlistServer",
}
JOIN_ROLE = {"Coordinator.JoinServer"}
# As a member, these name the member itself (tablet server 0) most of the time.
OWN_UUID = {"Coordinator.Heartbeat", "Coordinator.EnlistServer"}
AS_MEMBER_SHARE = 0.75
JOIN_ADMIT_WAIT_S = 30.0  # of their calls; the rest as the admin (the role table's refusal)

INT_BOUNDARIES = {
    FieldDescriptor.TYPE_INT32: (0, -1, 1, 2, -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (0, -1, 1, -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (0, -1, 1, -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (0, -1, 1, 2, -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (0, -1, 1, -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (0, -1, 1, -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 1, 2, 3, 2**31, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 1, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 1, 2, 3, 2**63 - 1, 2**63, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 1, 2**63 - 1, 2**64 - 1),
}
INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
BAD_STRINGS = (
    "",
    " ",
    "-1",
    "0",
    "../../../../etc/passwd",
    "/",
    "a\x00b",
    "\u00e9\U0001f600\u202e",
    "9" * 40,
    "x" * 256,
    "table'; drop",
    "%s%n",
)


@dataclass
class Target:
    service: str
    address: str
    uuid: str
    methods: list[str]
    key: bytes | None  # the privileged key of its cluster
    alive: Callable[[], bool]
    log_path: Path


@dataclass
class Pools:
    """Real names of the cluster, by kind; `victim` ones for destructive methods."""

    table_names: list[str] = field(default_factory=list)
    table_ids: list[str] = field(default_factory=list)
    tablet_ids: list[str] = field(default_factory=list)
    server_uuids: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=lambda: ["k", "v", "w"])
    victim_table_names: list[str] = field(default_factory=list)
    victim_table_ids: list[str] = field(default_factory=list)
    victim_tablet_ids: list[str] = field(default_factory=list)
    fake_uuids: list[str] = field(default_factory=lambda: [uuidlib.uuid4().hex for _ in range(3)])
    fake_addresses: list[str] = field(
        default_factory=lambda: ["127.0.0.1:1", "127.0.0.1:65535", "10.255.255.1:7000"]
    )


class Generator:
    """Request messages from descriptors: random and boundary values in every field."""

    def __init__(self, rng: random.Random, pools: Pools, arrow_bodies: list[bytes]) -> None:
        self.rng = rng
        self.pools = pools
        self.arrow_bodies = arrow_bodies
        self.victims_only = False
        # Share of fields given a wild value (boundary, malformed); the rest get plausible
        # ones (small ints, real ids, valid enums), so that a request passes the first
        # checks and the wild field is met deep inside.
        self.wild = 1.0

    def message(self, desc: Descriptor, cls: type[Message], depth: int = 0) -> Message:
        msg = cls()
        self.fill(msg, depth)
        return msg

    def fill(self, msg: Message, depth: int) -> None:
        rng = self.rng
        for f in msg.DESCRIPTOR.fields:
            if rng.random() < 0.25:
                continue  # left unset
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                self._map(msg, f, depth)
            elif f.is_repeated:
                if rng.random() < self.wild:
                    n = rng.choice((0, 1, 2, 3, REPEATED_LONG if depth == 0 else 5))
                else:
                    n = rng.choice((1, 1, 2))
                if f.message_type is not None:
                    if depth >= DEPTH_MAX:
                        continue
                    for _ in range(n):
                        self.fill(getattr(msg, f.name).add(), depth + 1)
                else:
                    values = [self.scalar(f) for _ in range(n)]
                    self._set(lambda v, f=f: getattr(msg, f.name).extend(v), values, f)
            elif f.message_type is not None:
                if depth < DEPTH_MAX:
                    self.fill(getattr(msg, f.name), depth + 1)
            else:
                value = self.scalar(f)
                self._set(lambda v, f=f: setattr(msg, f.name, v), value, f)

    def _map(self, msg: Message, f: FieldDescriptor, depth: int) -> None:
        key_f, value_f = (
            f.message_type.fields_by_name["key"],
            f.message_type.fields_by_name["value"],
        )
        target = getattr(msg, f.name)
        for _ in range(self.rng.choice((0, 1, 3))):
            key = self.scalar(key_f)
            try:
                if value_f.message_type is not None:
                    if depth < DEPTH_MAX:
                        self.fill(target[key], depth + 1)
                else:
                    target[key] = self.scalar(value_f)
            except (TypeError, ValueError):
                pass

    def _set(self, setter, value, f: FieldDescriptor) -> None:
        try:
            setter(value)
        except (TypeError, ValueError):
            # An open enum value the runtime refuses, or a string that is not valid UTF-8:
            # fall back to a valid one (the bytes on the wire are what matters).
            if f.enum_type is not None:
                setter([0] if isinstance(value, list) else 0)

    def scalar(self, f: FieldDescriptor):
        rng = self.rng
        t = f.type
        if rng.random() >= self.wild:
            return self.plausible(f)
        if t in INT_BOUNDARIES:
            roll = rng.random()
            if roll < 0.45:
                return rng.choice(INT_BOUNDARIES[t])
            if roll < 0.8:
                lo, hi = INT_RANGES[t]
                return max(lo, min(hi, rng.randint(0, 5)))
            return rng.randint(*INT_RANGES[t])
        if t == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return rng.choice((0.0, -1.0, 1.0, 0.5, 1e308, -1e308, math.inf, -math.inf, math.nan))
        if t == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in f.enum_type.values]
            return rng.choice(values + [max(values) + 1, -1, 2**31 - 1])
        if t == FieldDescriptor.TYPE_STRING:
            return self.string(f.name)
        if t == FieldDescriptor.TYPE_BYTES:
            return self.bytes_value()
        raise AssertionError(f"no generator for field type {t} ({f.full_name})")

    def plausible(self, f: FieldDescriptor):
        rng = self.rng
        t = f.type
        if t in INT_BOUNDARIES:
            return rng.choice((1, 1, 2, 3))
        if t == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return rng.choice((0.0, 1.0, 2.5))
        if t == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in f.enum_type.values if v.number] or [0]
            return rng.choice(values)
        if t == FieldDescriptor.TYPE_STRING:
            return self.string(f.name, plausible=True)
        if self.arrow_bodies:
            return rng.choice(self.arrow_bodies)
        return b"x"

    def string(self, name: str, plausible: bool = False) -> str:
        rng = self.rng
        p = self.pools
        roll = 1.0 if plausible else rng.random()
        if roll < 0.05:
            return "x" * HUGE_STRING_CHARS
        if roll < 0.3:
            return rng.choice(BAD_STRINGS + tuple(p.fake_uuids) + tuple(p.fake_addresses))
        lname = name.lower()
        v = self.victims_only
        if "tablet" in lname:
            pool = p.victim_tablet_ids if v else p.tablet_ids + p.victim_tablet_ids
        elif "table_id" in lname:
            pool = p.victim_table_ids if v else p.table_ids + p.victim_table_ids
        elif "uuid" in lname or "server" in lname or lname in ("peer", "voted_for", "leader"):
            pool = p.fake_uuids if v else p.server_uuids
        elif "address" in lname:
            pool = p.fake_addresses if v else p.addresses
        elif lname == "log":
            pool = p.logs
        elif "column" in lname or lname in ("projection", "drop_columns", "key"):
            pool = p.columns
        elif "name" in lname or "table" in lname:
            pool = p.victim_table_names if v else p.table_names + p.victim_table_names
        else:
            pool = p.table_names + p.tablet_ids + p.columns + p.logs
            if not v:
                pool = pool + p.server_uuids
        return rng.choice(pool) if pool else rng.choice(BAD_STRINGS)

    def bytes_value(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return b""
        if roll < 0.3:
            return os.urandom(1 << 20) if rng.random() < 0.3 else b"\xff" * 4096
        if roll < 0.7 and self.arrow_bodies:
            return mutate(rng, rng.choice(self.arrow_bodies))
        return rng.randbytes(rng.randint(1, 64))


def mutate(rng: random.Random, body: bytes) -> bytes:
    """An Arrow IPC body, whole or with flipped bytes or truncated."""
    roll = rng.random()
    if roll < 0.3:
        return body
    data = bytearray(body)
    if roll < 0.7:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        return bytes(data)
    return bytes(data[: rng.randrange(len(data))])


def arrow_bodies() -> list[bytes]:
    """Arrow IPC streams of the kind a client writes (and some it never would)."""
    out = []
    tables = [
        pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", None])}),
        pa.table({"k": pa.array([7], pa.int64())}),
        pa.table({"k": pa.array(["x"]), "v": pa.array([[1, 2]])}),
        pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
    ]
    # What a hostile or broken client sends and Arrow's IPC reader accepts without a full
    # validation: a string column with invalid UTF-8, and one with negative offsets.
    keys = pa.array([1, 2], pa.int64())
    offsets = pa.py_buffer(struct.pack("<3i", 0, 2, 4))
    bad_utf8 = pa.Array.from_buffers(
        pa.string(), 2, [None, offsets, pa.py_buffer(b"\xff\xfe\xc3(")]
    )
    negative = pa.py_buffer(struct.pack("<3i", 0, -100, 4))
    bad_offsets = pa.Array.from_buffers(pa.string(), 2, [None, negative, pa.py_buffer(b"abcd")])
    tables += [
        pa.Table.from_arrays([keys, bad_utf8], names=["k", "v"]),
        pa.Table.from_arrays([keys, bad_offsets], names=["k", "v"]),
    ]
    for t in tables:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        out.append(sink.getvalue().to_pybytes())
    return out


# --- the wire ----------------------------------------------------------------------------


class RawCaller:
    """A DEALER socket per address: one request, then its answer or nothing. Raw rather than
    rpc.client, to tell a server's answer (any status) from none at all, and to wait past
    the call's own deadline for it. An address with a key in `server_keys` is called with
    CURVE as the key pair `keypair` (rpc.keys.KeyPair); any other plaintext."""

    def __init__(self, ctx: zmq.Context, keypair=None, server_keys=None) -> None:
        self.ctx = ctx
        self._ctx = ctx
        self._sockets: dict[str, zmq.Socket] = {}
        self._call_id = 0
        self.keypair = keypair
        self.server_keys: dict[str, str] = dict(server_keys or {})

    def call(
        self,
        address: str,
        header: RequestHeader,
        body: bytes,
        sidecars: list[bytes],
        wait_s: float,
    ) -> ResponseHeader | None:
        sock = self._sockets.get(address)
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            # A DEALER whose CURVE handshake was refused has no pipe: a send would block for
            # ever (seen with a join token's key not yet known to a follower).
            sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
            server_key = self.server_keys.get(address)
            if server_key:
                sock.curve_publickey = self.keypair.public.encode("ascii")
                sock.curve_secretkey = self.keypair.secret.encode("ascii")
                sock.curve_serverkey = server_key.encode("ascii")
            sock.connect(endpoint(address))
            self._sockets[address] = sock
        self._call_id += 1
        header.call_id = self._call_id
        try:
            sock.send_multipart([header.SerializeToString(), body, *sidecars])
        except zmq.Again:
            # Not even sent: a fresh socket next time (a part of a message may be queued).
            sock.close(0)
            del self._sockets[address]
            return None
        deadline = time.monotonic() + wait_s
        while (remaining := deadline - time.monotonic()) > 0:
            if not sock.poll(int(remaining * 1000) + 1):
                continue
            frames = sock.recv_multipart()
            answer = ResponseHeader()
            answer.ParseFromString(frames[0])
            if answer.call_id == self._call_id:
                return answer
        return None

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close(0)
        self._sockets.clear()


@dataclass
class Finding:
    method: str
    target: str
    what: str
    request: str

    def __str__(self) -> str:
        return f"{self.method} at {self.target}: {self.what}\n    request: {self.request}"


def request_type(method: str) -> type[Message]:
    if method in REQUEST_TYPES:
        return REQUEST_TYPES[method]
    service, name = method.split(".", 1)
    module = MODULES[service]
    return getattr(module, f"{name}Request")


def short(msg: Message, sidecars: list[bytes]) -> str:
    text = str(msg).replace("\n", " ")
    if len(text) > 600:
        text = text[:600] + f"... ({len(text)} chars)"
    return text + (f" sidecars={[len(s) for s in sidecars]}" if sidecars else "")


# --- the cluster -------------------------------------------------------------------------


def _ping(caller: RawCaller, address: str) -> PingResponse:
    header = RequestHeader(method="rpc.Ping", timeout_ms=10_000)
    for _ in range(30):
        answer = caller.call(address, header, b"", [], 12.0)
        if answer is not None and answer.status == StatusCode.OK:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"{address} does not answer rpc.Ping")
    # The body is the second frame: ping again through rpc.client for the parsed answer.
    with _rpc_client(caller, address) as client:
        return client.ping(timeout_s=10)


def _rpc_client(caller: RawCaller, address: str, key: bytes | None = None):
    """An rpc client of `address`, CURVE as the caller's key pair where it has a key."""
    from rpc.client import RpcClient
    from rpc.keys import ClientCurve

    server_key = caller.server_keys.get(address, "")
    if not server_key:
        return RpcClient(address, privileged_key=key)
    curve = ClientCurve(caller.keypair)
    return RpcClient(address, privileged_key=key, curve=curve, server_key=server_key)


def _server_keys(cluster) -> dict[str, str]:
    """Every process's public key by its address, from the cluster's folder ({} for a
    plaintext cluster)."""
    from tservers.fs import FsLayout

    creds = cluster.credentials()
    if creds is None:
        return {}
    keys = dict(creds.coordinator_keys())
    for node in cluster.spec.tservers:
        keys[node.rpc] = FsLayout(Path(node.data), "").public_key()
    return keys


def _tablet_reports(cluster, caller: RawCaller, key: bytes | None) -> dict[str, list]:
    out = {}
    for node in cluster.spec.tservers:
        with _rpc_client(caller, node.rpc, key) as client:
            uuid = client.ping(timeout_s=10).uuid
            resp = client.call(
                uuid,
                "TServer.ListTablets",
                tpb.ListTabletsRequest(),
                tpb.ListTabletsResponse,
                timeout_s=20,
                idempotent=True,
            )
        out[node.name] = list(resp.tablets)
    return out


def _failed(reports: dict[str, list]) -> list[str]:
    return [
        f"{server}: tablet {t.tablet_id} ({t.table_name}) {t.status}: {t.error}"
        for server, tablets in reports.items()
        for t in tablets
        if t.status == "FAILED"
    ]


def _schema(*names: str) -> cpb.Schema:
    cols = [cpb.ColumnSchema(name="k", type=cpb.INT64, is_key=True)]
    cols += [cpb.ColumnSchema(name=n, type=cpb.STRING, nullable=True) for n in names]
    return cpb.Schema(columns=cols)


def test_every_rpc_method_answers_ok_or_a_typed_error(tmp_path):
    seed = int(os.environ.get("FUZZ_SEED", str(random.randrange(2**32))))
    print(f"\nfuzz seed {seed} (FUZZ_SEED={seed} repeats it); {CALLS_PER_METHOD} calls per method")
    rng = random.Random(seed)
    replicas = make_replicas(tmp_path / "ls", 3)
    ctx = zmq.Context()
    with local_cluster(tmp_path / "cluster", coordinators=3, tservers=3) as cluster:
        creds = cluster.credentials()
        keys = _server_keys(cluster)
        caller = RawCaller(ctx, creds.keypair if creds else None, keys)
        member = RawCaller(ctx, _tserver_keypair(cluster, 0), keys)
        try:
            for r in replicas:
                r.start()
            _run(cluster, replicas, caller, member, rng, seed)
        finally:
            caller.close()
            member.close()
            ctx.term()
            for r in replicas:
                r.stop()


def _tserver_keypair(cluster, i: int):
    """Tablet server i's own CURVE key pair, from its fs root (the server role)."""
    from rpc import keys
    from tservers.fs import KEY_NAME, FsLayout

    return keys.load_keypair(FsLayout(Path(cluster.spec.tservers[i].data), "").keys_dir, KEY_NAME)


def _join_caller(cluster, ctx: zmq.Context, server_keys: dict[str, str], address: str) -> RawCaller:
    """A caller with a fresh, unused join token's key pair (the join role): one per call,
    since a JoinServer that passes spends its token. Returned once `address` admits its key
    (a follower learns of the token from the log a moment after the leader logged it): it
    answers a Ping at all, PERMISSION_DENIED (the join role may call JoinServer alone)."""
    from coordinator.ops.principals import join_token_name
    from rpc import join_token

    _text, pair = join_token.make()
    with cluster.client(timeout_s=60) as meta:
        meta.call(
            "AddPrincipal",
            cpb.AddPrincipalRequest(
                request_id=meta.next_request_id(),
                name=join_token_name(pair.public),
                kind="join-token",
                public_key=pair.public,
                roles=["join"],
                ttl_s=600,
            ),
            cpb.AddPrincipalResponse,
        )
    deadline = time.monotonic() + JOIN_ADMIT_WAIT_S
    while True:
        joiner = RawCaller(ctx, pair, server_keys)
        ping = RequestHeader(method="rpc.Ping", timeout_ms=2000)
        if joiner.call(address, ping, b"", [], 2.0) is not None:
            return joiner
        joiner.close()  # a refused handshake is not retried on the same socket
        if time.monotonic() > deadline:
            raise AssertionError(f"{address} never admitted a join token's key")
        time.sleep(0.2)


def _role_refusal(answer: ResponseHeader) -> bool:
    """Refused before the handler ran: the role table, the recipient check, no key."""
    if answer.status == StatusCode.PERMISSION_DENIED:
        return " needs " in answer.message and " role" in answer.message
    return answer.status in (StatusCode.INVALID_NAME, StatusCode.UNAUTHENTICATED)


def _run(
    cluster, replicas, caller: RawCaller, member: RawCaller, rng: random.Random, seed: int
) -> None:
    from logstore.remote import RemoteLogStore

    secret = cluster.spec.password_file.read_text().strip()
    key = privileged.derive_key(secret)
    ls_key = privileged.derive_key(LOGSTORE_PASSWORD)

    # The objects the calls aim at: two tables to keep, two victims to destroy.
    pools = Pools()
    with cluster.client(timeout_s=60) as meta:
        for name, victim in (
            ("fz_main", False),
            ("fz_keep", False),
            ("fz_v1", True),
            ("fz_v2", True),
        ):
            table_id = meta.create_table(name, _schema("v"), num_tablets=2, replication_factor=3)
            locs = meta.get_tablet_locations(table_id=table_id)
            tablets = [t.tablet_id for t in locs.tablets]
            if victim:
                pools.victim_table_names.append(name)
                pools.victim_table_ids.append(table_id)
                pools.victim_tablet_ids += tablets
            else:
                pools.table_names.append(name)
                pools.table_ids.append(table_id)
                pools.tablet_ids += tablets
        pools.server_uuids = [s.uuid for s in meta.list_servers()]
    with RemoteLogStore([r.rpc_address for r in replicas]) as store:
        store.barrier(timeout_s=30)
        store.append("fz_log", b"first", timeout_s=30)

    targets: list[Target] = []
    for node in cluster.spec.coordinators:
        p = _ping(caller, node.rpc)
        log_path = cluster.log_dir / f"{node.name}.log"
        targets.append(
            Target(
                "Coordinator",
                node.rpc,
                p.uuid,
                list(p.methods),
                key,
                lambda n=node: cluster.is_up(n),
                log_path,
            )
        )
        pools.addresses += [node.rpc, node.raft]
        pools.server_uuids.append(p.uuid)
    for node in cluster.spec.tservers:
        p = _ping(caller, node.rpc)
        log_path = cluster.log_dir / f"{node.name}.log"
        targets.append(
            Target(
                "TServer",
                node.rpc,
                p.uuid,
                list(p.methods),
                key,
                lambda n=node: cluster.is_up(n),
                log_path,
            )
        )
        pools.addresses.append(node.rpc)
    for r in replicas:
        p = _ping(caller, r.rpc_address)
        targets.append(
            Target(
                "LogStore",
                r.rpc_address,
                p.uuid,
                list(p.methods),
                ls_key,
                r.alive,
                Path(r.log_path),
            )
        )
        pools.addresses += [r.rpc_address, r.raft_address]
    pools.logs = ["fz_log", "lease", "coordinator", "catalog"]

    # Every method of every server, with its request type.
    methods: dict[str, list[Target]] = {}
    for t in targets:
        for m in t.methods:
            methods.setdefault(m, []).append(t)
    unresolved = [m for m in methods if not _resolves(m)]
    assert not unresolved, f"methods without a known request type: {unresolved}"
    print(f"{len(methods)} methods on {len(targets)} servers: {sorted(methods)}")

    with cluster.client(timeout_s=60) as meta:
        leader_node = cluster.leader(meta)
    leader_address = leader_node.rpc if leader_node is not None else ""

    member_address = cluster.spec.tservers[0].rpc
    member_uuid = next(t.uuid for t in targets if t.address == member_address)

    reports_before = _tablet_reports(cluster, caller, key)
    assert not _failed(reports_before), _failed(reports_before)

    gen = Generator(rng, pools, arrow_bodies())
    findings: list[Finding] = []
    counts: dict[str, int] = {}
    per_method: dict[str, dict[str, int]] = {}
    examples: dict[tuple[str, str], str] = {}
    member_calls: dict[str, dict[str, int]] = {}  # as a member: answers (mangled apart)
    reached: dict[str, int] = {}  # as a member, past the role table into the handler
    calls = 0
    started = time.monotonic()
    for method in sorted(methods):
        cls = request_type(method)
        for _ in range(CALLS_PER_METHOD):
            candidates = methods[method]
            if method.startswith("Coordinator.") and rng.random() < 0.7:
                # Mostly the leader: followers answer NOT_LEADER before looking further.
                candidates = [t for t in candidates if t.address == leader_address] or candidates
            target = rng.choice(candidates)
            as_member = (
                method in SERVER_ROLE | JOIN_ROLE
                and target.service != "LogStore"
                and rng.random() < AS_MEMBER_SHARE
            )
            # As a member, its tablet reports name victims' tablets only.
            gen.victims_only = method in ON_VICTIMS or (as_member and method in OWN_UUID)
            gen.wild = rng.choice((1.0, 0.15, 0.05))
            req = gen.message(cls.DESCRIPTOR, cls)
            if as_member and method in OWN_UUID and rng.random() < 0.6:
                # The member's own uuid and address (the coordinator checks the key against
                # the uuid first): the rest of the handler is what is met.
                req.server_uuid, req.address = member_uuid, member_address
            sidecars = []
            if method == "TServer.Write" and rng.random() < 0.5:
                # Half the writes are well formed up to their bodies (a real tablet, its
                # schema version, one body per op block): the bodies are what is fuzzed.
                ops = [v.number for v in tpb.OpType.DESCRIPTOR.values if v.number]
                req = tpb.WriteRequest(
                    tablet_id=rng.choice(pools.tablet_ids),
                    schema_version=1,
                    ops=[rng.choice(ops) for _ in range(rng.choice((1, 1, 2)))],
                )
                sidecars = [mutate(rng, rng.choice(gen.arrow_bodies)) for _ in req.ops]
            elif method == "TServer.Write":
                # Mostly one body per op block (as the server requires), else any number.
                n = len(req.ops) if rng.random() < 0.7 else rng.choice((0, 1, 2, 3))
                sidecars = [
                    rng.choice(gen.arrow_bodies) if rng.random() > gen.wild else gen.bytes_value()
                    for _ in range(n)
                ]
            body = req.SerializeToString()
            mangled = bool(body) and rng.random() < 0.1
            if mangled:
                body = mutate(rng, body)
            roll = rng.random()
            recipient = target.uuid
            if roll < 0.08:
                recipient = rng.choice(pools.fake_uuids + [t.uuid for t in targets])
            elif roll < 0.1:
                recipient = ""
            header = RequestHeader(
                method=method,
                recipient_uuid=recipient,
                caller_uuid=f"fuzz-{rng.randrange(1000)}",
                timeout_ms=rng.choice((CALL_TIMEOUT_MS, CALL_TIMEOUT_MS, 1, 100)),
            )
            if target.key is not None and rng.random() < 0.8:
                header.auth_tag = privileged.tag(
                    target.key, method, recipient, header.caller_uuid, body
                )
            via = caller
            if as_member:
                via = member
                if method in JOIN_ROLE:
                    via = _join_caller(cluster, caller.ctx, caller.server_keys, target.address)
            try:
                answer = via.call(
                    target.address,
                    header,
                    body,
                    sidecars,
                    CALL_TIMEOUT_MS / 1000 + ANSWER_GRACE_S,
                )
            finally:
                if via is not caller and via is not member:
                    via.close()
            calls += 1
            if as_member:
                seen = member_calls.setdefault(method, {})
                tag = (
                    "mangled"
                    if mangled
                    else (StatusCode.Name(answer.status) if answer is not None else "NO ANSWER")
                )
                seen[tag] = seen.get(tag, 0) + 1
                if answer is not None and not mangled and not _role_refusal(answer):
                    reached[method] = reached.get(method, 0) + 1
            if answer is None:
                what = "no answer (lost connection or hung handler)"
                if not target.alive():
                    what = "the process DIED"
                findings.append(Finding(method, target.address, what, short(req, sidecars)))
                continue
            status = StatusCode.Name(answer.status)
            counts[status] = counts.get(status, 0) + 1
            by_method = per_method.setdefault(method, {})
            by_method[status] = by_method.get(status, 0) + 1
            examples.setdefault((method, status), answer.message[:100])
            if answer.status == StatusCode.INTERNAL or answer.status not in StatusCode.values():
                findings.append(
                    Finding(
                        method, target.address, f"{status}: {answer.message}", short(req, sidecars)
                    )
                )
        dead = [t.address for t in targets if not t.alive()]
        if dead:
            findings.append(Finding(method, ",".join(dead), "process died", ""))
            break
    elapsed = time.monotonic() - started
    print(f"{calls} calls in {elapsed:.0f}s; answers by status: {dict(sorted(counts.items()))}")
    for method, by_status in sorted(per_method.items()):
        print(f"  {method}: {dict(sorted(by_status.items()))}")
        for status in sorted(by_status):
            if status not in ("OK", "INVALID_NAME", "NOT_LEADER"):
                print(f"      {status}, e.g. {examples[(method, status)]!r}")

    print("as a member (a tablet server's key; JoinServer: a join token's):")
    for method in sorted(SERVER_ROLE | JOIN_ROLE):
        print(f"  {method}: {dict(sorted(member_calls.get(method, {}).items()))}")
    unreached = sorted(m for m in SERVER_ROLE | JOIN_ROLE if m in methods and not reached.get(m))
    if CALLS_PER_METHOD < 10:  # too few calls to be sure each is met as a member
        unreached = []

    dead = [t.address for t in targets if not t.alive()]
    reports_after = _tablet_reports(cluster, caller, key) if not dead else {}
    failed = _failed(reports_after)

    # The cluster still works: a new table takes rows and gives them back; the log commits.
    if not dead:
        _still_works(cluster, replicas)

    if findings or dead or failed or unreached:
        tracebacks = []
        for t in targets:
            text = t.log_path.read_text(errors="replace") if t.log_path.exists() else ""
            if "Traceback" in text:
                tracebacks.append(
                    f"--- {t.service} {t.address} ({t.log_path}):\n{_tracebacks(text)}"
                )
        pytest.fail(
            f"seed {seed}: {len(findings)} finding(s), dead {dead}, failed tablets {failed}, "
            f"handlers never reached as a member: {unreached}\n"
            + "\n".join(str(f) for f in findings[:40])
            + "\n"
            + "\n".join(tracebacks)[:20000]
        )


def _tracebacks(text: str, max_chars: int = 6000) -> str:
    out, keep = [], 0
    for line in text.splitlines():
        if "Traceback" in line or "ERROR" in line:
            keep = 30
        if keep:
            out.append(line)
            keep -= 1
    return "\n".join(out)[-max_chars:]


def _resolves(method: str) -> bool:
    try:
        return issubclass(request_type(method), Message)
    except (AttributeError, KeyError, ValueError):
        return False


def _still_works(cluster, replicas) -> None:
    import logcentric
    from logstore.remote import RemoteLogStore

    creds = str(cluster.spec.admin_credentials) if cluster.spec.secure else None
    with logcentric.connect(cluster.spec.coordinator_addresses, credentials=creds) as client:
        columns = [logcentric.Column("k", "int64", key=True), logcentric.Column("v", "string")]
        client.create_table("fz_after", columns, num_tablets=2, replication_factor=3)
        table = client.table("fz_after")
        with client.new_session() as session:
            session.insert(table, [{"k": i, "v": str(i)} for i in range(10)])
        keys = sorted(k for batch in table.scan() for k in batch.column("k").to_pylist())
        assert keys == list(range(10)), keys
    with RemoteLogStore([r.rpc_address for r in replicas]) as store:
        store.append("fz_log", b"after", timeout_s=30)
