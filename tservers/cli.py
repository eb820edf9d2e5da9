"""`tserver`: run a tablet server and its operator tools.

tserver start --fs-root DIR --bind HOST:PORT [--coordinators H:P,... | --cluster NAME]
              [--no-wal-sync] [--quarantine-retention-s S] [--quarantine-bytes-max B]
              [--coordinator-keys KEY|FILE,... [--leader-silence-s S] | --insecure]
              [--join-token TOKEN]
tserver status --address HOST:PORT     a live server: uuid, tablets, WAL and write counters
tserver fs format --fs-root DIR        (refuses a non-empty directory)
tserver fs uuid --fs-root DIR
tserver show-key --fs-root DIR [--json]   the server's CURVE public key (for its admission)
tserver wal dump (--fs-root DIR --tablet ID | --segment FILE)
tserver cmeta dump --fs-root DIR --tablet ID
tserver cmeta rewrite --fs-root DIR --tablet ID [--term N] [--voted-for UUID|--clear-vote]
                      [--config-index N] [--peer UUID=ADDRESS:VOTER|NON_VOTER ...]
tserver tablets (--fs-root DIR | --address HOST:PORT)
tserver copies --address HOST:PORT          tablet copies onto a server: progress, rate
tserver copy-cancel --address HOST:PORT --tablet ID
tserver copy-from-remote --fs-root DIR --tablet ID --source HOST:PORT [--source-uuid UUID]
                         [--force] [--timeout S] [--rate-mb X]
                         [--credentials FILE] [--source-key KEY|FILE]
                                             copy one tablet onto a STOPPED server
tserver quarantine list --fs-root DIR [--json]    what deletions set aside: size, age
tserver quarantine purge --fs-root DIR [--older-than-s N | --bytes-max B | --all]
                                             remove them from a STOPPED server's root

Errors an operator can fix (a bad flag, a taken port, an fs root in use) print one line
`tserver: error: ...` and exit 1; argparse's own refusals exit 2. Ctrl-C ends any command
with one line (`tserver: interrupted`) and exit status 130; `start` stops the server
cleanly first. The listing and status commands (status, tablets, copies, quarantine list,
fs uuid, cmeta dump) take `--json`: one JSON document (shapes in design/client.md).

The tools that call a live server (status, tablets --address, copies, copy-cancel,
copy-from-remote) take `--credentials FILE` (else $LOGCENTRIC_CREDENTIALS): CURVE as the
file's principal (copy-from-remote: as the stopped server, with its fs root's key pair),
the server's key from `--server-key` (`--source-key`) or else from the coordinators the file
lists; without credentials they call plaintext, as a server started with --insecure needs.

`start` enlists with the coordinators given by --coordinators, or by --cluster NAME from the
clusters file (rpc/clusters.py). It runs CURVE by default (design/security.md section 4):
every connection encrypted and authenticated, callers admitted and authorized by the
principals table the coordinator leader pushes. That needs the coordinator nodes' public
keys: `--coordinator-keys`, one per address in the order of --coordinators (each 40 z85
characters or a key file, e.g. a node's keys/coordinator.key), or, with --cluster, the keys
of the credentials file the cluster's clusters-file entry names. Without them, or without
coordinators at all (a standalone server would admit nobody), it refuses to start, in one
line. `--insecure` runs it plaintext and unauthenticated, said in a WARNING log line and in
its start line (a server for a test, or a trusted network); `--curve` says the default.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from google.protobuf import text_format

from rpc import heap, logsetup, observe
from rpc.addresses import address_arg, address_list_arg
from rpc.console import (
    DaemonStop,
    add_json,
    add_version,
    cluster_addresses,
    int_in,
    interruptible,
    print_json,
    run_command,
)
from rpc.errors import RpcError
from rpc.http_access import HttpConfigError, add_http_arguments, http_access_of
from rpc.keys import glue_key_arguments, public_key_arg, public_keys_arg
from rpc.privileged import PASSWORD_ENV, read_password
from rpc.protocols.tserver_pb2 import (
    ConsensusMetaPB,
    DataState,
    EntryType,
    MemberType,
    OpType,
)
from tservers import metafile
from tservers import quarantine as qmod
from tservers.fs import FsError, FsLayout, FsLocked, lock_root
from tservers.metafile import MetaFileCorrupt
from tservers.raft_driver import RETAIN_BYTES_MAX_DEFAULT, RETAIN_ENTRIES_MAX_DEFAULT
from tservers.tablet.budgets import MEMSTORE_BYTES_MAX_DEFAULT
from tservers.tablet.pages import MAPPED_BYTES_MAX_DEFAULT
from tservers.tablet_copy import SESSION_IDLE_S
from tservers.wal import segment as seg
from tservers.wal.segment import WalCorruption


class CliError(Exception):
    """An operating error: printed without a traceback, exit status 1."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


# A wait of at most a day (a float past that is a typo, and `inf`/`nan` are no waits).
IDLE_S_MAX = 86_400.0


def _nonnegative_float(text: str) -> float:
    """0 (off) or a number of seconds up to IDLE_S_MAX."""
    value = _float(text)
    if not 0 <= value <= IDLE_S_MAX:
        raise argparse.ArgumentTypeError(f"must be 0 (off) to {IDLE_S_MAX:g} s, got {value:g}")
    return value


# A throttle below this many MB/s (1 kB/s) is refused: 1e-300 rounded to 0 bytes/s, which
# means unthrottled; above RATE_MB_MAX it would not fit the byte counters.
RATE_MB_MIN = 0.001
RATE_MB_MAX = 1_000_000.0


def _rate_mb(text: str) -> float:
    """A throttle in MB/s: 0 (unthrottled), or RATE_MB_MIN to RATE_MB_MAX."""
    value = _float(text)
    if value == 0:
        return 0.0
    if not RATE_MB_MIN <= value <= RATE_MB_MAX:
        raise argparse.ArgumentTypeError(
            f"must be 0 (unthrottled) or above, from {RATE_MB_MIN:g} to {RATE_MB_MAX:g} "
            f"MB/s, got {value:g}"
        )
    return value


