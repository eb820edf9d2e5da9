"""The console scripts' entry points: `coordinator`, `logstore` and `tserver`.

A console script imports its command's module before anything of ours runs, and those
imports take a few tenths of a second (zmq, protobuf, pyarrow). Ctrl-C in that window used
to end in a KeyboardInterrupt traceback; here it ends like every later Ctrl-C, with one line
("NAME: interrupted") and status 130. This module imports nothing but C modules itself, so
the window left is the interpreter's own start-up (some 30 ms).
"""

from __future__ import annotations

# _signal is the C module: `signal` imports `enum`, itself a window for Ctrl-C.
import _signal
import sys

EXIT_INTERRUPTED = 130  # rpc.console.EXIT_INTERRUPTED, not imported: that is the slow part


def _main_of(module: str):
    return __import__(module, fromlist=["main"]).main


def _run(name: str, module: str) -> int:
    # Ctrl-C during the import is held, not raised: raised inside a class body it can come
    # out as another error (Python wraps one raised in __set_name__ in a RuntimeError).
    held: list[int] = []
    before = _signal.getsignal(_signal.SIGINT)
    if before is _signal.SIG_IGN:  # `nohup`, `cmd &` from a script: stays ignored
        return _main_of(module)()
    _signal.signal(_signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        main = _main_of(module)
    finally:
        _signal.signal(_signal.SIGINT, before)
    if held:
        print(f"{name}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return main()  # its own @interruptible ends a later Ctrl-C the same way


def coordinator() -> int:
    return _run("coordinator", "optools.coordinator_cli")


def logstore() -> int:
    return _run("logstore", "logstore.cli")


def tserver() -> int:
    return _run("tserver", "tservers.cli")
