"""Fixtures for the log tool: real logs in real logstore replicas (embedded, stopped and read
offline; or a `logstore serve` process read live)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from logstore.remote import RemoteLogStore
from logstore.replicated import ReplicatedLogStore
from optools import logtool
from tests.logstore.helpers import PASSWORD, free_addresses, wait_for
from tests.logstore.procs import ReplicaProcess, make_replicas

from .builder import Expected, build_history

NODE_UUID = "c1-node-uuid-for-tests"


@dataclass
class Built:
    node_dir: Path
    expected: Expected


def open_replica(node_dir: Path, address: str | None = None) -> ReplicatedLogStore:
    address = address or free_addresses(1)[0]
    store = ReplicatedLogStore(address, [address], str(node_dir / "logstore"), PASSWORD)
    store.barrier(timeout_s=20.0)
    return store


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> Built:
    """A node data dir (coordinator-uuid + logstore/) whose replica was stopped cleanly;
    everything is in the journal (no snapshot)."""
    node_dir = tmp_path_factory.mktemp("node")
    (node_dir / "coordinator-uuid").write_text(NODE_UUID + "\n")
    with open_replica(node_dir) as store:
        expected = build_history(store)
    return Built(node_dir, expected)


@pytest.fixture(scope="module")
def compacted(tmp_path_factory) -> Built:
    """The same history, then a snapshot (journal trimmed behind it), then two more records
    that live only in the journal."""
    from .builder import B_ADDR, B_UUID, Writer, lease

    node_dir = tmp_path_factory.mktemp("node-compacted")
    with open_replica(node_dir) as store:
        expected = build_history(store)
        store.force_compaction()
        wait_for(lambda: store.status()["snapshots_written"] >= 1, what="a snapshot")
        wait_for(lambda: store.status()["journal_first_index"] > 10, what="the journal trimmed")
        w = Writer(store, expected)
        renew = expected.ids["renew_b1"]
        w.record("renew_b2", lease(B_UUID, B_ADDR, expected.ids["takeover_b"], False), (renew,))
    return Built(node_dir, expected)


@dataclass
class Served:
    replica: ReplicaProcess
    expected: Expected

    @property
    def address(self) -> str:
        return self.replica.rpc_address


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    (replica,) = make_replicas(tmp_path_factory.mktemp("serve"), 1)
    replica.start()
    try:
        with RemoteLogStore([replica.rpc_address]) as store:
            store.barrier(timeout_s=20.0)
            expected = build_history(store)
        yield Served(replica, expected)
    finally:
        replica.stop()


def run_tool(*argv: str, credentials=None) -> tuple[int, str]:
    """Run the tool in-process; (exit code, stdout). `credentials` (rpc.credentials): a live
    read of a CURVE node as that principal (what `coordinator log --credentials` passes)."""
    out = io.StringIO()
    args = logtool.build_parser().parse_args(list(argv))
    args.credentials_obj = credentials
    code = logtool.run(args, out=out)
    return code, out.getvalue()


def one_doc(text: str) -> dict:
    """The one JSON document a non-follow --json run prints (one line, one object)."""
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1, f"expected one JSON document, got {len(lines)} lines"
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def items(text: str) -> list[dict]:
    """The list a non-follow --json document carries (records, pending or epochs), or the
    document itself (--summary) as a list of one."""
    doc = one_doc(text)
    if "by_type" in doc:  # --summary ("epochs" there is a count)
        return [doc]
    for key in ("records", "pending", "epochs"):
        if key in doc:
            assert isinstance(doc[key], list)
            return doc[key]
    raise AssertionError(f"no list in {sorted(doc)}")
