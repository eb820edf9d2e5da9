"""Every per-row error names the column and what is wrong with its value: the rows the
client refuses before sending (`Table.fit`: Arrow's own conversion errors name no column)
and the rows a tablet server refuses (it names a key by its value only)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from logcentric.client import Client, Column, Table
from tests.support.cluster import local_cluster


def _table() -> Table:
    t = Table(None, "t")  # fit() needs only the schema: no cluster
    t.arrow_schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string(), nullable=False),
            pa.field("n", pa.int8()),
            pa.field("ts", pa.timestamp("us")),
            pa.field("b", pa.bool_()),
        ]
    )
    t.key_columns = ["id"]
    return t


def test_rows_given_as_dicts_name_the_column_and_the_value():
    _, refused = _table().fit(
        [
            {"id": 1, "name": "fits"},
            {"id": "x", "name": "b"},
            {"id": 2, "name": 5},
            {"id": 3, "name": "c", "n": 300},
            {"id": 4, "name": "d", "ts": "not a time"},
            {"id": 6, "name": "e", "b": "yes"},
            {"id": 7, "name": b"\xff"},
            {"id": 8, "name": None},
            {"id": 9, "name": "x" * 500, "n": 1000},
        ]
    )
    why = {row["id"]: text for row, text in refused}
    assert set(why) == {2, 3, 4, 6, 7, 8, 9, "x"}
    assert why["x"].startswith("column 'id' (int64): value 'x' does not fit: ")
    assert why[2].startswith("column 'name' (string): value 5 does not fit: ")
    assert why[3].startswith("column 'n' (int8): value 300 does not fit: ")
    assert why[4].startswith("column 'ts' (timestamp[us]): value 'not a time' does not fit: ")
    assert why[6].startswith("column 'b' (bool): value 'yes' does not fit: ")
    assert why[7].startswith("column 'name' (string): value b'\\xff' does not fit: ")
    assert why[8] == "column 'name' is null, which it cannot be"
    assert why[9].startswith("column 'n' (int8): value 1000 does not fit: ")


def test_arrow_rows_name_every_column_that_does_not_fit():
    _, refused = _table().fit(
        pa.table(
            {
                "id": pa.array([1, 2**64 - 1, 3], pa.uint64()),
                "name": ["a", "b", "c"],
                "n": pa.array([1.0, 500.0, 2.5]),
            }
        )
    )
    why = {row["id"]: text for row, text in refused}
    assert why[2**64 - 1] == (
        "column 'id' (int64): value 18446744073709551615 does not fit: Integer value "
        "18446744073709551615 not in range: 0 to 9223372036854775807; column 'n' (int8): "
        "value 500.0 does not fit: Float value 500.000000 was truncated converting to int8"
    )
    assert why[3].startswith("column 'n' (int8): value 2.5 does not fit: Float value 2.5")
    _, refused = _table().fit(pa.table({"id": ["1", "zz"], "name": ["a", "b"]}))
    assert [text for _, text in refused] == [
        "column 'id' (int64): value 'zz' does not fit: Failed to parse string: 'zz' as a "
        "scalar of type int64"
    ]
    _, refused = _table().fit(pa.table({"id": [1], "name": pa.array([b"\xff"], pa.binary())}))
    assert (
        refused[0][1] == "column 'name' (string): value b'\\xff' does not fit: Invalid UTF8 payload"
    )


def test_a_long_value_is_cut_in_the_message():
    _, refused = _table().fit([{"id": "9" * 1000 + "x", "name": "a"}])
    (text,) = [t for _, t in refused]
    assert text.startswith("column 'id' (int64): value '999") and "...' does not fit" not in text
    assert "..." in text and len(text) < 1000


@pytest.mark.integration
def test_tablet_server_refusals_name_the_key_columns(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=1) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            v = Column("v", "string", nullable=True)
            client.create_table("one", [Column("id", "int64", key=True), v], num_tablets=1)
            keys = [Column("a", "int64", key=True), Column("b", "string", key=True)]
            client.create_table("two", [*keys, v], num_tablets=1)
            one, two = client.table("one"), client.table("two")
            with client.new_session() as s:
                s.insert(one, [{"id": 1, "v": "x"}])
                s.insert(two, [{"a": 1, "b": "k", "v": "x"}])
                s.flush()
                assert s.errors == []
                s.insert(one, [{"id": 1, "v": "again"}, {"id": 2, "v": "new"}])
                s.update(one, [{"id": 99, "v": "nobody"}])
                s.delete(one, [{"id": 98}])
                s.insert(two, [{"a": 1, "b": "k", "v": "again"}])
                errors = s.flush()
    got = sorted((e.op, e.status, e.message) for e in errors)
    assert [(op, status) for op, status, _ in got] == [
        ("delete", "NOT_FOUND"),
        ("insert", "ALREADY_EXISTS"),
        ("insert", "ALREADY_EXISTS"),
        ("update", "NOT_FOUND"),
    ], got
    messages = [m for _, _, m in got]
    assert messages[0].startswith("key column 'id' = 98: ") and "not found" in messages[0]
    inserts = sorted(messages[1:3])
    assert inserts[0].startswith("key column 'id' = 1: ") and "already exists" in inserts[0]
    assert inserts[1].startswith("key columns 'a' = 1, 'b' = 'k': ") and "already" in inserts[1]
    assert messages[3].startswith("key column 'id' = 99: ") and "not found" in messages[3]
