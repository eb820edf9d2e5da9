"""The schema rules that the coordinator and the tablet servers both check, defined once.

The coordinator logs a CreateTable or AlterTable decision before any tablet server sees the
schema; a schema it accepted and a tablet server then refused would leave that operation
pending for ever (every retry refused), and with it a new leader's recovery. So the
coordinator checks at least what `tservers.tablet.schema` checks, from these definitions.
Light on purpose (no pyarrow): the coordinator imports it. It lives in the wire layer, beside
the protocols whose schemas it rules on, because the coordinator imports no tablet-server
code (design/architecture.md). Type numbers are the wire's, the same in coordinator.proto's
ColumnType and tserver.proto's DataType.
"""

from __future__ import annotations

import re

COLUMNS_MAX = 300
# ASCII letters, digits and '_', not starting with a digit, 1-128 characters.
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
DOUBLE = 3  # a key column may not be a double (equality and order of floats)


def column_name_problem(name: str) -> str | None:
    """Why `name` cannot name a column, or None."""
    if COLUMN_NAME_RE.match(name):
        return None
    return (
        f"bad column name {name!r}: letters, digits and '_', not starting with a digit, "
        "at most 128 characters"
    )
