"""Refusals at the CURVE handshake, judged per key: an admission window before a WARNING.

A tablet server runs before its key is admitted: `local-cluster up` starts it and then logs
its principal as the admin; a server joining with a join token heartbeats with its own key
as soon as JoinServer answers, before every node has replayed its principal; a tool calls a
tablet server as the admin before the leader pushed it the principals table. Until then
each node refuses each of its handshakes (the client reconnects every half second or so).
That is admission at work, not something to page anyone about, and seven WARNINGs a
coordinator at every secure start teach an on-call engineer to ignore the real ones.

So a key's first refusal is one INFO line; its later refusals within `window_s` of the
first are counted only; a key still refused after the window is a WARNING, with the count
and how long (once per window while it keeps trying); a key admitted after refusals gets
one INFO line saying after how many and how long. A key refused and never seen again (a
peer that gave up within the window) stays at INFO.

`HandshakeRefusals` is the pure rule (time is an input; no logging), bounded in the keys it
remembers; `HandshakeLog` is what `rpc.server`'s ZAP handler calls, and logs.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

# How long a key may be refused before its refusals are a WARNING: an admission by an admin
# script or a join on a loaded machine (local-cluster admits its servers within ~5 s idle).
ADMISSION_WINDOW_S = 30.0
# Keys remembered at once (refused, not yet admitted or warned of); the oldest forgotten
# first, so a flood of made-up keys costs bounded memory (and a forgotten key that comes
# back starts a new window: at worst one more INFO line).
KEYS_REMEMBERED_MAX = 1024
# First refusals logged at INFO per window of the log (the rest counted, said in one line).
FIRSTS_LOGGED_MAX = 20

log = logging.getLogger(__name__)


class Verdict(enum.Enum):
    FIRST = "first"  # the key's first refusal: INFO
    COUNTED = "counted"  # within its admission window, or warned of in this window already
    STILL_REFUSED = "still_refused"  # refused past its window: WARNING


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: Verdict
    refusals: int  # this key's refusals so far (this one included)
    since_s: float  # since its first refusal


@dataclass(slots=True)
class _Key:
    first_s: float
    refusals: int = 0
    warned_s: float | None = None


class HandshakeRefusals:
    """The per-key rule (see the module docstring). Not thread-safe: `HandshakeLog` locks."""

    def __init__(
        self, window_s: float = ADMISSION_WINDOW_S, keys_max: int = KEYS_REMEMBERED_MAX
    ) -> None:
        assert window_s > 0 and keys_max >= 1
        self.window_s = window_s
        self._keys_max = keys_max
        self._keys: OrderedDict[str, _Key] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def refused(self, key: str, now_s: float) -> Judged:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key(first_s=now_s)
            while len(self._keys) > self._keys_max:
                self._keys.popitem(last=False)
        state.refusals += 1
        since_s = now_s - state.first_s
        if state.refusals == 1:
            verdict = Verdict.FIRST
        elif since_s >= self.window_s and (
            state.warned_s is None or now_s - state.warned_s >= self.window_s
        ):
            state.warned_s = now_s
            verdict = Verdict.STILL_REFUSED
        else:
            verdict = Verdict.COUNTED
        return Judged(verdict, state.refusals, since_s)

    def admitted(self, key: str, now_s: float) -> Judged | None:
        """The key passed the handshake: forget it. Its refusals before, if it had any."""
        state = self._keys.pop(key, None)
        if state is None:
            return None
        return Judged(Verdict.COUNTED, state.refusals, now_s - state.first_s)


class HandshakeLog:
    """What the ZAP handler calls (its own thread): logs by `HandshakeRefusals`' verdicts.
    `warn` takes the WARNINGs (rpc.server gives its rate-limited refusal log); the INFO
    lines of first refusals are limited to FIRSTS_LOGGED_MAX per window."""

    def __init__(
        self,
        service: str,
        warn: Callable[..., None],
        *,
        window_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        window_s = ADMISSION_WINDOW_S if window_s is None else window_s  # read at each server
        self._service = service or "rpc server"
        self._warn = warn
        self._clock = clock
        self._rule = HandshakeRefusals(window_s)
        self._lock = threading.Lock()
        self._firsts_window_s = -window_s
        self._firsts_logged = 0
        self._firsts_unlogged = 0

    def refused(self, key: str) -> None:
        with self._lock:
            now_s = self._clock()
            judged = self._rule.refused(key, now_s)
            log_first, unlogged = False, 0
            if judged.verdict is Verdict.FIRST:
                log_first, unlogged = self._first_budget(now_s)
        window_s = self._rule.window_s
        if unlogged:
            log.info(
                "%s: %d more keys refused at the CURVE handshake were not logged (at most %d "
                "per %.0f s)",
                self._service,
                unlogged,
                FIRSTS_LOGGED_MAX,
                window_s,
            )
        if log_first:
            log.info(
                "%s refused a connection at the CURVE handshake: unknown key %s (expected "
                "while a server or tool waits to be admitted; a WARNING if still refused "
                "after %.0f s)",
                self._service,
                key,
                window_s,
            )
        elif judged.verdict is Verdict.STILL_REFUSED:
            self._warn(
                "%s refused a connection at the CURVE handshake: unknown key %s, refused %d "
                "times in %.0f s (not admitted: unknown or revoked)",
                self._service,
                key,
                judged.refusals,
                judged.since_s,
            )
        else:
            log.debug("%s refused key %s again (%d)", self._service, key, judged.refusals)

    def admitted(self, key: str) -> None:
        with self._lock:
            judged = self._rule.admitted(key, self._clock())
        if judged is not None:
            log.info(
                "%s admitted key %s at the CURVE handshake after %d refusals in %.1f s",
                self._service,
                key,
                judged.refusals,
                judged.since_s,
            )

    def _first_budget(self, now_s: float) -> tuple[bool, int]:
        """Whether one more first refusal may be logged at INFO now, and how many went
        unlogged in the window that just closed (under _lock)."""
        unlogged = 0
        if now_s - self._firsts_window_s >= self._rule.window_s:
            unlogged = self._firsts_unlogged
            self._firsts_window_s, self._firsts_logged, self._firsts_unlogged = now_s, 0, 0
        if self._firsts_logged >= FIRSTS_LOGGED_MAX:
            self._firsts_unlogged += 1
            return False, unlogged
        self._firsts_logged += 1
        return True, unlogged