def _seconds(text: str) -> float:
    """A duration in seconds: 0 or above, finite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or above, got {value}")
    return value


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
BYTES_MAX = (1 << 63) - 1  # the wire's uint64 fields, and every file system, fit below it


def _byte_count(text: str) -> int:
    """A size in bytes, 0 or above, with an optional K/M/G/T suffix (powers of 1024)."""
    body = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = body[-1:] if body[-1:] in _BYTE_UNITS else ""
    digits = body[: len(body) - len(unit)]
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(
            f"not a size in bytes: {text!r} (a whole number, optionally with K, M, G or T)"
        )
    value = int(digits) * _BYTE_UNITS[unit]
    if value > BYTES_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is above the largest size, {BYTES_MAX}")
    return value


def _log_level(text: str) -> int:
    level = logging.getLevelNamesMapping().get(text.strip().upper())
    if level is None:
        names = ", ".join(n.lower() for n in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
        raise argparse.ArgumentTypeError(f"unknown log level {text!r} (one of {names})")
    return level


def _lock_fs(root: str, holder: str, refusal: str):
    """The fs root's lock (`tservers.fs.lock_root`), for an offline tool that changes the
    root: FsLocked (a running server or another tool holds it) becomes `refusal: ...`."""
    try:
        return lock_root(Path(root), holder=holder)
    except FsLocked as e:
        raise CliError(f"{refusal}: {e}") from e
    except FsError as e:
        raise CliError(str(e)) from e


# The one line `tserver start` says when it cannot run CURVE (the default) for want of keys.
NO_KEYS = (
    "a tablet server runs CURVE by default and needs its coordinators' public keys: give "
    "--coordinators with --coordinator-keys KEY|FILE,..., or --cluster NAME whose clusters-"
    "file entry names a credentials file listing each coordinator's key; or run it plaintext "
    "and unauthenticated with --insecure"
)
NO_COORDINATORS = (
    "a standalone tablet server (no --coordinators or --cluster) cannot run CURVE, the "
    "default: no coordinator pushes it the principals table, so it would admit nobody; give "
    "--coordinators with --coordinator-keys KEY|FILE,..., or --cluster NAME whose clusters-"
    "file entry names a credentials file; or run it plaintext and unauthenticated with "
    "--insecure"
)


def _start_keys(args, coordinators: tuple[str, ...]) -> tuple[str, ...]:
    """The coordinators' public keys for a CURVE start, one per address in order:
    --coordinator-keys, else (with --cluster) those the cluster's credentials file lists for
    its addresses. CliError (one line naming both ways and --insecure) when neither gives
    them."""
    if not coordinators:
        raise CliError(NO_COORDINATORS)
    if args.coordinator_keys:
        return tuple(args.coordinator_keys)
    if not args.cluster:
        raise CliError(NO_KEYS)
    from rpc import clusters, credentials

    path = clusters.credentials_of(None, args.cluster)
    if not path:
        raise CliError(f"cluster {args.cluster!r} has no credentials file: {NO_KEYS}")
    try:
        creds = credentials.load(Path(path).expanduser())
        # Unauthenticated when the file lists no key for one of the cluster's addresses.
        return tuple(creds.server_key(address) for address in coordinators)
    except RpcError as e:
        raise CliError(f"{e.message} ({NO_KEYS})") from e


def _cmd_start(args) -> int:
    heap.limit_arenas()  # before any thread: freed answers can go back (rpc/heap.py)
    # Ctrl-C and SIGTERM stop the server cleanly, even while it is still starting.
    daemon = DaemonStop("tserver")
    stop = daemon.event

    from tservers.server import TabletServer, TServerConfig

    log = logging.getLogger(__name__)
    coordinators = tuple(args.coordinators)
    if args.cluster:
        coordinators = tuple(cluster_addresses(None, args.cluster))
    logsetup.configure_from_args(args, args.log_level)
    if args.insecure and args.curve:
        raise CliError("--insecure and --curve exclude each other")
    if args.insecure and args.coordinator_keys:
        raise CliError(
            "--coordinator-keys are for CURVE (the default); --insecure runs plaintext: "
            "give one or the other"
        )
    # CURVE unless --insecure says otherwise (design/security.md section 4; --curve, once
    # needed, still says the default explicitly).
    curve = not args.insecure
    coordinator_keys = _start_keys(args, coordinators) if curve else ()
    try:
        http_access = http_access_of(args)  # a public --http needs a mode: checked first
    except HttpConfigError as e:
        raise CliError(str(e)) from None
    cfg = TServerConfig(
        fs_root=Path(args.fs_root),
        bind=args.bind,
        wal_sync=not args.no_wal_sync,
        segment_size_bytes_max=args.segment_size_mb << 20,
        flush_rows_threshold=args.flush_rows,
        flush_idle_s=args.flush_idle_s,
        workers=args.workers,
        coordinators=coordinators,
        copy_rate_limit_bytes_s=int(args.copy_rate_mb * 1_000_000),
        fs_reserved_bytes=args.fs_reserved_bytes,
        mapped_bytes_max=args.mapped_bytes_max,
        memstore_bytes_max=args.memstore_bytes_max,
        compaction_rate_bytes_s=int(args.compaction_rate_mb * 1_000_000),
        compaction_run_bytes_max=(args.compaction_budget_mb or 0) << 20,
        copy_session_idle_s=args.copy_session_idle_s,
        wal_retain_entries_max=args.wal_retain_entries,
        wal_retain_bytes_max=args.wal_retain_mb << 20,
        quarantine_retention_s=args.quarantine_retention_s,
        quarantine_bytes_max=args.quarantine_bytes_max,
        http_bind=args.http,
        http_access=http_access,
        password=read_password(args.password_file, PASSWORD_ENV, "tserver"),
        curve=curve,
        coordinator_keys=coordinator_keys,
        leader_silence_s=args.leader_silence_s,
        join_token=args.join_token,  # a secret: never logged (repr=False in the config)
    )
    if args.startup_threads is not None:
        cfg = dataclasses.replace(cfg, startup_threads=args.startup_threads)
    observe.quiet_old_generation()  # a large long-lived heap (rpc/observe.py)
    try:
        # The server holds the fs root's lock until it closes (or the process dies):
        # offline tools that change the root (`copy-from-remote`) refuse to run beside it.
        server = TabletServer(cfg)
    except FsLocked as e:
        raise CliError(f"{e} (is another tserver running on it?)") from e
    except (FsError, RpcError) as e:
        raise CliError(e.message if isinstance(e, RpcError) else str(e)) from e
    try:
        server.start()
    except (RpcError, OSError) as e:
        # The bind failed (address in use, not this host's) or the tablets could not be
        # opened: close what started (the fs root's lock included) before saying why.
        server.close()
        text = e.message if isinstance(e, RpcError) else str(e)
        raise CliError(f"cannot start: {text}") from e
    if args.insecure:
        # Loud: whoever reads the log sees how it was started, and what that allows.
        log.warning(
            "INSECURE (--insecure): tablet server %s on %s runs plaintext and "
            "unauthenticated: anyone who reaches the port can write, scan and delete its "
            "tablets' rows; run it so on a trusted network or for a test only "
            "(design/security.md)",
            server.uuid,
            server.address,
        )
    _warn_reserve_too_large(server)
    http = f" http={server.observer.url}" if server.observer.url else ""
    mode = (
        f" curve-key={server.keypair.public}"
        if curve
        else " INSECURE (plaintext, unauthenticated: --insecure)"
    )
    print(f"tserver {server.uuid} serving on {server.address}{http}{mode}", flush=True)
    while not stop.wait(1.0):
        pass
    log.info("shutting down")
    server.close()
    # Everything is closed and synced. The interpreter's own end then collects: it walked
    # every object of a 10,000-replica server, 1.6 s of a stop (issue 28). Frozen, they are
    # left to the process's exit.
    gc.freeze()
    # A daemon's end: 130 and one line for Ctrl-C, 0 for SIGTERM.
    return daemon.exit_status()


def _warn_reserve_too_large(server) -> None:
    """A reserve at or above the file system's size keeps the server FULL for ever (every
    new tablet, copy and write refused): say so at start, on stderr and in the log."""
    st = server.disk.state(fresh=True)
    if st.reserved_bytes >= st.total_bytes:
        text = (
            f"--fs-reserved-bytes {st.reserved_bytes} is not below the size of the file "
            f"system of {server.disk.root} ({st.total_bytes} bytes): this server is full "
            "for ever (new tablets, tablet copies and writes refused with NO_SPACE)"
        )
        logging.getLogger(__name__).warning("%s", text)
        print(f"tserver: warning: {text}", file=sys.stderr, flush=True)


def _cmd_fs_format(args) -> int:
    try:
        fs = FsLayout.format(Path(args.fs_root), args.uuid)
    except FsError as e:
        raise CliError(str(e)) from e
    except OSError as e:  # not a directory on the way, no permission, disk full, ...
        raise CliError(f"cannot format {args.fs_root}: {e.strerror or e}") from e
    print(fs.uuid)
    return 0


def _cmd_fs_uuid(args) -> int:
    try:
        uuid = FsLayout.read_instance(Path(args.fs_root)).uuid
    except FsError as e:
        raise CliError(str(e)) from e
    if args.json:
        print_json({"fs_root": args.fs_root, "uuid": uuid})
    else:
        print(uuid)
    return 0


def _cmd_fs_downgrade(args) -> int:
    """Fold the hard-state journal into the consensus metadata files, for older code."""
    with _lock_fs(args.fs_root, "tserver fs downgrade", "refusing to downgrade"):
        fs = _open_fs(args.fs_root)
        try:
            written = fs.downgrade()
        except OSError as e:
            raise CliError(f"cannot downgrade {args.fs_root}: {e.strerror or e}") from e
    if args.json:
        print_json({"fs_root": args.fs_root, "uuid": fs.uuid, "cmeta_written": written})
    else:
        print(
            f"{args.fs_root}: the hard-state journal folded into {len(written)} consensus "
            "metadata files and removed; older tablet servers can start on it (a newer one "
            "starts the journal again)"
        )
    return 0


def _cmd_show_key(args) -> int:
    try:
        fs = FsLayout(Path(args.fs_root), FsLayout.read_instance(Path(args.fs_root)).uuid)
        key = fs.public_key()
    except FsError as e:
        raise CliError(str(e)) from e
    if args.json:
        print_json({"fs_root": args.fs_root, "uuid": fs.uuid, "public_key": key})
    else:
        print(key)
    return 0


def _open_fs(root: str) -> FsLayout:
    try:
        return FsLayout.open(Path(root))
    except FsError as e:
        raise CliError(str(e)) from e


def _describe_entry(e) -> str:
    head = f"  entry {e.term}.{e.index} {EntryType.Name(e.type)}"
    if e.type == EntryType.WRITE:
        import pyarrow as pa

        parts = []
        for b in e.write.blocks:
            try:  # fully validated first: a malformed column must not crash the dump
                t = pa.ipc.open_stream(pa.py_buffer(b.arrow_ipc)).read_all()
                t.validate(full=True)
            except (pa.ArrowException, OSError, ValueError) as err:
                parts.append(f"{OpType.Name(b.op)} MALFORMED rows: {err}")
                continue
            parts.append(f"{OpType.Name(b.op)} {t.num_rows} rows {t.column_names}")
            if len(parts) == 1 and t.num_rows:
                parts[-1] += f" first={t.slice(0, 1).to_pylist()[0]}"
        return f"{head} schema v{e.write.schema_version}: " + "; ".join(parts)
    if e.type == EntryType.CONFIG_CHANGE:
        return f"{head} {text_format.MessageToString(e.config, as_one_line=True)}"
    return head


def _segment_json(path: Path, c) -> dict:
    """One segment as `wal dump --json` lists it (design/client.md)."""
    h, f = c.header, c.footer
    return {
        "path": str(path),
        "tablet_id": h.tablet_id,
        "sequence": h.sequence,
        "created_ms": h.created_ms,
        "entries": [
            {
                "term": e.term,
                "index": e.index,
                "type": EntryType.Name(e.type),
                "text": _describe_entry(e).strip(),
            }
            for e in c.entries
        ],  # fmt: skip
        "torn_at": c.torn_at,
        "torn_reason": c.torn_reason if c.torn_at is not None else None,
        "footer": None
        if f is None
        else {
            "num_entries": f.num_entries,
            "min_index": f.min_index,
            "max_index": f.max_index,
            "closed_ms": f.closed_ms,
        },
        "data_end": c.data_end,
    }


def _read_segment(path: Path, is_last: bool):
    try:
        return seg.read_segment(path, is_last=is_last)
    except WalCorruption as e:
        raise CliError(str(e)) from e


def _dump_segment(path: Path, is_last: bool) -> None:
    c = _read_segment(path, is_last)
    h = c.header
    print(f"segment {path}")
    print(f"  header: tablet {h.tablet_id} sequence {h.sequence} created_ms {h.created_ms}")
    for e in c.entries:
        print(_describe_entry(e))
    if c.torn_at is not None:
        print(f"  torn tail at offset {c.torn_at}: {c.torn_reason}")
    if c.footer is not None:
        f = c.footer
        print(
            f"  footer: {f.num_entries} entries, index {f.min_index}..{f.max_index}, "
            f"closed_ms {f.closed_ms}"
        )
    else:
        print(f"  no footer (open segment), data ends at offset {c.data_end}")


def _cmd_wal_dump(args) -> int:
    if args.segment:
        paths = [(Path(args.segment), True)]
    else:
        if not (args.fs_root and args.tablet):
            raise CliError("give --segment FILE, or --fs-root DIR and --tablet ID")
        fs = _open_fs(args.fs_root)
        wal_dir = fs.wal_dir(args.tablet)
        if not wal_dir.is_dir():
            raise CliError(f"tablet {args.tablet} has no WAL directory ({wal_dir})")
        segs = seg.list_segments(wal_dir)
        paths = [(path, i == len(segs) - 1) for i, (_, path) in enumerate(segs)]
    if args.json:
        print_json({"segments": [_segment_json(p, _read_segment(p, last)) for p, last in paths]})
        return 0
    for path, last in paths:
        _dump_segment(path, is_last=last)
    return 0


def _read_cmeta(fs: FsLayout, tablet: str) -> ConsensusMetaPB:
    try:
        return fs.read_cmeta(tablet)
    except FileNotFoundError as e:
        raise CliError(f"tablet {tablet} has no consensus metadata") from e
    except MetaFileCorrupt as e:
        raise CliError(str(e)) from e


def _cmd_cmeta_dump(args) -> int:
    fs = _open_fs(args.fs_root)
    cm = _read_cmeta(fs, args.tablet)
    if args.json:
        from google.protobuf.json_format import MessageToDict

        print_json(
            {
                "tablet_id": args.tablet,
                "cmeta": MessageToDict(cm, preserving_proto_field_name=True),
            }
        )
        return 0
    print(text_format.MessageToString(cm), end="")
    return 0


def _cmd_cmeta_rewrite(args) -> int:
    fs = _open_fs(args.fs_root)
    # A running server keeps its consensus metadata in memory and writes it back: an edit
    # beside it would be lost or, worse, mixed with its own. Held until the rewrite ends.
    with _lock_fs(args.fs_root, "tserver cmeta rewrite", "refusing to rewrite"):
        return _rewrite_cmeta(fs, args)


def _rewrite_cmeta(fs: FsLayout, args) -> int:
    """The new metadata is built and checked first; the backup is written only for a
    change that will be made."""
    old = _read_cmeta(fs, args.tablet)
    if args.term is not None and args.term < old.current_term and not args.force:
        raise CliError(
            f"refusing to lower the term from {old.current_term} to {args.term} "
            "(amnesia risk); add --force if you really mean it"
        )
    cm = ConsensusMetaPB()
    cm.CopyFrom(old)
    if args.term is not None:
        cm.current_term = args.term
    if args.clear_vote:
        cm.voted_for = ""
    elif args.voted_for is not None:
        cm.voted_for = args.voted_for
    if args.config_index is not None:
        cm.committed_config.opid_index = args.config_index
    if args.peer:
        del cm.committed_config.peers[:]
        for spec in args.peer:
            try:
                uuid, rest = spec.split("=", 1)
                address, mtype = rest.rsplit(":", 1) if rest.count(":") >= 2 else (rest, "VOTER")
                member = MemberType.Value(mtype)
            except ValueError as e:
                raise CliError(f"bad --peer {spec!r}: want UUID=HOST:PORT:VOTER|NON_VOTER") from e
            cm.committed_config.peers.add(uuid=uuid, address=address, member_type=member)
    if cm == old:
        raise CliError(
            "nothing to change: give --term, --voted-for or --clear-vote, --config-index or "
            "--peer (values other than the current ones)"
        )
    path = fs.cmeta_path(args.tablet)
    backup = path.with_name(f"{path.name}.backup-{int(time.time() * 1000)}")
    metafile.write_atomic(backup, path.read_bytes())
    print(f"backup written to {backup}")
    fs.rewrite_cmeta(cm)  # (the hard-state journal forgets the tablet: the file holds)
    print(text_format.MessageToString(cm), end="")
    return 0


def _cmd_tablets(args) -> int:
    if args.address:
        from rpc.protocols.tserver_pb2 import ListTabletsRequest, ListTabletsResponse

        resp = _live_call(
            args, args.address, "ListTablets", ListTabletsRequest(), ListTabletsResponse
        )
        reports = list(resp.tablets)
        if args.json:
            print_json(
                {
                    "source": "live",
                    "address": args.address,
                    "tablets": [
                        {
                            "tablet_id": r.tablet_id,
                            "table_name": r.table_name,
                            "data_state": DataState.Name(r.data_state),
                            "status": r.status,
                            "role": r.role,
                            "leader_uuid": r.leader_uuid,
                            "term": r.current_term,
                            "last_op_id": [r.last_op_id.term, r.last_op_id.index],
                            "commit_index": r.commit_index,
                            "error": r.error,
                        }
                        for r in reports
                    ],
                }
            )
            return 0
        for r in reports:
            print(
                f"{r.tablet_id}\t{DataState.Name(r.data_state)}\t{r.status}\t"
                f"{r.role or '-'}\tleader={r.leader_uuid[:12] or '-'}\t"
                f"term={r.current_term}\tlast={r.last_op_id.term}.{r.last_op_id.index}\t"
                f"commit={r.commit_index}\t{r.table_name}\t{r.error}"
            )
        return 0
    if not args.fs_root:
        raise CliError("give --fs-root DIR or --address HOST:PORT")
    fs = _open_fs(args.fs_root)
    if args.json:
        print_json({"source": "fs", "fs_root": args.fs_root, "tablets": _fs_tablets(fs)})
        return 0
    for tid in fs.tablet_ids():
        try:
            sb = fs.read_superblock(tid)
            print(
                f"{tid}\t{DataState.Name(sb.data_state)}\tschema v{sb.schema.version}\t"
                f"flushed={sb.flushed_index}\tblocks={len(sb.blocks)}\t{sb.table_name}"
            )
        except MetaFileCorrupt as e:
            print(f"{tid}\tCORRUPT\t{e}")
    return 0


def _fs_tablets(fs: FsLayout) -> list[dict]:
    """`tablets --fs-root --json`: each tablet's superblock, or its error."""
    out = []
    for tid in fs.tablet_ids():
        row = {"tablet_id": tid, "table_name": "", "data_state": "CORRUPT", "schema_version": 0,
               "flushed_index": 0, "blocks": 0, "error": ""}  # fmt: skip
        try:
            sb = fs.read_superblock(tid)
        except MetaFileCorrupt as e:
            row["error"] = str(e)
        else:
            row.update(
                table_name=sb.table_name,
                data_state=DataState.Name(sb.data_state),
                schema_version=sb.schema.version,
                flushed_index=sb.flushed_index,
                blocks=len(sb.blocks),
            )
        out.append(row)
    return out


