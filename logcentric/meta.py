"""Client side of the coordinator protocol: leader discovery, request ids, bounded retries.

The public name, in the user package, of `rpc.coordinator_client` (the implementation lives
in the wire layer: the server tools call the coordinators with it too, and no server package
imports this one; design/architecture.md). See that module for how calls are retried and
how a silent node is given up.
"""

from __future__ import annotations

from rpc.coordinator_client import (
    ATTEMPTS_MAX,
    BACKOFF_INITIAL_S,
    BACKOFF_MAX_S,
    HINT_HOPS_AT_ONCE,
    PATIENCE_INITIAL_S,
    PATIENCE_MAX_S,
    PING_TIMEOUT_S,
    RETRYABLE,
    SUSPECT_S,
    WATCH_INTERVAL_S,
    WATCH_JOIN_S,
    CoordinatorClient,
    SilenceWatch,
    attempt_patience_s,
)

__all__ = [
    "ATTEMPTS_MAX",
    "BACKOFF_INITIAL_S",
    "BACKOFF_MAX_S",
    "HINT_HOPS_AT_ONCE",
    "PATIENCE_INITIAL_S",
    "PATIENCE_MAX_S",
    "PING_TIMEOUT_S",
    "RETRYABLE",
    "SUSPECT_S",
    "WATCH_INTERVAL_S",
    "WATCH_JOIN_S",
    "CoordinatorClient",
    "SilenceWatch",
    "attempt_patience_s",
]
