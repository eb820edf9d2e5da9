"""What every command-line tool shares (`coordinator`, `logstore`, `tserver`): how a command
ends (an error is one line; Ctrl-C is one line and exit status 130; a reader gone from
stdout is quiet), `--version`, how a cluster is named on the command line (`--coordinators`,
`--cluster`, else the environment and the clusters file: `rpc.clusters`), `--json` output,
and whole-number arguments in a range.

Exit statuses: 0 done, 1 an operating error (or an unhealthy status), 2 bad usage (argparse's
own refusals, and a cluster that is not named or not known), 130 interrupted (SIGINT).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

DISTRIBUTION = "logcentric"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, what shells report for a Ctrl-C
# After a command's first Ctrl-C it has this long to end by itself (its KeyboardInterrupt
# unwinding, sockets closed, threads joined); then it ends at once, with the same one line
# and status (`interruptible`).
INTERRUPT_EXIT_S = 5.0
_said: list[str] = []  # the "interrupted" line, once printed


class UsageError(Exception):
    """Bad usage found after parsing (e.g. nothing names a cluster): one line, exit 2."""


def int_in(low: int, high: int):
    """An integer type for argparse: low..high, refused with the range otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {value}")
        return value

    parse.__name__ = f"int_{low}_to_{high}"  # argparse names the type in some messages
    return parse


# ------------------------------------------------------------ how a command ends