def _add_credentials(
    p: argparse.ArgumentParser, key_flag: str, whose: str, caller: str = "the file's principal"
) -> None:
    """--credentials FILE and the server's key flag of a tool that calls a tablet server."""
    p.add_argument(
        "--credentials",
        metavar="FILE",
        default=None,
        help="a credentials file (else $LOGCENTRIC_CREDENTIALS): call with CURVE, as a CURVE "
        f"tablet server (the default) needs, as {caller}; the server's key: {key_flag}, "
        "else the key the coordinators the file lists admitted for it (asking them needs "
        "the admin role). Neither: plaintext (a server started with --insecure)",
    )
    p.add_argument(
        key_flag,
        type=public_key_arg,
        default=None,
        metavar="KEY|FILE",
        help=f"the public key of {whose} (its `tserver show-key`), instead of asking the "
        "coordinators: 40 z85 characters or a key file",
    )


def _credentials(args):
    """The credentials the tool calls with: --credentials, else $LOGCENTRIC_CREDENTIALS;
    None: plaintext."""
    from rpc import credentials

    path = credentials.find_path(args.credentials)
    if not path:
        return None
    try:
        return credentials.load(path)
    except RpcError as e:
        raise CliError(e.message) from e


def _admitted_key(creds, address: str, uuid: str, key_flag: str) -> tuple[str, str]:
    """(uuid, public key) of the tablet server at `address` (the one named `uuid`, when
    given) as the coordinators of `creds` know it: its UUID from ListServers, and the key
    of the active `tserver` principal of that name (ListPrincipals, the admin role's). So a
    key is never taken from the server itself, only from coordinators the file vouches
    for (design/security.md section 2). CliError naming `key_flag` when they cannot say."""
    from rpc.coordinator_client import CoordinatorClient
    from rpc.errors import PermissionDenied
    from rpc.protocols import coordinator_pb2 as pb

    instead = f"give {key_flag} KEY|FILE (the server's `tserver show-key`)"
    if not creds.coordinator_keys():
        raise CliError(
            f"the credentials file {creds.path} lists no coordinator with a key to ask for "
            f"the key of {address}: {instead}"
        )
    try:
        with CoordinatorClient(creds.addresses, credentials=creds, timeout_s=10.0) as meta:
            servers = meta.list_servers()
            if uuid:
                found = [s for s in servers if s.uuid == uuid]
            else:  # a wiped server rejoins at its address: the LIVE one first
                found = sorted(
                    (s for s in servers if s.address == address), key=lambda s: s.state != "LIVE"
                )
            if not found:
                named = f"no tablet server {uuid}" if uuid else f"no tablet server at {address}"
                raise CliError(f"the coordinators know {named}: {instead}")
            uuid = found[0].uuid
            answer = meta.call(
                "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
            )
    except PermissionDenied as e:
        raise CliError(
            f"asking the coordinators for the key of {address}: {e.message}; {instead}"
        ) from e
    except RpcError as e:
        raise CliError(
            f"cannot ask the coordinators for the key of {address}: {e.message}; {instead}"
        ) from e
    for principal in answer.principals:
        if principal.name == uuid and principal.kind == "tserver":
            if principal.state == "active" and not principal.pending:
                return uuid, principal.public_key
            break
    raise CliError(f"tablet server {uuid} at {address} is not admitted (no active principal)")


