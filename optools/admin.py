"""Operator commands on a running cluster: status (a ksck), tables, create/drop/describe,
group membership, and the replication commands (move, retire, remove, set-replication).

`coordinator status` checks the cluster the way `kudu cluster ksck` does: which node leads and
whether every node answers, every tablet server's state, every table's tablets, and for every
replica whether its tablet server actually hosts it, running, with the table's schema
version, and whether the replicas of a tablet agree on their committed config. It asks the
tablet servers themselves, not only the coordinator's view. It prints a summary per tablet
server (state, last heartbeat, replicas, the tablets it leaves under-replicated or
unavailable) and per table (healthy / under-replicated / unavailable tablets), then each
distinct problem once: one dead server is one problem, not one per tablet. Exit status 0 when
healthy, 1 when anything is wrong (2 for bad usage), with `--json` for machines (one object,
design/logtool.md "JSON output").

Arguments are checked when they are parsed (addresses with a port, positive timeouts, counts
that fit the wire's unsigned fields), so that bad usage is one line and exit status 2; the
coordinator still checks every request's values itself.

All commands talk through the client library; none imports server code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from coordinator.catalog import REPLICATION_FACTOR_MAX
from logcentric.client import TYPE_NAMES, Client, Column
from logcentric.meta import CoordinatorClient
from logcentric.tablets import TabletServerClient
from rpc import errors
from rpc.addresses import address_list_arg
from rpc.console import int_in, run_command
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols.tserver_pb2 import DataState, ListTabletsResponse

DEFAULT_TIMEOUT_S = 10.0
TIMEOUT_S_MAX = 3600.0
WAIT_S_MAX = 86400.0
UINT32_MAX = 2**32 - 1  # counts travel in uint32 fields


# ------------------------------------------------------------ argument types


def addresses_arg(value: str) -> list[str]:
    """HOST:PORT,... -> the addresses: at least one, each with its port (not 0)."""
    return list(address_list_arg(value))


def _seconds(value: str, low_s: float, high_s: float, zero_ok: bool) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not (low_s <= v if zero_ok else low_s < v) or not v <= high_s:  # NaN fails both
        bound = "[0" if zero_ok else "(0"
        raise argparse.ArgumentTypeError(f"must be in {bound}, {high_s:g}] seconds, got {value}")
    return v


def timeout_arg(value: str) -> float:
    """A timeout: more than 0 s (0 would fail every call before it is sent)."""
    return _seconds(value, 0.0, TIMEOUT_S_MAX, zero_ok=False)


def wait_arg(value: str) -> float:
    """A wait: 0 (do not wait) or more."""
    return _seconds(value, 0.0, WAIT_S_MAX, zero_ok=True)


def count_arg(low: int):
    """An integer type for argparse: low..UINT32_MAX (what the uint32 field can carry)."""
    return int_in(low, UINT32_MAX)


@dataclass
class NodeCheck:
    address: str
    ok: bool
    role: str = ""
    epoch: int = 0
    applied_id: int = 0
    pending_ops: int = 0
    error: str = ""
    raft_address: str = ""  # its replica of the coordinator log (embedded logstore)
    log_members: list[str] = field(default_factory=list)  # the log's replicas, as it knows them
    public_key: str = ""  # its CURVE key (empty: a plaintext node)
    # CURVE (it answered Status with a public key); False: INSECURE, plaintext and
    # unauthenticated (`coordinator start --insecure`); None: it did not answer.
    secure: bool | None = None


@dataclass
class ReplicaCheck:
    server_uuid: str
    address: str
    ok: bool
    problem: str = ""
    config_index: int = -1
    # Its tablet server answered ListTablets: the problem is this replica's own. Otherwise
    # the server's problem (DOWN, unreachable) explains it, and is said once, for the server.
    server_answered: bool = True


# A tablet's health, worst first.
UNAVAILABLE = "unavailable"  # fewer than a majority of its voters run: no leader, no write
INCONSISTENT = "inconsistent"  # its replicas disagree on the committed config
UNDER_REPLICATED = "under_replicated"  # a majority runs, but not every replica it should have
HEALTHY = "healthy"
TABLET_HEALTH = (HEALTHY, UNDER_REPLICATED, UNAVAILABLE, INCONSISTENT)


@dataclass
class TabletCheck:
    tablet_id: str
    ok: bool
    replicas: list[ReplicaCheck] = field(default_factory=list)
    problem: str = ""  # the tablet's own problem (majority, config, replica count)
    health: str = HEALTHY


@dataclass
class TableCheck:
    name: str
    table_id: str
    state: str
    schema_version: int
    ok: bool
    tablets: list[TabletCheck] = field(default_factory=list)
    replication_factor: int = 0
    # Tablets by health (TABLET_HEALTH), and "total".
    tablet_counts: dict[str, int] = field(default_factory=dict)


@dataclass
class ServerCheck:
    """A tablet server as the leader lists it, whether it answered ListTablets, and the
    tablets its replicas' absence leaves under-replicated or unavailable."""

    uuid: str
    address: str
    state: str
    replicas: int
    retired: bool
    last_heartbeat_age_s: float  # on the leader; -1 when it saw none
    answered: bool = True
    error: str = ""
    under_replicated_tablets: int = 0
    unavailable_tablets: int = 0
    # Its file system as its last heartbeat said (all 0: not reported); full: free at or
    # below the reserve, so it refuses new tablets and writes.
    fs_total_bytes: int = 0
    fs_free_bytes: int = 0
    fs_used_bytes: int = 0
    fs_reserved_bytes: int = 0
    fs_full: bool = False
    fs_root_bytes: int = 0


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@dataclass
class ClusterCheck:
    healthy: bool = True
    leader: str = ""
    nodes: list[NodeCheck] = field(default_factory=list)
    servers: list[ServerCheck] = field(default_factory=list)
    tables: list[TableCheck] = field(default_factory=list)
    pending_ops: int = 0
    log_members: list[str] = field(default_factory=list)  # as the leader knows them
    problems: list[str] = field(default_factory=list)
    # Every node that answered runs CURVE; False when one is insecure (plaintext).
    secure: bool = True

    def problem(self, text: str) -> None:
        self.healthy = False
        self.problems.append(text)


