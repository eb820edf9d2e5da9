"""`coordinator` command line: run a node and ask a running group simple questions.

    coordinator start --id c1 --data-dir DIR --bind 127.0.0.1:7100 \\
        --raft 127.0.0.1:7200 --peers 127.0.0.1:7201,127.0.0.1:7202 --password-file PW
    coordinator start --id dev --data-dir DIR --raft 127.0.0.1:7200 --insecure-dev
    coordinator start ... [--admin-public-key FILE]   (CURVE, the default; roles: security.md)
    coordinator start ... --insecure          (plaintext and unauthenticated: said loudly)
    coordinator show-key --data-dir DIR       (the node's CURVE public key; made if missing)
    coordinator status --coordinators 127.0.0.1:7100,127.0.0.1:7101   (a ksck; admin.py)
    coordinator status --cluster local        (a name from the clusters file)
    coordinator tables|create-table|drop-table|describe|servers ...
    coordinator retire-tserver UUID ... ; then stop it; coordinator remove-tserver UUID ...
    coordinator local-cluster up|down|status ...                     (localcluster.py)
    coordinator log --data-dir NODE_DIR ... | --cluster NAME ...     (logtool.py)
    coordinator users add|list|set-roles|revoke ...                  (users_cli.py)
    coordinator clusters                      (the clusters file: names and addresses)

Every command that talks to a cluster names it the same way: `--coordinators HOST:PORT,...`,
else `--cluster NAME`, else $LOGCENTRIC_COORDINATORS, $LOGCENTRIC_CLUSTER, the clusters
file's default (logcentric/clusters.py), else the coordinators of the credentials file.
Nothing naming one is bad usage (exit status 2). Every such command takes `--credentials
FILE` (else $LOGCENTRIC_CREDENTIALS, else the cluster's `credentials` entry in the clusters
file): CURVE to the coordinators with the keys the file lists, as its principal.

`start` runs the node with CURVE, the default (design/security.md sections 2, 3, 5; `--curve`
says it explicitly): its key pair in <data-dir>/keys (`show-key` prints the public key,
making the pair first if the node has never run), callers admitted by the principals of the
coordinator log and checked against the role table. At the cluster's first start the first
node to lead logs the bootstrap admin: the key of `--admin-public-key FILE` (give it to every
node), or, without it, a key pair it makes, whose credentials file it writes to
<data-dir>/admin.credentials (0600) and names in its log. `start --insecure` runs the client
RPC service plaintext and unauthenticated (anyone who reaches the port can write or drop
tables): a WARNING at start, `INSECURE plaintext` in the start line, and `coordinator status`
names the node as insecure.

The cluster password protects the Raft traffic of the embedded logstore (pysyncobj pickles
its messages: it never runs unauthenticated between hosts). Without one, only a single-node
development group bound on 127.0.0.1 may run, and only with --insecure-dev.

Bad usage (an address without a port, a negative count, a timeout of 0, an unknown log
level) is refused when the arguments are parsed: one line, exit status 2, no traceback.
Ctrl-C ends any command with one line and exit status 130 (rpc/console.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from rpc import logsetup
from rpc.addresses import address_arg
from rpc.console import (
    add_cluster_arguments,
    add_json,
    add_version,
    interruptible,
    print_json,
)
from rpc.http_access import HttpConfigError, add_http_arguments, http_access_of
from rpc.keys import KeyFileError, glue_key_arguments, public_keys_arg

PASSWORD_ENV = "COORDINATOR_PASSWORD"


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _raft_address(value: str) -> str:
    """Empty (an external logstore) or HOST:PORT, the node's identity in the group."""
    from rpc.addresses import address_arg

    return address_arg(value, port_zero_ok=False) if value.strip() else ""


def _raft_addresses(value: str) -> str:
    from rpc.addresses import address_list_arg

    return ",".join(address_list_arg(value, empty_ok=True))


def _log_level(value: str) -> str:
    name = value.strip().upper()
    if name not in logging.getLevelNamesMapping() or name == "NOTSET":
        raise argparse.ArgumentTypeError(
            f"unknown level {value!r}; one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
        )
    return name


def _password(args) -> str | None:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as e:
            raise SystemExit(f"coordinator: cannot read password file: {e}") from None
        if not value:
            raise SystemExit(f"coordinator: password file {args.password_file} is empty")
        return value
    return os.environ.get(PASSWORD_ENV) or None