def _live_curve(args, address: str):
    """The CURVE settings of a call to the tablet server at `address`: (ClientCurve, its
    key) with credentials, (None, "") without: plaintext."""
    from rpc.keys import ClientCurve

    creds = _credentials(args)
    if creds is None:
        if args.server_key:
            raise CliError("--server-key needs --credentials FILE (whose key pair calls)")
        return None, ""
    key = args.server_key or _admitted_key(creds, address, "", "--server-key")[1]
    return ClientCurve(creds.keypair), key


def _rpc_problem(address: str, e: RpcError, curve) -> str:
    """An rpc error for the operator; a handshake refused without credentials says why."""
    from rpc.client import HandshakeFailed

    text = f"{address}: {e}"
    if curve is None and isinstance(e, HandshakeFailed):
        text += " (a CURVE tablet server: give --credentials FILE)"
    return text


def _live_call(args, address: str, method: str, request, response_type):
    from rpc.client import RpcClient

    curve, key = _live_curve(args, address)
    try:
        with RpcClient(address, caller_uuid="tserver-cli", curve=curve, server_key=key) as c:
            pong = c.ping()
            if pong.service != "tserver":
                raise CliError(f"{address} is a {pong.service or 'unknown'} server, not a tserver")
            return c.call(pong.uuid, f"TServer.{method}", request, response_type, idempotent=True)
    except RpcError as e:
        raise CliError(_rpc_problem(address, e, curve)) from e


