"""Log set-up of a daemon: text or JSON lines, to stderr or a file that rotates by size.

    configure(level="INFO", fmt="json", file="/var/log/lc/tserver.log", max_bytes=64 << 20)

A JSON line holds `ts` (UTC, ISO 8601 with milliseconds), `level`, `logger`, `msg`, the
thread's name, and `exc` with the traceback when there is one; fields passed in a record's
`extra={"fields": {...}}` are added as they are. Rotation keeps `backups` old files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import logging.handlers
from pathlib import Path

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_BYTES_DEFAULT = 64 << 20
BACKUPS_DEFAULT = 5


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        out = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "thread": record.threadName,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                out.setdefault(str(key), value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(
    *,
    level: str | int = "INFO",
    fmt: str = "text",
    file: str | Path | None = None,
    max_bytes: int = MAX_BYTES_DEFAULT,
    backups: int = BACKUPS_DEFAULT,
) -> logging.Handler:
    """Give the root logger this one handler in place of any an earlier call installed
    (handlers others installed, such as a test runner's, stay); returns it."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(FORMATS)}")
    if max_bytes < 4096 or backups < 0:
        raise ValueError("a log file needs max_bytes >= 4096 and backups >= 0")
    if file:
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    else:
        handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler._logcentric_setup = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_logcentric_setup", False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def _bytes_max(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
    if not 4096 <= value <= 1 << 40:
        raise argparse.ArgumentTypeError(f"must be 4096..2^40 bytes, got {text}")
    return value


def _backups(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be 0..1000, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """A daemon's log flags: --log-format, --log-file, --log-file-bytes-max, --log-file-backups."""
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text lines or JSON lines (default text)",
    )
    parser.add_argument(
        "--log-file",
        default="",
        help="write the log to this file, rotated by size (default stderr)",
    )
    parser.add_argument(
        "--log-file-bytes-max",
        type=_bytes_max,
        default=MAX_BYTES_DEFAULT,
        help="rotate the log file at this size (default %(default)d)",
    )
    parser.add_argument(
        "--log-file-backups",
        type=_backups,
        default=BACKUPS_DEFAULT,
        help="rotated files kept (default %(default)d)",
    )


def configure_from_args(args: argparse.Namespace, level: str | int) -> logging.Handler:
    """`configure` from the flags `add_arguments` added."""
    return configure(
        level=level,
        fmt=args.log_format,
        file=args.log_file or None,
        max_bytes=args.log_file_bytes_max,
        backups=args.log_file_backups,
    )
