"""The coordinator accepts no schema that a tablet server would refuse.

A CreateTable is logged (its commit point) before any tablet server sees the schema; one the
servers then refused would stay pending for ever, and with it every new leader's recovery.
Both sides check from `rpc.schema_rules`; this holds them to it on random schemas.
"""

from __future__ import annotations

import random

import pytest

from coordinator.gateway import schema_to_tserver
from coordinator.ops.common import check_column, check_schema
from rpc.errors import BadRequest
from rpc.protocols import coordinator_pb2 as pb
from tservers.tablet.schema import validate_new

NAMES = ["id", "_x", "a1", "Z_9", "my-id", "bad name", "1st", "é", "", "x" * 128, "y" * 129]
TYPES = [pb.INT64, pb.INT32, pb.DOUBLE, pb.BOOL, pb.STRING, pb.BINARY, pb.TIMESTAMP]


def accepted(check, schema) -> bool:
    try:
        check(schema)
    except BadRequest:
        return False
    return True


def random_schema(rng: random.Random) -> pb.Schema:
    schema = pb.Schema()
    for i in range(rng.randint(0, 5)):
        schema.columns.add(
            name=rng.choice(NAMES) if rng.random() < 0.5 else f"c{i}",
            type=rng.choice(TYPES),
            is_key=rng.random() < 0.4,
            nullable=rng.random() < 0.3,
        )
    return schema


def test_whatever_the_coordinator_accepts_a_tablet_server_accepts():
    rng = random.Random(7)
    both = coordinator_only = 0
    for _ in range(5000):
        schema = random_schema(rng)
        coordinator = accepted(check_schema, schema)
        tserver = accepted(validate_new, schema_to_tserver(schema))
        assert tserver or not coordinator, schema
        both += coordinator and tserver
        coordinator_only += tserver and not coordinator
    assert both > 100  # the generator reaches valid schemas too
    assert coordinator_only == 0  # and the two agree on them


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ([("my-id", pb.INT64, True)], "bad column name 'my-id'"),
        ([("bad name", pb.INT64, True)], "bad column name"),
        ([("1st", pb.INT64, True)], "bad column name"),
        ([("k" * 129, pb.INT64, True)], "bad column name"),
        ([("k", pb.DOUBLE, True)], "cannot be a double"),
    ],
)
def test_refused_by_the_coordinator_before_anything_is_logged(columns, message):
    schema = pb.Schema()
    for name, kind, key in columns:
        schema.columns.add(name=name, type=kind, is_key=key)
    with pytest.raises(BadRequest, match=message):
        check_schema(schema)


def test_an_added_column_follows_the_same_name_rule():
    with pytest.raises(BadRequest, match="bad column name"):
        check_column(pb.ColumnSchema(name="new-col", type=pb.STRING, nullable=True))
    check_column(pb.ColumnSchema(name="new_col", type=pb.STRING, nullable=True))
