"""The `logstore` command: run a replica, inspect and change a cluster.

    logstore serve --raft-address H:P --peers H:P,H:P --rpc-bind H:P --data-dir DIR
                   (--password-file FILE | env LOGSTORE_PASSWORD | --insecure-dev)
                   [--client-keys KEY|FILE,...] [--admin-keys KEY|FILE,...] | --insecure
    logstore show-key --data-dir DIR [--json]  the replica's CURVE public key (made if missing)
    logstore status --servers H:P,...          role, term, commit/applied index, sizes
    logstore add-member --servers H:P,... RAFT_ADDRESS
    logstore remove-member --servers H:P,... RAFT_ADDRESS
    logstore transfer-leadership --servers H:P,... [RAFT_ADDRESS]
    logstore append / read / last-id --servers H:P,... LOG ...
    logstore status / read / last-id --cluster NAME | --coordinators H:P,...
                   the coordinators' own log (each node serves its replica read-only)

`--servers` lists replicas' RPC addresses; `serve` prints one line
`logstore serving uuid=U rpc=H:P raft=H:P curve-key=K clients=N admins=M` on stdout once it
accepts calls (`... INSECURE (plaintext, unauthenticated: --insecure)` with --insecure).

`serve` runs its zmq API with CURVE by default (design/security.md section 2): its key pair
is <data-dir>/keys/logstore.key{,_secret}, made at its first start (or by `show-key`) and
never replaced. It admits only the public keys given (each 40 z85 characters or a key file,
e.g. a coordinator node's <data-dir>/keys/coordinator.key; a key may begin with "-": write
`--client-keys=KEY,...`): `--client-keys` with the
`server` role (coordinator nodes: append, barrier, read, last-id, status) and `--admin-keys`
with the `admin` role (operators: status, read, last-id, add-member, remove-member,
transfer-leadership). `--insecure` runs it plaintext, anyone may call: a WARNING line at
start and INSECURE in the start line. The replicas' Raft traffic is pysyncobj's own,
encrypted under the group's password (logstore/auth.py), whatever the API does.

The client commands call with CURVE when they have credentials: `--credentials FILE` (else
$LOGCENTRIC_CREDENTIALS; with --cluster, also the cluster's clusters-file entry), a
rpc/credentials.py file whose key pair is the caller's. Each replica's public key comes from
`--server-keys KEY|FILE,...` (one per --servers address, in order), else from the file's
entry for that address (its `coordinators` list names HOST:PORT and public_key; a file for a
logstore group lists the replicas' RPC addresses there). No credentials: plaintext, which a
CURVE replica does not answer. The read-only
commands also take the coordinators (`--coordinators`, `--cluster`, else the environment
and the clusters file, as every tool: rpc/clusters.py) and `--json` (one JSON document;
shapes in design/client.md). Ctrl-C ends any command with one line and exit status 130.
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import sys

from logstore.api import READ_LIMIT_MAX
from rpc import logsetup
from rpc.addresses import address_arg, address_list_arg
from rpc.console import (
    DaemonStop,
    add_cluster_arguments,
    add_json,
    add_version,
    cluster_addresses,
    int_in,
    interruptible,
    print_json,
    run_command,
)
from rpc.errors import RpcError, TimedOut, Unauthenticated, Unavailable
from rpc.http_access import HttpConfigError, add_http_arguments, http_access_of
from rpc.keys import glue_key_arguments, public_keys_arg

logger = logging.getLogger("logstore.cli")

PASSWORD_ENV = "LOGSTORE_PASSWORD"
PASSWORD_HELP = (
    "the group's password (also LOGSTORE_PASSWORD or LOGCENTRIC_PASSWORD): replicas change "
    "membership or leadership only for a caller who holds it"
)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _password(args) -> str | None:
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as f:
            value = f.read().strip()
        if not value:
            raise SystemExit(f"logstore: password file {args.password_file} is empty")
        return value
    return os.environ.get(PASSWORD_ENV) or None


def _insecure_problem(args, password: str | None) -> str | None:
    """Why a replica without a password may not run, in the flags' names, or None."""
    if password:
        return None
    if args.peers:
        return (
            "a store of several replicas needs the cluster password: give --password-file "
            f"FILE (or ${PASSWORD_ENV}) on every replica"
        )
    if args.raft_address.rsplit(":", 1)[0] != "127.0.0.1":
        return (
            f"--raft-address {args.raft_address} is not on 127.0.0.1: give --password-file "
            f"FILE (or ${PASSWORD_ENV}); only a single-node development store on 127.0.0.1 "
            "may run without one"
        )
    if not args.insecure_dev:
        return (
            f"no cluster password: give --password-file FILE (or ${PASSWORD_ENV}), or "
            "--insecure-dev for a single-node development store on 127.0.0.1"
        )
    return None