def insecure_problem(password: str | None, raft: str, peers: list[str], insecure_dev: bool):
    """Why an embedded logstore without a password may not run, in the flags' own names
    (the logstore's check says it in its API's terms), or None."""
    if password:
        return None
    if peers:
        return (
            "a group of several nodes needs the cluster password: give --password-file FILE "
            f"(or ${PASSWORD_ENV}) on every node"
        )
    if raft.rsplit(":", 1)[0] != "127.0.0.1":
        return (
            f"--raft {raft} is not on 127.0.0.1: give --password-file FILE (or ${PASSWORD_ENV}); "
            "only a single-node development group on 127.0.0.1 may run without one"
        )
    if not insecure_dev:
        return (
            f"no cluster password: give --password-file FILE (or ${PASSWORD_ENV}), or "
            "--insecure-dev for a single-node development group on 127.0.0.1"
        )
    return None


def cmd_start(args) -> int:
    # Ctrl-C and SIGTERM stop the node cleanly, even while it is still starting: a node
    # never started is then closed at once.
    from rpc.console import DaemonStop

    daemon = DaemonStop("coordinator")

    from coordinator.engine import EngineConfig
    from coordinator.leases import LeaseConfig
    from coordinator.node import CoordinatorNode, NodeConfig
    from rpc.errors import RpcError

    if not args.logstore and not args.raft:
        print("coordinator: --raft HOST:PORT is needed for the embedded logstore", file=sys.stderr)
        return 2
    password = _password(args)
    if not args.logstore and (
        problem := insecure_problem(password, args.raft, _split(args.peers), args.insecure_dev)
    ):
        print(f"coordinator: cannot start: {problem}", file=sys.stderr)
        return 1
    try:
        lease = LeaseConfig(
            lease_timeout_s=args.lease_timeout_s,
            renew_interval_s=args.lease_timeout_s / 5,
            drift_margin_s=args.lease_timeout_s / 10,
            # Conditional appends settle duels; the back-off only spreads retries.
            backoff_min_s=args.lease_timeout_s / 20,
            backoff_max_s=args.lease_timeout_s / 5,
        )
    except AssertionError:
        print("coordinator: --lease-timeout-s must be positive", file=sys.stderr)
        return 2
    if args.insecure and args.curve:
        print("coordinator: --insecure and --curve exclude each other", file=sys.stderr)
        return 2
    try:
        http_access = http_access_of(args)  # a public --http needs a mode: checked first
    except HttpConfigError as e:
        print(f"coordinator: {e}", file=sys.stderr)
        return 2
    curve = not args.insecure  # CURVE is the default; --curve says so
    admin_key = ""
    if args.admin_public_key:
        if not curve:
            print(
                "coordinator: --admin-public-key needs CURVE (the default): drop --insecure",
                file=sys.stderr,
            )
            return 2
        from optools.users_cli import read_public_key

        admin_key = read_public_key(args.admin_public_key, "coordinator start")
    config = NodeConfig(
        node_id=args.id,
        data_dir=args.data_dir,
        bind=args.bind,
        raft_address=args.raft,
        peers=tuple(_split(args.peers)),
        password=password,
        allow_insecure_dev=args.insecure_dev,
        logstore_addresses=tuple(_split(args.logstore)),
        logstore_keys=tuple(args.logstore_keys),
        lease=lease,
        engine=EngineConfig(tserver_timeout_s=args.tserver_timeout_s),
        http=args.http,
        http_access=http_access,
        curve=curve,
        bootstrap_admin_key=admin_key,
    )
    from rpc import observe

    observe.quiet_old_generation()  # a catalog of 10,000 tables is a large heap (rpc/observe.py)
    try:
        node = CoordinatorNode(config)
    except (RpcError, ValueError, OSError, KeyFileError) as e:
        print(f"coordinator: cannot start: {e}", file=sys.stderr)
        return 1
    with node:
        console = f" http={node.http.url}" if node.http is not None else ""
        key = f" curve-key={node.public_key}" if node.public_key else " INSECURE plaintext"
        if not curve:
            logging.getLogger("coordinator").warning(
                "coordinator %s is INSECURE (--insecure): its client RPC service on %s is "
                "plaintext and unauthenticated; anyone who reaches that port can read, write "
                "or drop tables and change the cluster. Start it without --insecure for CURVE "
                "(design/security.md)",
                args.id,
                node.address,
            )
        print(
            f"coordinator {args.id} uuid={node.uuid} rpc={node.address}{console}{key}",
            flush=True,
        )
        if curve and not admin_key:
            print(
                "coordinator: no --admin-public-key: at the cluster's first start the first "
                f"node to lead writes the admin's credentials to {node.admin_credentials_path}",
                flush=True,
            )
        daemon.wait()
    return daemon.exit_status()


