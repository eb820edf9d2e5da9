"""Tablet locations answered from a cache of serialized answers (the leader's hottest read).

Building a GetTabletLocations answer (Engine.get_tablet_locations) costs more than the rest
of the call, and the answer changes rarely: when an operation is applied or a heartbeat
brings a different report. The catalog's values are frozen dataclasses replaced whenever
they change (coordinator/catalog.py), so an answer stays right for as long as every value it
was built from is still the very same object in the catalog: the table, each of its tablets,
each tablet's report, and the server of each replica. An entry keeps those objects (so none
can be freed and its identity reused) and a lookup compares them with `is` under the catalog
lock: a few dict reads instead of building and serializing the message.

The answer itself is built by Engine.get_tablet_locations, and then each replica is given
the CURVE public key of the active tablet-server principal named by its UUID (`server_key`:
design/security.md section 2; empty for a server not admitted with a key), so a client
connects to a replica only if it proves it holds the key admitted for that UUID. `_sources`
names what the answer reads, the principal of each replica included. Whoever makes the
builder read more of the catalog adds it there too (the tests compare cached and fresh
answers after every kind of change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.catalog import Catalog, TableInfo
from rpc.protocols import coordinator_pb2 as pb
from rpc.server import Serialized

ENTRIES_MAX = 4096

# (tablet id, tablet, report, ((replica uuid, server, principal), ...)); report, servers and
# principals may be None
_TabletSources = tuple[str, object, object, tuple[tuple[str, object, object], ...]]
TSERVER_KIND = "tserver"


def server_key(catalog: Catalog, server_uuid: str) -> str:
    """The public key of the active tablet-server principal named `server_uuid`, or ""
    (caller holds the catalog lock)."""
    p = catalog.principals.get(server_uuid)
    if p is None or p.kind != TSERVER_KIND or not p.in_force_active:
        return ""
    return p.public_key


@dataclass(frozen=True, slots=True)
class _Entry:
    table: TableInfo
    tablets: tuple[_TabletSources, ...]
    body: Serialized


class LocationCache:
    """Serialized GetTabletLocations answers per table, checked on every lookup."""

    def __init__(
        self,
        catalog: Catalog,
        build: Callable[[pb.GetTabletLocationsRequest], pb.GetTabletLocationsResponse],
    ) -> None:
        self._catalog = catalog
        self._build = build
        self._entries: dict[tuple[str, str], _Entry] = {}  # guarded by the catalog lock
        self.hits = 0
        self.misses = 0

    def lookup(self, request: pb.GetTabletLocationsRequest) -> Serialized:
        """The answer's bytes; raises what the builder raises (NotFound, BadRequest)."""
        catalog = self._catalog
        key = (request.table_id, "") if request.table_id else ("", request.name)
        with catalog.lock:
            entry = self._entries.get(key)
            if entry is not None and self._valid(entry, key):
                self.hits += 1
                return entry.body
            # Built and recorded under one hold of the (reentrant) lock: they agree.
            response = self._build(request)
            for tablet in response.tablets:
                for replica in tablet.replicas:
                    replica.public_key = server_key(catalog, replica.server_uuid)
            table = catalog.tables[response.table_id]
            body = Serialized(response.SerializeToString())
            if len(self._entries) >= ENTRIES_MAX:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = _Entry(table, self._sources(table), body)
            self.misses += 1
            return body

    def _valid(self, entry: _Entry, key: tuple[str, str]) -> bool:
        catalog = self._catalog
        table_id = key[0] or catalog.names.get(key[1])
        if catalog.tables.get(table_id) is not entry.table:
            return False
        tablets, reports, servers = catalog.tablets, catalog.tablet_reports, catalog.servers
        principals = catalog.principals
        for tablet_id, tablet, report, replicas in entry.tablets:
            if tablets.get(tablet_id) is not tablet or reports.get(tablet_id) is not report:
                return False
            for uuid, server, principal in replicas:
                if servers.get(uuid) is not server or principals.get(uuid) is not principal:
                    return False
        return True

    def _sources(self, table: TableInfo) -> tuple[_TabletSources, ...]:
        """Every catalog value the answer for `table` was built from."""
        catalog = self._catalog
        return tuple(
            (
                tablet_id,
                catalog.tablets.get(tablet_id),
                catalog.tablet_reports.get(tablet_id),
                tuple(
                    (uuid, catalog.servers.get(uuid), catalog.principals.get(uuid))
                    for uuid in catalog.current_replicas(tablet_id)
                ),
            )
            for tablet_id in table.tablet_ids
        )
