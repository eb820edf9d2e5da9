"""`logstore serve`: one ReplicatedLogStore replica behind the project's zmq RPC layer.

Methods (logstore/logstore.proto): LogStore.Append, Read, LastId, Barrier, Status,
AddMember, RemoveMember. An append sent to any replica reaches the Raft leader (the replica
forwards it) and is answered once the serving replica has applied it. CONDITION_FAILED
answers carry a ConditionFailedDetail body with the log's current last id.

The server's UUID is created once and kept in `<data_dir>/uuid`, so a replica keeps its
name across restarts and a wiped data directory gets a new one (INVALID_NAME for callers
that still use the old name).

CURVE (design/security.md §2) unless `insecure`: the server's key pair is
`<data_dir>/keys/logstore.key{,_secret}`, made at its first start and never replaced; it
admits only the public keys of `client_keys` (the `server` role: coordinator nodes) and
`admin_keys` (the `admin` role: operators), and checks every call against the role table
(rpc/authz.py: Append and Barrier need `server`; Read, LastId and Status `server` or
`admin`; AddMember, RemoveMember, TransferLeadership `admin`, and the group's password as
before). Replicas reach each other over pysyncobj's own encrypted transport
(logstore/auth.py), not over this service: no replica key is admitted here.

With `http_bind`, the server also serves rpc.observe's HTTP endpoint: `/metrics` (the rpc
server's families and the replica's, `replica_metrics`), `/healthz`, and `/readyz` (ready
when the replica knows a leader and has applied up to the commit index it last saw).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from pysyncobj import FAIL_REASON

from logstore import logstore_pb2 as pb
from logstore.api import LogConditionFailed
from logstore.journal import write_file_atomically
from logstore.replicated import _RETRYABLE, _UNKNOWN, ReplicaConfig, ReplicatedLogStore
from logstore.state import check_append_request, outcome_id
from rpc import authz, keys, observe, privileged
from rpc.errors import BadRequest, PermissionDenied, RpcError, Unavailable
from rpc.server import CallContext, RpcServer

logger = logging.getLogger(__name__)

SERVICE = "logstore"
UUID_FILE = "uuid"
KEYS_DIR = "keys"
KEY_NAME = "logstore"  # <data_dir>/keys/logstore.key and logstore.key_secret
# Handlers wait on Raft; leave the rpc layer a little time to send the answer.
DEADLINE_MARGIN_S = 0.05


def load_or_create_uuid(data_dir: str) -> str:
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, UUID_FILE)
    if os.path.exists(path):
        with open(path, encoding="ascii") as f:
            value = f.read().strip()
        if value:
            return value
    value = uuidlib.uuid4().hex
    write_file_atomically(path, value.encode("ascii") + b"\n")
    return value


@dataclass(frozen=True, slots=True)
class ServeConfig:
    raft_address: str
    peers: tuple[str, ...]
    data_dir: str
    rpc_bind: str = "127.0.0.1:0"
    password: str | None = None
    allow_insecure_dev: bool = False
    workers: int = 64
    queue_max: int = 1024
    replica: ReplicaConfig = ReplicaConfig()
    http_bind: str = ""  # HOST:PORT of /metrics, /healthz, /readyz; "" serves none
    http_access: observe.HttpAccess = observe.HttpAccess()  # beyond loopback (rpc/observe.py)
    metrics: bool = True  # per-method rpc metrics (False: for benchmarks)
    # Plaintext, anyone may call (said explicitly: `logstore serve --insecure`). Otherwise
    # CURVE with the key pair of <data_dir>/keys, admitting only these public keys (z85):
    insecure: bool = False
    client_keys: tuple[str, ...] = ()  # the `server` role: coordinator nodes
    admin_keys: tuple[str, ...] = ()  # the `admin` role: operators


def keys_dir(data_dir: str) -> str:
    return os.path.join(data_dir, KEYS_DIR)


def load_or_create_keypair(data_dir: str) -> keys.KeyPair:
    """The replica's CURVE key pair, made in <data_dir>/keys at its first start."""
    return keys.load_or_create_keypair(keys_dir(data_dir), KEY_NAME)


def roles_by_key(client_keys, admin_keys) -> dict[str, tuple[str, ...]]:
    """Public key -> the roles it holds here (a key in both lists holds both)."""
    table: dict[str, set[str]] = {}
    for key in client_keys:
        table.setdefault(keys.KeyPair(key).public, set()).add(authz.SERVER)
    for key in admin_keys:
        table.setdefault(keys.KeyPair(key).public, set()).add(authz.ADMIN)
    return {key: tuple(sorted(roles)) for key, roles in table.items()}


