"""What every command-line tool does when its reader goes away (`tool ... | head`)."""

from __future__ import annotations

import os
import sys


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