def run_command(
    func,
    args,
    prog: str,
    handled: tuple[type[BaseException], ...],
    *,
    name: str | None = None,
) -> int:
    """Run a parsed command-line command and return its exit status: an error of a
    `handled` type is one line on stderr (`prog: error`) and status 1; a UsageError is one
    line and status 2; Ctrl-C (KeyboardInterrupt) is one line (`name: interrupted`, `name`
    defaulting to `prog`) and status 130; a reader gone from stdout (`| head`) ends it
    quietly (`reader_gone`). stdout is flushed here, so that a gone reader shows inside this
    handling rather than at the interpreter's exit."""
    try:
        code = func(args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        return interrupted(name or prog)
    except BrokenPipeError:
        return reader_gone()
    except UsageError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return EXIT_USAGE
    except handled as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1


class DaemonStop:
    """How a daemon's main thread waits to be stopped: Ctrl-C and SIGTERM set `event` (the
    handlers do nothing else, so a daemon still starting stops too), and `exit_status`
    is what it exits with once stopped: one line and 130 for Ctrl-C, 0 for SIGTERM. A
    signal its caller left ignored (`nohup`, `cmd &` from a script) stays ignored."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.event = threading.Event()
        self.signals: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.signals.append(signum)
        self.event.set()

    def wait(self, interval_s: float = 1.0) -> None:
        """Until a signal stops it."""
        while not self.event.wait(interval_s):
            pass

    def exit_status(self) -> int:
        return interrupted(self.name) if self.signals[:1] == [signal.SIGINT] else 0


def interrupted(name: str) -> int:
    """The end of a command stopped by Ctrl-C: one line on stderr, exit status 130. What
    is left to do (closing sockets, joining threads at the interpreter's exit) runs with a
    second Ctrl-C ending the process at once, without a traceback."""
    with contextlib.suppress(ValueError):  # not the main thread: nothing to install
        signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone as well: nothing more to say to it
        reader_gone()
    print(f"{name}: interrupted", file=sys.stderr, flush=True)
    _said.append(name)
    return EXIT_INTERRUPTED


def interruptible(name: str, exit_within_s: float | None = INTERRUPT_EXIT_S) -> Callable:
    """Decorate a tool's `main(argv)`: Ctrl-C while it parses its arguments or sets up
    (before `run_command` takes over) ends it the same way, one line and status 130.

    With `exit_within_s`, Ctrl-C also starts a timer: a command still running that long
    after it (its cleanup stuck: a lock left held by the interrupt, a join that never
    returns) prints the same line and ends at once. CI saw `logstore status` waiting on a
    silent server stay for 180 s after its Ctrl-C, with nothing on stderr; 60 tries here
    did not show it again. None: no timer (a command whose cleanup may take long, e.g.
    stopping the processes it started). A daemon's own handler (`DaemonStop`) replaces
    this one once it runs."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None) -> int:
            previous = _arm_interrupt_exit(name, exit_within_s)
            try:
                return main(argv)
            except KeyboardInterrupt:
                return interrupted(name)
            finally:
                if previous is not None:
                    with contextlib.suppress(ValueError, TypeError):
                        signal.signal(signal.SIGINT, previous)

        return wrapper

    return wrap


def _arm_interrupt_exit(name: str, exit_within_s: float | None):
    """Install the SIGINT handler of `interruptible` in place of Python's own (not of one
    the caller chose, nor an ignored SIGINT); returns the handler replaced, or None."""
    try:
        current = signal.getsignal(signal.SIGINT)
        if current is not signal.default_int_handler and not getattr(current, "_ours", False):
            return None

        def on_sigint(_signum, _frame) -> None:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second: as Python's
            if exit_within_s is not None:
                timer = threading.Timer(exit_within_s, _exit_interrupted, (name,))
                timer.daemon = True
                timer.start()
            raise KeyboardInterrupt

        on_sigint._ours = True  # type: ignore[attr-defined]
        signal.signal(signal.SIGINT, on_sigint)
        return current
    except ValueError:  # not the main thread
        return None


def _exit_interrupted(name: str) -> None:
    """The end of a command whose Ctrl-C did not end it within its time: the one line (if
    not said yet) and status 130, now."""
    if not _said:
        with contextlib.suppress(OSError, ValueError):
            print(f"{name}: interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold Ctrl-C back for the length of the block, then raise KeyboardInterrupt when it
    ends if one came: for a step that must not be cut in two (starting a process and
    recording its pid). SIGINT left ignored by the caller (`nohup`, `cmd &`) stays ignored;
    outside the main thread this does nothing."""
    pending: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, _frame: pending.append(signum))
    except ValueError:  # not the main thread
        yield
        return
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not pending:
        return
    if callable(previous):
        previous(signal.SIGINT, None)  # Python's own handler raises KeyboardInterrupt
    elif previous == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)  # the default action: the process ends


@contextlib.contextmanager
def ignored_interrupts() -> Iterator[None]:
    """Ignore Ctrl-C for the length of the block (cleanup that must finish: stopping the
    processes a command started; each step of it has its own deadline)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def reader_gone() -> int:
    """Stop quietly once stdout's reader has gone (BrokenPipeError): stdout is pointed at
    /dev/null, so that the interpreter's final flush does not fail again with a traceback.
    Returns the exit status to use, 0 (the command did its part; the reader chose to stop)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (tests capture it): nothing to flush
        pass
    return 0


# ------------------------------------------------------------ --version, --json


def version() -> str:
    """The installed distribution's version ("unknown" when running from a bare checkout)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version`: prints `prog VERSION` and exits 0."""
    parser.add_argument(
        "--version",
        action="version",
        version=f"{prog} {version()}",
        help="print the version and exit",
    )


def add_json(parser: argparse.ArgumentParser, what: str = "") -> None:
    """`--json`: one JSON document on stdout (its shape is in design/client.md)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document on stdout"
        + (f": {what}" if what else "")
        + " (shapes: design/client.md)",
    )


def print_json(document) -> None:
    """Print one JSON document on one line of stdout."""
    print(json.dumps(document, sort_keys=False))


# ------------------------------------------------------------ naming a cluster


def add_cluster_arguments(parser, *, required_help: str = "") -> None:
    """`--coordinators HOST:PORT,...` and `--cluster NAME` (resolved by `cluster_addresses`:
    the flag, else the name, else $LOGCENTRIC_COORDINATORS / $LOGCENTRIC_CLUSTER, else the
    clusters file's default)."""
    from rpc.addresses import address_list_arg

    parser.add_argument(
        "--coordinators",
        type=lambda text: list(address_list_arg(text)),
        default=None,
        help="coordinator node addresses HOST:PORT,... (else --cluster, "
        "$LOGCENTRIC_COORDINATORS, $LOGCENTRIC_CLUSTER, the clusters file's default)"
        + required_help,
    )
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        default=None,
        help="a cluster named in the clusters file (`coordinator clusters` lists them)",
    )


def cluster_addresses(coordinators, cluster: str | None) -> list[str]:
    """The coordinator addresses named by the flags, the environment or the clusters file
    (`rpc.clusters.resolve`); nothing naming a cluster, or an unknown name, is a UsageError
    saying what to give."""
    from rpc import clusters
    from rpc.errors import BadRequest, NotFound

    try:
        return list(clusters.resolve(coordinators, cluster))
    except (BadRequest, NotFound) as err:
        raise UsageError(err.message) from None