def _timeout(ctx: CallContext) -> float:
    return max(0.01, ctx.remaining_s() - DEADLINE_MARGIN_S)


def _entry_pb(e) -> pb.EntryPB:
    return pb.EntryPB(id=e.id, data=e.data, invalidates=e.invalidates)


RAFT_ROLES = ("leader", "follower", "candidate")


def replica_metrics(store: ReplicatedLogStore) -> list[Metric]:
    """The metric families of one replica (`logstore serve`'s, or a coordinator node's
    embedded one), read at scrape time: Raft term, commit, applied and last index, role,
    members; append latency; Raft batches of appends; journal fsync latency, records per
    group commit, syncs and size."""
    s = store.status()
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float) -> None:
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        out.append(g)

    gauge("logcentric_logstore_raft_term", "Current Raft term", s["term"])
    gauge("logcentric_logstore_raft_commit_index", "Raft commit index", s["commit_index"])
    gauge("logcentric_logstore_raft_applied_index", "Last Raft index applied", s["applied_index"])
    gauge(
        "logcentric_logstore_raft_last_index", "Last Raft index in the journal", s["last_log_index"]
    )
    role = GaugeMetricFamily(
        "logcentric_logstore_raft_role", "1 for this replica's Raft role", labels=["role"]
    )
    for name in RAFT_ROLES:
        role.add_metric([name], 1.0 if s["role"] == name else 0.0)
    out.append(role)
    gauge(
        "logcentric_logstore_raft_leader_known",
        "1 when a leader is known",
        1.0 if s["leader"] else 0.0,
    )
    gauge("logcentric_logstore_members", "Voting replicas of the group", len(s["members"]))
    gauge(
        "logcentric_logstore_connected_peers",
        "Other replicas this one has a connection to",
        len(s["connected"]),
    )
    # Histograms written by other threads are read as they are: buckets() makes the
    # cumulative counts in one pass, so the exposition stays consistent.
    latency = store.append_latency
    out.append(
        observe.histogram_family(
            "logcentric_logstore_append_latency_seconds",
            "append() on this replica from submit to outcome (failures included)",
            [],
            [([], latency)],
        )
    )
    node = store._node  # pysyncobj node: counters of its tick thread, read without a lock
    batches = CounterMetricFamily(
        "logcentric_logstore_append_batches", "Raft commands proposed, each a batch of appends"
    )
    batches.add_metric([], node._ls_batches)
    out.append(batches)
    batched = CounterMetricFamily(
        "logcentric_logstore_batched_appends",
        "Appends proposed in batches (divided by append_batches: the mean batch size)",
    )
    batched.add_metric([], node._ls_batched_appends)
    out.append(batched)
    journal = store._journal
    out.append(
        observe.histogram_family(
            "logcentric_logstore_journal_fsync_latency_seconds",
            "One fdatasync of the journal (a group commit)",
            [],
            [([], journal.sync_latency)],
        )
    )
    out.append(
        observe.histogram_family(
            "logcentric_logstore_journal_group_commit_records",
            "Journal records written by one group commit (write + fdatasync)",
            [],
            [([], journal.group_commit_records)],
        )
    )
    syncs = CounterMetricFamily("logcentric_logstore_journal_syncs", "Journal group commits")
    syncs.add_metric([], s["journal_syncs"])
    out.append(syncs)
    gauge("logcentric_logstore_journal_bytes", "Size of the journal file", s["journal_bytes"])
    gauge("logcentric_logstore_snapshot_bytes", "Size of the last snapshot", s["snapshot_bytes"])
    gauge("logcentric_logstore_live_entries", "Live entries of every log", s["live_entries"])
    return out