# A member this far behind the leader's applied id is reported (a snapshot catches up a new
# one in seconds; one that stays behind cannot follow: a wrong password or --peers, say).
LOG_MEMBER_LAG_MAX = 10_000


def check_log_members(result: ClusterCheck) -> None:
    """The coordinator log's replicas (embedded logstore): as the leader knows them, each
    must answer (be given in --coordinators and be up), follow the log, and know the same
    members; a group of two survives no failure. Nothing to check for an external logstore
    (its own `logstore status` does)."""
    leader = next(n for n in result.nodes if n.address == result.leader)
    if not leader.log_members:
        return
    result.log_members = leader.log_members
    answering = {n.raft_address: n for n in result.nodes if n.ok and n.raft_address}
    if len(leader.log_members) == 2:
        result.problem(
            "the coordinator log has 2 replicas: it survives no failure (add a third node)"
        )
    for member in leader.log_members:
        node = answering.get(member)
        if node is None:
            result.problem(
                f"log member {member} did not answer (down, or its node is not given in "
                "--coordinators)"
            )
        elif leader.applied_id - node.applied_id > LOG_MEMBER_LAG_MAX or (
            node.applied_id == 0 and leader.applied_id > 0
        ):
            result.problem(
                f"log member {member} ({node.address}) applied {node.applied_id} of the "
                f"leader's {leader.applied_id}: not following (a new one catching up, or one "
                "that cannot join: wrong password or --peers?)"
            )
    for raft, node in answering.items():
        if raft not in leader.log_members:
            result.problem(
                f"coordinator {node.address} (raft {raft}) is not a member of the log: add it "
                "with `coordinator add-node`, or stop it"
            )
        elif node.log_members and node.log_members != leader.log_members:
            result.problem(
                f"coordinator {node.address} sees log members {node.log_members}, the leader "
                f"{leader.log_members}"
            )


def check_cluster(addresses: list[str], timeout_s: float, credentials=None) -> ClusterCheck:
    result = ClusterCheck()
    with CoordinatorClient(
        addresses,
        timeout_s=timeout_s,
        call_timeout_s=min(timeout_s, 3.0),
        credentials=credentials,
    ) as meta:
        for address in addresses:
            try:
                st = meta.status(address, timeout_s=min(timeout_s, 3.0))
            except errors.RpcError as err:
                result.nodes.append(NodeCheck(address, False, error=str(err)))
                result.problem(f"coordinator {address} does not answer: {err}")
                continue
            result.nodes.append(
                NodeCheck(
                    address,
                    True,
                    st.role,
                    st.epoch,
                    st.applied_id,
                    st.pending_ops,
                    raft_address=st.raft_address,
                    log_members=sorted(st.log_members),
                    public_key=st.public_key,
                    secure=bool(st.public_key),
                )
            )
            if not st.public_key:
                result.secure = False
            if st.role == "LEADER":
                result.leader = address
                result.pending_ops = st.pending_ops
        if not result.leader:
            result.problem("no coordinator node leads")
            return result
        check_log_members(result)
        if result.pending_ops:
            result.problem(f"{result.pending_ops} operation(s) started and not finished")
        servers = meta.list_servers()
        tables = [
            (summary, meta.describe_table(summary.name), meta.get_tablet_locations(summary.name))
            for summary in meta.list_tables()
        ]
        server_keys = {  # CURVE: each server's admitted key, as the locations give it
            r.server_uuid: r.public_key
            for _s, _d, locations in tables
            for t in locations.tablets
            for r in t.replicas
            if r.public_key
        }
        if credentials is not None:
            # A server that hosts no replica (retired, drained, new, or no table yet) is in
            # no location: its key comes from its tserver principal. Without it the call went
            # plaintext to a CURVE server and the server was reported as not answering.
            server_keys = {**_tserver_keys(meta), **server_keys}
        reports = _tablet_reports(servers, timeout_s, credentials, server_keys)
        for s in servers:
            report = reports.get(s.uuid)
            result.servers.append(
                ServerCheck(
                    s.uuid,
                    s.address,
                    s.state,
                    s.replicas,
                    s.retired,
                    round(s.last_heartbeat_age_s, 1),
                    answered=not isinstance(report, str),
                    error=report if isinstance(report, str) else "",
                    fs_total_bytes=s.fs_total_bytes,
                    fs_free_bytes=s.fs_free_bytes,
                    fs_used_bytes=s.fs_used_bytes,
                    fs_reserved_bytes=s.fs_reserved_bytes,
                    fs_full=s.fs_full,
                    fs_root_bytes=s.fs_root_bytes,
                )
            )
        for summary, described, locations in tables:
            result.tables.append(check_table(summary, described, locations, reports))
    summarize_problems(result)
    return result


def _tserver_keys(meta: CoordinatorClient) -> dict[str, str]:
    """Each active tablet-server principal's key by its UUID (ListPrincipals: an admin's
    call); empty for a caller that may not list principals."""
    try:
        listed = meta.call(
            "ListPrincipals", cpb.ListPrincipalsRequest(), cpb.ListPrincipalsResponse
        )
    except errors.PermissionDenied:
        return {}
    return {
        p.name: p.public_key
        for p in listed.principals
        if p.kind == "tserver" and p.state == "active" and p.public_key
    }


