"""`coordinator log`: decode and inspect the coordinator log (design/logtool.md).

    coordinator log --data-dir NODE_DIR                 every record, offline (node stopped or not)
    coordinator log --address H:P[,H:P]                 live, from coordinator nodes (their
                                                        RPC address) or `logstore serve` replicas
    coordinator log ... --type create_table --op 12 --table users --server U --live-only
    coordinator log ... --follow [--interval-s 0.5]     tail new records until Ctrl-C (lease
                                                        renewals hidden unless --renewals)
    coordinator log ... --pending                       STARTED operations with no DONE
    coordinator log ... --leases                        lease history: who led which epoch, when
    coordinator log ... --summary                       counts and bytes by type
    coordinator log ... --json                          one JSON document (--follow: one JSON
                                                        object per line)

Each record is printed with its id, live or invalidated (and by which record), type,
operation id and phase, request id, the table, tablets and servers it concerns, the ids it
invalidates and its size. A record that does not decode is printed as "undecodable" with
the reason. Ids whose entries are no longer held anywhere (invalidated, then compacted
away) are printed as "gone" ranges.

The lead wires this as the `coordinator log` subcommand with `add_arguments(parser)` and
`run(args)`; `main(argv)` runs it standalone (`python -m optools.logtool`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from coordinator.records import (
    ALL_TYPES,
    TYPE_GONE,
    Filter,
    RecordView,
    decode_entry,
    format_epoch,
    format_view,
    gone_ranges,
    lease_history,
    name_tables,
    normalize_type,
    pending_operations,
    summarize,
)
from optools.logtool_source import (
    DataDirError,
    LoadStats,
    LogImage,
    RemoteReader,
    load_data_dir,
)

DEFAULT_LOG = "coordinator"  # coordinator.leases.driver.LOG_NAME
EXIT_INCOMPLETE = 3  # printed what could be read, but part of the data dir could not be
INTERVAL_S_MIN = 0.05
INTERVAL_S_MAX = 60.0
TIMEOUT_S_MAX = 300.0
# --follow says how many lease renewals it hid at most this often (and once at its end).
RENEWALS_NOTE_INTERVAL_S = 10.0


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _interval(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not INTERVAL_S_MIN <= v <= INTERVAL_S_MAX:
        raise argparse.ArgumentTypeError(f"must be {INTERVAL_S_MIN}..{INTERVAL_S_MAX} seconds")
    return v


def _timeout(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 < v <= TIMEOUT_S_MAX:
        raise argparse.ArgumentTypeError(f"must be in (0, {TIMEOUT_S_MAX}] seconds")
    return v


def _addresses(value: str) -> str:
    """--address: HOST:PORT,... with at least one address, each with its port."""
    from rpc.addresses import address_list_arg

    return ",".join(address_list_arg(value))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # No source given: the cluster named by the environment or the clusters file (the
    # `coordinator` command resolves it; optools/coordinator_cli.py).
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--data-dir",
        help="a coordinator node's data dir (or its logstore replica dir): read offline",
    )
    src.add_argument(
        "--coordinators",
        "--address",
        dest="address",
        type=_addresses,
        help="RPC addresses (HOST:PORT, comma-separated) of coordinator nodes or of "
        "`logstore serve` replicas: read live",
    )
    src.add_argument("--cluster", metavar="NAME", help="read live from a named cluster")
    parser.add_argument("--log", default=DEFAULT_LOG, help="log name (default: %(default)s)")
    flt = parser.add_argument_group("filters (records must match all given)")
    flt.add_argument(
        "--type",
        action="append",
        default=[],
        help=f"record type, repeatable or comma-separated: {', '.join(ALL_TYPES)}",
    )
    flt.add_argument(
        "--op", action="append", default=[], help="operation id (its records), repeatable"
    )
    flt.add_argument("--table", action="append", default=[], help="table id or name, repeatable")
    flt.add_argument("--server", action="append", default=[], help="server uuid, repeatable")
    flt.add_argument("--live-only", action="store_true", help="only live records")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--pending", action="store_true", help="STARTED operations with no DONE")
    mode.add_argument("--leases", action="store_true", help="lease history: who led when")
    mode.add_argument(
        "--summary", action="store_true", help="counts by type, live and invalidated, bytes"
    )
    mode.add_argument("--follow", "-f", action="store_true", help="tail new records until Ctrl-C")
    parser.add_argument(
        "--renewals",
        action="store_true",
        help="--follow: also print lease renewals (hidden by default; takeovers are shown)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document (with --follow: one JSON object per record, per line)",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="also print each decoded record in full"
    )
    parser.add_argument(
        "--interval-s",
        type=_interval,
        default=0.5,
        help=f"--follow poll interval, {INTERVAL_S_MIN}..{INTERVAL_S_MAX} (default %(default)s)",
    )
    parser.add_argument(
        "--timeout-s", type=_timeout, default=10.0, help="per-call timeout for --address"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coordinator log",
        description="Decode the coordinator log, offline from a data dir or live.",
        epilog=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


class UsageError(Exception):
    pass


def build_filter(args: argparse.Namespace) -> Filter:
    types = set()
    for raw in args.type:
        for t in _split(raw):
            norm = normalize_type(t)
            if norm is None:
                raise UsageError(f"unknown --type {t!r}; one of: {', '.join(ALL_TYPES)}")
            types.add(norm)
    ops = set()
    for raw in args.op:
        for o in _split(raw):
            try:
                ops.add(int(o))
            except ValueError:
                raise UsageError(f"--op needs an operation id (a number), not {o!r}") from None
    tables = {t for raw in args.table for t in _split(raw)}
    servers = {s for raw in args.server for s in _split(raw)}
    return Filter(
        frozenset(types),
        frozenset(ops),
        frozenset(tables),
        frozenset(servers),
        bool(args.live_only),
    )


# ------------------------------------------------------------------ output


def views_of(image: LogImage, first_id: int = 1) -> list[RecordView]:
    """Decoded views of an image, with gone ranges, in id order, from first_id on."""
    views = [decode_entry(e) for e in image.entries if e.id >= first_id]
    held = {e.id for e in image.entries}
    views += gone_ranges(image.last_id, held, image.invalidated_by, first_id=first_id)
    views.sort(key=lambda v: v.id)
    return views


def _doc(out: TextIO, doc: dict[str, Any]) -> None:
    """The one JSON document of a command that is not --follow."""
    out.write(json.dumps(doc, sort_keys=True) + "\n")


def _emit(out: TextIO, v: RecordView, args) -> None:
    """One record: a text line, or (--follow --json) one JSON object on its own line."""
    if args.json:
        out.write(json.dumps(v.to_json(), sort_keys=True) + "\n")
    else:
        out.write(format_view(v, args.verbose) + "\n")


def _selected(views: Sequence[RecordView], flt: Filter) -> list[RecordView]:
    """The views a listing shows: those matching the filter; gone ranges only without
    filters or with --type gone."""
    out = []
    for v in views:
        if v.type == TYPE_GONE:
            if not flt.active() or TYPE_GONE in flt.types:
                out.append(v)
        elif flt.matches(v):
            out.append(v)
    return out


class RenewalHider:
    """What --follow leaves out without --renewals: lease renewals of the epoch already
    seen, and the "gone" ranges they leave behind. Each renewal invalidates the one before,
    so a poll finds the earlier ones gone ("#N gone (invalidated by #N+1)"): a gone range
    invalidated by a lease record, or of unknown invalidator right before one (its own
    invalidator gone too), was a lease record, and is hidden with the renewals. Shown
    always: takeovers, and the first renewal of an epoch not seen before (a new leader, or
    the current one when the listing starts, whose takeover was already gone): at least one
    line per epoch. Pure: views in, views out; it remembers the
    last epoch and the lease ids of the previous poll (a gone range may be invalidated by
    one of them)."""

    def __init__(self) -> None:
        self.epoch = 0  # the last lease epoch shown or hidden
        self._lease_ids: set[int] = set()  # lease record ids (held or gone) of the last poll

    def select(self, views: Sequence[RecordView]) -> tuple[list[RecordView], int]:
        """(the views to print, how many were hidden as renewals)."""
        ordered = sorted(views, key=lambda v: v.id)
        lease_ids = set(self._lease_ids)
        lease_ids.update(v.id for v in ordered if v.lease is not None)
        hidden_gone: set[int] = set()  # ids (view starts) of gone ranges that were leases
        # Backwards: a lease record invalidates only the lease record before it.
        for v in reversed(ordered):
            if v.type != TYPE_GONE:
                continue
            by_lease = v.invalidated_by in lease_ids if v.invalidated_by else False
            before_lease = not v.invalidated_by and (v.id_to + 1) in lease_ids
            if by_lease or before_lease:
                hidden_gone.add(v.id)
                lease_ids.update(range(v.id, v.id_to + 1))
        shown: list[RecordView] = []
        hidden = 0
        for v in ordered:
            if v.type == TYPE_GONE and v.id in hidden_gone:
                hidden += 1
            elif v.lease is not None and not v.lease.takeover and v.lease.epoch == self.epoch:
                hidden += 1
            else:
                shown.append(v)
            if v.lease is not None:
                self.epoch = max(self.epoch, v.lease.epoch)
        # Only the newest ids can be what the next poll's first gone range names.
        top = max((v.id_to or v.id for v in ordered), default=0)
        self._lease_ids = {i for i in lease_ids if i > top - 64} if top else self._lease_ids
        return shown, hidden


def _print_list(
    out: TextIO,
    views: Sequence[RecordView],
    flt: Filter,
    args,
    hider: RenewalHider | None = None,
) -> int:
    """Print the selected views one by one (text lines, or JSON lines for --follow); with
    a `hider`, lease renewals (and the gone ranges they leave) are left out. Returns how
    many were hidden."""
    selected = _selected(views, flt)
    hidden = 0
    if hider is not None:
        selected, hidden = hider.select(selected)
    for v in selected:
        _emit(out, v, args)
    return hidden


def _print_listing(out: TextIO, image: LogImage, views: Sequence[RecordView], flt, args) -> None:
    """The listing without --follow: text lines, or one JSON document."""
    if args.json:
        records = [v.to_json() for v in _selected(views, flt)]
        _doc(out, {"log": image.log, "last_id": image.last_id, "records": records})
    else:
        _print_list(out, views, flt, args)


def _print_pending(
    out: TextIO, image: LogImage, views: Sequence[RecordView], flt: Filter, args
) -> None:
    pending = [v for v in pending_operations(views) if flt.matches(v)]
    if args.json:
        doc = {
            "log": image.log,
            "last_id": image.last_id,
            "pending": [v.to_json() for v in pending],
        }
        _doc(out, doc)
        return
    out.write(
        f"{len(pending)} pending operation(s) (STARTED with no DONE), last id {image.last_id}\n"
    )
    for v in pending:
        _emit(out, v, args)


def _print_leases(out: TextIO, image: LogImage, views: Sequence[RecordView], args) -> None:
    epochs = lease_history(views)
    if args.json:
        doc = {"log": image.log, "last_id": image.last_id, "epochs": [e.to_json() for e in epochs]}
        _doc(out, doc)
        return
    out.write(
        f"{len(epochs)} epoch(s) named by the lease records still held; times are the "
        "writers' wall clocks, UTC ('-': a record written without one)\n"
    )
    for e in epochs:
        out.write(format_epoch(e, args.verbose) + "\n")


def _print_summary(out: TextIO, image: LogImage, views: Sequence[RecordView], args) -> None:
    s = summarize(views, image.last_id)
    st: LoadStats = image.stats
    live_source = bool(args.address)
    if args.json:
        source = st.to_json()
        source["kind"] = "live" if live_source else "data_dir"
        _doc(out, {"log": image.log, **s, "source": source})
        return
    where = "a live read holds none of them" if live_source else "this data dir still holds"
    held = "" if live_source else f" {s['invalidated_held']}, {s['gone_ids']} gone"
    out.write(
        f"log {image.log!r}: last id {s['last_id']}; {s['live']} live records "
        f"({s['live_bytes']} bytes), {s['invalidated']} ids invalidated ({where}{held})\n"
    )
    out.write(f"{'type':<16}{'live':>8}{'live_bytes':>12}{'inval_held':>12}{'held_bytes':>12}\n")
    for name, row in s["by_type"].items():
        out.write(
            f"{name:<16}{row['live']:>8}{row['live_bytes']:>12}{row['invalidated_held']:>12}"
            f"{row['invalidated_held_bytes']:>12}\n"
        )
    out.write(
        f"{'total':<16}{s['live']:>8}{s['live_bytes']:>12}{s['invalidated_held']:>12}"
        f"{s['invalidated_held_bytes']:>12}\n"
    )
    out.write(
        f"pending operations: {s['pending_operations']}; epochs (named by live lease "
        f"records): {s['epochs']}; undecodable live records: {s['undecodable']}\n"
    )
    if live_source:
        out.write(f"source: live from {st.replica_dir}\n")
        return
    out.write(
        f"source: {st.replica_dir}" + (f" (node {st.node_uuid})" if st.node_uuid else "") + "\n"
        f"  snapshot: {st.snapshot_bytes} bytes at Raft index {st.snapshot_raft_index}"
        f" members={','.join(st.snapshot_members) or '-'}\n"
        f"  journal: {st.journal_entries} entries"
        f" (Raft #{st.journal_first_index}..#{st.journal_last_index}), {st.journal_bytes} bytes;"
        f" term {st.term}, saved commit index {st.commit_index}\n"
        f"  raft commands replayed: {dict(st.raft_commands) or '-'};"
        f" rejected appends: {dict(st.rejected_appends) or '-'}\n"
    )


class RenewalNotes:
    """--follow's count of the lease renewals it hid: a line "(N lease renewals hidden)"
    at most every `interval_s` while renewals are being hidden, and one for the rest at the
    end. With --json the line goes to stderr: stdout holds only records."""

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        json_lines: bool,
        interval_s: float = RENEWALS_NOTE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = err if json_lines else out
        self.interval_s = interval_s
        self.clock = clock
        self.unsaid = 0  # hidden since the last note
        self.total = 0
        self._last_note_s: float | None = None

    def hidden(self, n: int) -> None:
        self.unsaid += n
        self.total += n
        now = self.clock()
        if self.unsaid and (
            self._last_note_s is None or now - self._last_note_s >= self.interval_s
        ):
            self._say(now)

    def close(self) -> None:
        if self.unsaid:
            self._say(self.clock())

    def _say(self, now: float) -> None:
        self.stream.write(
            f"({self.unsaid} lease renewal{'s' if self.unsaid != 1 else ''} hidden; "
            "--renewals shows them)\n"
        )
        self.stream.flush()
        self.unsaid = 0
        self._last_note_s = now


# ------------------------------------------------------------------ running


class _Source:
    """The chosen reader: load everything once, then poll for what is new."""

    def __init__(self, args) -> None:
        self.args = args
        self.remote: RemoteReader | None = None
        # Table id -> its name as of the last record read (set_replication records carry
        # only the id; --follow names new ones from what it has seen).
        self.table_names: dict[str, str] = {}
        if args.address is not None:
            addresses = _split(args.address)
            if not addresses:
                raise UsageError("--address needs at least one HOST:PORT")
            self.remote = RemoteReader(
                addresses, args.timeout_s, credentials=getattr(args, "credentials_obj", None)
            )
            try:
                for w in self.remote.check_service():
                    sys.stderr.write(f"coordinator log: warning: {w}\n")
            except BaseException:
                self.remote.close()
                raise

    def load(self) -> LogImage:
        if self.remote is not None:
            return self.remote.load(self.args.log)
        return load_data_dir(self.args.data_dir, self.args.log)

    def new_views(self, after_id: int) -> tuple[list[RecordView], int]:
        """Views with id > after_id (gone ranges clipped) and the new last id."""
        log = self.args.log
        if self.remote is not None:
            last = self.remote.last_id(log)
            if last <= after_id:
                return [], after_id
            entries, last = self.remote.read(log, after_id + 1, last)
            image = LogImage(
                log,
                last,
                entries,
                {i: e.id for e in entries for i in e.invalidates},
                LoadStats(),
            )
        else:
            image = load_data_dir(self.args.data_dir, log)
            if image.last_id <= after_id:
                return [], after_id
        return self.named(views_of(image, first_id=after_id + 1)), image.last_id

    def named(self, views: list[RecordView]) -> list[RecordView]:
        """The views with the tables of id-only records named, from these views and the
        ones named before."""
        views, self.table_names = name_tables(views, self.table_names)
        return views

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()


def _follow(
    out: TextIO,
    source: _Source,
    after_id: int,
    flt: Filter,
    args,
    stop,
    notes: RenewalNotes | None,
    hider: RenewalHider | None = None,
) -> None:
    while not stop.wait(args.interval_s):
        try:
            views, last = source.new_views(after_id)
        except (DataDirError, OSError) as err:
            sys.stderr.write(f"coordinator log: {err} (still following)\n")
            continue
        except Exception as err:  # noqa: BLE001 - rpc errors while the node restarts
            from rpc.errors import RpcError

            if not isinstance(err, RpcError):
                raise
            sys.stderr.write(f"coordinator log: {err} (still following)\n")
            continue
        hidden = _print_list(out, views, flt, args, hider)
        out.flush()
        if notes is not None:
            notes.hidden(hidden)  # also says what earlier polls hid, once the interval passed
        after_id = max(after_id, last)


def run(
    args: argparse.Namespace,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run with parsed arguments; returns the exit code. `stop` ends --follow (tests);
    from the command line, Ctrl-C does."""
    from rpc.console import reader_gone
    from rpc.errors import RpcError

    out = out or sys.stdout
    stop = stop or threading.Event()
    source: _Source | None = None
    try:
        flt = build_filter(args)
        source = _Source(args)
        image = source.load()
        views = source.named(views_of(image))
        for w in image.stats.warnings:
            sys.stderr.write(f"coordinator log: warning: {w}\n")
        if args.summary:
            _print_summary(out, image, views, args)
        elif args.pending:
            _print_pending(out, image, views, flt, args)
        elif args.leases:
            _print_leases(out, image, views, args)
        elif args.follow:
            notes = None if args.renewals else RenewalNotes(out, sys.stderr, args.json)
            hider = None if args.renewals else RenewalHider()
            try:
                hidden = _print_list(out, views, flt, args, hider)
                out.flush()
                if notes is not None:
                    notes.hidden(hidden)
                _follow(out, source, image.last_id, flt, args, stop, notes, hider)
            finally:
                if notes is not None:
                    notes.close()  # what it hid since the last note, once, at the end
        else:
            _print_listing(out, image, views, flt, args)
        out.flush()
        return EXIT_INCOMPLETE if image.stats.incomplete else 0
    except KeyboardInterrupt:
        # Also for --follow, which only Ctrl-C ends: the caller's run_command (or main)
        # says so in one line and exits 130, as every command does.
        raise
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        return reader_gone() if out is sys.stdout else 0
    except UsageError as err:
        sys.stderr.write(f"coordinator log: {err}\n")
        return 2
    except (DataDirError, RpcError, OSError) as err:
        sys.stderr.write(f"coordinator log: {err}\n")
        return 1
    finally:
        if source is not None:
            source.close()


def main(argv: list[str] | None = None) -> int:
    from rpc.console import interrupted

    try:
        args = build_parser().parse_args(argv)
        return run(args)
    except KeyboardInterrupt:
        return interrupted("coordinator log")


if __name__ == "__main__":
    sys.exit(main())
