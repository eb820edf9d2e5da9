"""The principals table a CURVE coordinator leader pushes to tablet servers in heartbeat
answers, and the check that a heartbeat comes from the server it names (design/security.md
section 4).

The table is every principal with its roles and state in force (coordinator/ops/principals.py:
while an operation is pending, the more restrictive of before and after). Its version is a
digest of the entries, so the same table has the same version on every node and across a
failover: a tablet server that already holds it gets nothing, one whose version differs gets
the whole table in the next answer. Built at most once per applied log record (the catalog's
applied id), never per heartbeat.
"""

from __future__ import annotations

import hashlib
import threading

from coordinator.catalog import Catalog
from rpc.errors import PermissionDenied
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as pb

TSERVER_KIND = "tserver"
JOIN_TOKEN_KIND = "join-token"


class KeyMismatch(PermissionDenied):
    """A tablet server's key that is not the key admitted for the UUID its request names
    (PERMISSION_DENIED, the message saying so like the role table's refusals)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"permission denied: {reason}")


def table_of(catalog: Catalog) -> pb.PrincipalsTable:
    """The principals in force, sorted by name, with their version (caller need not hold
    the catalog's lock)."""
    table = pb.PrincipalsTable()
    with catalog.lock:
        for name in sorted(catalog.principals):
            p = catalog.principals[name]
            if p.kind == JOIN_TOKEN_KIND:
                continue  # a token joins through the coordinator only: never a server's caller
            if p.in_force_active:
                state = "active"
            elif p.state == "revoked":
                state = "revoked"  # also a revocation pending: in force from its commit point
            else:
                state = "pending"  # added, not done: not admitted yet
            table.entries.add(
                name=p.name,
                kind=p.kind,
                public_key=p.public_key,
                roles=list(p.in_force_roles if p.in_force_active else ()),
                state=state,
            )
    digest = hashlib.blake2b(
        b"".join(e.SerializeToString(deterministic=True) + b"\n" for e in table.entries),
        digest_size=8,
    ).digest()
    table.version = int.from_bytes(digest, "big") or 1
    return table


class PrincipalsPush:
    """The table to push, rebuilt when the catalog has applied another record."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()
        self._applied_id = -1
        self._table = pb.PrincipalsTable()
        self.pushed = 0  # answers that carried the table

    def table(self) -> pb.PrincipalsTable:
        applied = self._catalog.applied_id
        with self._lock:
            if applied != self._applied_id:
                table = table_of(self._catalog)
                if table.version != self._table.version:
                    self._table = table
                self._applied_id = applied
            return self._table

    def answer(self, response: pb.HeartbeatResponse, reported_version: int) -> None:
        """Put the table into a leader's heartbeat answer when the server holds another."""
        table = self.table()
        if table.version != reported_version:
            response.principals.CopyFrom(table)
            self.pushed += 1


def check_server_key(catalog: Catalog, server_uuid: str, peer_key: str) -> None:
    """Raise KeyMismatch unless `peer_key` (as the CURVE handshake proved it) is the key of
    the active tablet-server principal named `server_uuid`: a known key never passes for
    another server's UUID, nor a coordinator node's or a user's key for a tablet server."""
    with catalog.lock:
        name = catalog.principal_keys.get(peer_key)
        p = catalog.principals.get(name) if name is not None else None
        if p is None or not p.in_force_active:
            raise KeyMismatch(f"the key {peer_key} is not an admitted principal's")
        if p.kind != TSERVER_KIND:
            raise KeyMismatch(
                f"the key of {p.kind} principal {p.name!r} is not a tablet server's: it may "
                f"not speak for tablet server {server_uuid}"
            )
        if p.name != server_uuid:
            raise KeyMismatch(
                f"the key of tablet server {p.name} may not speak for tablet server "
                f"{server_uuid}: a tablet server is admitted by its UUID and key together"
            )


class CatalogServerKeys(ClientCurve):
    """A coordinator node's CURVE client settings for its calls to tablet servers: a call
    to tablet server U connects only to a server proving it holds the key of the active
    tablet-server principal named U in this node's catalog (none: NoServerKey, nothing
    sent), so a key is never taken for another server's."""

    def __init__(self, keypair: KeyPair, catalog: Catalog) -> None:
        super().__init__(keypair)
        self._catalog = catalog

    def server_key(self, uuid: str) -> str:
        if not uuid:
            return ""
        with self._catalog.lock:
            p = self._catalog.principals.get(uuid)
            if p is None or p.kind != TSERVER_KIND or not p.in_force_active:
                return ""
            return p.public_key