def _bytes(n: float) -> str:
    """A size for people: kB below a megabyte (a throttled copy's rate reads as 0.0 MB
    otherwise, like an unthrottled one's limit), else MB."""
    return f"{n / 1e3:.1f} kB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def _cmd_copies(args) -> int:
    from rpc.protocols.tserver_pb2 import StatusRequest, StatusResponse

    st = _live_call(args, args.address, "Status", StatusRequest(), StatusResponse)
    if args.json:
        print_json({"address": args.address, "copies": [_copy_fields(j) for j in st.copies]})
        return 0
    if not st.copies:
        print("no tablet copies")
    for j in st.copies:
        pct = 100.0 * j.bytes_done / j.bytes_total if j.bytes_total else 0.0
        limit = f"\tlimit {_bytes(j.rate_limit_bytes_s)}/s" if j.rate_limit_bytes_s else ""
        print(
            f"{j.tablet_id}\t{j.state}\tfrom {j.source_uuid[:12]}\t"
            f"files {j.files_done}/{j.files_total}\t"
            f"{_bytes(j.bytes_done)}/{_bytes(j.bytes_total)} ({pct:.0f}%)\t"
            f"{_bytes(j.rate_bytes_s)}/s{limit}\t{j.error}"
        )
    return 0


def _copy_fields(j) -> dict:
    return {
        "tablet_id": j.tablet_id,
        "state": j.state,
        "source_uuid": j.source_uuid,
        "files_done": j.files_done,
        "files_total": j.files_total,
        "bytes_done": j.bytes_done,
        "bytes_total": j.bytes_total,
        "rate_bytes_s": j.rate_bytes_s,
        "rate_limit_bytes_s": j.rate_limit_bytes_s,
        "error": j.error,
    }


def _cmd_status(args) -> int:
    """A live server's own view: uuid, address, tablets, WAL and write counters, copies."""
    from rpc.protocols.tserver_pb2 import StatusRequest, StatusResponse

    st = _live_call(args, args.address, "Status", StatusRequest(), StatusResponse)
    fields = {
        "uuid": st.uuid,
        "address": st.address,
        "tablets": st.tablets,
        "wal_groups": st.wal_groups,
        "wal_syncs": st.wal_syncs,
        "wal_entries": st.wal_entries,
        "writes": st.writes,
        "rows_written": st.rows_written,
        "wal_sync_enabled": st.wal_sync_enabled,
        "copies": [_copy_fields(j) for j in st.copies],
    }
    if args.json:
        print_json(fields)
        return 0
    sync = "" if st.wal_sync_enabled else " (WAL sync OFF)"
    print(f"tserver {st.uuid} at {st.address}{sync}")
    print(f"  tablets: {st.tablets}; writes: {st.writes} ({st.rows_written} rows)")
    print(f"  WAL: {st.wal_entries} entries in {st.wal_groups} groups, {st.wal_syncs} syncs")
    print(f"  tablet copies onto it: {len(st.copies)}")
    return 0


def _cmd_copy_cancel(args) -> int:
    from rpc.protocols.tserver_pb2 import CancelTabletCopyRequest, CancelTabletCopyResponse

    _live_call(
        args,
        args.address,
        "CancelTabletCopy",
        CancelTabletCopyRequest(tablet_id=args.tablet),
        CancelTabletCopyResponse,
    )
    print(f"cancelling the copy of {args.tablet}")
    return 0


PROGRESS_TTY_S = 0.2  # bar redraw interval on a terminal
PROGRESS_LINE_S = 5.0  # one line per interval otherwise (logs, pipes)
BAR_WIDTH = 30


def _progress_text(job, now: float, t0: float) -> str:
    done, total = job.bytes_done, job.bytes_total
    elapsed = max(now - t0, 1e-6)
    rate = done / elapsed
    pct = 100.0 * done / total if total else 0.0
    if rate > 0 and total:
        eta_s = int((total - done) / rate)
        eta = f"{eta_s // 60}:{eta_s % 60:02d}"
    else:
        eta = "--:--"
    return (
        f"{_bytes(done)}/{_bytes(total)} ({pct:3.0f}%)  "
        f"files {job.files_done}/{job.files_total}  {_bytes(rate)}/s  ETA {eta}"
    )


class _Progress:
    """The copy's progress on stderr from a thread: on a terminal a bar redrawn in place
    with \r; otherwise (a pipe, a log file) one plain line every PROGRESS_LINE_S."""

    def __init__(self, job, stream) -> None:
        self.job = job
        self.stream = stream
        self.tty = stream.isatty()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._width = 0
        self._thread = threading.Thread(target=self._run, name="copy-progress", daemon=True)

    def start(self) -> _Progress:
        self._thread.start()
        return self

    def _draw(self) -> None:
        job, now = self.job, time.monotonic()
        text = _progress_text(job, now, self._t0)
        if self.tty:
            frac = job.bytes_done / job.bytes_total if job.bytes_total else 0.0
            filled = int(BAR_WIDTH * min(frac, 1.0))
            line = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {text}"
            pad = " " * max(0, self._width - len(line))
            self._width = len(line)
            self.stream.write(f"\r{line}{pad}")
        else:
            self.stream.write(f"copying: {text}\n")
        self.stream.flush()

    def _run(self) -> None:
        interval = PROGRESS_TTY_S if self.tty else PROGRESS_LINE_S
        while not self._stop.wait(interval):
            if self.job.bytes_total:
                self._draw()

    def stop(self, *, completed: bool) -> None:
        self._stop.set()
        self._thread.join(5.0)
        if completed:
            self._draw()
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