def cmd_show_key(args) -> int:
    """The node's CURVE public key, from <data-dir>/keys (made first if missing, as the
    node's first start would: so keys can be gathered before a first start)."""
    from coordinator.node import KEY_NAME, KEYS_DIR
    from rpc import keys

    directory = os.path.join(args.data_dir, KEYS_DIR)
    made = not keys.public_path(directory, KEY_NAME).exists()
    try:
        pair = keys.load_or_create_keypair(directory, KEY_NAME)
    except keys.KeyFileError as e:
        print(f"coordinator show-key: {e}", file=sys.stderr)
        return 1
    admin = os.path.join(args.data_dir, "admin.credentials")
    if args.json:
        print_json(
            {
                "public_key": pair.public,
                "key_file": str(keys.public_path(directory, KEY_NAME)),
                "made": made,
                "admin_credentials": admin if os.path.exists(admin) else None,
            }
        )
    else:
        print(pair.public)
    return 0


def cmd_clusters(args) -> int:
    """The clusters file: each name and its coordinators, the default marked."""
    from logcentric import clusters

    path = clusters.config_path()
    doc = clusters.load(path)
    if args.json:
        print_json(
            {
                "file": str(path),
                "default": doc["default"],
                "clusters": [
                    {"name": name, "coordinators": list(doc["clusters"][name])}
                    for name in sorted(doc["clusters"])
                ],
            }
        )
        return 0
    if not doc["clusters"]:
        print(f"no clusters in {path} (`coordinator local-cluster up` registers one)")
        return 0
    for name in sorted(doc["clusters"]):
        mark = "\tdefault" if name == doc["default"] else ""
        print(f"{name}\t{','.join(doc['clusters'][name])}{mark}")
    return 0


