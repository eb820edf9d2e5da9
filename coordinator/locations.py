"""Tablet locations answered from a cache of serialized answers (the leader's hottest read).

Building a GetTabletLocations answer (Engine.get_tablet_locations) costs more than the rest
of the call, and the answer changes rarely: when an operation is applied or a heartbeat
brings a different report. The catalog's values are frozen dataclasses replaced whenever
they change (coordinator/catalog.py), so an answer stays right for as long as every value it
was built from is still the very same object in the catalog: the table, each of its tablets,
each tablet's report, and the server of each replica. An entry keeps those objects (so none
can be freed and its identity reused) and a lookup compares them with `is` under the catalog
lock: a few dict reads per tablet of that table, whatever the size of the catalog.

Those reads are skipped while nothing the answers read has changed: the catalog counts every
change of its tables, names, tablets, reports, servers and principals
(`Catalog.locations_generation`), and an entry keeps the count at which it was last found
valid. A hit at the same count is one dict read (session 23: at 10,000 tables the reads of
the five large dicts for tables spread over the catalog cost the coordinator 4-5 us a call
more than for 10 hot ones, 41 against 37 us of CPU, memory not in the processor's caches).
Under writes the leaders' reports change and the count moves: the entries are checked as
before and stamped again.

A tablet's report is replaced on every report its leader sends, also when nothing the answer
says has changed (its last op index moved with writes, a beat repeating it): then the
answer's fields of the new report (`_report_facts`) are compared with those of the kept one,
and when they agree the entry takes the new report without building anything.

Every table's answer is kept (issue 28): at most `2 x tables + ENTRIES_MIN` entries (one by
id and one by name per table, and room for those of dropped or renamed tables until they
age out, oldest first). A fixed 4,096 made a catalog of 10,000 tables rebuild most answers
on every pass over it. An entry is one flat tuple (few objects for the garbage collector to
track: each build's survivors bring its next full collection closer, some 150 ms at 10,000
tables).

The answer itself is built by Engine.get_tablet_locations, and then each replica is given
the CURVE public key of the active tablet-server principal named by its UUID (`server_key`:
design/security.md section 2; empty for a server not admitted with a key), so a client
connects to a replica only if it proves it holds the key admitted for that UUID. `_sources`
names what the answer reads, the principal of each replica included, and `_report_facts`
what it reads of a report. Whoever makes the builder read more of the catalog adds it there
too (the tests compare cached and fresh answers after every kind of change).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.catalog import Catalog, TabletReportInfo
from rpc.protocols import coordinator_pb2 as pb
from rpc.server import Serialized

# Entries kept beyond two per table (those of dropped or renamed tables, until they age out).
ENTRIES_MIN = 4096
TSERVER_KIND = "tserver"

# An entry: [the catalog's locations_generation when last found valid, table, body, then
# per tablet: tablet id, tablet, report, replica count, then per replica: uuid, server,
# principal]. Report, servers and principals may be None.
_GENERATION, _TABLE, _BODY, _FIRST_TABLET = 0, 1, 2, 3


def server_key(catalog: Catalog, server_uuid: str) -> str:
    """The public key of the active tablet-server principal named `server_uuid`, or ""
    (caller holds the catalog lock)."""
    p = catalog.principals.get(server_uuid)
    if p is None or p.kind != TSERVER_KIND or not p.in_force_active:
        return ""
    return p.public_key


def _report_facts(report: TabletReportInfo | None) -> tuple | None:
    """What Engine.get_tablet_locations reads of a tablet's report (through
    Catalog.current_replicas too: its config)."""
    if report is None:
        return None
    return (report.leader_uuid, report.config_index, report.config_uuids, report.member_types)


class LocationCache:
    """Serialized GetTabletLocations answers per table, checked on every lookup."""

    def __init__(
        self,
        catalog: Catalog,
        build: Callable[[pb.GetTabletLocationsRequest], pb.GetTabletLocationsResponse],
    ) -> None:
        self._catalog = catalog
        self._build = build
        self._entries: dict[tuple[str, str], tuple] = {}  # guarded by the catalog lock
        self.hits = 0
        self.misses = 0  # answers built

    def lookup(self, request: pb.GetTabletLocationsRequest) -> Serialized:
        """The answer's bytes; raises what the builder raises (NotFound, BadRequest)."""
        catalog = self._catalog
        key = (request.table_id, "") if request.table_id else ("", request.name)
        with catalog.lock:
            entry = self._entries.get(key)
            if entry is not None:
                generation = catalog.locations_generation
                if entry[_GENERATION] == generation or self._valid(entry, key):
                    entry[_GENERATION] = generation
                    self.hits += 1
                    return entry[_BODY]
            # Built and recorded under one hold of the (reentrant) lock: they agree.
            response = self._build(request)
            for tablet in response.tablets:
                for replica in tablet.replicas:
                    replica.public_key = server_key(catalog, replica.server_uuid)
            table = catalog.tables[response.table_id]
            body = Serialized(response.SerializeToString())
            entries = self._entries
            entries.pop(key, None)  # (re-inserted last: the oldest entries age out first)
            while len(entries) >= 2 * len(catalog.tables) + ENTRIES_MIN:
                entries.pop(next(iter(entries)))
            entries[key] = [catalog.locations_generation, table, body, *self._sources(table)]
            self.misses += 1
            return body

    def _valid(self, entry: list, key: tuple[str, str]) -> bool:
        catalog = self._catalog
        table_id = key[0] or catalog.names.get(key[1])
        if catalog.tables.get(table_id) is not entry[_TABLE]:
            return False
        tablets, reports, servers = catalog.tablets, catalog.tablet_reports, catalog.servers
        principals = catalog.principals
        i, end = _FIRST_TABLET, len(entry)
        while i < end:  # (indexed, not sliced: a hit allocates nothing)
            tablet_id = entry[i]
            if tablets.get(tablet_id) is not entry[i + 1]:
                return False
            if reports.get(tablet_id) is not entry[i + 2] and not self._same_report(entry, i):
                return False
            j, i = i + 4, i + 4 + 3 * entry[i + 3]
            while j < i:
                uuid = entry[j]
                if (
                    servers.get(uuid) is not entry[j + 1]
                    or principals.get(uuid) is not entry[j + 2]
                ):
                    return False
                j += 3
        return True

    def _same_report(self, entry: list, i: int) -> bool:
        """Whether the tablet at `i` of `entry` has a new report that changes nothing the
        answer says; if so the entry keeps the new one (caller holds the lock)."""
        new = self._catalog.tablet_reports.get(entry[i])
        if _report_facts(new) != _report_facts(entry[i + 2]):
            return False
        entry[i + 2] = new
        return True

    def _sources(self, table) -> list:
        """Every catalog value the answer for `table` was built from, flat (see the entry)."""
        catalog = self._catalog
        out: list = []
        for tablet_id in table.tablet_ids:
            replicas = catalog.current_replicas(tablet_id)
            out += (
                tablet_id,
                catalog.tablets.get(tablet_id),
                catalog.tablet_reports.get(tablet_id),
                len(replicas),
            )
            for uuid in replicas:
                out += (uuid, catalog.servers.get(uuid), catalog.principals.get(uuid))
        return out
