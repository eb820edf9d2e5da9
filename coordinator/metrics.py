"""A coordinator node's metrics and the lines an on-call engineer looks for in its log.

`CoordinatorObserver` owns the node's prometheus-client registry (`CoordinatorNode.
metrics_registry`, served by the node's HTTP endpoint): the rpc server's families, the
lease, the replay, the catalog, re-replication and the embedded log replica's
(logstore.service.replica_metrics), all read at scrape time from what the components keep.

Its watcher thread (one per node, named `observer-<node id>`) logs one line at each change
it sees (design/operability.md, "Logs"):
- a tablet server goes silent for the node's tablet-server timeout ("seen down"), and its
  heartbeats come back ("back"); every node sees heartbeats, not only the leader. One never
  heard from is silent since this node first knew of it (`server_silence_s`), so a server
  enlisted or replayed just now has one timeout to send its first heartbeat here: no false
  "seen down" followed by "back" half a second later at a cluster's start;
- a peer of the embedded coordinator log loses its Raft connection, and gets it back;
- the lease changes holder or epoch (with the takeover record's wall-clock time), or no
  holder is known any more;
and `on_role_change` logs this node's own lease changes with the wall-clock time.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.engine import STEPS
from rpc import observe
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb

if TYPE_CHECKING:
    from coordinator.node import CoordinatorNode

logger = logging.getLogger(__name__)

LOG_NAME = "coordinator"  # the coordinator log (coordinator.leases.driver.LOG_NAME)
WATCH_INTERVAL_S = 0.5
# A log peer never seen connected is reported down once the node has run this long.
PEER_GRACE_S = 10.0
ROLES = ("LEADER", "RECOVERING", "FOLLOWER")
REREPLICATION_COUNTERS = (
    "sent",
    "refused",
    "replicas_created",
    "strays_deleted",
    "schemas_caught_up",
)
TIMEOUT_S = 2.0  # store calls made at scrape or watch time


def server_silence_s(now: float, last_heartbeat: float | None, known_since: float) -> float:
    """How long a tablet server has been silent to this node (monotonic seconds): since its
    last heartbeat here; never heard from, since this node first knew of it (`known_since`:
    when its watcher first saw it in the catalog). A server admitted and enlisted after the
    node started, whose enlistment this node replays before its first heartbeat arrives, is
    not silent for the time before this node knew of it."""
    assert now >= known_since
    return now - (last_heartbeat if last_heartbeat is not None else known_since)


def wall_clock(unix_s: float | None = None) -> str:
    """UTC, ISO 8601 with milliseconds: how every line of this module names a time."""
    t = dt.datetime.fromtimestamp(time.time() if unix_s is None else unix_s, tz=dt.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Monotonic:
    """A running total over a counter its owner resets now and then (the replication
    counters start again at each change of leadership): what a Prometheus counter needs."""

    def __init__(self) -> None:
        self._base = 0
        self._last = 0

    def total(self, current: int) -> int:
        if current < self._last:
            self._base += self._last
        self._last = current
        return self._base + current


class CoordinatorObserver:
    """The node's registry, collectors and watcher thread. close() stops the thread."""

    def __init__(
        self,
        node: CoordinatorNode,
        *,
        watch_interval_s: float = WATCH_INTERVAL_S,
        peer_grace_s: float = PEER_GRACE_S,
    ) -> None:
        assert watch_interval_s > 0
        self.node = node
        self.registry = observe.new_registry()
        self.registry.register(observe.ScrapeCollector(lambda: node.server.collect_metrics()))
        self.registry.register(observe.ScrapeCollector(self.collect))
        self.registry.register(observe.ScrapeCollector(self._log_replica_metrics))
        self._watch_interval_s = watch_interval_s
        self._peer_grace_s = peer_grace_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = time.monotonic()
        # Written under _lock.
        self.role_changes: Counter[str] = Counter()
        self.leader_changes = 0
        self._rereplication = {key: _Monotonic() for key in REREPLICATION_COUNTERS}
        # The watcher's own state (its thread only).
        self._holder: tuple[str, str, int] | None = None  # uuid, address, epoch
        self._holder_known = False
        self._servers_down: dict[str, float] = {}  # uuid -> when seen down (monotonic)
        self._servers_seen: set[str] = set()
        # uuid -> when this watcher first saw it (monotonic): the start of its silence while
        # it was never heard from. Pruned of servers gone from the catalog and heartbeats.
        self._servers_known: dict[str, float] = {}
        self._peers: dict[str, tuple[bool, float]] = {}  # raft address -> (connected, since)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> CoordinatorObserver:
        assert self._thread is None, "start() twice"
        self._started_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"observer-{self.node.config.node_id}", daemon=True
        )
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.error("observer thread did not stop in %.0f s", timeout_s)
            self._thread = None

    # -- this node's lease -------------------------------------------------------------

    def on_role_change(self, role, epoch: int) -> None:
        """Lease driver callback (its thread): count and log this node's role change."""
        with self._lock:
            self.role_changes[role.value] += 1
        logger.info(
            "lease: this node %s (%s) is now %s, epoch %d, at %s",
            self.node.config.node_id,
            self.node.uuid,
            role.value,
            epoch,
            wall_clock(),
        )

    # -- the watcher -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self._watch_interval_s):
            for step in (self._watch_lease, self._watch_servers, self._watch_peers):
                try:
                    step()
                except RpcError as e:  # the store did not answer: try again next round
                    logger.debug("observer: %s: %s", step.__name__, e)
                except Exception:  # a bug here must not stop the other watches
                    logger.exception("observer: %s failed", step.__name__)

    def _watch_lease(self) -> None:
        lease = getattr(self.node, "lease", None)
        if lease is None:
            return
        hint = lease.hint()
        if not hint.uuid:
            if self._holder_known and self._holder is not None:
                uuid, address, epoch = self._holder
                logger.warning(
                    "lease: no holder known any more at %s (the last, %s at %s with epoch %d, "
                    "has not renewed within the lease timeout)",
                    wall_clock(),
                    uuid,
                    address,
                    epoch,
                )
            self._holder_known = False
            return
        holder = (hint.uuid, hint.address, int(hint.epoch))
        if holder != self._holder:
            if self._holder is not None and holder[2] != self._holder[2]:
                with self._lock:
                    self.leader_changes += 1
            logger.info(
                "lease: %s at %s holds epoch %d (taken at %s), seen at %s",
                holder[0],
                holder[1],
                holder[2],
                self._takeover_time(holder[2]),
                wall_clock(),
            )
        self._holder = holder
        self._holder_known = True

    def _takeover_time(self, epoch: int) -> str:
        """The wall-clock time the takeover record of `epoch` (its id) was written."""
        try:
            entries = self.node.store.read(LOG_NAME, epoch, 1, timeout_s=TIMEOUT_S)
        except RpcError:
            return "unknown"
        if not entries or entries[0].id != epoch:
            return "unknown"
        record = pb.LogRecord()
        record.ParseFromString(entries[0].data)
        if record.WhichOneof("record") != "lease" or not record.lease.written_unix_ms:
            return "unknown"
        return wall_clock(record.lease.written_unix_ms / 1000)

    def _watch_servers(self) -> None:
        engine = self.node.engine
        if engine is None:
            return
        timeout_s = engine.config.tserver_timeout_s
        catalog = self.node.catalog
        now = time.monotonic()
        with catalog.lock:
            heartbeats = dict(catalog.heartbeats)
            addresses = {uuid: s.address for uuid, s in catalog.servers.items()}
        present = set(heartbeats) | set(addresses)
        for uuid in set(self._servers_known) - present:
            del self._servers_known[uuid]
        for uuid in sorted(present):
            last = heartbeats.get(uuid)
            address = addresses.get(uuid, "?")
            known_since = self._servers_known.setdefault(uuid, now)
            silent_s = server_silence_s(now, last, known_since)
            if uuid in self._servers_down:
                if last is not None and silent_s < timeout_s:
                    down_s = now - self._servers_down.pop(uuid)
                    logger.warning(
                        "tablet server %s at %s is back: heartbeats again at %s (seen down "
                        "for %.1f s)",
                        uuid,
                        address,
                        wall_clock(),
                        down_s,
                    )
            elif silent_s >= timeout_s:
                self._servers_down[uuid] = now
                never = " (never heard from by this node)" if last is None else ""
                logger.warning(
                    "tablet server %s at %s seen down at %s: no heartbeat for %.1f s%s",
                    uuid,
                    address,
                    wall_clock(),
                    silent_s,
                    never,
                )
            if last is not None:
                self._servers_seen.add(uuid)

    def _watch_peers(self) -> None:
        status = self._replica_status()
        if status is None:
            return
        now = time.monotonic()
        own = status.get("address", "")
        connected = set(status.get("connected", ()))
        for peer in status.get("members", ()):
            if peer == own:
                continue
            up = peer in connected
            was = self._peers.get(peer)
            if was is None:
                if up or now - self._started_at >= self._peer_grace_s:
                    self._peers[peer] = (up, now)
                    if not up:
                        logger.warning(
                            "coordinator log peer %s seen down at %s: no Raft connection "
                            "since this node started",
                            peer,
                            wall_clock(),
                        )
                continue
            if up == was[0]:
                continue
            self._peers[peer] = (up, now)
            if up:
                logger.warning(
                    "coordinator log peer %s is back: Raft connection up again at %s (down "
                    "for %.1f s)",
                    peer,
                    wall_clock(),
                    now - was[1],
                )
            else:
                logger.warning(
                    "coordinator log peer %s seen down at %s: Raft connection lost (role of "
                    "this replica: %s, leader %s)",
                    peer,
                    wall_clock(),
                    status.get("role", "?"),
                    status.get("leader") or "unknown",
                )

    def _replica_status(self) -> dict | None:
        """The embedded log replica's status, or None (an external logstore)."""
        if not self.node.config.raft_address:
            return None
        status = getattr(self.node.store, "status", None)
        return status() if callable(status) else None

    # -- metrics -----------------------------------------------------------------------

    def collect(self) -> list[Metric]:
        node = self.node
        out: list[Metric] = []
        now = time.monotonic()
        lease = getattr(node, "lease", None)
        engine = node.engine
        role = "FOLLOWER"
        epoch = 0
        renewal_age_s = float("nan")
        if lease is not None and engine is not None:
            serving = engine.serving()
            role = "LEADER" if serving else "RECOVERING" if lease.is_serving() else "FOLLOWER"
            epoch = lease.epoch if role != "FOLLOWER" else lease.hint().epoch
            keeper = lease.keeper
            # Leader: since its last renewal started; follower: since the log tail it
            # watches last moved (the leader's renewals move it).
            since = keeper.last_append_start if role != "FOLLOWER" else keeper.seen_at
            if since is not None:
                renewal_age_s = max(0.0, now - since)
        out.append(
            _gauge("logcentric_coordinator_lease_epoch", "Lease epoch this node knows", epoch)
        )
        roles = GaugeMetricFamily(
            "logcentric_coordinator_role", "1 for this node's role", labels=["role"]
        )
        for name in ROLES:
            roles.add_metric([name], 1.0 if role == name else 0.0)
        out.append(roles)
        out.append(
            _gauge(
                "logcentric_coordinator_lease_renewal_age_seconds",
                "Leader: since its last lease renewal started; follower: since the log tail "
                "last moved (NaN before either)",
                renewal_age_s,
            )
        )
        with self._lock:
            role_changes = dict(self.role_changes)
            leader_changes = self.leader_changes
        changes = CounterMetricFamily(
            "logcentric_coordinator_role_changes",
            "Changes of this node's lease role (failovers), by the role it took",
            labels=["role"],
        )
        for name in ("LEADER", "FOLLOWER"):
            changes.add_metric([name], role_changes.get(name, 0))
        out.append(changes)
        out.append(
            _counter(
                "logcentric_coordinator_leader_changes",
                "Changes of the lease epoch this node saw (another holder or epoch)",
                leader_changes,
            )
        )
        catalog = node.catalog
        with catalog.lock:
            applied = catalog.applied_id
            pending = len(catalog.pending)
            tables = len(catalog.tables)
            tablets = len(catalog.tablets)
            states = Counter(s.state.value for s in catalog.servers.values())
        try:
            last_id = node.store.last_id(LOG_NAME, timeout_s=TIMEOUT_S)
        except RpcError:
            last_id = applied
        out.append(
            _gauge("logcentric_coordinator_log_last_id", "Last id of the coordinator log", last_id)
        )
        out.append(
            _gauge("logcentric_coordinator_applied_id", "Last log id the catalog applied", applied)
        )
        out.append(
            _gauge(
                "logcentric_coordinator_replay_backlog_entries",
                "Log ids not yet applied to the catalog (last id minus applied id)",
                max(0, last_id - applied),
            )
        )
        out.append(
            _gauge(
                "logcentric_coordinator_pending_operations",
                "Operations logged and not completed",
                pending,
            )
        )
        out.append(_gauge("logcentric_coordinator_tables", "Tables in the catalog", tables))
        out.append(_gauge("logcentric_coordinator_tablets", "Tablets in the catalog", tablets))
        servers = GaugeMetricFamily(
            "logcentric_coordinator_tablet_servers",
            "Tablet servers in the catalog by state",
            labels=["state"],
        )
        for name in ("LIVE", "DOWN"):
            servers.add_metric([name], states.get(name, 0))
        out.append(servers)
        out.append(
            _gauge(
                "logcentric_coordinator_tablet_servers_seen_down",
                "Tablet servers this node sees silent past the tablet-server timeout",
                len(self._servers_down),
            )
        )
        out.append(self._rereplication_metrics())
        answers = CounterMetricFamily(
            "logcentric_coordinator_location_answers",
            "Tablet-location answers of this node (GetTabletLocations): from the cache of "
            "serialized answers, or built because the table's entry was missing or stale",
            labels=["source"],
        )
        locations = node.locations
        answers.add_metric(["cache"], locations.hits if locations is not None else 0)
        answers.add_metric(["built"], locations.misses if locations is not None else 0)
        out.append(answers)
        steps = sorted(engine.step_latency.items()) if engine is not None else []
        out.append(
            observe.histogram_family(
                "logcentric_coordinator_operation_step_seconds",
                "Steps of the mutating operations this node ran as leader, by operation kind "
                f"({', '.join(STEPS)}: design/operability.md)",
                ["kind", "step"],
                [([kind, step], h) for (kind, step), h in steps],
            )
        )
        peers = [p for p in self._peers.values()]
        out.append(
            _gauge(
                "logcentric_coordinator_log_peers_down",
                "Peers of the embedded coordinator log without a Raft connection",
                sum(1 for up, _ in peers if not up),
            )
        )
        return out

    def _rereplication_metrics(self) -> Metric:
        family = CounterMetricFamily(
            "logcentric_coordinator_rereplication_actions",
            "Re-replication actions of this node as leader: config changes sent or refused, "
            "replicas created, stray replicas deleted, replicas brought to their table's schema",
            labels=["action"],
        )
        replication = self.node.replication
        counters = replication.counters if replication is not None else None
        with self._lock:
            for key in REREPLICATION_COUNTERS:
                current = getattr(counters, key, 0) if counters is not None else 0
                family.add_metric([key], self._rereplication[key].total(current))
        return family

    def _log_replica_metrics(self) -> list[Metric]:
        """The embedded log replica's families (logcentric_logstore_*)."""
        from logstore.replicated import ReplicatedLogStore
        from logstore.service import replica_metrics

        store = self.node.store
        return replica_metrics(store) if isinstance(store, ReplicatedLogStore) else []


def _gauge(name: str, doc: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _counter(name: str, doc: str, value: float) -> Metric:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family