def _cmd_copy_from_remote(args) -> int:
    from rpc.client import RpcClient
    from rpc.errors import TabletNotFound
    from rpc.keys import ClientCurve
    from rpc.protocols.tserver_pb2 import StartTabletCopyRequest
    from tservers.tablet_copy import JobState, OfflineTarget, _Job, copy_tablet
    from tservers.wal.segment import WalCorruption

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    root = Path(args.fs_root)
    fs = _open_fs(args.fs_root)
    with _lock_fs(args.fs_root, "tserver copy-from-remote", "refusing to copy"):
        from tservers.tablet.manager import check_tablet_id

        try:
            check_tablet_id(args.tablet)
        except RpcError as e:
            raise CliError(e.message) from e
        target = OfflineTarget(fs, force=args.force)
        try:
            local = target.local_superblock(args.tablet)
        except RpcError as e:
            raise CliError(e.message) from e
        if local is not None and local.data_state == DataState.READY and not args.force:
            raise CliError(
                f"tablet {args.tablet} is already READY on this server; --force replaces it "
                "(the local replica is tombstoned and quarantined first)"
            )
        # CURVE when a key for the source is given or learnt from the coordinators of the
        # credentials: the copy runs as this server, with its own key pair from its fs root
        # (an admitted `tserver` principal: copy sessions need the server role).
        curve, source_key = None, args.source_key or ""
        creds = None if source_key else _credentials(args)
        if creds is not None:
            _uuid, source_key = _admitted_key(
                creds, args.source, args.source_uuid or "", "--source-key"
            )
        if source_key:
            try:
                keypair, _created = fs.load_keys()
            except FsError as e:
                raise CliError(str(e)) from e
            curve = ClientCurve(keypair)
        # Who serves the source address, within the deadline.
        try:
            with RpcClient(
                args.source, caller_uuid=fs.uuid, curve=curve, server_key=source_key
            ) as c:
                pong = c.ping(timeout_s=args.timeout)
        except RpcError as e:
            problem = _rpc_problem(args.source, e, curve).removeprefix(f"{args.source}: ")
            raise CliError(
                f"source {args.source} unreachable within {args.timeout:g} s: {problem}"
            ) from e
        if pong.service != "tserver":
            raise CliError(f"{args.source} is a {pong.service or 'unknown'} server, not a tserver")
        if args.source_uuid and pong.uuid != args.source_uuid:
            raise CliError(f"{args.source} is server {pong.uuid}, not {args.source_uuid}")
        if pong.uuid == fs.uuid:
            raise CliError(f"{args.source} is this server ({fs.uuid}): nothing to copy from")
        job = _Job(
            StartTabletCopyRequest(
                tablet_id=args.tablet, source_uuid=pong.uuid, source_address=args.source
            )
        )
        job.state = JobState.RUNNING
        job.started = time.monotonic()
        print(
            f"copying tablet {args.tablet} from {args.source} ({pong.uuid}) into {root}",
            file=sys.stderr,
        )
        progress = _Progress(job, sys.stderr).start()
        completed = False
        try:
            total = copy_tablet(
                target,
                job,
                caller_uuid=fs.uuid,
                rate_limit_bytes_s=int(args.rate_mb * 1_000_000),
                curve=ClientCurve(keypair, {pong.uuid: source_key}) if curve else None,
            )
            completed = True
        except TabletNotFound as e:
            raise CliError(f"tablet {args.tablet} not found on the source {args.source}") from e
        except (RpcError, OSError, WalCorruption, MetaFileCorrupt) as e:
            text = e.message if isinstance(e, RpcError) else f"{type(e).__name__}: {e}"
            raise CliError(f"copy failed: {text}{_left_state(target, args.tablet)}") from e
        except KeyboardInterrupt:
            raise CliError(f"interrupted{_left_state(target, args.tablet)}") from None
        finally:
            progress.stop(completed=completed)
    elapsed = time.monotonic() - job.started
    print(
        f"copied tablet {args.tablet}: {job.files_done} files, {total / 1e6:.1f} MB in "
        f"{elapsed:.1f} s ({total / max(elapsed, 1e-6) / 1e6:.1f} MB/s); it is READY: "
        "start the tablet server to serve it"
    )
    return 0


def _left_state(target, tablet_id: str) -> str:
    """What an interrupted copy leaves, for the error message."""
    try:
        sb = target.local_superblock(tablet_id)
    except Exception:  # the message is about the copy's error; this is a hint only
        return ""
    if sb is not None and sb.data_state == DataState.COPYING:
        return (
            f"; tablet {tablet_id} is left COPYING here: re-run this command, or start the "
            "server (it deletes the partial copy at startup)"
        )
    return ""


def _cmd_quarantine_list(args) -> int:
    fs = _open_fs(args.fs_root)  # reading only: allowed beside a running server
    now_s = time.time()  # ages of files on disk: wall-clock time
    entries = qmod.scan(fs.quarantine_root)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": e.name,
                        "tablet_id": e.tablet_id,
                        "size_bytes": e.size_bytes,
                        "age_s": round(e.age_s(now_s), 3),
                        "mtime_s": e.mtime_s,
                        "removing": e.removing,
                    }
                    for e in entries
                ]
            )
        )
        return 0
    if not entries:
        print("quarantine is empty")
        return 0
    for e in entries:
        state = "\tremoval unfinished" if e.removing else ""
        print(
            f"{e.name}\t{qmod.format_bytes(e.size_bytes)}\t"
            f"{qmod.format_age(e.age_s(now_s))} old{state}"
        )
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entries, {qmod.format_bytes(total)}")
    return 0