def cmd_show_key(args) -> int:
    """The replica's CURVE public key, from <data-dir>/keys (made first if missing, as its
    first start would: so the keys can be gathered before a group first starts)."""
    from logstore.service import KEY_NAME, keys_dir, load_or_create_keypair
    from rpc import keys

    directory = keys_dir(args.data_dir)
    made = not keys.public_path(directory, KEY_NAME).exists()
    try:
        pair = load_or_create_keypair(args.data_dir)
    except keys.KeyFileError as e:
        print(f"logstore show-key: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json(
            {
                "data_dir": args.data_dir,
                "public_key": pair.public,
                "key_file": str(keys.public_path(directory, KEY_NAME)),
                "made": made,
            }
        )
    else:
        print(pair.public)
    return 0


def cmd_serve(args) -> int:
    # Ctrl-C and SIGTERM stop the replica cleanly, even while it is still starting.
    daemon = DaemonStop("logstore")
    stop = daemon.event

    from logstore.replicated import ReplicaConfig
    from logstore.service import LogStoreServer, ServeConfig

    defaults = ReplicaConfig()
    replica = ReplicaConfig(
        append_entries_period_s=args.heartbeat_s,
        raft_min_timeout_s=args.election_min_s,
        raft_max_timeout_s=args.election_max_s,
        # pysyncobj wants these above the heartbeat and the election timeouts: longer
        # timings stretch them too.
        leader_fallback_timeout_s=max(
            defaults.leader_fallback_timeout_s, 2.5 * args.election_max_s
        ),
        connection_timeout_s=max(defaults.connection_timeout_s, args.election_max_s),
        compaction_min_entries=args.compaction_min_entries,
    )
    password = _password(args)
    if problem := _insecure_problem(args, password):
        print(f"logstore: cannot serve: {problem}", file=sys.stderr)
        return 1
    if args.insecure and (args.client_keys or args.admin_keys):
        print(
            "logstore: cannot serve: --client-keys and --admin-keys are for CURVE (the "
            "default); --insecure runs plaintext: give one or the other",
            file=sys.stderr,
        )
        return 2
    try:
        http_access = http_access_of(args)  # a public --http needs a mode: checked first
    except HttpConfigError as e:
        print(f"logstore: cannot serve: {e}", file=sys.stderr)
        return 2
    if args.insecure:
        # Loud, and before anything can fail: whoever reads the log sees how it was started.
        logger.warning(
            "INSECURE (--insecure): this logstore replica's API on %s runs plaintext and "
            "unauthenticated: anyone who reaches the port can append to and read its logs; "
            "run it so on a trusted network or for a test only (design/security.md)",
            args.rpc_bind,
        )
    config = ServeConfig(
        raft_address=args.raft_address,
        peers=tuple(_split(args.peers)),
        data_dir=args.data_dir,
        rpc_bind=args.rpc_bind,
        password=password,
        allow_insecure_dev=args.insecure_dev,
        replica=replica,
        http_bind=args.http,
        http_access=http_access,
        insecure=args.insecure,
        client_keys=args.client_keys,
        admin_keys=args.admin_keys,
    )
    # The tick thread, the rpc I/O thread and the handlers hand the GIL to each other on
    # every append; Python's default 5 ms switch interval would dominate the latency.
    sys.setswitchinterval(args.switch_interval_s)
    from rpc import observe
    from rpc.keys import KeyFileError

    observe.quiet_old_generation()  # a log of 1M live entries is a large heap (rpc/observe.py)

    try:
        server = LogStoreServer(config)
    except KeyFileError as e:  # a secret its group or others may read, a broken pair
        print(f"logstore: cannot serve: {e}", file=sys.stderr)
        return 1
    with server:
        http = f" http={server.http_url}" if server.http_url else ""
        mode = (
            " INSECURE (plaintext, unauthenticated: --insecure)"
            if args.insecure
            else f" curve-key={server.public_key} clients={len(set(args.client_keys))} "
            f"admins={len(set(args.admin_keys))}"
        )
        print(
            f"logstore serving uuid={server.uuid} rpc={server.address} raft={args.raft_address}"
            + http
            + mode,
            flush=True,
        )
        while not stop.wait(1.0):
            pass
    # A daemon's end: 130 and one line for Ctrl-C, 0 for SIGTERM.
    return daemon.exit_status()


