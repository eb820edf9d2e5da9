"""What every command-line tool shares: its reader going away (`tool ... | head`), and
whole-number arguments in a range."""

from __future__ import annotations

import argparse
import os
import sys


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


def run_command(func, args, prog: str, handled: tuple[type[BaseException], ...]) -> int:
    """Run a parsed command-line command and return its exit status: an error of a
    `handled` type is one line on stderr (`prog: error`) and status 1; a reader gone from
    stdout (`| head`) ends it quietly (`reader_gone`). stdout is flushed here, so that a
    gone reader shows inside this handling rather than at the interpreter's exit."""
    try:
        code = func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return reader_gone()
    except handled as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1


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