def _tablet_reports(
    servers, timeout_s: float, credentials=None, server_keys=None
) -> dict[str, ListTabletsResponse | str]:
    """ListTablets of every tablet server, or why it could not be asked. With credentials,
    CURVE to each server whose admitted key the locations gave (`server_keys`)."""
    out: dict[str, ListTabletsResponse | str] = {}
    server_keys = server_keys or {}
    for s in servers:
        key = server_keys.get(s.uuid, "") if credentials is not None else ""
        try:
            with TabletServerClient(
                s.address,
                s.uuid,
                timeout_s=min(timeout_s, 3.0),
                keypair=credentials.keypair if key else None,
                server_key=key,
            ) as ts:
                out[s.uuid] = ts.list_tablets()
        except errors.RpcError as err:
            out[s.uuid] = f"unreachable: {err}"
    return out


def check_table(summary, described, locations, reports) -> TableCheck:
    """One table's tablets against the tablet servers' reports (ListTablets of each, or why
    it could not be asked): every replica's state, every tablet's health. Pure."""
    table = TableCheck(
        summary.name,
        summary.table_id,
        summary.state,
        described.schema.version,
        ok=True,
        replication_factor=described.replication_factor,
    )
    for loc in locations.tablets:
        tablet = TabletCheck(loc.tablet_id, ok=True)
        for r in loc.replicas:
            replica = ReplicaCheck(r.server_uuid, r.address, ok=True)
            report = reports.get(r.server_uuid)
            if isinstance(report, str) or report is None:
                replica.ok, replica.problem = False, report or "tablet server not known"
                replica.server_answered = False
            else:
                found = next((t for t in report.tablets if t.tablet_id == loc.tablet_id), None)
                if found is None:
                    replica.ok, replica.problem = False, "missing on its tablet server"
                elif found.data_state != DataState.READY or found.status != "RUNNING":
                    replica.ok = False
                    replica.problem = (
                        f"{DataState.Name(found.data_state)}/{found.status} {found.error}".strip()
                    )
                elif found.schema_version != described.schema.version:
                    replica.ok = False
                    replica.problem = (
                        f"schema version {found.schema_version}, table has "
                        f"{described.schema.version}"
                    )
                else:
                    replica.config_index = found.committed_config.opid_index
            tablet.replicas.append(replica)
        indexes = {r.config_index for r in tablet.replicas if r.ok}
        voters = [
            r.ok
            for r, located in zip(tablet.replicas, loc.replicas, strict=True)
            if located.member_type != "NON_VOTER"
        ]
        bad = [r for r in tablet.replicas if not r.ok]
        if not tablet.replicas or (voters and sum(voters) < len(voters) // 2 + 1):
            tablet.health = UNAVAILABLE
            tablet.problem = (
                f"UNAVAILABLE: {sum(voters)} of its {len(voters)} voters running, not a "
                "majority (no leader, no write)"
                if tablet.replicas
                else "UNAVAILABLE: no replica"
            )
        elif len(indexes) > 1:
            tablet.health = INCONSISTENT
            tablet.problem = f"replicas disagree on the committed config: {sorted(indexes)}"
        elif len(loc.replicas) != described.replication_factor:
            tablet.health = UNDER_REPLICATED
            tablet.problem = (
                f"{len(loc.replicas)} replicas, replication factor {described.replication_factor}"
            )
        elif any(r.member_type == "NON_VOTER" for r in loc.replicas):
            tablet.health = UNDER_REPLICATED
            tablet.problem = "a replica is still a NON_VOTER (being copied)"
        elif bad:
            tablet.health = UNDER_REPLICATED
        if tablet.health != HEALTHY:
            tablet.ok = table.ok = False
        table.tablets.append(tablet)
    table.tablet_counts = {h: sum(t.health == h for t in table.tablets) for h in TABLET_HEALTH}
    table.tablet_counts["total"] = len(table.tablets)
    return table


IDS_SHOWN_MAX = 5  # tablet ids named in one problem line; the rest are counted


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:IDS_SHOWN_MAX])
    return shown + (f" and {len(ids) - IDS_SHOWN_MAX} more" if len(ids) > IDS_SHOWN_MAX else "")