def _addresses(args) -> list[str]:
    """The replicas to ask: --servers (logstore serve replicas), else the coordinators
    named by --coordinators, --cluster, the environment or the clusters file (each
    coordinator node serves its replica of the coordinator log read-only)."""
    if getattr(args, "servers", None):
        return _split(args.servers)
    if not getattr(args, "read_only", False):
        raise SystemExit(f"logstore {args.command}: --servers HOST:PORT,... is needed")
    return cluster_addresses(args.coordinators, args.cluster)


def _credentials(args):
    """The caller's credentials (rpc/credentials.py), None for plaintext: --credentials,
    else $LOGCENTRIC_CREDENTIALS; for the coordinators (no --servers), also the clusters
    file's entry of the cluster named."""
    from rpc import credentials

    if getattr(args, "servers", None):
        path = credentials.find_path(args.credentials)
        return credentials.load(path) if path else None
    return credentials.resolve(
        args.credentials, coordinators=args.coordinators, cluster=args.cluster
    )


def _server_keys(args, addresses: list[str], creds) -> dict[str, str]:
    """Address -> the public key a CURVE call to it must find: --server-keys (one per
    --servers address, in order), else the credentials file's entry for the address. An
    address with neither has no key: a call to it is refused unsent (NoServerKey)."""
    given = list(getattr(args, "server_keys", None) or ())
    if given:
        if creds is None:
            raise SystemExit(
                f"logstore {args.command}: --server-keys needs --credentials FILE (the "
                "caller's key pair)"
            )
        if not getattr(args, "servers", None) or len(given) != len(addresses):
            raise SystemExit(
                f"logstore {args.command}: --server-keys gives one key per --servers address, "
                f"in order ({len(given)} keys for {len(addresses)} addresses)"
            )
        return dict(zip(addresses, given, strict=True))
    if creds is None:
        return {}
    return {a: k for a, k in creds.coordinator_keys().items() if a in addresses}


def _client_options(args, addresses: list[str]) -> dict:
    """RemoteLogStore's CURVE options for these addresses ({} for plaintext)."""
    creds = _credentials(args)
    keys_of = _server_keys(args, addresses, creds)
    if creds is None:
        return {}
    return {"curve": creds.client_curve(), "server_keys": keys_of}


def _remote(args, **kw):
    from logstore.remote import RemoteLogStore

    addresses = _addresses(args)
    return RemoteLogStore(
        addresses, connect_timeout_s=args.timeout_s, **_client_options(args, addresses), **kw
    )


def _replica_status(address: str, timeout_s: float, options: dict) -> dict:
    """One replica's status as `status --json` lists it (design/client.md)."""
    from logstore.remote import RemoteLogStore

    row = {"address": address, "ok": False, "error": ""}
    with RemoteLogStore([address], connect_timeout_s=timeout_s, **options) as store:
        try:
            s = store.status(timeout_s=timeout_s)
        except (Unavailable, TimedOut) as err:
            row["error"] = f"unreachable ({err})"
            return row
        except Unauthenticated as err:  # no key for it, a handshake refused, a key refused
            hint = "" if options else " (give --credentials FILE: design/security.md)"
            row["error"] = f"refused: {err.message}{hint}"
            return row
        except RpcError as err:  # it answered: not a replica, or it refused
            row["error"] = f"answered, but not with a replica's status ({err})"
            return row
    row.update(
        ok=True,
        uuid=s.uuid,
        raft_address=s.raft_address,
        role=s.role,
        term=s.term,
        commit_index=s.commit_index,
        applied_index=s.applied_index,
        leader=s.leader,
        members=list(s.members),
        journal_entries=s.journal_entries,
        journal_first_index=s.journal_first_index,
        journal_bytes=s.journal_bytes,
        journal_syncs=s.journal_syncs,
        snapshot_bytes=s.snapshot_bytes,
        live_entries=s.live_entries,
        live_bytes=s.live_bytes,
        logs={x.log: x.last_id for x in s.logs},
    )
    return row


