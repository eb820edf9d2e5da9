"""A tablet server's metrics, health and readiness (design/operability.md).

`TServerObserver` owns the server's prometheus-client registry (its own, never the global
one) and, when the server was given `http_bind`, its rpc.observe.HttpEndpoint. Every figure
is read at scrape time from counters the components keep anyway (the rpc server's shards,
the WAL appender, the service's row counts, the tablet copy jobs, the tablet reports), so
no call on a hot path touches a prometheus object.

Readiness: enlisted with the coordinator leader (when the server has coordinators) and every
tablet listed at start-up open (started, or failed and reported so).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from rpc import observe
from rpc.protocols.tserver_pb2 import DataState
from tservers.service import ANSWER_BUFFERS
from tservers.tablet.pages import mapped_file_bytes

if TYPE_CHECKING:
    from tservers.server import TabletServer

log = logging.getLogger(__name__)

COPY_ACTIVE_STATES = ("QUEUED", "RUNNING")


def _counter(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    family = CounterMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


def _by_reason(reasons: dict[str, int]) -> Metric:
    """Background compactions by why they were picked (tservers/tablet/compaction.py)."""
    family = CounterMetricFamily(
        "logcentric_tserver_compactions_by_reason",
        "Background compactions run, by the policy term that picked them (tiered, overlap)",
        labels=["reason"],
    )
    for reason, n in sorted(reasons.items()):
        family.add_metric([reason], n)
    return family


def _gauge(name: str, doc: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _data_state_name(value: int) -> str:
    try:
        return DataState.Name(value)
    except ValueError:
        return str(value)


class TServerObserver:
    """The registry, its collectors and the HTTP endpoint of one tablet server."""

    def __init__(self, server: TabletServer) -> None:
        self.server = server
        self.registry = observe.new_registry()
        self.registry.register(observe.ScrapeCollector(self._rpc_metrics))
        self.registry.register(observe.ScrapeCollector(self.collect))
        self.http: observe.HttpEndpoint | None = None

    def start(self, http_bind: str, access: observe.HttpAccess | None = None) -> TServerObserver:
        """Serve /metrics, /healthz, /readyz on `http_bind` ("" serves nothing)."""
        if http_bind:
            from tservers.status_page import page_handler

            self.http = observe.HttpEndpoint(
                http_bind,
                self.registry,
                name="tserver",
                ready=self.readiness,
                pages=[page_handler(self.server)],
                access=access,
            ).start()
            log.info("tablet server %s: http on %s", self.server.uuid, self.http.url)
        return self

    @property
    def url(self) -> str:
        return self.http.url if self.http is not None else ""

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None

    # -- readiness ---------------------------------------------------------------------

    def readiness(self) -> tuple[bool, list[str]]:
        why: list[str] = []
        manager = self.server.manager
        if not manager.wait_open(0):
            why.append(f"{manager.starting} tablet(s) still opening")
        if self.server.config.coordinators:
            hb = self.server.heartbeater
            if hb is None or not hb.enlisted:
                why.append("not enlisted with the coordinator leader (no leader has said so)")
        return not why, why

    # -- metrics -----------------------------------------------------------------------

    def _rpc_metrics(self) -> list[Metric]:
        rpc = self.server.rpc
        return rpc.collect_metrics() if rpc is not None else []

    def collect(self) -> list[Metric]:
        server = self.server
        manager = server.manager
        out: list[Metric] = []
        tablets = GaugeMetricFamily(
            "logcentric_tserver_tablets",
            "Replicas on this server by runtime status, data state and Raft role",
            labels=["status", "data_state", "role"],
        )
        groups: Counter[tuple[str, str, str]] = Counter()
        for r in manager.reports():
            role = r.role if r.status == "RUNNING" and r.role else "NONE"
            data_state = _data_state_name(r.data_state) if r.data_state else "UNKNOWN"
            groups[(r.status, data_state, role)] += 1
        for labels, n in sorted(groups.items()):
            tablets.add_metric(list(labels), n)
        out.append(tablets)
        service = server.service
        written = service.rows_written if service is not None else 0
        scanned = service.rows_scanned if service is not None else 0
        out.append(_counter("logcentric_tserver_rows_written", "Rows written as leader", written))
        out.append(
            _counter("logcentric_tserver_rows_scanned", "Rows sent in scan answers", scanned)
        )
        a = manager.appender
        out.append(
            observe.histogram_family(
                "logcentric_tserver_wal_group_commit_records",
                "Tablet appends (records) written per WAL group commit",
                [],
                [([], a.group_records)],
            )
        )
        out.append(
            observe.histogram_family(
                "logcentric_tserver_wal_fsync_latency_seconds",
                "One fdatasync of a WAL segment",
                [],
                [([], a.sync_latency)],
            )
        )
        out.append(_counter("logcentric_tserver_wal_groups", "WAL group commits", a.groups))
        out.append(_counter("logcentric_tserver_wal_syncs", "WAL segment fdatasyncs", a.syncs))
        out.append(_counter("logcentric_tserver_wal_entries", "WAL entries written", a.entries))
        out.extend(self._copy_metrics())
        out.extend(self._storage_metrics())
        out.extend(self._raft_metrics())
        hb = server.heartbeater
        out.append(
            _gauge(
                "logcentric_tserver_enlisted",
                "1 when the coordinator leader last said this server is enlisted",
                1.0 if hb is not None and hb.enlisted else 0.0,
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_heartbeat_rounds",
                "Heartbeat rounds sent to the coordinator nodes",
                hb.beats if hb is not None else 0,
            )
        )
        return out

    def _raft_metrics(self) -> list[Metric]:
        d = self.server.manager.driver
        j = self.server.manager.fs.hard_states
        return [
            _counter(
                "logcentric_tserver_raft_messages_in", "Raft messages taken in", d.messages_in
            ),
            _counter(
                "logcentric_tserver_raft_messages_dropped",
                "Raft messages dropped on a full inbox (Raft resends)",
                d.messages_dropped,
            ),
            _counter("logcentric_tserver_raft_messages_out", "Raft messages sent", d.messages_out),
            _counter(
                "logcentric_tserver_raft_messages_unsent",
                "Raft messages dropped on the way out: no connection to the peer yet, or its "
                "queue full (Raft resends)",
                d.messages_unsent,
            ),
            _gauge(
                "logcentric_tserver_raft_groups_quiet",
                "Raft groups quiet now (idle: no heartbeats, no timers)",
                d.quiet_groups(),
            ),
            _gauge(
                "logcentric_tserver_raft_peers_down",
                "Peer tablet servers declared dead by liveness and not heard from since",
                len(d.peers_down),
            ),
            _counter(
                "logcentric_tserver_raft_peers_declared_down",
                "Times a peer tablet server was declared dead (not heard from in time)",
                d.peers_declared_down,
            ),
            _counter(
                "logcentric_tserver_raft_groups_woken_by_liveness",
                "Quiet groups woken because a peer server died or came back",
                d.groups_woken_by_liveness,
            ),
            _gauge(
                "logcentric_tserver_raft_peers_opening",
                "Peer tablet servers whose pings say they still open their tablets (counted down)",
                len(d.peers_opening),
            ),
            _gauge(
                "logcentric_tserver_raft_elections_held",
                "Replicas opened at start-up that start no election until all are open",
                d.held_groups(),
            ),
            _counter(
                "logcentric_tserver_raft_campaigns_deferred",
                "Elections put off a timeout: as many ran on this server as it runs at once",
                d.campaigns_deferred,
            ),
            _counter(
                "logcentric_tserver_raft_campaigns_refilled",
                "Deferred elections started as soon as a place was free again",
                d.campaigns_refilled,
            ),
            _counter(
                "logcentric_tserver_raft_liveness_late_rounds",
                "Liveness rounds that found this server stalled (peers declared dead only "
                "after three timeouts of silence then)",
                d.late_liveness_rounds,
            ),
            _counter(
                "logcentric_tserver_raft_liveness_pings_withheld",
                "Liveness ping rounds not sent: the Raft driver stuck in one step",
                d.pings_withheld,
            ),
            _counter(
                "logcentric_tserver_raft_hardstate_appends",
                "Records appended to the hard-state journal (one fdatasync each)",
                j.appends,
            ),
            _counter(
                "logcentric_tserver_raft_hardstate_states",
                "Terms and votes written to the hard-state journal",
                j.states_written,
            ),
            _gauge(
                "logcentric_tserver_raft_hardstate_journal_bytes",
                "Size of the hard-state journal (compacted past 4 MiB)",
                j.size_bytes,
            ),
        ]

    def _storage_metrics(self) -> list[Metric]:
        """Background compactions and the reserved free space (design/storage.md)."""
        c = self.server.manager.compaction
        out = [
            _counter("logcentric_tserver_compactions", "Background compactions run", c.compactions),
            _by_reason(c.reasons),
            _counter(
                "logcentric_tserver_compaction_bytes_written",
                "Bytes of data blocks written by background compactions",
                c.bytes_written,
            ),
            _counter(
                "logcentric_tserver_compaction_throttled_seconds",
                "Time background compactions waited for the rate limit's budget",
                c.throttled_s,
            ),
        ]
        m = self.server.manager
        out.append(
            _gauge(
                "logcentric_tserver_mapped_bytes",
                "Resident pages of memory-mapped files (data blocks, shared libraries)",
                mapped_file_bytes(),
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_mapped_trims",
                "Times every data block's mapped pages were handed back (--mapped-bytes-max)",
                m.mapped_trims,
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_idle_flushes",
                "Memstores flushed for having taken no write for --flush-idle-s",
                m.idle_flushes,
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_memory_flushes",
                "Memstores flushed to keep all of them under --memstore-bytes-max",
                m.memory_flushes,
            )
        )
        out.append(
            _gauge(
                "logcentric_tserver_memstore_bytes",
                "Estimated bytes of the memstores written since their last idle flush, as the "
                "last maintenance round with writes added them up (--memstore-bytes-max)",
                m.memstore_bytes_last,
            )
        )
        out.append(
            _gauge(
                "logcentric_tserver_arrow_allocated_bytes",
                "Bytes allocated from Arrow's memory pool (memstore row blocks, merges, answers; "
                "not the data blocks' mapped pages)",
                pa.total_allocated_bytes(),
            )
        )
        pool = ANSWER_BUFFERS  # scan answers' reused mappings (rpc/sendbuffers.py)
        out.append(
            _gauge(
                "logcentric_tserver_answer_buffer_bytes",
                "Bytes of the mappings kept for scan answers, lent or free",
                pool.bytes_held,
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_answer_buffers_reused",
                "Scan answer buffers lent from a kept mapping",
                pool.reused,
            )
        )
        out.append(
            _counter(
                "logcentric_tserver_answer_buffers_declined",
                "Scan answer buffers the pool declined (size or bound): allocated with malloc",
                pool.declined,
            )
        )
        disk = self.server.disk
        try:
            st = disk.state()
        except OSError:
            return out
        out.append(
            _gauge("logcentric_tserver_fs_free_bytes", "Free bytes (f_bavail)", st.free_bytes)
        )
        out.append(
            _gauge("logcentric_tserver_fs_reserved_bytes", "Reserved free bytes", st.reserved_bytes)
        )
        out.append(
            _counter(
                "logcentric_tserver_no_space_refusals",
                "Calls refused with NO_SPACE (free space at or below the reserve)",
                disk.refusals,
            )
        )
        return out

    def _copy_metrics(self) -> list[Metric]:
        jobs = self.server.manager.copy_jobs
        if jobs is None:
            return []
        finished, live = jobs.progress()
        active = [j for j in live if j.state in COPY_ACTIVE_STATES]
        copies = GaugeMetricFamily(
            "logcentric_tserver_tablet_copies", "Tablet copies onto this server", labels=["state"]
        )
        for state in COPY_ACTIVE_STATES:
            copies.add_metric([state], sum(1 for j in active if j.state == state))
        ended = CounterMetricFamily(
            "logcentric_tserver_tablet_copies_ended",
            "Tablet copies onto this server that ended",
            labels=["outcome"],
        )
        ended.add_metric(["done"], jobs.done)
        ended.add_metric(["failed"], jobs.failed)
        return [
            copies,
            ended,
            _counter(
                "logcentric_tserver_tablet_copy_bytes",
                "Bytes received by tablet copies onto this server",
                finished + sum(j.bytes_done for j in live),
            ),
            _gauge(
                "logcentric_tserver_tablet_copy_rate_bytes_per_second",
                "Sum of the running copies' mean rates",
                sum(j.rate_bytes_s for j in active if j.state == "RUNNING"),
            ),
            _gauge(
                "logcentric_tserver_tablet_copy_remaining_bytes",
                "Bytes the running copies still have to receive",
                sum(max(0, j.bytes_total - j.bytes_done) for j in active),
            ),
        ]
