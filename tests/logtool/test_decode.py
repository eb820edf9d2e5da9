"""Unit tests of the pure decoding core: every record type, bad bytes never raise, gone
ranges, filters, pending operations, lease history and summary counts."""

from __future__ import annotations

import random

from coordinator.records import (
    TYPE_GONE,
    TYPE_INVALIDATION,
    TYPE_UNDECODABLE,
    Filter,
    RawEntry,
    Status,
    decode_entry,
    gone_ranges,
    lease_history,
    normalize_type,
    pending_operations,
    summarize,
)
from optools.logtool_source import safe_unpickle
from rpc.protocols import coordinator_pb2 as pb

from .builder import create_table, lease


def raw(i: int, rec: pb.LogRecord | bytes, live: bool = True, inv=(), by: int = 0) -> RawEntry:
    data = rec if isinstance(rec, bytes) else rec.SerializeToString()
    return RawEntry(i, data, tuple(inv), live, by)


def test_create_table_fields():
    v = decode_entry(raw(7, create_table(7, "users", pb.STARTED, "cli", 3)))
    assert v.type == "create_table" and v.status is Status.LIVE
    assert (v.op_id, v.phase, v.request_id) == (7, "STARTED", "cli/3")
    assert v.table_id == "t7" and v.table_names == ("users",)
    assert v.tablets == ("t7-0", "t7-1") and v.servers == ("ts-1", "ts-2", "ts-3")
    assert v.to_json()["record"]["create_table"]["name"] == "users"


def test_lease_epoch_of_takeover_is_its_own_id():
    t = decode_entry(raw(5, lease("u", "a:1", 0, True)))
    r = decode_entry(raw(6, lease("u", "a:1", 5, False), inv=(4,)))
    assert t.lease == ("u", "a:1", 5, True, 0) and r.lease == ("u", "a:1", 5, False, 0)
    assert r.invalidates == (4,)


def test_every_server_record_type():
    recs = {
        "enlist_server": pb.LogRecord(
            enlist_server=pb.EnlistServer(
                header=pb.OpHeader(op_id=3, phase=pb.DONE), server_uuid="s", address="h:1"
            )
        ),
        "server_down": pb.LogRecord(
            server_down=pb.ServerDown(
                header=pb.OpHeader(op_id=4, phase=pb.DONE), server_uuid="s", reason="silent"
            )
        ),
        "remove_server": pb.LogRecord(
            remove_server=pb.RemoveServer(
                header=pb.OpHeader(op_id=5, phase=pb.DONE), server_uuid="s", previous_record_id=4
            )
        ),
    }
    for kind, rec in recs.items():
        v = decode_entry(raw(1, rec))
        assert v.type == kind and v.servers == ("s",) and v.phase == "DONE"


def test_bad_bytes_never_raise():
    rng = random.Random(1234)
    good = create_table(7, "users", pb.STARTED, "cli", 3).SerializeToString()
    samples = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) for _ in range(500)]
    # Flipped bytes and truncations of a real record.
    for _ in range(500):
        b = bytearray(good)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        samples.append(bytes(b[: rng.randrange(1, len(b) + 1)]))
    kinds = set()
    for s in samples:
        v = decode_entry(RawEntry(1, s, (), True))
        kinds.add(v.type)
        if v.type == TYPE_UNDECODABLE:
            assert v.error
        v.to_json()
    assert TYPE_UNDECODABLE in kinds


def test_invalid_utf8_string_is_undecodable():
    # field 2 (create_table) holding field 3 (name, a string) with invalid UTF-8
    inner = b"\x1a\x02\xff\xfe"
    v = decode_entry(RawEntry(1, b"\x12" + bytes([len(inner)]) + inner, (), True))
    assert v.type == TYPE_UNDECODABLE


def test_empty_entry_is_invalidation_only():
    v = decode_entry(RawEntry(3, b"", (1, 2), False))
    assert v.type == TYPE_INVALIDATION and v.invalidates == (1, 2)


def test_gone_ranges_split_by_invalidator():
    views = gone_ranges(10, {1, 2, 6, 10}, {3: 6, 4: 6, 5: 9, 7: 0})
    got = [(v.id, v.id_to, v.invalidated_by) for v in views]
    assert got == [(3, 4, 6), (5, 5, 9), (7, 9, 0)]
    assert all(v.type == TYPE_GONE for v in views)
    assert [(v.id, v.id_to) for v in gone_ranges(10, {1, 2, 6, 10}, {}, first_id=8)] == [(8, 9)]


def test_normalize_type():
    assert normalize_type("CreateTable") == "create_table"
    assert normalize_type("create-table") == "create_table"
    assert normalize_type("lease") == "lease"
    assert normalize_type("nope") is None