def cmd_status(args) -> int:
    addresses = _addresses(args)
    options = _client_options(args, addresses)
    replicas = [_replica_status(a, args.timeout_s, options) for a in addresses]
    failures = sum(1 for r in replicas if not r["ok"])
    leaders = {r["leader"] for r in replicas if r["ok"] and r["leader"]}
    # Like `coordinator status`: exit 1 when anything is unhealthy, with one line saying what.
    problems = []
    if failures:
        problems.append(f"{failures} of {len(addresses)} replicas did not answer")
    if not leaders and failures < len(addresses):
        problems.append("no replica knows a leader (no majority?): appends cannot commit")
    elif len(leaders) > 1:
        problems.append(f"replicas name different leaders {sorted(leaders)} (an election?)")
    leader = next(iter(leaders)) if len(leaders) == 1 else ""
    if args.json:
        print_json(
            {"healthy": not problems, "leader": leader, "problems": problems, "replicas": replicas}
        )
        return 1 if problems else 0
    for r in replicas:
        if not r["ok"]:
            print(f"{r['address']}: {r['error']}")
            continue
        logs = ", ".join(f"{k}={v}" for k, v in r["logs"].items()) or "-"
        print(
            f"{r['address']} raft={r['raft_address']} role={r['role']} term={r['term']} "
            f"commit={r['commit_index']} applied={r['applied_index']} "
            f"leader={r['leader'] or '-'}\n"
            f"    members={','.join(r['members'])}\n"
            f"    journal: {r['journal_entries']} entries from #{r['journal_first_index']}, "
            f"{r['journal_bytes']} bytes, {r['journal_syncs']} syncs; snapshot "
            f"{r['snapshot_bytes']} bytes; live: {r['live_entries']} entries, "
            f"{r['live_bytes']} bytes\n"
            f"    logs (last id): {logs}"
        )
    if problems:
        print("UNHEALTHY: " + "; ".join(problems))
        return 1
    print(f"OK: {len(addresses)} replicas answered, leader {leader}")
    return 0


def _privileged_remote(args):
    """A client that signs its calls with the group's password (membership changes and
    leadership transfer are privileged: rpc/privileged.py)."""
    from rpc import privileged

    password = privileged.read_password(
        args.password_file, PASSWORD_ENV, "logstore"
    ) or os.environ.get(privileged.PASSWORD_ENV)
    key = privileged.derive_key(password) if password else None
    return _remote(args, privileged_key=key)


def cmd_member(args) -> int:
    with _privileged_remote(args) as store:
        if args.command == "add-member":
            store.add_member(args.raft_address, timeout_s=args.timeout_s)
        else:
            store.remove_member(args.raft_address, timeout_s=args.timeout_s)
    print(f"{args.command} {args.raft_address}: done")
    return 0


def cmd_transfer(args) -> int:
    with _privileged_remote(args) as store:
        leader = store.transfer_leadership(args.raft_address, timeout_s=args.timeout_s)
    print(f"leader: {leader}")
    return 0


def cmd_append(args) -> int:
    inv = [int(i) for i in _split(args.invalidates)] if args.invalidates else []
    with _remote(args) as store:
        new_id = store.append(
            args.log, args.data.encode(), args.expected_id, inv, timeout_s=args.timeout_s
        )
    print(new_id)
    return 0


