"""A RemoteLogStore talking to one `logstore serve` process (contract suite), with CURVE
(the replica's default) as a key it admits."""

from __future__ import annotations

import contextlib

from .procs import make_replicas, remote


@contextlib.contextmanager
def remote_store(tmp_path):
    (replica,) = make_replicas(tmp_path, 1, secure=True)
    replica.start()
    try:
        with remote([replica]) as store:
            store.barrier(timeout_s=20.0)
            yield store
    finally:
        replica.stop()
