"""`coordinator` command line: run a node and ask a running group simple questions.

    coordinator start --id c1 --data-dir DIR --bind 127.0.0.1:7100 \\
        --raft 127.0.0.1:7200 --peers 127.0.0.1:7201,127.0.0.1:7202 --password-file PW
    coordinator start --id dev --data-dir DIR --raft 127.0.0.1:7200 --insecure-dev
    coordinator status --coordinators 127.0.0.1:7100,127.0.0.1:7101   (a ksck; admin.py)
    coordinator tables|create-table|drop-table|describe|servers --coordinators ...
    coordinator retire-tserver UUID ... ; then stop it; coordinator remove-tserver UUID ...
    coordinator local-cluster up|down|status ...                     (localcluster.py)
    coordinator log --data-dir NODE_DIR ...                          (logtool.py)

The cluster password protects the Raft traffic of the embedded logstore (pysyncobj pickles
its messages: it never runs unauthenticated between hosts). Without one, only a single-node
development group bound on 127.0.0.1 may run, and only with --insecure-dev.

Bad usage (an address without a port, a negative count, a timeout of 0, an unknown log
level) is refused when the arguments are parsed: one line, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from rpc.addresses import address_arg

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


def cmd_start(args) -> int:
    from coordinator.engine import EngineConfig
    from coordinator.leases import LeaseConfig
    from coordinator.node import CoordinatorNode, NodeConfig
    from rpc.errors import RpcError

    if not args.logstore and not args.raft:
        print("coordinator: --raft HOST:PORT is needed for the embedded logstore", file=sys.stderr)
        return 2
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
    config = NodeConfig(
        node_id=args.id,
        data_dir=args.data_dir,
        bind=args.bind,
        raft_address=args.raft,
        peers=tuple(_split(args.peers)),
        password=_password(args),
        allow_insecure_dev=args.insecure_dev,
        logstore_addresses=tuple(_split(args.logstore)),
        lease=lease,
        engine=EngineConfig(tserver_timeout_s=args.tserver_timeout_s),
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        node = CoordinatorNode(config)
    except (RpcError, ValueError, OSError) as e:
        print(f"coordinator: cannot start: {e}", file=sys.stderr)
        return 1
    with node:
        print(f"coordinator {args.id} uuid={node.uuid} rpc={node.address}", flush=True)
        while not stop.wait(1.0):
            pass
    return 0


def cmd_servers(args) -> int:
    from logcentric.meta import CoordinatorClient

    with CoordinatorClient(args.coordinators, timeout_s=args.timeout_s) as client:
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
    from optools import admin, localcluster, logtool

    parser = argparse.ArgumentParser(prog="coordinator", description=__doc__.splitlines()[0])
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
    start.add_argument("--lease-timeout-s", type=float, default=1.0)
    start.add_argument("--tserver-timeout-s", type=admin.timeout_arg, default=5.0)
    start.set_defaults(func=cmd_start)

    # status (a ksck), tables, create/drop-table, describe, replication, ..., remove-tserver
    admin.add_commands(sub)
    p = sub.add_parser("servers", help="list tablet servers")
    p.add_argument("--coordinators", required=True, type=admin.addresses_arg, help="HOST:PORT,...")
    p.add_argument(
        "--timeout-s",
        type=admin.timeout_arg,
        default=admin.DEFAULT_TIMEOUT_S,
        help="total time for the request (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_servers)
    p = sub.add_parser("local-cluster", help="a whole cluster as local processes")
    localcluster.add_arguments(p)
    p = sub.add_parser("log", help="decode and inspect the coordinator log")
    logtool.add_arguments(p)
    p.set_defaults(func=logtool.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level or ("INFO" if args.command == "start" else "WARNING")
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from rpc.console import run_command
    from rpc.errors import RpcError

    # OSError: an operating error no command foresaw (permissions, a full disk).
    return run_command(args.func, args, "coordinator", (RpcError, OSError))


if __name__ == "__main__":
    sys.exit(main())
