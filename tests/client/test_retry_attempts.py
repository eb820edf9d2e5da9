"""Tablet-server calls retry for the client's whole timeout, not a fixed short count.

Seen in the suite: a scan right after CreateTable gave up UNAVAILABLE (8 attempts, 1.6 s of
pauses) 1.7 s after the tablet was created, just before its first leader was elected.
"""

from __future__ import annotations

import time

from coordinator.client.client import TSERVER_ATTEMPTS_MAX, _attempts


def test_a_timeout_of_zero_still_retries_once():
    assert len(list(_attempts(0.0))) == 2


def test_attempts_go_on_until_the_timeout_has_passed():
    t0 = time.monotonic()
    seen = list(_attempts(2.5))
    t1 = time.monotonic()
    elapsed = t1 - t0
    # The retry window covers a first election (up to two 1 s election timeouts)...
    assert elapsed >= 2.5
    # ...with backoff pauses, not a busy loop, and never beyond the cap; every round is
    # given the same deadline, the call's.
    assert 2 < len(seen) < TSERVER_ATTEMPTS_MAX
    assert len(set(seen)) == 1 and t0 + 2.5 <= seen[0] <= t1 + 2.5
