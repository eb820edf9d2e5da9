"""The Raft driver's inbox of network messages is bounded in messages and in payload bytes
(what arrives beyond is dropped: Raft resends), and an empty inbox takes one message of
any size, so that no message is too big ever to be delivered."""

from __future__ import annotations

from tservers.consensus import AppendRequest, Entry
from tservers.consensus.types import EntryType
from tservers.raft_driver import MESSAGE_OVERHEAD_BYTES, DriverOptions, RaftDriver, message_bytes


def append(n_entries: int, payload_bytes: int, first: int = 1) -> AppendRequest:
    entries = tuple(
        Entry(1, i, EntryType.WRITE, b"x" * payload_bytes) for i in range(first, first + n_entries)
    )
    return AppendRequest("t", "leader", "me", 1, first - 1, 1 if first > 1 else 0, entries, 0)


def driver(**opts) -> RaftDriver:
    return RaftDriver("me", appender=None, options=DriverOptions(**opts))  # never started


def test_message_bytes_counts_payloads_and_an_overhead():
    assert message_bytes(append(3, 1000)) == MESSAGE_OVERHEAD_BYTES + 3000
    assert message_bytes(append(0, 0)) == MESSAGE_OVERHEAD_BYTES


def test_inbox_is_bounded_in_bytes():
    d = driver(inbox_bytes_max=10_000)
    msgs = [append(1, 3000, first=i) for i in range(1, 6)]
    assert d.deliver(msgs, {}) == 3  # 3 x 3128 fit in 10,000, a fourth does not
    assert d.messages_in == 3 and d.messages_dropped == 2
    assert d.deliver([append(1, 10, first=9)], {}) == 1  # a small one still fits
    assert d.deliver([append(1, 3000, first=10)], {}) == 0


def test_inbox_is_bounded_in_messages():
    d = driver(inbox_messages_max=4)
    assert d.deliver([append(1, 1, first=i) for i in range(1, 4)], {}) == 3
    assert d.deliver([append(1, 1, first=i) for i in range(4, 7)], {}) == 1
    assert d.messages_dropped == 2


def test_an_empty_inbox_takes_one_message_of_any_size():
    d = driver(inbox_bytes_max=1000)
    assert d.deliver([append(2, 5000), append(1, 1, first=3)], {}) == 1
    assert d.deliver([append(1, 5000, first=3)], {}) == 0  # not empty any more
