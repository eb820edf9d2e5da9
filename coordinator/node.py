"""One coordinator node: logstore replica, lease keeper, replay thread, engine, RPC service.

The node embeds a logstore replica by default (or reaches an external logstore with
`logstore_addresses`). Its RPC service ("Coordinator.*") answers:
- on the leader, after recovery: everything;
- on the leader during recovery: UNAVAILABLE with a retry hint;
- on followers: NOT_LEADER with the hint from the last Lease record (catalog reads and
  mutating requests); GetLeader, Status, Heartbeat are answered by every node (tablet
  servers heartbeat to every node; only the leader acts on them).

Construct it on a thread that outlives it (the embedded pysyncobj replica's tick thread
stops with the thread that created it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass, field

from coordinator import authz
from coordinator.catalog import Catalog
from coordinator.console import Console, ConsoleSource
from coordinator.crashpoints import CrashPoints
from coordinator.engine import Engine, EngineConfig
from coordinator.gateway import RpcTabletServerGateway
from coordinator.leases import LeaseConfig
from coordinator.leases.driver import LeaseDriver
from coordinator.leases.testclock import clock_from_env
from coordinator.locations import LocationCache
from coordinator.metrics import CoordinatorObserver
from coordinator.ops import principals
from coordinator.principal_push import CatalogServerKeys, PrincipalsPush, check_server_key
from coordinator.replay.replayer import Replayer
from coordinator.replication import ReplicationConfig, ReplicationManager
from logstore import logstore_pb2 as lspb
from logstore.api import LogStore
from logstore.service import LogStoreService
from rpc import credentials, errors, keys, privileged
from rpc.addresses import parse_host_port
from rpc.dirlock import lock_server_dir
from rpc.errors import BadRequest, Unavailable
from rpc.observe import HttpAccess, HttpEndpoint
from rpc.protocols import coordinator_pb2 as pb
from rpc.server import CallContext, RpcServer

logger = logging.getLogger(__name__)

UUID_FILE = "coordinator-uuid"
KEYS_DIR = "keys"
KEY_NAME = "coordinator"
ADMIN_NAME = "admin"
ADMIN_CREDENTIALS_FILE = "admin.credentials"
BOOTSTRAP_POLL_S = 0.2
# The admitted keys' loading (CoordinatorNode._load_admitted_keys): one barrier and replay
# attempt may take this long, and a failed one is tried again after KEYS_LOAD_RETRY_S.
KEYS_LOAD_ATTEMPT_S = 2.0
KEYS_LOAD_RETRY_S = 0.1
LOGSTORE_DIR = "logstore"
RPC_WORKERS = 16
RPC_QUEUE_MAX = 1024


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    data_dir: str
    bind: str = "127.0.0.1:0"
    # Embedded logstore: this node's Raft address and the Raft addresses of the others.
    raft_address: str = ""
    peers: tuple[str, ...] = ()
    password: str | None = None
    allow_insecure_dev: bool = False
    # External logstore instead (`logstore serve` replicas' RPC addresses).
    logstore_addresses: tuple[str, ...] = ()
    # Their CURVE public keys, one per address in order: the node calls them with CURVE as
    # its own key pair (<data_dir>/keys, made if missing; the replicas admit it with
    # `logstore serve --client-keys`). None: plaintext (a `logstore serve --insecure`).
    logstore_keys: tuple[str, ...] = ()
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    # The web console, /metrics, /healthz, /readyz (coordinator/console.py): HOST:PORT, "" off.
    http: str = ""
    http_access: HttpAccess = HttpAccess()  # beyond loopback: auth or public (rpc/observe.py)
    # CURVE on the rpc service (design/security.md): the node's key pair in <data_dir>/keys,
    # callers admitted by the principals table, every call checked against the role table
    # (coordinator/authz.py). Off: plaintext, as before. `admin_keys`: public keys admitted
    # as admins besides the table's (the bootstrap admin until it is logged; not logged).
    curve: bool = False
    admin_keys: tuple[str, ...] = ()
    # The bootstrap admin, logged once at the cluster's first start (no principal in the
    # log yet) by whichever CURVE node first leads: this public key as the `admin` user, or
    # with "" a key pair the node makes, its credentials written to
    # <data_dir>/admin.credentials (0600). Give every node the same key, or none. Not with
    # `admin_keys` (admins that are not logged: tests embedding a node).
    bootstrap_admin_key: str = ""
    bootstrap_admin: bool = True


def load_or_create_uuid(data_dir: str, node_id: str) -> str:
    """The node's UUID, created once per data directory (a wiped node gets a new one)."""
    path = os.path.join(data_dir, UUID_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = f"{node_id}-{uuidlib.uuid4().hex[:16]}"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return value


def open_store(config: NodeConfig, uuid: str) -> LogStore:
    if config.logstore_keys and len(config.logstore_keys) != len(config.logstore_addresses):
        raise ValueError(
            f"{len(config.logstore_keys)} logstore keys for {len(config.logstore_addresses)} "
            "logstore addresses: give one key per address, in order"
        )
    if config.logstore_addresses:
        from logstore.remote import RemoteLogStore

        curve, server_keys = None, None
        if config.logstore_keys:
            pair = keys.load_or_create_keypair(os.path.join(config.data_dir, KEYS_DIR), KEY_NAME)
            curve = keys.ClientCurve(pair)
            server_keys = dict(zip(config.logstore_addresses, config.logstore_keys, strict=True))
        return RemoteLogStore(
            list(config.logstore_addresses),
            caller_uuid=uuid,
            curve=curve,
            server_keys=server_keys,
        )
    from logstore.replicated import ReplicatedLogStore

    if not config.raft_address:
        raise ValueError("an embedded logstore needs this node's Raft address")
    return ReplicatedLogStore(
        config.raft_address,
        list(config.peers),
        os.path.join(config.data_dir, LOGSTORE_DIR),
        config.password,
        allow_insecure_dev=config.allow_insecure_dev,
    )


def _denied(reason: str) -> errors.PermissionDenied:
    return errors.PermissionDenied(f"permission denied: {reason}")


class _Guarded:
    """Registers handlers on an RpcServer with CURVE behind the role table
    (coordinator/authz.py): a call whose key's roles (ctx.principal, the authorizer's
    answer at this very call) may not call the method is refused before the handler runs,
    naming the role it needs. Roles replace the interim password guard there: no method is
    registered privileged (design/security.md section 1)."""

    def __init__(self, server: RpcServer) -> None:
        self.server = server

    def register(self, method: str, request_type, handler, **kw) -> None:
        def guarded(request, ctx: CallContext):
            reason = authz.authorize(method, ctx.principal or ())
            if reason is not None:
                raise _denied(reason)
            return handler(request, ctx)

        kw.pop("privileged", None)
        self.server.register(method, request_type, guarded, **kw)


class CoordinatorNode:
    """Owns every component; a context manager. `address` is the client RPC address."""

    def __init__(self, config: NodeConfig, store: LogStore | None = None) -> None:
        self.config = config
        os.makedirs(config.data_dir, exist_ok=True)
        # One process per data dir: a second node on it would share this one's UUID and
        # (embedded) log replica. Held until close(), or the process's death.
        self._dir_lock = lock_server_dir(
            config.data_dir, f"coordinator {config.node_id}", "that coordinator node"
        )
        try:
            self.uuid = load_or_create_uuid(config.data_dir, config.node_id)
            self._owns_store = store is None
            self.store = store if store is not None else open_store(config, self.uuid)
        except BaseException:
            self._dir_lock.release()
            raise
        self.catalog = Catalog()
        self.replayer = Replayer(self.store, self.catalog, name=f"replay-{config.node_id}")
        # The cluster's password signs the privileged calls this node makes (DeleteTablet,
        # ChangeConfig) and guards its own (AddNode, RemoveNode): rpc/privileged.py.
        self.privileged_key = privileged.derive_key(config.password) if config.password else None
        self.keypair: keys.KeyPair | None = None
        self.tserver_curve: CatalogServerKeys | None = None
        if config.curve:
            try:
                self.keypair = keys.load_or_create_keypair(
                    os.path.join(config.data_dir, KEYS_DIR), KEY_NAME
                )
            except BaseException:
                self._dir_lock.release()
                raise
            # Calls to tablet servers: CURVE, each server's key from the principals table.
            self.tserver_curve = CatalogServerKeys(self.keypair, self.catalog)
        self.gateway = RpcTabletServerGateway(
            self.uuid, privileged_key=self.privileged_key, curve=self.tserver_curve
        )
        self.engine: Engine | None = None
        self.locations: LocationCache | None = None
        self.replication: ReplicationManager | None = None
        self.public_key = ""
        # With CURVE: the principals table pushed to tablet servers in heartbeat answers.
        self.principals_push = PrincipalsPush(self.catalog) if config.curve else None
        curve = None
        # With CURVE: set once the principals table holds every record the log had when the
        # node started (_load_admitted_keys); until then an unknown key is not refused.
        self.keys_loaded = threading.Event()
        self._keys_loader: threading.Thread | None = None
        if self.keypair is not None:
            self.public_key = self.keypair.public
            curve = keys.ServerCurve(self.keypair, self._roles_of_key, self._keys_ready)
        self.server = RpcServer(
            self.uuid,
            config.bind,
            service="coordinator",
            workers=RPC_WORKERS,
            queue_max=RPC_QUEUE_MAX,
            privileged_key=self.privileged_key,
            curve=curve,
        )
        self._register()
        self._closed = threading.Event()
        # Metrics and the watcher's log lines (coordinator/metrics.py); its registry is the
        # one the HTTP endpoint serves.
        self.observer = CoordinatorObserver(self)
        self.metrics_registry = self.observer.registry
        self.http: HttpEndpoint | None = None
        self._console: ConsoleSource | None = None
        try:
            self.server.start()
            self.address = self.server.address
            self.lease = LeaseDriver(
                self.store,
                self.uuid,
                self.address,
                config.lease,
                seed=hash(self.uuid) & 0xFFFFFFFF,
                on_role_change=self._on_role_change,
                clock=clock_from_env(config.node_id),  # time.monotonic unless a test skews it
            )
            self.engine = Engine(
                self.catalog,
                self.lease,
                self.replayer,
                self.gateway,
                CrashPoints.from_env(),
                config.engine,
            )
            self.locations = LocationCache(self.catalog, self.engine.get_tablet_locations)
            self.replication = ReplicationManager(
                self.catalog,
                self.uuid,
                self.engine.serving,
                config.replication,
                privileged_key=self.privileged_key,
                curve=self.tserver_curve,
            )
            self.replayer.start()
            if config.curve:
                self._keys_loader = threading.Thread(
                    target=self._load_admitted_keys, name=f"keys-{config.node_id}", daemon=True
                )
                self._keys_loader.start()
            self.engine.start()
            self.replication.start()
            self.lease.start()
            self.observer.start()
            self.http = self._start_http() if config.http else None
            self.lease.set_http_address(self.http_address)  # in its next Lease record
            self.bootstrap_result: str = ""  # the admin logged by this node, once done
            self._bootstrap: threading.Thread | None = None
            if config.curve and config.bootstrap_admin and not config.admin_keys:
                self._bootstrap = threading.Thread(
                    target=self._bootstrap_admin, name=f"bootstrap-{config.node_id}", daemon=True
                )
                self._bootstrap.start()
        except BaseException:
            self.close()
            raise
        logger.info("coordinator %s (%s) serving on %s", config.node_id, self.uuid, self.address)

    def _start_http(self) -> HttpEndpoint:
        """The console's pages and readiness on the node's HTTP endpoint (rpc/observe.py)."""
        self._console = ConsoleSource(self, http_address=lambda: self.http_address)
        endpoint = HttpEndpoint(
            self.config.http,
            self.metrics_registry,
            name="coordinator",
            ready=self._console.readiness,
            pages=[Console(self._console).handle],
            access=self.config.http_access,
        )
        endpoint.start()
        logger.info("coordinator %s console at %s", self.config.node_id, endpoint.url)
        return endpoint

    @property
    def http_address(self) -> str:
        """The console's address as others link to it (https://... when it serves HTTPS)."""
        return self.http.advertised if self.http is not None else ""

    def _on_role_change(self, role, epoch: int) -> None:
        self.observer.on_role_change(role, epoch)
        if self.engine is not None:
            self.engine.on_role_change(role, epoch)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self.http is not None:
            self.http.close()
        self.observer.close()
        if self._console is not None:
            self._console.close()
        lease = getattr(self, "lease", None)
        if lease is not None:
            lease.close()
        bootstrap = getattr(self, "_bootstrap", None)
        if bootstrap is not None and bootstrap is not threading.current_thread():
            bootstrap.join(BOOTSTRAP_POLL_S * 50)  # an execute in flight ends with the engine
        loader = self._keys_loader
        if loader is not None and loader is not threading.current_thread():
            loader.join(KEYS_LOAD_ATTEMPT_S * 3 + 1)  # an attempt in flight, then it sees _closed
        if self.replication is not None:
            self.replication.close()
        if self.engine is not None:
            self.engine.close()
        self.server.close()
        self.replayer.close()
        self.gateway.close()
        if self._owns_store:
            self.store.close()
        self._dir_lock.release()

    def __enter__(self) -> CoordinatorNode:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ rpc

    def _engine(self) -> Engine:
        engine = self.engine
        if engine is None:
            raise Unavailable("coordinator node starting", retry_after_ms=100)
        return engine

    def _replication_call(self) -> ReplicationManager:
        """Move/retire/status requests: the serving leader only."""
        self._engine().check_serving()
        if self.replication is None:
            raise Unavailable("coordinator node starting", retry_after_ms=100)
        return self.replication

    def _register(self) -> None:
        """Reads run inline on the rpc I/O thread: they only take the catalog lock, which
        is held briefly by pure code (apply, decide), never across I/O; the lease check is
        lock-free. Mutating calls run on the worker pool (they wait for appends and tablet
        servers)."""
        s = _Guarded(self.server) if self.config.curve else self.server
        mutate = {
            "CreateTable": (pb.CreateTableRequest, "create_table"),
            "DropTable": (pb.DropTableRequest, "drop_table"),
            "AlterTable": (pb.AlterTableRequest, "alter_table"),
            "RemoveServer": (pb.RemoveServerRequest, "remove_server"),
            "SetReplication": (pb.SetReplicationRequest, "set_replication"),
        }
        for method, (request_type, kind) in mutate.items():
            s.register(
                f"Coordinator.{method}",
                request_type,
                lambda req, ctx, kind=kind: self._execute(kind, req),
            )
        s.register(
            "Coordinator.ListTables",
            pb.ListTablesRequest,
            lambda req, ctx: self._engine().list_tables(),
            inline=True,
        )
        s.register(
            "Coordinator.DescribeTable",
            pb.DescribeTableRequest,
            lambda req, ctx: self._engine().describe_table(req),
            inline=True,
        )
        s.register(
            "Coordinator.GetTabletLocations",
            pb.GetTabletLocationsRequest,
            self._tablet_locations,
            inline=True,
        )
        s.register(
            "Coordinator.ListServers",
            pb.ListServersRequest,
            lambda req, ctx: self._engine().list_servers(),
            inline=True,
        )
        s.register("Coordinator.Heartbeat", pb.HeartbeatRequest, self._heartbeat, inline=True)
        s.register("Coordinator.EnlistServer", pb.EnlistServerRequest, self._enlist_server)
        # A tablet server admitting itself with a join token (the `join` role's one method).
        s.register("Coordinator.JoinServer", pb.JoinServerRequest, self._join_server)
        s.register(
            "Coordinator.GetLeader",
            pb.GetLeaderRequest,
            lambda req, ctx: self._engine().get_leader(),
            inline=True,
        )
        s.register("Coordinator.Status", pb.StatusRequest, self._status, inline=True)
        s.register(
            "Coordinator.MoveReplica",
            pb.MoveReplicaRequest,
            lambda req, ctx: self._replication_call().move_replica(req),
        )
        s.register("Coordinator.RetireServer", pb.RetireServerRequest, self._retire_server)
        s.register(
            "Coordinator.ReplicationStatus",
            pb.ReplicationStatusRequest,
            lambda req, ctx: self._replication_call().status(),
        )
        # The coordinator log, read-only, through the logstore's own read methods: the log
        # inspection tool (and any RemoteLogStore reader) can read a running node's log.
        # Appends are never served here: only the lease holder writes, through its engine.
        log_service = LogStoreService(self.store, self.uuid)
        local = bool(self.config.raft_address)  # an external store's reads are RPCs: pool
        s.register("LogStore.Read", lspb.ReadRequest, log_service.read, inline=local)
        s.register("LogStore.LastId", lspb.LastIdRequest, log_service.last_id, inline=local)
        if local:  # its replica's Raft state, for `logstore status --cluster NAME` (a read)
            s.register("LogStore.Status", lspb.StatusRequest, log_service.status)
        s.register("Coordinator.AddNode", pb.AddNodeRequest, self._add_node, privileged=True)
        # Principals (design/security.md section 3): the admin role's, guarded until CURVE
        # and roles are enforced by the interim privileged guard (rpc/privileged.py).
        for method, response_type in (
            ("AddPrincipal", pb.AddPrincipalResponse),
            ("RevokePrincipal", pb.RevokePrincipalResponse),
            ("SetPrincipalRoles", pb.SetPrincipalRolesResponse),
        ):
            s.register(
                f"Coordinator.{method}",
                getattr(pb, f"{method}Request"),
                lambda req, ctx, t=response_type: self._principal_change(req, t),
                privileged=True,
            )
        s.register(
            "Coordinator.ListPrincipals",
            pb.ListPrincipalsRequest,
            self._list_principals,
            privileged=True,
        )
        s.register(
            "Coordinator.RemoveNode", pb.RemoveNodeRequest, self._remove_node, privileged=True
        )

    # ------------------------------------------------------------ bootstrap admin

    @property
    def admin_credentials_path(self) -> str:
        return os.path.join(self.config.data_dir, ADMIN_CREDENTIALS_FILE)

    def _bootstrap_admin(self) -> None:
        """Log the first admin at the cluster's first start (design/security.md section 5):
        when this node leads and serves and the log holds no principal at all. The request
        id is this node's own and fixed, so a retry (after a lost answer or a failover)
        gets the first answer; a node that sees any principal (another node bootstrapped,
        or this one did before a restart) stops. Ends with the node."""
        attempt = 0
        while not self._closed.wait(BOOTSTRAP_POLL_S):
            with self.catalog.lock:
                if self.catalog.principals:
                    return
            engine = self.engine
            if engine is None or not engine.serving():
                continue
            attempt += 1
            try:
                key, where = self._bootstrap_key()
                request = pb.AddPrincipalRequest(
                    request_id=pb.RequestId(client_id=f"bootstrap-admin-{self.uuid}", seq=1),
                    name=ADMIN_NAME,
                    kind="user",
                    public_key=key,
                    roles=[authz.ADMIN],
                )
                engine.execute(principals.KIND, request)
            except (keys.KeyFileError, OSError, credentials.CredentialsError) as e:
                logger.error("bootstrap admin: cannot make or read its credentials: %s", e)
                return
            except errors.RpcError as e:
                level = logging.INFO if isinstance(e, errors.NotLeader) else logging.WARNING
                logger.log(level, "bootstrap admin: attempt %d: %s", attempt, e)
                continue
            self.bootstrap_result = where
            logger.warning(
                "bootstrap admin %r logged with key %s%s",
                ADMIN_NAME,
                key,
                f"; its credentials are in {where} (mode 0600: keep it secret, move it to "
                "the operator)"
                if where
                else "",
            )
            return

    def _bootstrap_key(self) -> tuple[str, str]:
        """The admin's public key, and the credentials file made for it ("" for a key
        given). A file made by an earlier attempt is used again (its key may be logged)."""
        if self.config.bootstrap_admin_key:
            return self.config.bootstrap_admin_key, ""
        path = self.admin_credentials_path
        if not os.path.exists(path):
            assert self.keypair is not None
            doc = credentials.document(
                ADMIN_NAME,
                "user",
                [authz.ADMIN],
                keys.KeyPair.generate(),
                [(self.address, self.keypair.public)],
            )
            try:
                credentials.write(path, doc)
            except FileExistsError:
                pass
        return credentials.load(path).keypair.public, path

    def _load_admitted_keys(self) -> None:
        """Set `keys_loaded` once the catalog holds every record the log acknowledged before
        this call: a barrier through the log (this replica has all of them), then the replay
        through the log's tail. Until then the principals table may lack keys the other
        nodes admit (a node started again before its replay's first pass; a replica that
        missed records while the node was down, and catches up only once a quorum answers),
        so the rpc server does not refuse an unknown key at the handshake, which its client
        takes as final (`KeyRefused`), but answers its calls UNAVAILABLE, and the client
        asks another node (rpc/keys.py ServerCurve.ready). Tried again until it succeeds or
        the node closes: without a quorum it waits for one."""
        started = time.monotonic()
        attempt = 0
        how = "this node leads and serves"  # _keys_ready found it so first
        while not self._closed.is_set() and not self.keys_loaded.is_set():
            attempt += 1
            try:
                self.store.barrier(timeout_s=KEYS_LOAD_ATTEMPT_S)
                tail = self.store.last_id(self.replayer.log, timeout_s=KEYS_LOAD_ATTEMPT_S)
                applied = self.replayer.apply_through(tail, timeout_s=KEYS_LOAD_ATTEMPT_S)
            except Exception as e:  # no quorum yet, a replica behind: try again
                level = logging.INFO if attempt == 1 or attempt % 30 == 0 else logging.DEBUG
                logger.log(
                    level,
                    "coordinator %s: admitted keys not loaded yet (attempt %d, %.1f s): %s",
                    self.config.node_id,
                    attempt,
                    time.monotonic() - started,
                    e,
                )
                self._closed.wait(KEYS_LOAD_RETRY_S)
                continue
            how = f"log applied through {applied}"
            self.keys_loaded.set()
        if self.keys_loaded.is_set():
            logger.info(
                "coordinator %s: admitted keys loaded (%s) %.2f s after start; unknown keys "
                "are refused from now on",
                self.config.node_id,
                how,
                time.monotonic() - started,
            )

    def _keys_ready(self) -> bool:
        """The rpc server's ServerCurve.ready (ZAP thread, I/O thread: cheap, no lock): the
        admitted keys are loaded, or this node leads and serves, which it does only once
        its replay has applied the log through its own lease (Engine.serving)."""
        if self.keys_loaded.is_set():
            return True
        engine = self.engine
        if engine is not None and engine.serving():
            self.keys_loaded.set()
            return True
        return False

    def _roles_of_key(self, public_key: str) -> tuple[str, ...] | None:
        """The CURVE authorizer: the roles in force for a caller's key (the principals
        table, coordinator/ops/principals.py, or a bootstrap admin key); None refuses it."""
        if public_key in self.config.admin_keys:
            return (authz.ADMIN,)
        return principals.roles_of_key(self.catalog, public_key)

    def _heartbeat(self, request: pb.HeartbeatRequest, ctx: CallContext):
        """Every node records it; with CURVE the key must be the one admitted for the UUID
        it names, and a leader's answer carries the principals table when the server holds
        another version (design/security.md section 4)."""
        if self.principals_push is not None:
            check_server_key(self.catalog, request.server_uuid, ctx.peer_key)
        response = self._engine().heartbeat(request)
        if self.principals_push is not None and response.is_leader:
            self.principals_push.answer(response, request.principals_version)
        return response

    def _enlist_server(self, request: pb.EnlistServerRequest, ctx: CallContext):
        if self.principals_push is not None:
            check_server_key(self.catalog, request.server_uuid, ctx.peer_key)
        return self._execute("enlist_server", request)

    def _tablet_locations(self, request: pb.GetTabletLocationsRequest, ctx: CallContext):
        """From the cache of serialized answers (coordinator/locations.py), leader only."""
        self._engine().check_serving()
        if self.locations is None:
            raise Unavailable("coordinator node starting", retry_after_ms=100)
        return self.locations.lookup(request)

    def _execute(self, kind: str, request):
        response = self._engine().execute(kind, request)
        if response is None:
            return pb.EnlistServerResponse() if kind == "enlist_server" else None
        return response

    def _principal_change(self, request, response_type):
        """AddPrincipal, RevokePrincipal, SetPrincipalRoles: one logged operation kind
        (coordinator/ops/principals.py), answered with the principal's name."""
        if isinstance(request, pb.AddPrincipalRequest) and request.kind == "join-token":
            if not self.config.curve:  # JoinServer needs the caller's key: CURVE
                raise BadRequest("join tokens need coordinator nodes run with --curve")
            # The deadline is counted on this (the leader's) wall clock: decide is pure.
            request = principals.AddJoinToken(request, now_unix_ms=int(time.time() * 1000))
            answer = self._engine().execute(principals.KIND, request)
            return response_type(name=answer.name or request.request.name)
        answer = self._engine().execute(principals.KIND, request)
        return response_type(name=answer.name or request.name)

    def _join_server(self, request: pb.JoinServerRequest, ctx: CallContext):
        """A tablet server admits itself: the caller's key (the handshake proved it) must be
        an unused, unexpired join token's; one logged operation admits the server's own key
        and spends the token (coordinator/ops/principals.py). Expiry: this node's wall clock
        (time.time) against the deadline the leader that made the token logged."""
        if not ctx.peer_key:
            raise BadRequest("join tokens need a coordinator node run with CURVE")
        op = principals.JoinServer(
            request_id=request.request_id,
            server_uuid=request.server_uuid,
            public_key=request.public_key,
            token_key=ctx.peer_key,
            now_unix_ms=int(time.time() * 1000),
        )
        answer = self._engine().execute(principals.KIND, op)
        logger.info(
            "tablet server %s admitted by a join token, key %s",
            request.server_uuid,
            request.public_key,
        )
        return pb.JoinServerResponse(name=answer.name or request.server_uuid)

    def _list_principals(self, request: pb.ListPrincipalsRequest, ctx: CallContext):
        self._engine().check_serving()
        return principals.summaries(self.catalog)

    def _retire_server(self, request: pb.RetireServerRequest, ctx: CallContext):
        """Logged (ops/retire_server), then answered with the replicas still on it."""
        self._execute("retire_server", request)
        return self._replication_call().hosted_replicas(request.server_uuid)

    def _status(self, request: pb.StatusRequest, ctx: CallContext) -> pb.StatusResponse:
        response = self._engine().status(self.uuid, self.address)
        store_status = getattr(self.store, "status", None)
        if self.config.raft_address and callable(store_status):
            response.raft_address = self.config.raft_address
            response.log_members.extend(store_status().get("members", ()))
        response.http_address = self.http_address
        response.public_key = self.public_key
        return response

    # ------------------------------------------------------------ group membership

    def _membership(self, change: str, raft_address: str, ctx: CallContext):
        """Add or remove one replica of the embedded log; any node forwards it to the Raft
        leader. The logstore refuses a second change while one is in progress."""
        if not raft_address:
            raise BadRequest("a node's Raft address (HOST:PORT) is needed")
        parse_host_port(raft_address)
        fn = getattr(self.store, change, None)
        if not self.config.raft_address or fn is None:
            raise BadRequest(
                "this node uses an external logstore: change its replicas with "
                "`logstore add-member` / `logstore remove-member`"
            )
        logger.info("membership: %s %s", change, raft_address)
        fn(raft_address, timeout_s=max(1.0, ctx.remaining_s() - 0.5))
        return pb.MembershipResponse(members=self.store.status().get("members", ()))

    def _add_node(self, request: pb.AddNodeRequest, ctx: CallContext):
        return self._membership("add_member", request.raft_address, ctx)

    def _remove_node(self, request: pb.RemoveNodeRequest, ctx: CallContext):
        if request.raft_address == self.config.raft_address:
            raise BadRequest("a node cannot remove itself: ask another node")
        return self._membership("remove_member", request.raft_address, ctx)