def _per_table(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def summarize_problems(result: ClusterCheck) -> None:
    """Each tablet server's share in unhealthy tablets, then every distinct problem once,
    after the coordinators' (already in result.problems). Pure.

    - a server that is not LIVE or did not answer: one line, with the tablets it leaves
      under-replicated and unavailable (its replicas' problem is the server's);
    - replica problems on servers that answered: one line per server and kind of problem,
      naming the tablets;
    - a tablet's own problem (no majority, a config disagreement, a replica count other than
      the factor, a replica being copied): one line per table and problem."""
    by_uuid = {s.uuid: s for s in result.servers}
    # server uuid -> health -> table name -> tablets
    impact: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    replica_problems: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    tablet_problems: dict[tuple[str, str], list[str]] = defaultdict(list)
    for table in result.tables:
        for tablet in table.tablets:
            if tablet.health == HEALTHY:
                continue
            for r in tablet.replicas:
                if r.ok:
                    continue
                impact[r.server_uuid][tablet.health][table.name] += 1
                if r.server_answered:
                    replica_problems[(r.server_uuid, r.address, r.problem)].append(tablet.tablet_id)
            if tablet.problem:
                tablet_problems[(table.name, tablet.problem)].append(tablet.tablet_id)
    for s in result.servers:
        s.under_replicated_tablets = sum(impact[s.uuid][UNDER_REPLICATED].values())
        s.unavailable_tablets = sum(impact[s.uuid][UNAVAILABLE].values())
    for uuid in sorted(set(impact) - set(by_uuid)):  # a replica on a server nobody lists
        result.servers.append(
            ServerCheck(
                uuid, "", "UNKNOWN", 0, False, -1.0, answered=False,
                error="tablet server not known",
                under_replicated_tablets=sum(impact[uuid][UNDER_REPLICATED].values()),
                unavailable_tablets=sum(impact[uuid][UNAVAILABLE].values()),
            )
        )  # fmt: skip
    for s in result.servers:
        if s.state == "LIVE" and s.answered:
            continue
        what = f"is {s.state}" if s.state != "LIVE" else f"did not answer ListTablets ({s.error})"
        heard = (
            f" (last heartbeat {s.last_heartbeat_age_s:.1f} s ago)"
            if s.last_heartbeat_age_s >= 0
            else ""
        )
        effects = []
        for health, word in ((UNDER_REPLICATED, "under-replicated"), (UNAVAILABLE, "unavailable")):
            tables = impact[s.uuid][health]
            if tables:
                effects.append(f"{sum(tables.values())} {word} ({_per_table(tables)})")
        hint = ""
        if s.state == "DOWN" and s.replicas == 0 and not effects:
            hint = (
                "; it hosts no replica any more: restart it, or forget it with "
                f"`coordinator remove-tserver {s.uuid}` once it is gone for good"
            )
        effect = f": tablets left {', '.join(effects)}" if effects else ""
        address = f" ({s.address})" if s.address else ""
        result.problem(f"tablet server {s.uuid}{address} {what}{heard}{effect}{hint}")
    for s in result.servers:
        if s.fs_full:
            result.problem(
                f"tablet server {s.uuid} ({s.address}) is full: {s.fs_free_bytes} bytes free, "
                f"at or below its reserve of {s.fs_reserved_bytes}: it refuses new tablets and "
                "writes; free space (drop tables) or add tablet servers"
            )
    for (uuid, address, problem), tablets in replica_problems.items():
        result.problem(
            f"tablet server {uuid} ({address}): {len(tablets)} replica(s) {problem}: "
            f"{_ids(tablets)}"
        )
    for (table_name, problem), tablets in tablet_problems.items():
        result.problem(f"table {table_name}: {len(tablets)} tablet(s) {problem}: {_ids(tablets)}")


def status_json(result: ClusterCheck) -> dict:
    """`coordinator status --json`: one object (design/logtool.md "JSON output")."""
    return asdict(result)


def cmd_status(args) -> int:
    result = check_cluster(args.coordinators, args.timeout_s, credentials_of(args))
    if args.json:
        print(json.dumps(status_json(result), indent=2))
        return 0 if result.healthy else 1
    print(f"leader: {result.leader or 'NONE'}")
    for n in result.nodes:
        state = f"{n.role} epoch {n.epoch} applied {n.applied_id}" if n.ok else f"DOWN ({n.error})"
        raft = f" (raft {n.raft_address})" if n.raft_address else ""
        print(f"  coordinator {n.address:22} {state}{raft}")
    for n in result.nodes:
        if n.secure is False:
            print(
                f"  WARNING: coordinator {n.address} is INSECURE: plaintext and unauthenticated "
                "(started with --insecure); anyone who reaches its port can write or drop tables"
            )
    if result.log_members:
        print(f"  log members ({len(result.log_members)}): {', '.join(result.log_members)}")
    not_live = sum(1 for s in result.servers if s.state != "LIVE")
    print(
        f"tablet servers: {len(result.servers)}" + (f" ({not_live} not LIVE)" if not_live else "")
    )
    for s in result.servers:
        heard = f"{s.last_heartbeat_age_s:.1f} s ago" if s.last_heartbeat_age_s >= 0 else "never"
        line = (
            f"  {s.uuid[:12]:12} {s.address:22} {s.state:5} heartbeat {heard:>10}  "
            f"{s.replicas:>4} replicas"
        )
        if s.under_replicated_tablets or s.unavailable_tablets:
            line += (
                f"  leaves {s.under_replicated_tablets} tablet(s) under-replicated, "
                f"{s.unavailable_tablets} unavailable"
            )
        if s.fs_total_bytes:
            line += (
                f"  disk {_size(s.fs_free_bytes)} free of {_size(s.fs_total_bytes)}"
                f" (reserve {_size(s.fs_reserved_bytes)}, its files {_size(s.fs_root_bytes)})"
            )
            if s.fs_full:
                line += " FULL"
        if not s.answered and s.state == "LIVE":
            line += "  (did not answer)"
        print(line + ("  (retired)" if s.retired else ""))
    bad_tables = sum(1 for t in result.tables if not t.ok)
    print(f"tables: {len(result.tables)}" + (f" ({bad_tables} unhealthy)" if bad_tables else ""))
    for t in result.tables:
        c = t.tablet_counts
        line = (
            f"  {t.name:24} {t.state:8} schema v{t.schema_version} rf {t.replication_factor}  "
            f"{c['total']} tablets: {c[HEALTHY]} healthy, {c[UNDER_REPLICATED]} "
            f"under-replicated, {c[UNAVAILABLE]} unavailable"
        )
        print(line + (f", {c[INCONSISTENT]} inconsistent" if c[INCONSISTENT] else ""))
    print(f"pending operations: {result.pending_ops}")
    if result.healthy:
        print("OK: the cluster is healthy")
        return 0
    print(f"UNHEALTHY: {len(result.problems)} problem(s)")
    for p in result.problems:
        print(f"  - {p}")
    return 1


def parse_columns(text: str) -> list[Column]:
    """ "id:int64:key,name:string,score:double:nullable" -> columns."""
    columns = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        if len(bits) < 2 or bits[1] not in TYPE_NAMES:
            raise errors.BadRequest(
                f"column {part!r}: write NAME:TYPE[:key][:nullable] with TYPE one of "
                f"{', '.join(TYPE_NAMES)}"
            )
        flags = set(bits[2:])
        unknown = flags - {"key", "nullable"}
        if unknown:
            raise errors.BadRequest(f"column {part!r}: unknown flag(s) {sorted(unknown)}")
        columns.append(Column(bits[0], bits[1], key="key" in flags, nullable="nullable" in flags))
    if not columns:
        raise errors.BadRequest("no columns given")
    return columns


def cmd_tables(args) -> int:
    with Client(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as client:
        tables = client.meta.list_tables()
    if args.json:  # one object, also when there is no table
        listed = [{"name": t.name, "id": t.table_id, "state": t.state} for t in tables]
        print(json.dumps({"tables": listed}))
        return 0
    for summary in tables:
        print(f"{summary.name}\t{summary.table_id}\t{summary.state}")
    return 0


def cmd_create_table(args) -> int:
    columns = parse_columns(args.columns)
    with Client(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as client:
        table_id = client.create_table(
            args.name, columns, num_tablets=args.tablets, replication_factor=args.replication
        )
    _result(args, f"created table {args.name} ({table_id})", name=args.name, table_id=table_id)
    warn_even_factor(args.replication)
    return 0


def warn_even_factor(factor: int) -> None:
    """An even factor survives no more failures than the odd one below it, and with 2 a
    tablet loses its majority (no leader, no write) with one server."""
    if factor and factor % 2 == 0:
        print(
            f"warning: {factor} replicas tolerate as few failed servers as {factor - 1} "
            f"({(factor - 1) // 2}): a majority of {factor // 2 + 1} must stay live; an odd "
            "factor is the usual choice",
            file=sys.stderr,
        )


def cmd_drop_table(args) -> int:
    with Client(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as client:
        table_id = client.drop_table(args.name)
    _result(args, f"dropped table {args.name} ({table_id})", name=args.name, table_id=table_id)
    return 0


def cmd_describe(args) -> int:
    with Client(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as client:
        d = client.describe_table(args.name)
        locations = client.tablet_locations(args.name)
    columns = [
        {
            "name": c.name,
            "type": next(k for k, v in TYPE_NAMES.items() if v == c.type),
            "key": c.is_key,
            "nullable": c.nullable,
        }
        for c in d.schema.columns
    ]
    tablets = [
        {
            "tablet_id": t.tablet_id,
            "bucket": t.partition.hash_bucket,
            "replicas": [
                {
                    "uuid": r.server_uuid,
                    "address": r.address,
                    "leader": r.is_leader,
                    "server_state": r.server_state,
                    "member_type": r.member_type,
                }
                for r in t.replicas
            ],
        }
        for t in locations.tablets
    ]
    info = {
        "name": d.name,
        "id": d.table_id,
        "state": d.state,
        "schema_version": d.schema.version,
        "replication_factor": d.replication_factor,
        "columns": columns,
        "tablets": tablets,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(
        f"table {d.name} ({d.table_id}) {d.state}, schema v{d.schema.version}, "
        f"replication {d.replication_factor}"
    )
    for c in columns:
        flags = " ".join(
            f for f in ("key" if c["key"] else "", "nullable" if c["nullable"] else "") if f
        )
        print(f"  {c['name']:24} {c['type']:10} {flags}")
    for t in tablets:
        where = ", ".join(_replica_text(r) for r in t["replicas"])
        print(f"  tablet {t['tablet_id']:16} bucket {t['bucket']:3}  {where}")
    print("  (* the leader as last reported; a DOWN server's replica is marked DOWN)")
    return 0


def _replica_text(r: dict) -> str:
    """`address*` for the leader last reported, with DOWN / NON_VOTER when so: a leader
    on a DOWN server is a stale report (an election is due), not a leader."""
    marks = [m for m in (r["server_state"], r["member_type"]) if m in ("DOWN", "NON_VOTER")]
    star = "*" if r["leader"] and r["server_state"] != "DOWN" else ""
    return r["address"] + star + (f" ({', '.join(marks)})" if marks else "")


def cmd_membership(args) -> int:
    from rpc import privileged
    from rpc.protocols import coordinator_pb2 as cpb

    # The nodes answer AddNode / RemoveNode only when signed with the cluster's password.
    password = privileged.read_password(
        getattr(args, "password_file", None), "COORDINATOR_PASSWORD", "coordinator"
    ) or os.environ.get(privileged.PASSWORD_ENV)
    key = privileged.derive_key(password) if password else None
    with CoordinatorClient(
        args.coordinators,
        timeout_s=args.timeout_s,
        privileged_key=key,
        credentials=credentials_of(args),
    ) as meta:
        method, request = (
            ("AddNode", cpb.AddNodeRequest(raft_address=args.raft))
            if args.command == "add-node"
            else ("RemoveNode", cpb.RemoveNodeRequest(raft_address=args.raft))
        )
        last: errors.RpcError | None = None
        # Any node forwards the change to the Raft leader; try them in turn.
        for address in args.coordinators:
            try:
                answer = meta.call_at(
                    address, method, request, cpb.MembershipResponse, args.timeout_s
                )
                break
            except (errors.Unavailable, errors.TimedOut) as err:
                last = err
        else:
            raise last or errors.Unavailable("no coordinator node answered")
    members = ", ".join(answer.members)
    if args.json:
        print(json.dumps({"members": list(answer.members)}))
    else:
        verb = "added" if args.command == "add-node" else "removed"
        print(f"{verb} {args.raft}; the coordinator log's replicas are now: {members}")
    return 0


# ------------------------------------------------------------ replication (architecture 4.5)

POLL_INTERVAL_S = 0.5


def _say(args, text: str) -> None:
    """A line for people; with --json, progress goes to stderr and stdout keeps the one JSON
    object the command prints at its end (`_result`)."""
    print(text, file=sys.stderr if args.json else sys.stdout)


def _result(args, text: str, **fields) -> None:
    """The command's outcome: `text` for people, or `fields` as one JSON object."""
    print(json.dumps(fields) if args.json else text)


def _wait(args, done, what: str) -> bool:
    """Poll done() every POLL_INTERVAL_S until it is true or --wait-s passed."""
    deadline = time.monotonic() + args.wait_s
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            print(f"coordinator {args.command}: {what} not done after {args.wait_s} s",
                  file=sys.stderr)  # fmt: skip
            return False
        time.sleep(POLL_INTERVAL_S)


def replication_status(meta: CoordinatorClient) -> cpb.ReplicationStatusResponse:
    return meta.call("ReplicationStatus", cpb.ReplicationStatusRequest(),
                     cpb.ReplicationStatusResponse)  # fmt: skip


def cmd_move_replica(args) -> int:
    request = cpb.MoveReplicaRequest(
        tablet_id=args.tablet, from_uuid=args.from_uuid, to_uuid=args.to_uuid or ""
    )
    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as meta:
        meta.call("MoveReplica", request, cpb.MoveReplicaResponse)
        moving = f"moving the replica of {args.tablet} off {args.from_uuid}"
        fields = dict(tablet_id=args.tablet, from_uuid=args.from_uuid, to_uuid=request.to_uuid)
        if args.wait_s <= 0:
            _result(args, moving, **fields, moved=False)
            return 0
        _say(args, moving)

        def moved() -> bool:
            # Asking again is idempotent and re-arms the move after a coordinator failover;
            # BAD_REQUEST "has no replica" means the source is out of the config: done.
            try:
                meta.call("MoveReplica", request, cpb.MoveReplicaResponse)
            except errors.BadRequest as err:
                if "has no replica on" in err.message:
                    return True
                raise
            return False

        if not _wait(args, moved, "the move"):
            return 1
    _result(
        args, f"moved: {args.tablet} has no replica on {args.from_uuid} any more", **fields,
        moved=True,
    )  # fmt: skip
    return 0


def _server(meta: CoordinatorClient, uuid: str) -> cpb.ServerSummary | None:
    """The tablet server `uuid` as ListServers has it, or None if it is not known."""
    return next((s for s in meta.list_servers() if s.uuid == uuid), None)


def server_fields(s: cpb.ServerSummary) -> dict:
    """A tablet server's summary as JSON fields (status --json, servers --json)."""
    return {
        "uuid": s.uuid,
        "address": s.address,
        "state": s.state,
        "replicas": s.replicas,
        "retired": s.retired,
        "last_heartbeat_age_s": s.last_heartbeat_age_s,
        "fs_total_bytes": s.fs_total_bytes,
        "fs_free_bytes": s.fs_free_bytes,
        "fs_used_bytes": s.fs_used_bytes,
        "fs_reserved_bytes": s.fs_reserved_bytes,
        "fs_full": s.fs_full,
        "fs_root_bytes": s.fs_root_bytes,
    }


def cmd_retire_tserver(args) -> int:
    """Retire a server (logged: it gets no new replica, on every leader, until removed or
    cancelled) and wait until every replica has moved off it."""
    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as meta:
        if args.cancel:
            before = _server(meta, args.uuid)
            meta.retire_server(args.uuid, cancel=True)
            was = before is None or before.retired
            text = (
                f"{args.uuid} is no longer retired: it takes new replicas again"
                if was
                else f"{args.uuid} was not retired: nothing to cancel"
            )
            _result(args, text, uuid=args.uuid, retired=False, was_retired=was)
            return 0
        left = [meta.retire_server(args.uuid)]
        _say(args, f"retired {args.uuid}: {left[0]} replicas to move off it")
        ended = []  # why the retirement ended while waiting (another operator's command)
        if args.wait_s > 0:

            def drained() -> bool:  # a read: the retirement is logged, nothing to re-send
                s = _server(meta, args.uuid)
                if s is None or not s.retired:
                    ended.append("was removed" if s is None else "had its retirement cancelled")
                    return True
                left[0] = s.replicas
                return left[0] == 0

            if not _wait(args, drained, "retiring"):
                return 1
        if ended:
            print(f"coordinator retire-tserver: {args.uuid} {ended[0]} while its replicas "
                  "were moving off", file=sys.stderr)  # fmt: skip
            return 1
        server = _server(meta, args.uuid) if left[0] == 0 else None
    text = ""
    if left[0] == 0:
        first = (
            "it is DOWN already: remove it with"
            if server is not None and server.state == "DOWN"
            else "stop it, and once `coordinator servers` shows it DOWN, remove it with"
        )
        text = (
            f"{args.uuid} hosts no replica and gets no new one: {first} "
            f"`coordinator remove-tserver {args.uuid}` (or keep it: "
            f"`coordinator retire-tserver {args.uuid} --cancel`)"
        )
    if text or args.json:
        _result(args, text, uuid=args.uuid, retired=True, replicas_left=left[0])
    return 0


def cmd_remove_tserver(args) -> int:
    """Forget a tablet server that is DOWN (the last step of decommissioning)."""
    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as meta:
        server = _server(meta, args.uuid)
        try:
            meta.remove_server(args.uuid)
        except errors.NotFound as err:
            print(f"coordinator remove-tserver: {err} (`coordinator servers` lists them)",
                  file=sys.stderr)  # fmt: skip
            return 1
        except errors.IllegalState as err:
            # A live server would enlist again at its next heartbeat: it must be stopped and
            # marked down (no heartbeat for the coordinators' --tserver-timeout-s) first.
            print(
                f"coordinator remove-tserver: {err}; stop it first (retire-tserver moves its "
                "replicas off) and wait until `coordinator servers` shows it DOWN",
                file=sys.stderr,
            )
            return 1
    address = server.address if server is not None else ""
    replicas = server.replicas if server is not None else 0
    if args.json:
        print(json.dumps({"removed": args.uuid, "address": address, "replicas": replicas}))
        return 0
    line = f"removed tablet server {args.uuid}" + (f" ({address})" if address else "")
    if replicas:
        line += (
            f"; its {replicas} replica(s) stay in their tablets' configurations until "
            "re-replication replaces them (in tablets that keep a live majority; "
            "`coordinator replication` names any that do not)"
        )
    print(line)
    return 0


def cmd_set_replication(args) -> int:
    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as meta:
        request = cpb.SetReplicationRequest(
            request_id=meta.next_request_id(), name=args.table, replication_factor=args.factor
        )
        table_id = meta.call("SetReplication", request, cpb.SetReplicationResponse).table_id
        same = "" if table_id else " (unchanged: the factor it had)"
        said = f"table {args.table}: replication factor {args.factor}{same}"
        fields = dict(table=args.table, replication_factor=args.factor, changed=bool(table_id))
        warn_even_factor(args.factor)
        if args.wait_s <= 0:
            _result(args, said, **fields, converged=False)
            return 0
        _say(args, said)

        def converged() -> bool:
            locations = meta.get_tablet_locations(name=args.table)
            return (
                all(
                    len(t.replicas) == args.factor
                    and all(
                        r.server_state == "LIVE" and r.member_type == "VOTER" for r in t.replicas
                    )
                    for t in locations.tablets
                )
                and replication_status(meta).under_replicated == 0
            )

        if not _wait(args, converged, "converging"):
            return 1
    replicas = "replica" if args.factor == 1 else "replicas"
    _result(
        args, f"every tablet of {args.table} has {args.factor} {replicas}", **fields,
        converged=True,
    )  # fmt: skip
    return 0


def not_running_tablets(st: cpb.ReplicationStatusResponse) -> int:
    """Tablets the leader does not judge: those of tables not RUNNING (being created, altered
    or dropped). `tablets` counts every table's; the other counts only RUNNING tables'. The
    two are read one after the other, so a table changing state in between can make the
    difference negative for a moment: never below 0."""
    judged = st.healthy_tablets + st.under_replicated + st.unknown
    return max(0, st.tablets - judged)


def cmd_replication(args) -> int:
    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as meta:
        st = replication_status(meta)
    not_running = not_running_tablets(st)
    if args.json:
        print(json.dumps({
            "tablets": st.tablets, "healthy": st.healthy_tablets,
            "under_replicated": st.under_replicated, "unknown": st.unknown,
            "not_running": not_running,
            "moves": [[m.tablet_id, m.from_uuid, m.to_uuid] for m in st.moves],
            "retiring": list(st.retiring), "changes_sent": st.changes_sent,
            "changes_refused": st.changes_refused, "strays": st.strays,
            "strays_deleted": st.strays_deleted, "stale_schemas": st.stale_schemas,
            "schemas_caught_up": st.schemas_caught_up,
            "unhealthy": [{"tablet_id": u.tablet_id, "table": u.table_name, "reason": u.reason}
                          for u in st.unhealthy],
        }))  # fmt: skip
    else:
        print(
            f"tablets {st.tablets}: healthy {st.healthy_tablets}, under-replicated "
            f"{st.under_replicated}, unknown {st.unknown}, of tables being created, altered or "
            f"dropped {not_running}; moves {len(st.moves)}, retiring "
            f"{len(st.retiring)}; config changes sent {st.changes_sent}, refused "
            f"{st.changes_refused}; stray replicas {st.strays}, deleted {st.strays_deleted}; "
            f"replicas behind their schema {st.stale_schemas}, caught up {st.schemas_caught_up}"
        )
        for u in st.unhealthy:
            print(f"  {u.tablet_id} ({u.table_name or '?'}): {u.reason}")
        shown = len(st.unhealthy)
        if shown < st.under_replicated + st.unknown:
            print(f"  ... and {st.under_replicated + st.unknown - shown} more")
    return 0 if st.under_replicated == 0 and st.unknown == 0 else 1


def add_credentials_argument(p: argparse.ArgumentParser) -> None:
    from rpc.credentials import CREDENTIALS_ENV

    if any(a.dest == "credentials" for a in p._actions):
        return
    p.add_argument(
        "--credentials",
        metavar="FILE",
        default=None,
        help=f"a credentials file: CURVE as its principal (else ${CREDENTIALS_ENV}, else the "
        "cluster's entry in the clusters file; none: plaintext)",
    )


def credentials_of(args):
    """The credentials the command runs with (rpc/credentials.py), or None: --credentials,
    $LOGCENTRIC_CREDENTIALS, or the named cluster's clusters-file entry. Loaded once."""
    from rpc import credentials

    if not hasattr(args, "_credentials"):
        args._credentials = credentials.resolve(
            getattr(args, "credentials", None),
            coordinators=getattr(args, "named_coordinators", None),
            cluster=getattr(args, "cluster", None),
        )
    return args._credentials


def coordinators_for(args, named, cluster: str | None) -> list[str]:
    """The coordinators a command talks to: `named` (--coordinators) or `cluster`
    (--cluster); else $LOGCENTRIC_COORDINATORS or $LOGCENTRIC_CLUSTER; else those of a
    credentials file given with --credentials (it was written for its cluster); else the
    clusters file's default; else those of the credentials file found otherwise
    ($LOGCENTRIC_CREDENTIALS). The same order as `logcentric.connect`."""
    from rpc import clusters
    from rpc.console import cluster_addresses

    args.named_coordinators = named
    creds = credentials_of(args)
    if named or cluster or creds is None:
        return cluster_addresses(named, cluster)
    env = (os.environ.get(v, "").strip() for v in (clusters.COORDINATORS_ENV, clusters.CLUSTER_ENV))
    if any(env):
        return cluster_addresses(None, None)
    if getattr(args, "credentials", None) or not clusters.load()["default"]:
        return list(creds.addresses)
    return cluster_addresses(None, None)


def _common(p: argparse.ArgumentParser) -> None:
    """--coordinators, --timeout-s, --credentials and --json."""
    add_credentials_argument(p)
    p.add_argument(
        "--coordinators",
        required=True,
        type=addresses_arg,
        help="coordinator node addresses HOST:PORT,...",
    )
    p.add_argument(
        "--timeout-s",
        type=timeout_arg,
        default=DEFAULT_TIMEOUT_S,
        help=f"total time for each request, (0, {TIMEOUT_S_MAX:g}] (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_commands(sub) -> None:
    """Add the operator commands (status, tables, create-table, ..., remove-tserver,
    set-replication, replication, describe) to a subparsers object."""
    p = sub.add_parser("status", help="check the cluster like ksck; exit 1 when unhealthy")
    _common(p)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("tables", help="list tables")
    _common(p)
    p.set_defaults(func=cmd_tables)
    p = sub.add_parser("create-table", help="create a hash-partitioned table")
    _common(p)
    p.add_argument("name")
    p.add_argument(
        "--columns",
        required=True,
        help="NAME:TYPE[:key][:nullable],... TYPE one of " + ", ".join(TYPE_NAMES),
    )
    p.add_argument("--tablets", type=count_arg(1), default=4)
    p.add_argument(
        "--replication",
        type=int_in(1, REPLICATION_FACTOR_MAX),
        default=0,
        help="replicas per tablet, 1-7 (default: 3, or the live servers when fewer)",
    )
    p.set_defaults(func=cmd_create_table)
    p = sub.add_parser("drop-table", help="drop a table (its tablets are tombstoned)")
    _common(p)
    p.add_argument("name")
    p.set_defaults(func=cmd_drop_table)
    for name, text in (
        ("add-node", "add a coordinator node's log replica (start the node first)"),
        ("remove-node", "remove a coordinator node's log replica (e.g. of a dead node)"),
    ):
        p = sub.add_parser(name, help=text)
        _common(p)
        p.add_argument("--raft", required=True, help="the node's logstore Raft HOST:PORT")
        p.add_argument(
            "--password-file",
            default=None,
            help="the cluster's password (also COORDINATOR_PASSWORD or LOGCENTRIC_PASSWORD): "
            "the nodes change membership only for a caller who holds it",
        )
        p.set_defaults(func=cmd_membership)
    p = sub.add_parser("move-replica", help="move a tablet's replica to another server")
    _common(p)
    p.add_argument("tablet", help="the tablet's id (coordinator describe TABLE)")
    p.add_argument("--from", dest="from_uuid", required=True, help="source tablet server uuid")
    p.add_argument("--to", dest="to_uuid", help="target uuid (default: the least loaded)")
    p.add_argument(
        "--wait-s",
        type=wait_arg,
        default=120.0,
        help="wait this long for the move to finish (default %(default)s); 0: do not wait",
    )
    p.set_defaults(func=cmd_move_replica)
    p = sub.add_parser(
        "retire-tserver",
        help="retire a tablet server: no new replica on it, every replica moved off it",
    )
    _common(p)
    p.add_argument("uuid", help="the tablet server's uuid (coordinator servers)")
    p.add_argument(
        "--wait-s",
        type=wait_arg,
        default=600.0,
        help="wait this long for its replicas to move off (default %(default)s); 0: do not wait",
    )
    p.add_argument(
        "--cancel", action="store_true", help="end the retirement: it takes replicas again"
    )
    p.set_defaults(func=cmd_retire_tserver)
    p = sub.add_parser(
        "remove-tserver",
        help="forget a tablet server that is DOWN (after retire-tserver and stopping it)",
    )
    _common(p)
    p.add_argument("uuid", help="the tablet server's uuid (coordinator servers)")
    p.set_defaults(func=cmd_remove_tserver)
    p = sub.add_parser("set-replication", help="change a table's replication factor")
    _common(p)
    p.add_argument("table", help="the table's name")
    p.add_argument(
        "factor",
        type=int_in(1, REPLICATION_FACTOR_MAX),
        help=f"replicas per tablet, 1-{REPLICATION_FACTOR_MAX} (odd: 1, 3, 5, 7)",
    )
    p.add_argument(
        "--wait-s",
        type=wait_arg,
        default=300.0,
        help="wait this long for every tablet to converge (default %(default)s); 0: do not wait",
    )
    p.set_defaults(func=cmd_set_replication)
    p = sub.add_parser("replication", help="re-replication summary; exit 1 unless all healthy")
    _common(p)
    p.set_defaults(func=cmd_replication)
    p = sub.add_parser("describe", help="a table's schema and tablets")
    _common(p)
    p.add_argument("name")
    p.set_defaults(func=cmd_describe)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coordinator", description=__doc__.splitlines()[0])
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run_command(args.func, args, f"coordinator {args.command}", (errors.RpcError,))


if __name__ == "__main__":
    sys.exit(main())
