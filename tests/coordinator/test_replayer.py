"""The replay thread over a MemoryLogStore: order, gaps left by invalidation, chunking."""

from __future__ import annotations

import time

from coordinator.catalog import Catalog, ServerState
from coordinator.leases.driver import LOG_NAME
from coordinator.replay.replayer import READ_CHUNK_ENTRIES, Replayer
from logstore.memory import MemoryLogStore
from rpc.protocols import coordinator_pb2 as pb


def enlist(uuid: str, address: str, previous: int) -> bytes:
    record = pb.LogRecord()
    record.enlist_server.header.phase = pb.DONE
    record.enlist_server.server_uuid = uuid
    record.enlist_server.address = address
    record.enlist_server.previous_record_id = previous
    return record.SerializeToString()


def fill(store: MemoryLogStore, servers: int, rounds: int) -> None:
    """Each round re-enlists every server at a new address, invalidating its old record."""
    last: dict[str, int] = {}
    for r in range(rounds):
        for s in range(servers):
            uuid = f"s{s}"
            prev = last.get(uuid, 0)
            last[uuid] = store.append(
                LOG_NAME, enlist(uuid, f"h:{r}", prev), invalidates=(prev,) if prev else ()
            )


def test_apply_through_skips_invalidated_ids_across_chunks():
    store = MemoryLogStore()
    fill(store, servers=7, rounds=3 * READ_CHUNK_ENTRIES // 7)
    last = store.last_id(LOG_NAME)
    catalog = Catalog()
    replayer = Replayer(store, catalog)
    assert replayer.apply_through(last) == last
    assert catalog.applied_id == last
    assert {s.address for s in catalog.servers.values()} == {f"h:{3 * READ_CHUNK_ENTRIES // 7 - 1}"}
    assert all(s.state is ServerState.LIVE for s in catalog.servers.values())


def test_thread_follows_new_records():
    store = MemoryLogStore()
    catalog = Catalog()
    with Replayer(store, catalog, poll_interval_s=0.01):
        fill(store, servers=3, rounds=2)
        target = store.last_id(LOG_NAME)
        deadline = time.monotonic() + 10
        while catalog.applied_id < target and time.monotonic() < deadline:
            time.sleep(0.01)
        assert catalog.applied_id == target
        assert {s.address for s in catalog.servers.values()} == {"h:1"}


def test_apply_own_applies_what_came_before():
    store = MemoryLogStore()
    catalog = Catalog()
    replayer = Replayer(store, catalog)
    store.append(LOG_NAME, enlist("a", "h:1", 0))  # e.g. a lease renewal by the driver
    data = enlist("b", "h:2", 0)
    entry_id = store.append(LOG_NAME, data, expected_id=2)
    record = pb.LogRecord()
    record.ParseFromString(data)
    replayer.apply_own(entry_id, record)
    assert catalog.applied_id == 2 and set(catalog.servers) == {"a", "b"}