def _cmd_quarantine_purge(args) -> int:
    fs = _open_fs(args.fs_root)
    if args.all:
        policy = qmod.Policy(retention_s=0, bytes_max=None)
    elif args.older_than_s is not None:
        policy = qmod.Policy(retention_s=args.older_than_s, bytes_max=None)
    elif args.bytes_max is not None:
        policy = qmod.Policy(retention_s=None, bytes_max=args.bytes_max)
    else:
        policy = qmod.Policy()  # what a server with default flags does
    # A running server reaps by itself, and may be filling a quarantine directory.
    with _lock_fs(args.fs_root, "tserver quarantine purge", "refusing to purge"):
        now_s = time.time()  # ages of files on disk: wall-clock time
        entries = qmod.scan(fs.quarantine_root)
        removed, failed = [], []
        for r, err in qmod.remove_planned(fs.quarantine_root, qmod.plan(entries, policy, now_s)):
            e = r.entry
            if err is not None:
                failed.append((e, err))
                continue
            removed.append(e)
            print(
                f"removed {e.name}\t{qmod.format_bytes(e.size_bytes)}\t"
                f"{qmod.format_age(e.age_s(now_s))} old\t({r.reason.value})",
                flush=True,
            )
    gone = {e.name for e in removed}
    left = [e for e in entries if e.name not in gone]
    freed = sum(e.size_bytes for e in removed)
    kept = sum(e.size_bytes for e in left)
    print(
        f"removed {len(removed)} entries ({qmod.format_bytes(freed)}); "
        f"{len(left)} left ({qmod.format_bytes(kept)})"
    )
    if failed:
        e, err = failed[0]
        raise CliError(f"could not remove {len(failed)} entries; {e.name}: {err.strerror or err}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tserver", description="Tablet server and its tools.")
    add_version(p, "tserver")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("start", help="run a tablet server")
    s.add_argument("--fs-root", required=True)
    s.add_argument(
        "--bind", type=address_arg, default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)"
    )
    s.add_argument(
        "--no-wal-sync",
        action="store_true",
        help="do not fsync the WAL (acknowledged writes may be lost on a crash)",
    )
    s.add_argument("--segment-size-mb", type=int, default=16)
    s.add_argument(
        "--flush-rows",
        type=int,
        default=200_000,
        help="flush a tablet's memstore when it holds this many rows",
    )
    s.add_argument(
        "--flush-idle-s",
        type=_nonnegative_float,
        default=60.0,
        help="flush a tablet's memstore once it has taken no write for this long, however "
        "few rows it holds (default %(default)s; 0: only by --flush-rows)",
    )
    s.add_argument("--workers", type=int, default=8)
    s.add_argument(
        "--startup-threads",
        type=int_in(1, 64),
        default=None,
        help="threads that open the tablets at start-up (default 2; more help only when "
        "the disk is slow: an open is mostly Python under the GIL)",
    )
    s.add_argument(
        "--password-file",
        default=None,
        help="the cluster's password (also LOGCENTRIC_PASSWORD): DeleteTablet, ChangeConfig "
        "and StartTabletCopy then answer only calls signed with it; a server bound beyond "
        "127.0.0.1 needs one",
    )
    named = s.add_mutually_exclusive_group()
    named.add_argument(
        "--coordinators",
        type=lambda text: address_list_arg(text, empty_ok=True),
        default=(),
        help="coordinator node addresses HOST:PORT,... to enlist and heartbeat with "
        "(neither this nor --cluster: the server runs alone, which needs --insecure)",
    )
    named.add_argument(
        "--cluster",
        metavar="NAME",
        default=None,
        help="enlist with the coordinators of a cluster named in the clusters file",
    )
    s.add_argument(
        "--copy-rate-mb",
        type=_rate_mb,
        default=0.0,
        help="throttle each tablet copy onto this server to MB/s (0: unthrottled)",
    )
    s.add_argument(
        "--fs-reserved-bytes",
        type=_byte_count,
        default=None,
        help="free space to keep on the fs root's file system (a K, M, G or T suffix: "
        "powers of 1024): at or below it new tablets, "
        "copies onto this server and writes (not deletes) are refused with NO_SPACE and the "
        "coordinator places new replicas elsewhere (default: 1%% of the file system or "
        "1 GiB, whichever is smaller; 0: none)",
    )
    s.add_argument(
        "--mapped-bytes-max",
        type=_byte_count,
        default=MAPPED_BYTES_MAX_DEFAULT,
        help="resident pages of memory-mapped files (the data blocks' pages the reads "
        "touched, shared libraries too) kept before every block's pages are handed back to "
        "the kernel; reads map them again from the page cache (a K, M, G or T suffix: "
        "powers of 1024; default 384M; 0: no bound)",
    )
    s.add_argument(
        "--memstore-bytes-max",
        type=_byte_count,
        default=MEMSTORE_BYTES_MAX_DEFAULT,
        help="the memstores of all tablets together (estimated: their Arrow data and ~180 "
        "bytes a row of index) above which the biggest are flushed (a K, M, G or T suffix: "
        "powers of 1024; default 1G; 0: no bound, only --flush-rows and --flush-idle-s)",
    )
    s.add_argument(
        "--compaction-rate-mb",
        type=_rate_mb,
        default=32.0,
        help="bytes per second budget of background compactions in MB/s "
        "(default %(default)s; 0: unthrottled)",
    )
    s.add_argument(
        "--compaction-budget-mb",
        type=_positive_int,
        default=None,
        help="a compaction merges at most this many MiB of blocks at once (the disk it "
        "needs before it frees its inputs; its memory is bounded apart from this, it streams); "
        "larger runs are left as they are, so more runs stay apart and each existence check "
        "reads more blocks (default: no bound, a compaction needs at most the tablet's size)",
    )
    s.add_argument(
        "--copy-session-idle-s",
        type=_positive_float,
        default=SESSION_IDLE_S,
        help="expire a copy session served by this server after this long without a fetch "
        "(default %(default)s)",
    )
    s.add_argument(
        "--wal-retain-entries",
        type=_positive_int,
        default=RETAIN_ENTRIES_MAX_DEFAULT,
        help="WAL entries kept below the flushed index for lagging peers; a peer further "
        "behind gets a tablet copy (default %(default)s)",
    )
    s.add_argument(
        "--wal-retain-mb",
        type=_positive_int,
        default=RETAIN_BYTES_MAX_DEFAULT >> 20,
        help="and at most this many MiB of their payloads (kept in memory too) "
        "(default %(default)s)",
    )
    s.add_argument(
        "--quarantine-retention-s",
        type=_seconds,
        default=qmod.RETENTION_S_DEFAULT,
        help="remove what a deletion set aside under quarantine/ once it is this many "
        "seconds old (0: as soon as the deletion ends) (default %(default)g)",
    )
    s.add_argument(
        "--quarantine-bytes-max",
        type=_byte_count,
        default=qmod.BYTES_MAX_DEFAULT,
        help="and, oldest first, while quarantine/ holds more than this many bytes (a K, M, "
        "G or T suffix: powers of 1024) (default %(default)d, 10 GiB)",
    )
    s.add_argument(
        "--insecure",
        action="store_true",
        help="run plaintext and unauthenticated: anyone who reaches the port can write, scan "
        "and delete rows (logged as a WARNING at start; the start line says INSECURE). For a "
        "trusted network or a test; a server bound beyond 127.0.0.1 still needs "
        "--password-file",
    )
    s.add_argument(
        "--curve",
        action="store_true",
        help="CURVE on every connection (encrypted, authenticated), the default: said "
        "explicitly. Callers admitted and authorized by the principals table the coordinator "
        "leader pushes in heartbeat answers; heartbeats as a CURVE client with this server's "
        "key (show-key). Needs the coordinators' keys: --coordinator-keys, or --cluster NAME "
        "with a credentials file in its clusters-file entry (design/security.md)",
    )
    s.add_argument(
        "--coordinator-keys",
        type=public_keys_arg,
        default=(),
        metavar="KEY|FILE,...",
        help="the coordinator nodes' public keys, one per address in the order of "
        "--coordinators (or of the cluster's addresses): 40 z85 characters, or a key file "
        "(a node's <data-dir>/keys/coordinator.key). With --cluster and no keys here: the "
        "keys of the cluster's credentials file",
    )
    s.add_argument(
        "--join-token",
        default=os.environ.get("LOGCENTRIC_JOIN_TOKEN", ""),
        metavar="TOKEN",
        help="with CURVE: a one-use token from `coordinator join-token` (also "
        "$LOGCENTRIC_JOIN_TOKEN) that admits this server's key while the coordinators refuse "
        "it; spent at the first admission (design/security.md section 5)",
    )
    s.add_argument(
        "--leader-silence-s",
        type=_positive_float,
        default=30.0,
        help="with CURVE: after this long without hearing a coordinator leader, refuse "
        "every call but the cluster's own (the principals table may be stale) "
        "(default %(default)s)",
    )
    s.add_argument("--log-level", type=_log_level, default="info")
    add_http_arguments(s, "the server's page, /metrics, /healthz, /readyz")
    logsetup.add_arguments(s)
    s.set_defaults(func=_cmd_start)

    fs = sub.add_parser("fs", help="file system root").add_subparsers(dest="fs_cmd", required=True)
    f = fs.add_parser("format", help="write a new instance file (the root must be empty)")
    f.add_argument("--fs-root", required=True)
    f.add_argument("--uuid", default=None, help="use this uuid instead of a new one")
    f.set_defaults(func=_cmd_fs_format)
    f = fs.add_parser("uuid", help="print the server's uuid")
    f.add_argument("--fs-root", required=True)
    add_json(f, "the fs root and its uuid")
    f.set_defaults(func=_cmd_fs_uuid)
    f = fs.add_parser(
        "downgrade",
        help="fold the hard-state journal into the consensus metadata files, so that a "
        "tablet server older than the journal can start on this root (the server stopped)",
    )
    f.add_argument("--fs-root", required=True)
    add_json(f, "the fs root and the tablets whose consensus metadata was written")
    f.set_defaults(func=_cmd_fs_downgrade)

    k = sub.add_parser(
        "show-key",
        help="print the server's CURVE public key (keys/tserver.key), for an admin to admit "
        "it: coordinator users add UUID --kind tserver --role server --public-key FILE",
    )
    k.add_argument("--fs-root", required=True)
    add_json(k, "the fs root, its uuid and its public key")
    k.set_defaults(func=_cmd_show_key)

    wal = sub.add_parser("wal", help="WAL tools").add_subparsers(dest="wal_cmd", required=True)
    w = wal.add_parser("dump", help="print header, entries and footer of WAL segments")
    w.add_argument("--fs-root")
    w.add_argument("--tablet")
    w.add_argument("--segment", help="one segment file")
    w.add_argument("--json", action="store_true", help='one JSON document: {"segments": [...]}')
    w.set_defaults(func=_cmd_wal_dump)

    cm = sub.add_parser("cmeta", help="consensus metadata tools").add_subparsers(
        dest="cmeta_cmd", required=True
    )
    c = cm.add_parser("dump", help="print a tablet's consensus metadata")
    c.add_argument("--fs-root", required=True)
    c.add_argument("--tablet", required=True)
    add_json(c, "the consensus metadata")
    c.set_defaults(func=_cmd_cmeta_dump)
    c = cm.add_parser("rewrite", help="change consensus metadata (a backup is written first)")
    c.add_argument("--fs-root", required=True)
    c.add_argument("--tablet", required=True)
    c.add_argument("--term", type=int_in(0, 2**63 - 1), help="the new current term")
    vote = c.add_mutually_exclusive_group()
    vote.add_argument("--voted-for", help="the UUID this replica voted for in that term")
    vote.add_argument("--clear-vote", action="store_true", help="no vote in that term")
    c.add_argument(
        "--config-index",
        type=int_in(-1, 2**63 - 1),
        help="the committed config's op index (-1: none committed yet)",
    )
    c.add_argument("--peer", action="append", help="UUID=HOST:PORT:VOTER|NON_VOTER (repeat)")
    c.add_argument("--force", action="store_true", help="allow lowering the term")
    c.set_defaults(func=_cmd_cmeta_rewrite)

    cp = sub.add_parser("copies", help="tablet copies onto a live server: progress and rate")
    cp.add_argument("--address", type=address_arg, required=True)
    add_json(cp, "the copies")
    _add_credentials(cp, "--server-key", "the server at --address")
    cp.set_defaults(func=_cmd_copies)
    st = sub.add_parser("status", help="a live server's uuid, tablets and counters")
    st.add_argument("--address", type=address_arg, required=True)
    add_json(st, "the server's status")
    _add_credentials(st, "--server-key", "the server at --address")
    st.set_defaults(func=_cmd_status)
    cc = sub.add_parser("copy-cancel", help="cancel a tablet copy onto a live server")
    cc.add_argument("--address", type=address_arg, required=True)
    cc.add_argument("--tablet", required=True)
    _add_credentials(cc, "--server-key", "the server at --address")
    cc.set_defaults(func=_cmd_copy_cancel)

    r = sub.add_parser(
        "copy-from-remote",
        help="copy one tablet from a live replica onto a STOPPED server's fs root",
        description="The operator's manual tablet copy: the same steps as a copy the leader "
        "asks for (superblock COPYING, consensus metadata merged, WAL, data, superblock "
        "READY), onto the fs root of a tablet server that is not running. Start the server "
        "afterwards to serve the tablet. Safe to re-run after an interruption.",
    )
    r.add_argument("--fs-root", required=True, help="the stopped server's fs root")
    r.add_argument("--tablet", required=True)
    r.add_argument(
        "--source",
        type=address_arg,
        required=True,
        help="HOST:PORT of a server with a live replica",
    )
    r.add_argument("--source-uuid", help="the source server's uuid (checked against its answer)")
    r.add_argument(
        "--force", action="store_true", help="replace a READY local replica (tombstoned first)"
    )
    r.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        help="seconds to reach the source before giving up (default 10)",
    )
    r.add_argument(
        "--rate-mb", type=_rate_mb, default=0.0, help="throttle to MB/s (0: unthrottled)"
    )
    r.add_argument("--log-level", type=_log_level, default="warning")
    _add_credentials(
        r,
        "--source-key",
        "the source server",
        "the stopped server (its key pair in --fs-root: copy sessions need the server role)",
    )
    r.set_defaults(func=_cmd_copy_from_remote)

    qs = sub.add_parser(
        "quarantine", help="what deletions set aside under quarantine/ (list, purge)"
    ).add_subparsers(dest="quarantine_cmd", required=True)
    q = qs.add_parser("list", help="each quarantine entry: name, size, age")
    q.add_argument("--fs-root", required=True)
    add_json(q, "a list of entries")
    q.set_defaults(func=_cmd_quarantine_list)
    q = qs.add_parser(
        "purge",
        help="remove quarantine entries from a STOPPED server's fs root",
        description="Removes quarantine entries and says which. Without an option it does "
        "what a server with default flags does: entries older than a day, then the oldest "
        "while more than 10 GiB are left. Refuses to run beside a running server (which "
        "removes them by itself: `tserver start --quarantine-retention-s`).",
    )
    q.add_argument("--fs-root", required=True, help="the stopped server's fs root")
    which = q.add_mutually_exclusive_group()
    which.add_argument(
        "--older-than-s", type=_seconds, help="remove the entries at least this many seconds old"
    )
    which.add_argument(
        "--bytes-max",
        type=_byte_count,
        help="remove the oldest entries until at most this many bytes are left",
    )
    which.add_argument("--all", action="store_true", help="remove every entry")
    q.set_defaults(func=_cmd_quarantine_purge)

    t = sub.add_parser("tablets", help="list tablets (offline from --fs-root or live)")
    t.add_argument("--fs-root")
    t.add_argument("--address", type=address_arg)
    add_json(t, "the tablets")
    _add_credentials(t, "--server-key", "the server at --address")
    t.set_defaults(func=_cmd_tablets)
    return p


@interruptible("tserver")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(glue_key_arguments(sys.argv[1:] if argv is None else argv))
    # OSError: an operating error no command foresaw (permissions, a full disk).
    return run_command(args.func, args, "tserver: error", (CliError, OSError), name="tserver")


if __name__ == "__main__":
    sys.exit(main())