def cmd_read(args) -> int:
    with _remote(args) as store:
        if args.barrier:
            store.barrier(timeout_s=args.timeout_s)
        entries = store.read(args.log, args.from_id, args.limit, timeout_s=args.timeout_s)
    if args.json:
        print_json({"log": args.log, "entries": [_entry_fields(e) for e in entries]})
        return 0
    for e in entries:
        inv = f" invalidates={','.join(map(str, e.invalidates))}" if e.invalidates else ""
        print(f"{e.id}\t{e.data!r}{inv}")
    return 0


def _entry_fields(e) -> dict:
    """An entry in `read --json`: the data as base64, and as text when it is UTF-8."""
    try:
        text = bytes(e.data).decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "id": e.id,
        "data_base64": base64.b64encode(bytes(e.data)).decode("ascii"),
        "data_text": text,
        "invalidates": list(e.invalidates),
    }


def cmd_last_id(args) -> int:
    with _remote(args) as store:
        if args.barrier:
            store.barrier(timeout_s=args.timeout_s)
        last_id = store.last_id(args.log, timeout_s=args.timeout_s)
    if args.json:
        print_json({"log": args.log, "last_id": last_id})
    else:
        print(last_id)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logstore", description=__doc__.split("\n")[0])
    add_version(p, "logstore")
    p.add_argument("--log-level", default="WARNING")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run one replica with its zmq API")
    s.add_argument(
        "--raft-address", type=_raft_address, required=True, help="this replica's Raft host:port"
    )
    s.add_argument(
        "--peers",
        type=lambda text: ",".join(address_list_arg(text, empty_ok=True)),
        default="",
        help="other replicas (Raft host:port, comma-separated)",
    )
    s.add_argument(
        "--rpc-bind", type=address_arg, default="127.0.0.1:0", help="host:port of the zmq API"
    )
    s.add_argument("--data-dir", required=True)
    s.add_argument("--password-file", help=f"cluster password (else env {PASSWORD_ENV})")
    s.add_argument(
        "--insecure-dev",
        action="store_true",
        help="allow no password: single-node development store on 127.0.0.1 only",
    )
    s.add_argument(
        "--client-keys",
        type=public_keys_arg,
        default=(),
        metavar="KEY|FILE,...",
        help="CURVE: public keys admitted with the server role (coordinator nodes: their "
        "<data-dir>/keys/coordinator.key or `coordinator show-key`)",
    )
    s.add_argument(
        "--admin-keys",
        type=public_keys_arg,
        default=(),
        metavar="KEY|FILE,...",
        help="CURVE: public keys admitted with the admin role (operators: status, reads, "
        "membership, leadership)",
    )
    s.add_argument(
        "--insecure",
        action="store_true",
        help="the zmq API plaintext and unauthenticated: anyone who reaches it may append "
        "and read (a WARNING at start; the start line says INSECURE). Default: CURVE",
    )
    s.add_argument(
        "--heartbeat-s", type=float, default=0.05, help="leader heartbeat period (default 0.05)"
    )
    s.add_argument(
        "--election-min-s",
        type=float,
        default=0.4,
        help="election timeout range, low end: above 3 heartbeats (default 0.4)",
    )
    s.add_argument(
        "--election-max-s",
        type=float,
        default=1.2,
        help="election timeout range, high end: above the low end (default 1.2)",
    )
    s.add_argument("--compaction-min-entries", type=int, default=20_000)
    s.add_argument("--switch-interval-s", type=float, default=0.0005, help="sys.setswitchinterval")
    add_http_arguments(s, "/metrics, /healthz, /readyz")
    logsetup.add_arguments(s)
    s.set_defaults(func=cmd_serve)

    k = sub.add_parser("show-key", help="print the replica's CURVE public key (made if missing)")
    k.add_argument("--data-dir", required=True)
    add_json(k, "the public key, its file and whether it was just made")
    k.set_defaults(func=cmd_show_key)

    def client_parser(name: str, help_text: str, *, read_only: bool = False, json_what=""):
        """A command on replicas: --servers; a read-only one (status, read, last-id) may
        instead name the coordinators, whose nodes serve their log's replicas read-only."""
        c = sub.add_parser(name, help=help_text)
        c.add_argument(
            "--servers",
            type=lambda text: ",".join(address_list_arg(text)),
            required=not read_only,
            help="replicas' RPC host:port, comma-separated"
            + (" (else the coordinators: --coordinators, --cluster, ...)" if read_only else ""),
        )
        if read_only:
            add_cluster_arguments(c)
            add_json(c, json_what)
            c.set_defaults(read_only=True)
        c.add_argument(
            "--credentials",
            metavar="FILE",
            default=None,
            help="CURVE as this principal (rpc/credentials.py; else $LOGCENTRIC_CREDENTIALS): "
            "each replica's key from --server-keys, else the file's entry for its address",
        )
        c.add_argument(
            "--server-keys",
            type=public_keys_arg,
            default=(),
            metavar="KEY|FILE,...",
            help="with --credentials: the replicas' public keys, one per --servers address in "
            "order (`logstore show-key`, or <data-dir>/keys/logstore.key)",
        )
        c.add_argument("--timeout-s", type=_positive_seconds, default=5.0)
        return c

    c = client_parser(
        "status",
        "print each replica's role, term, indexes and sizes",
        read_only=True,
        json_what="health, leader and each replica",
    )
    c.set_defaults(func=cmd_status)
    for name in ("add-member", "remove-member"):
        c = client_parser(name, f"{name.split('-')[0]} one voting replica")
        c.add_argument("raft_address", type=_raft_address)
        c.add_argument("--password-file", default=None, help=PASSWORD_HELP)
        c.set_defaults(func=cmd_member)
    c = client_parser("transfer-leadership", "move leadership (to RAFT_ADDRESS if given)")
    c.add_argument("raft_address", nargs="?", type=_raft_address)
    c.add_argument("--password-file", default=None, help=PASSWORD_HELP)
    c.set_defaults(func=cmd_transfer)
    c = client_parser("append", "append one entry")
    c.add_argument("log")
    c.add_argument("data")
    c.add_argument("--expected-id", type=int)
    c.add_argument("--invalidates", default="", help="comma-separated ids")
    c.set_defaults(func=cmd_append)
    c = client_parser("read", "print live entries", read_only=True, json_what="the entries")
    c.add_argument("log")
    c.add_argument("--from-id", type=int_in(1, 2**63 - 1), default=1, help="first id (default 1)")
    c.add_argument(
        "--limit",
        type=int_in(1, READ_LIMIT_MAX),
        default=1000,
        help=f"entries at most, 1..{READ_LIMIT_MAX} (default %(default)s)",
    )
    c.add_argument("--barrier", action="store_true", help="linearizable: barrier first")
    c.set_defaults(func=cmd_read)
    c = client_parser("last-id", "print a log's last id", read_only=True, json_what="the id")
    c.add_argument("log")
    c.add_argument("--barrier", action="store_true")
    c.set_defaults(func=cmd_last_id)
    return p