class ReplicaReadiness:
    """/readyz of a replica: ready when it knows a leader (itself, or one it is connected
    to) and has applied up to the commit index it saw at the previous check (the current
    one at the first)."""

    def __init__(self, store: ReplicatedLogStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._commit_seen: int | None = None

    def __call__(self) -> tuple[bool, list[str]]:
        s = self.store.status()
        why = []
        with self._lock:
            target = s["commit_index"] if self._commit_seen is None else self._commit_seen
            self._commit_seen = s["commit_index"]
        leader = s["leader"]
        if not leader:
            why.append(f"no Raft leader known (role {s['role']}, term {s['term']})")
        elif leader != s["address"] and leader not in s["connected"]:
            # pysyncobj keeps naming the last leader while it is connected to nobody (it
            # starts no election then): that leader is not known to be alive.
            # (Its address is not said: /readyz answers anyone, design/security.md §8.)
            why.append(f"no connection to the Raft leader (term {s['term']})")
        if s["applied_index"] < target:
            why.append(f"applied index {s['applied_index']} behind commit index {target}")
        return not why, why


class LogStoreService:
    """The RPC handlers bound to one replica."""

    def __init__(self, store: ReplicatedLogStore, uuid: str) -> None:
        self.store = store
        self.uuid = uuid
        self.rpc_address = ""

    def register(self, server: RpcServer, *, check_roles: bool = False) -> None:
        """`check_roles` (a CURVE server, whose authorizer answers the caller's roles): a
        call whose roles may not call the method (rpc/authz.py) is refused
        PERMISSION_DENIED before its handler runs."""

        def register(method: str, request_type, handler, **kw) -> None:
            if check_roles:
                handler = _role_checked(method, handler)
            server.register(method, request_type, handler, **kw)

        # Deferred (rpc/server.py): no worker waits for the commit; the Raft thread answers.
        register("LogStore.Append", pb.AppendRequest, self.append_later, inline=True, deferred=True)
        register("LogStore.Read", pb.ReadRequest, self.read)
        register("LogStore.LastId", pb.LastIdRequest, self.last_id)
        register("LogStore.Barrier", pb.BarrierRequest, self.barrier)
        register("LogStore.Status", pb.StatusRequest, self.status)
        # Privileged (rpc/privileged.py): membership changes need the group's password, and
        # with CURVE the admin role as well.
        register("LogStore.AddMember", pb.MemberRequest, self.add_member, privileged=True)
        register("LogStore.RemoveMember", pb.MemberRequest, self.remove_member, privileged=True)
        register(
            "LogStore.TransferLeadership",
            pb.TransferLeadershipRequest,
            self.transfer_leadership,
            privileged=True,
        )

    def append(self, req: pb.AppendRequest, ctx: CallContext) -> pb.AppendResponse:
        expected = req.expected_id if req.HasField("expected_id") else None
        try:
            new_id = self.store.append(
                req.log, req.data, expected, tuple(req.invalidates), timeout_s=_timeout(ctx)
            )
        except LogConditionFailed as err:
            raise _condition_failed(err) from None
        return pb.AppendResponse(id=new_id)

    def append_later(self, req: pb.AppendRequest, ctx: CallContext):
        """`append` without a thread waiting: queued for the Raft thread, whose callback
        answers. What `append` retries (the command surely not in the log: no leader, a
        full queue) is finished by `append` on the pool; the rest is answered as it does."""
        store = self.store
        store._check_open()
        expected = req.expected_id if req.HasField("expected_id") else None
        invalidates = tuple(req.invalidates)
        check_append_request(req.log, req.data, expected, invalidates)
        later = ctx.later()
        started = time.monotonic()

        def done(outcome, reason: int) -> None:  # on the Raft thread
            if reason in _RETRYABLE:
                later.run(lambda: self.append(req, ctx))
                return
            with store._append_latency_lock:
                store.append_latency.observe(time.monotonic() - started)
            if reason == FAIL_REASON.SUCCESS:
                try:
                    later.reply(pb.AppendResponse(id=outcome_id(outcome)))
                except LogConditionFailed as err:
                    later.fail(_condition_failed(err))
                except RpcError as err:
                    later.fail(err)
            elif reason in _UNKNOWN:
                later.fail(
                    Unavailable(
                        "leader changed before the command's outcome was known; "
                        "read the log to learn whether it was committed"
                    )
                )
            else:
                later.fail(Unavailable(f"command failed (pysyncobj reason {reason})"))

        store._enqueue_append((req.log, bytes(req.data), expected, invalidates), done)
        return later

    def read(self, req: pb.ReadRequest, ctx: CallContext) -> pb.ReadResponse:
        entries = self.store.read(req.log, max(1, req.from_id), req.limit or 1000)
        return pb.ReadResponse(entries=[_entry_pb(e) for e in entries])

    def last_id(self, req: pb.LastIdRequest, ctx: CallContext) -> pb.LastIdResponse:
        return pb.LastIdResponse(last_id=self.store.last_id(req.log))

    def barrier(self, req: pb.BarrierRequest, ctx: CallContext) -> pb.BarrierResponse:
        self.store.barrier(timeout_s=_timeout(ctx))
        return pb.BarrierResponse()

    def status(self, req: pb.StatusRequest, ctx: CallContext) -> pb.StatusResponse:
        s = self.store.status()
        return pb.StatusResponse(
            uuid=self.uuid,
            rpc_address=self.rpc_address,
            raft_address=s["address"],
            role=s["role"],
            leader=s["leader"] or "",
            term=s["term"],
            commit_index=s["commit_index"],
            applied_index=s["applied_index"],
            members=s["members"],
            connected=s["connected"],
            last_log_index=s["last_log_index"],
            last_log_term=s["last_log_term"],
            journal_entries=s["journal_entries"],
            journal_first_index=s["journal_first_index"],
            journal_bytes=s["journal_bytes"],
            journal_syncs=s["journal_syncs"],
            snapshot_bytes=s["snapshot_bytes"],
            snapshots_loaded=s["snapshots_loaded"],
            live_entries=s["live_entries"],
            live_bytes=s["live_bytes"],
            logs=[pb.LogLastId(log=k, last_id=v) for k, v in s["logs"].items()],
        )

    def add_member(self, req: pb.MemberRequest, ctx: CallContext) -> pb.MemberResponse:
        if not req.raft_address:
            raise BadRequest("raft_address is required")
        self.store.add_member(req.raft_address, timeout_s=_timeout(ctx))
        return pb.MemberResponse()

    def remove_member(self, req: pb.MemberRequest, ctx: CallContext) -> pb.MemberResponse:
        if not req.raft_address:
            raise BadRequest("raft_address is required")
        self.store.remove_member(req.raft_address, timeout_s=_timeout(ctx))
        return pb.MemberResponse()

    def transfer_leadership(
        self, req: pb.TransferLeadershipRequest, ctx: CallContext
    ) -> pb.TransferLeadershipResponse:
        leader = self.store.transfer_leadership(req.raft_address or None, timeout_s=_timeout(ctx))
        return pb.TransferLeadershipResponse(leader=leader)


def _condition_failed(err: LogConditionFailed) -> LogConditionFailed:
    """`err` with the ConditionFailedDetail body its answer carries."""
    return LogConditionFailed(
        err.message,
        last_id=err.last_id,
        body=pb.ConditionFailedDetail(last_id=err.last_id).SerializeToString(),
    )


def _role_checked(method: str, handler):
    def checked(request, ctx: CallContext):
        reason = authz.authorize(method, ctx.principal or ())
        if reason is not None:
            raise PermissionDenied(f"permission denied: {reason}")
        return handler(request, ctx)

    return checked


class LogStoreServer:
    """A replica plus its RPC server; a context manager. Create it on the main thread."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.uuid = load_or_create_uuid(config.data_dir)
        self.keypair: keys.KeyPair | None = None
        self.store = ReplicatedLogStore(
            config.raft_address,
            list(config.peers),
            config.data_dir,
            config.password,
            allow_insecure_dev=config.allow_insecure_dev,
            config=config.replica,
        )
        try:
            curve = None
            if not config.insecure:
                # Made once the replica holds its data dir's lock (no second process makes
                # one at the same time); a secret its group or others may read stops here.
                self.keypair = load_or_create_keypair(config.data_dir)
                roles = roles_by_key(config.client_keys, config.admin_keys)
                curve = keys.ServerCurve(self.keypair, roles.get)
            self.service = LogStoreService(self.store, self.uuid)
            self.rpc = RpcServer(
                self.uuid,
                bind=config.rpc_bind,
                service=SERVICE,
                workers=config.workers,
                queue_max=config.queue_max,
                metrics=config.metrics,
                privileged_key=privileged.derive_key(config.password) if config.password else None,
                curve=curve,
            )
            self.service.register(self.rpc, check_roles=curve is not None)
            self.rpc.start()
            self.service.rpc_address = self.rpc.address
            self.metrics_registry = observe.new_registry()
            self.metrics_registry.register(observe.ScrapeCollector(self.rpc.collect_metrics))
            self.metrics_registry.register(
                observe.ScrapeCollector(lambda: replica_metrics(self.store))
            )
            self.http: observe.HttpEndpoint | None = None
            if config.http_bind:
                self.http = observe.HttpEndpoint(
                    config.http_bind,
                    self.metrics_registry,
                    name="logstore",
                    ready=ReplicaReadiness(self.store),
                    access=config.http_access,
                ).start()
        except BaseException:
            if getattr(self, "rpc", None) is not None:
                self.rpc.close()
            self.store.close()
            raise

    @property
    def address(self) -> str:
        return self.rpc.address

    @property
    def public_key(self) -> str:
        """The replica's CURVE public key, "" when it runs plaintext."""
        return self.keypair.public if self.keypair is not None else ""

    @property
    def http_url(self) -> str:
        return self.http.url if self.http is not None else ""

    def close(self) -> None:
        try:
            if self.http is not None:
                self.http.close()
            self.rpc.close()
        finally:
            self.store.close()

    def __enter__(self) -> LogStoreServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