def _views():
    return [
        decode_entry(raw(1, lease("a", "a:1", 0, True))),
        decode_entry(raw(2, create_table(2, "users", pb.STARTED, "c", 1), False, by=3)),
        decode_entry(raw(3, create_table(2, "users", pb.DONE, "c", 1), inv=(2,))),
        decode_entry(raw(4, create_table(4, "orders", pb.STARTED, "c", 2))),
        decode_entry(raw(5, lease("b", "b:1", 0, True))),
        decode_entry(raw(6, b"\xff\xff\xff")),
    ]


def test_filters():
    views = _views()
    assert [v.id for v in views if Filter(types=frozenset({"lease"})).matches(v)] == [1, 5]
    assert [v.id for v in views if Filter(op_ids=frozenset({2})).matches(v)] == [2, 3]
    assert [v.id for v in views if Filter(tables=frozenset({"orders"})).matches(v)] == [4]
    assert [v.id for v in views if Filter(tables=frozenset({"t2"})).matches(v)] == [2, 3]
    assert [v.id for v in views if Filter(servers=frozenset({"ts-1"})).matches(v)] == [2, 3, 4]
    assert [v.id for v in views if Filter(live_only=True).matches(v)] == [1, 3, 4, 5, 6]


def test_pending_and_leases_and_summary():
    views = _views()
    assert [v.id for v in pending_operations(views)] == [4]
    epochs = lease_history(views)
    assert [(e.epoch, e.holder_uuid, e.ended_by, e.last_record_id) for e in epochs] == [
        (1, "a", 5, 4),
        (5, "b", 0, 6),
    ]
    s = summarize(views, last_id=8)  # ids 7 and 8: invalidated, no longer held
    assert s["by_type"]["create_table"]["live"] == 2
    assert s["by_type"]["create_table"]["invalidated_held"] == 1
    assert s["live"] == 5 and s["invalidated"] == 3
    assert s["invalidated_held"] == 1 and s["gone_ids"] == 2
    assert s["undecodable"] == 1 and s["pending_operations"] == 1 and s["epochs"] == 2


def test_safe_unpickle_refuses_other_globals():
    import pickle

    import pytest

    assert safe_unpickle(pickle.dumps((0, ("log", b"x", None, (1,))), 2)) == (
        0,
        ("log", b"x", None, (1,)),
    )
    assert safe_unpickle(pickle.dumps(b"", 2)) == b""
    with pytest.raises(pickle.UnpicklingError):
        safe_unpickle(pickle.dumps(random.Random, 2))


def test_renewal_notes_at_most_every_interval_and_once_at_the_end():
    import io

    from optools.logtool import RenewalNotes

    now = [100.0]
    out, err = io.StringIO(), io.StringIO()
    notes = RenewalNotes(out, err, json_lines=False, interval_s=10.0, clock=lambda: now[0])
    notes.hidden(3)  # the first note comes at once
    notes.hidden(0)
    now[0] += 4.0
    notes.hidden(2)  # within 10 s of the last note: counted, not said
    now[0] += 5.9
    notes.hidden(1)
    now[0] += 0.1
    notes.hidden(0)  # 10 s since the last note: says the 3 it held back
    now[0] += 1.0
    notes.hidden(4)
    notes.close()  # the rest, once
    notes.close()  # nothing more
    assert out.getvalue().splitlines() == [
        "(3 lease renewals hidden; --renewals shows them)",
        "(3 lease renewals hidden; --renewals shows them)",
        "(4 lease renewals hidden; --renewals shows them)",
    ]
    assert notes.total == 10 and err.getvalue() == ""
    # --json: stdout keeps only records; the note goes to stderr.
    notes = RenewalNotes(out, err, json_lines=True, clock=lambda: now[0])
    notes.hidden(1)
    assert err.getvalue() == "(1 lease renewal hidden; --renewals shows them)\n"


def test_lease_time_is_utc_iso_8601_and_dash_without_one():
    from coordinator.records import utc_iso

    rec = pb.LogRecord(
        lease=pb.Lease(holder_uuid="u", holder_address="a:1", takeover=True, written_unix_ms=1)
    )
    v = decode_entry(raw(5, rec))
    assert v.to_json()["lease"]["written_at"] == "1970-01-01T00:00:00.001Z"
    assert "at=1970-01-01T00:00:00.001Z" in v.summary
    assert utc_iso(1_764_107_702_123) == "2025-11-25T21:55:02.123Z"
    assert utc_iso(0) is None and utc_iso(2**63) is None
    old = decode_entry(raw(6, lease("u", "a:1", 0, True)))
    assert old.to_json()["lease"]["written_at"] is None and "at=-" in old.summary