def cmd_servers(args) -> int:
    from logcentric.meta import CoordinatorClient
    from optools.admin import credentials_of

    with CoordinatorClient(
        args.coordinators, timeout_s=args.timeout_s, credentials=credentials_of(args)
    ) as client:
        servers = client.list_servers()
        if args.json:
            from optools.admin import server_fields

            print(json.dumps([server_fields(s) for s in servers]))
            return 0
        for s in servers:
            retired = "\tretired" if s.retired else ""
            print(f"{s.uuid}\t{s.address}\t{s.state}\treplicas={s.replicas}{retired}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from optools import admin, localcluster, logtool, users_cli

    parser = argparse.ArgumentParser(prog="coordinator", description=__doc__.splitlines()[0])
    add_version(parser, "coordinator")
    parser.add_argument(
        "--log-level",
        type=_log_level,
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (default: INFO for start, else WARNING)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    start = sub.add_parser("start", help="run one coordinator node")
    start.add_argument("--id", required=True, help="this node's name")
    start.add_argument("--data-dir", required=True)
    start.add_argument(
        "--bind", type=address_arg, default="127.0.0.1:7100", help="client RPC HOST:PORT"
    )
    add_http_arguments(start, "web console, /metrics, /healthz, /readyz")
    start.add_argument(
        "--raft", type=_raft_address, default="", help="this node's logstore Raft HOST:PORT"
    )
    start.add_argument(
        "--peers",
        type=_raft_addresses,
        default="",
        help="the other nodes' Raft HOST:PORT, comma-separated",
    )
    start.add_argument("--password-file", default="", help=f"cluster password (or ${PASSWORD_ENV})")
    start.add_argument(
        "--insecure-dev",
        action="store_true",
        help="allow a single-node group on 127.0.0.1 without a password",
    )
    start.add_argument(
        "--logstore", default="", help="external logstore RPC addresses instead of embedding one"
    )
    start.add_argument(
        "--logstore-keys",
        type=public_keys_arg,
        default=(),
        metavar="KEY|FILE,...",
        help="with --logstore: the replicas' CURVE public keys, one per address in order "
        "(`logstore show-key`); the node calls them as its own key pair (<data-dir>/keys, "
        "`coordinator show-key`), which they admit with --client-keys. Without: plaintext",
    )
    start.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, unauthenticated client RPC: anyone who reaches the port can write "
        "or drop tables (a WARNING at start; `coordinator status` shows the node as insecure). "
        "Default off: CURVE",
    )
    start.add_argument(
        "--curve",
        action="store_true",
        help="CURVE on the client RPC service, the default (this flag says it explicitly): "
        "its key pair in <data-dir>/keys, callers admitted by the principals of the log and "
        "checked against the role table",
    )
    start.add_argument(
        "--admin-public-key",
        metavar="FILE",
        default="",
        help="(CURVE) the bootstrap admin's public key (Z85 text or a zmq "
        "certificate), logged as user 'admin' at the cluster's first start; without it the "
        "first node to lead makes one and writes <data-dir>/admin.credentials",
    )
    start.add_argument("--lease-timeout-s", type=float, default=1.0)
    start.add_argument("--tserver-timeout-s", type=admin.timeout_arg, default=5.0)
    logsetup.add_arguments(start)
    start.set_defaults(func=cmd_start)

    # status (a ksck), tables, create/drop-table, describe, replication, ..., remove-tserver
    admin.add_commands(sub)
    p = sub.add_parser("servers", help="list tablet servers")
    add_cluster_arguments(p)
    p.add_argument(
        "--timeout-s",
        type=admin.timeout_arg,
        default=admin.DEFAULT_TIMEOUT_S,
        help="total time for the request (default %(default)s)",
    )
    add_json(p, "a list of servers")
    p.set_defaults(func=cmd_servers)
    users_cli.add_commands(sub)  # users add|list|set-roles|revoke (design/security.md)
    p = sub.add_parser("local-cluster", help="a whole cluster as local processes")
    localcluster.add_arguments(p)
    p = sub.add_parser("log", help="decode and inspect the coordinator log")
    logtool.add_arguments(p)
    admin.add_credentials_argument(p)  # live reads: CURVE as an admin
    p.set_defaults(func=_cmd_log)
    p = sub.add_parser("show-key", help="a node's CURVE public key (made if missing)")
    p.add_argument("--data-dir", required=True, help="the node's data directory")
    add_json(p, "the key, its file, and the bootstrap admin's credentials file if any")
    p.set_defaults(func=cmd_show_key)
    p = sub.add_parser("clusters", help="list the clusters file's named clusters")
    add_json(p, "the file, its default and its clusters")
    p.set_defaults(func=cmd_clusters)
    for name, command in sub.choices.items():
        _name_cluster_by_flags(name, command)
    return parser


def _name_cluster_by_flags(name: str, command: argparse.ArgumentParser) -> None:
    """Every subcommand with an address-list --coordinators (admin.py's add them as
    required) also takes --cluster NAME, and without either finds the cluster through the
    environment or the clusters file (`_resolve_cluster`). local-cluster's --coordinators is
    a count and log's source is --coordinators/--address: both are left as they are."""
    if name in ("local-cluster", "log", "clusters", "start", "show-key"):
        return
    action = next((a for a in command._actions if a.dest == "coordinators"), None)
    if action is None:
        return
    action.required = False
    action.default = None
    action.help = (
        "coordinator node addresses HOST:PORT,... (else --cluster NAME, "
        "$LOGCENTRIC_COORDINATORS, $LOGCENTRIC_CLUSTER, the clusters file's default)"
    )
    if not any(a.dest == "cluster" for a in command._actions):
        command.add_argument(
            "--cluster",
            metavar="NAME",
            default=None,
            help="a cluster named in the clusters file (`coordinator clusters` lists them)",
        )
    from optools.admin import add_credentials_argument

    add_credentials_argument(command)
    command.set_defaults(names_cluster=True)


def _cmd_log(args) -> int:
    """`coordinator log`: offline from --data-dir, else live from the cluster named by
    --coordinators (alias --address), --cluster, the environment or the clusters file."""
    from optools import logtool
    from optools.admin import coordinators_for, credentials_of

    if args.data_dir is None:
        named = args.address
        if args.address is None:
            args.address = ",".join(coordinators_for(args, None, args.cluster))
        args.named_coordinators = named
        args.credentials_obj = credentials_of(args)
    return logtool.run(args)


def _resolve_cluster(func):
    def run(args) -> int:
        if getattr(args, "names_cluster", False):
            from optools.admin import coordinators_for

            args.coordinators = coordinators_for(args, args.coordinators, args.cluster)
        return func(args)

    return run


@interruptible("coordinator")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(glue_key_arguments(sys.argv[1:] if argv is None else argv))
    level = args.log_level or ("INFO" if args.command == "start" else "WARNING")
    if args.command == "start":
        logsetup.configure_from_args(args, level)
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from rpc.console import run_command
    from rpc.errors import RpcError

    # OSError: an operating error no command foresaw (permissions, a full disk).
    return run_command(_resolve_cluster(args.func), args, "coordinator", (RpcError, OSError))


if __name__ == "__main__":
    sys.exit(main())
