"""The `logstore` command: run a replica, inspect and change a cluster.

    logstore serve --raft-address H:P --peers H:P,H:P --rpc-bind H:P --data-dir DIR
                   (--password-file FILE | env LOGSTORE_PASSWORD | --insecure-dev)
    logstore status --servers H:P,...          role, term, commit/applied index, sizes
    logstore add-member --servers H:P,... RAFT_ADDRESS
    logstore remove-member --servers H:P,... RAFT_ADDRESS
    logstore transfer-leadership --servers H:P,... [RAFT_ADDRESS]
    logstore append / read / last-id --servers H:P,... LOG ...

`--servers` lists replicas' RPC addresses; `serve` prints one line
`logstore serving uuid=U rpc=H:P raft=H:P` on stdout once it accepts calls.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from logstore.api import READ_LIMIT_MAX
from rpc.addresses import address_arg, address_list_arg
from rpc.console import int_in, run_command
from rpc.errors import RpcError, TimedOut, Unavailable

PASSWORD_ENV = "LOGSTORE_PASSWORD"


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


def cmd_serve(args) -> int:
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
    config = ServeConfig(
        raft_address=args.raft_address,
        peers=tuple(_split(args.peers)),
        data_dir=args.data_dir,
        rpc_bind=args.rpc_bind,
        password=_password(args),
        allow_insecure_dev=args.insecure_dev,
        replica=replica,
    )
    # The tick thread, the rpc I/O thread and the handlers hand the GIL to each other on
    # every append; Python's default 5 ms switch interval would dominate the latency.
    sys.setswitchinterval(args.switch_interval_s)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with LogStoreServer(config) as server:
        print(
            f"logstore serving uuid={server.uuid} rpc={server.address} raft={args.raft_address}",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
    return 0


def _remote(args):
    from logstore.remote import RemoteLogStore

    return RemoteLogStore(_split(args.servers), connect_timeout_s=args.timeout_s)


def cmd_status(args) -> int:
    from logstore.remote import RemoteLogStore

    failures = 0
    leaders: set[str] = set()
    for address in _split(args.servers):
        with RemoteLogStore([address], connect_timeout_s=args.timeout_s) as store:
            try:
                s = store.status(timeout_s=args.timeout_s)
            except (Unavailable, TimedOut) as err:
                print(f"{address}: unreachable ({err})")
                failures += 1
                continue
            except RpcError as err:  # it answered: not a replica, or it refused
                print(f"{address}: answered, but not with a replica's status ({err})")
                failures += 1
                continue
        if s.leader:
            leaders.add(s.leader)
        logs = ", ".join(f"{x.log}={x.last_id}" for x in s.logs) or "-"
        print(
            f"{address} raft={s.raft_address} role={s.role} term={s.term} "
            f"commit={s.commit_index} applied={s.applied_index} leader={s.leader or '-'}\n"
            f"    members={','.join(s.members)}\n"
            f"    journal: {s.journal_entries} entries from #{s.journal_first_index}, "
            f"{s.journal_bytes} bytes, {s.journal_syncs} syncs; snapshot {s.snapshot_bytes} "
            f"bytes; live: {s.live_entries} entries, {s.live_bytes} bytes\n"
            f"    logs (last id): {logs}"
        )
    # Like `coordinator status`: exit 1 when anything is unhealthy, with one line saying what.
    problems = []
    if failures:
        problems.append(f"{failures} of {len(_split(args.servers))} replicas did not answer")
    if not leaders and failures < len(_split(args.servers)):
        problems.append("no replica knows a leader (no majority?): appends cannot commit")
    elif len(leaders) > 1:
        problems.append(f"replicas name different leaders {sorted(leaders)} (an election?)")
    if problems:
        print("UNHEALTHY: " + "; ".join(problems))
        return 1
    print(f"OK: {len(_split(args.servers))} replicas answered, leader {leaders.pop()}")
    return 0


def cmd_member(args) -> int:
    with _remote(args) as store:
        if args.command == "add-member":
            store.add_member(args.raft_address, timeout_s=args.timeout_s)
        else:
            store.remove_member(args.raft_address, timeout_s=args.timeout_s)
    print(f"{args.command} {args.raft_address}: done")
    return 0


def cmd_transfer(args) -> int:
    with _remote(args) as store:
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
        for e in store.read(args.log, args.from_id, args.limit, timeout_s=args.timeout_s):
            inv = f" invalidates={','.join(map(str, e.invalidates))}" if e.invalidates else ""
            print(f"{e.id}\t{e.data!r}{inv}")
    return 0


def cmd_last_id(args) -> int:
    with _remote(args) as store:
        if args.barrier:
            store.barrier(timeout_s=args.timeout_s)
        print(store.last_id(args.log, timeout_s=args.timeout_s))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logstore", description=__doc__.split("\n")[0])
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
    s.set_defaults(func=cmd_serve)

    def client_parser(name: str, help_text: str):
        c = sub.add_parser(name, help=help_text)
        c.add_argument(
            "--servers",
            type=lambda text: ",".join(address_list_arg(text)),
            required=True,
            help="replicas' RPC host:port, comma-separated",
        )
        c.add_argument("--timeout-s", type=_positive_seconds, default=5.0)
        return c

    c = client_parser("status", "print each replica's role, term, indexes and sizes")
    c.set_defaults(func=cmd_status)
    for name in ("add-member", "remove-member"):
        c = client_parser(name, f"{name.split('-')[0]} one voting replica")
        c.add_argument("raft_address", type=_raft_address)
        c.set_defaults(func=cmd_member)
    c = client_parser("transfer-leadership", "move leadership (to RAFT_ADDRESS if given)")
    c.add_argument("raft_address", nargs="?", type=_raft_address)
    c.set_defaults(func=cmd_transfer)
    c = client_parser("append", "append one entry")
    c.add_argument("log")
    c.add_argument("data")
    c.add_argument("--expected-id", type=int)
    c.add_argument("--invalidates", default="", help="comma-separated ids")
    c.set_defaults(func=cmd_append)
    c = client_parser("read", "print live entries")
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
    c = client_parser("last-id", "print a log's last id")
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.func is cmd_serve and (problem := _timing_problem(args)):
        parser.error(problem)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run_command(args.func, args, f"logstore {args.command}", (RpcError, OSError))


if __name__ == "__main__":
    sys.exit(main())
