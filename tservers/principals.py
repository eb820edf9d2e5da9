"""A tablet server's copy of the principals table, and the role check of every call
(design/security.md section 4).

The coordinator leader pushes the table in heartbeat answers (a version and every principal:
name, kind, public key, roles in force, state) whenever the version the server reports
differs. The server admits a CURVE key only if the table holds it as an active principal
(or it is one of the coordinator nodes' keys it was started with), and checks each call's
method against the role table (rpc/authz.py) before its handler runs, without asking the
coordinator. A revoked key is refused from the first call after the answer that carries
the new table: within one heartbeat interval and a round trip of the revocation's commit.

A server that has heard no coordinator leader for `leader_silence_s` refuses the calls of
every principal without the server role (users) until it hears one again: its table may be
stale, so a partitioned server cannot serve a revoked key forever. Calls of the cluster's own
processes (tablet Raft, tablet copy, the coordinator's) go on.

The table is kept on disk (`<fs-root>/principals`, CRC-checked, 0600, replaced atomically at
each change), and a restarted server starts from it: its users and peers are admitted at
once rather than after its first heartbeat answer (before, a restarted server refused every
client and every peer's Raft messages until then). A key revoked while it was down is refused
from that first answer, and a server that hears no leader refuses users after
`leader_silence_s` from its start, as any server does: the same bounds as a running server's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rpc import authz
from rpc.errors import PermissionDenied, Unavailable
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as cpb
from rpc.server import CallContext, RpcServer
from tservers import metafile

log = logging.getLogger(__name__)

ACTIVE = "active"
TSERVER_KIND = "tserver"
COORDINATOR_KIND = "coordinator"
LEADER_SILENCE_S_DEFAULT = 30.0


@dataclass(frozen=True, slots=True)
class Principal:
    """What the authorizer answers for an admitted key (CallContext.principal)."""

    name: str
    kind: str
    roles: tuple[str, ...]


def _denied(reason: str) -> PermissionDenied:
    """A refusal for a known key whose roles may not call the method."""
    return PermissionDenied(f"permission denied: {reason}")


class PrincipalCache:
    """The table as last pushed, by key; thread-safe (the table is replaced whole)."""

    def __init__(
        self,
        own_uuid: str,
        own_key: str,
        coordinator_keys: Sequence[str] = (),
        *,
        leader_silence_s: float = LEADER_SILENCE_S_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
        path: Path | None = None,
    ) -> None:
        """`path`: where the table is kept across restarts (read here if it exists)."""
        assert leader_silence_s > 0
        self.path = path
        self.own_uuid = own_uuid
        self.leader_silence_s = leader_silence_s
        self._clock = clock
        self._lock = threading.Lock()
        # Keys that hold whatever the table says: this server's own, and the coordinator
        # nodes' it was started with (the coordinator's calls carry the server role).
        self._fixed: dict[str, Principal] = {
            key: Principal(f"coordinator-{i}", COORDINATOR_KIND, (authz.SERVER,))
            for i, key in enumerate(coordinator_keys)
        }
        self._fixed[own_key] = Principal(own_uuid, TSERVER_KIND, (authz.SERVER,))
        self._by_key: dict[str, Principal] = {}
        self._server_keys: dict[str, str] = {}  # tablet server UUID -> its active key
        self.version = 0
        self.updates = 0
        self._last_leader = clock()  # a fresh start counts as heard (the table as kept)
        self.refused_stale = 0
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            table = metafile.read_meta(path, metafile.MAGIC_PRINCIPALS, cpb.PrincipalsTable)
        except FileNotFoundError:
            return
        except (OSError, metafile.MetaFileCorrupt) as e:
            # Not fatal: the next heartbeat answer brings the table again.
            log.warning("principals table %s not used (%s): waiting for the leader's", path, e)
            return
        self._install(table)
        log.info(
            "principals table version %016x from %s: %d active of %d principals (until the "
            "coordinator leader's answer)",
            table.version, path, len(self._by_key), len(table.entries),
        )  # fmt: skip

    def _install(self, table: cpb.PrincipalsTable) -> bool:
        """Make `table` the one in force; whether its version differs from the last."""
        by_key: dict[str, Principal] = {}
        server_keys: dict[str, str] = {}
        for e in table.entries:
            if e.state != ACTIVE or not e.public_key:
                continue
            by_key[e.public_key] = Principal(e.name, e.kind, tuple(e.roles))
            if e.kind == TSERVER_KIND:
                server_keys[e.name] = e.public_key
        with self._lock:
            changed = table.version != self.version
            self._by_key, self._server_keys = by_key, server_keys
            self.version = table.version
        return changed

    # -- the heartbeater's side -------------------------------------------------------

    def heard_leader(self, table: cpb.PrincipalsTable | None = None) -> None:
        """A coordinator leader answered a heartbeat; `table` if its answer carried one."""
        if table is not None and table.version:
            changed = self._install(table)
            self.updates += 1
            if changed:
                log.info(
                    "principals table version %016x: %d active of %d principals",
                    table.version,
                    len(self._by_key),
                    len(table.entries),
                )
                self._save(table)
        self._last_leader = self._clock()

    def _save(self, table: cpb.PrincipalsTable) -> None:
        if self.path is None:
            return
        try:
            metafile.write_meta(self.path, metafile.MAGIC_PRINCIPALS, table, mode=0o600)
        except OSError as e:  # a full disk, say: the table in memory still holds
            log.warning("could not keep the principals table in %s: %s", self.path, e)

    def silent_s(self) -> float:
        """Seconds since a coordinator leader last answered."""
        return self._clock() - self._last_leader

    # -- the rpc server's side --------------------------------------------------------

    def authorize_key(self, key: str) -> Principal | None:
        """The rpc authorizer (rpc.keys.ServerCurve): who holds `key`, None to refuse.
        Per connection (ZAP) and per call: a dict lookup."""
        return self._fixed.get(key) or self._by_key.get(key)

    def server_key(self, uuid: str) -> str:
        """The active key of tablet server `uuid` ("" if the table has none)."""
        return self._server_keys.get(uuid, "")

    def check(self, method: str, principal: Principal | None) -> None:
        """Raise unless `principal` may call `method` now."""
        roles = principal.roles if principal is not None else ()
        reason = authz.authorize(method, roles)
        if reason is not None:
            raise _denied(reason)
        if authz.SERVER not in roles:
            silent = self.silent_s()
            if silent > self.leader_silence_s:
                self.refused_stale += 1
                raise Unavailable(
                    f"tablet server {self.own_uuid} has heard no coordinator leader for "
                    f"{silent:.0f} s (over {self.leader_silence_s:g} s): its principals table "
                    "may be stale, so it serves only the cluster's own calls until it hears one",
                    retry_after_ms=1000,
                )


class Guarded:
    """Registers handlers on an RpcServer with CURVE behind the role check of a
    PrincipalCache. Roles replace the interim password guard (no method is registered
    privileged), as on a CURVE coordinator node."""

    def __init__(self, server: RpcServer, cache: PrincipalCache) -> None:
        self.server = server
        self.cache = cache

    def register(self, method: str, request_type, handler, **kw) -> None:
        check = self.cache.check

        def guarded(request, ctx: CallContext):
            check(method, ctx.principal)
            return handler(request, ctx)

        kw.pop("privileged", None)
        self.server.register(method, request_type, guarded, **kw)


class TableServerKeys(ClientCurve):
    """A tablet server's CURVE client settings for its calls to other tablet servers (tablet
    Raft, tablet copy): a call to server U connects only to a server proving it holds the
    key of the active tablet-server principal named U in the pushed table (none known:
    NoServerKey, nothing sent), so a key is never taken for another server's."""

    def __init__(self, keypair: KeyPair, cache: PrincipalCache) -> None:
        super().__init__(keypair)
        self._cache = cache

    def server_key(self, uuid: str) -> str:
        return self._cache.server_key(uuid) if uuid else ""