def _raft_address(text: str) -> str:
    return address_arg(text, port_zero_ok=False)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, got {text}")
    return value


def _timing_problem(args) -> str | None:
    """What is wrong with `serve`'s Raft timing, in pysyncobj's own terms (it asserts them)."""
    if not args.heartbeat_s > 0:
        return "--heartbeat-s must be above 0"
    if not args.election_min_s > 3 * args.heartbeat_s:
        return (
            f"--election-min-s ({args.election_min_s:g}) must be above three heartbeats "
            f"(3 x --heartbeat-s = {3 * args.heartbeat_s:g})"
        )
    if not args.election_max_s > args.election_min_s:
        return (
            f"--election-max-s ({args.election_max_s:g}) must be above --election-min-s "
            f"({args.election_min_s:g})"
        )
    return None


@interruptible("logstore")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(glue_key_arguments(sys.argv[1:] if argv is None else argv))
    if args.func is cmd_serve and (problem := _timing_problem(args)):
        parser.error(problem)
    level = getattr(logging, str(args.log_level).upper(), logging.WARNING)
    if args.func is cmd_serve:
        logsetup.configure_from_args(args, level)
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_command(
        args.func, args, f"logstore {args.command}", (RpcError, OSError), name="logstore"
    )


if __name__ == "__main__":
    sys.exit(main())
