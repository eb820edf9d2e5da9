"""Warnings of refused requests at a bounded rate: a scanner, a flood or a wrong password in a
dashboard must not fill the log. Used by the rpc server (refused calls) and the HTTP
endpoints (refused requests)."""

from __future__ import annotations

import logging
import threading
import time


class RefusalLog:
    """Warnings on `logger`, at most `burst` per `window_s`; the ones left out are summed up
    in one line ("N more <what> were not logged ...<note>") when the next window opens."""

    def __init__(
        self, logger: logging.Logger, what: str, burst: int, window_s: float, note: str = ""
    ) -> None:
        assert burst >= 1 and window_s > 0
        self._log = logger
        self._what = what
        self._note = note
        self._burst = burst
        self._window_s = window_s
        self._lock = threading.Lock()
        self._window_start = -window_s
        self._logged = 0
        self._unlogged = 0

    def warning(self, msg: str, *args) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._window_start >= self._window_s:
                unlogged, self._unlogged = self._unlogged, 0
                self._window_start, self._logged = now, 0
                if unlogged:
                    self._log.warning(
                        "%d more %s were not logged (at most %d per %.0f s%s)",
                        unlogged,
                        self._what,
                        self._burst,
                        self._window_s,
                        self._note,
                    )
            if self._logged >= self._burst:
                self._unlogged += 1
                return
            self._logged += 1
        self._log.warning(msg, *args)
