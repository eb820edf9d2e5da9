"""A RemoteLogStore talking to one `logstore serve` process (contract suite)."""

from __future__ import annotations

import contextlib

from logstore.remote import RemoteLogStore

from .procs import make_replicas


@contextlib.contextmanager
def remote_store(tmp_path):
    (replica,) = make_replicas(tmp_path, 1)
    replica.start()
    try:
        with RemoteLogStore([replica.rpc_address]) as store:
            store.barrier(timeout_s=20.0)
            yield store
    finally:
        replica.stop()
