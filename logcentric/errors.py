"""The exceptions a user of `logcentric` catches: one class per wire status code.

They are defined once, in the wire layer (`rpc.errors`), because servers raise them and clients
rebuild them from the answer's status; this module names them for users. Every one derives
from `LogcentricError` (an alias of `rpc.errors.RpcError`): `except logcentric.LogcentricError`
catches anything the cluster answered.
"""

from __future__ import annotations

from rpc.errors import (
    AlreadyExists,
    AlreadyInProgress,
    BadRequest,
    Cancelled,
    CasFailed,
    ConditionFailed,
    Corruption,
    IllegalState,
    Internal,
    InvalidName,
    InvalidTerm,
    LeaderHintValue,
    NoSpace,
    NotFound,
    NotLeader,
    PermissionDenied,
    RpcError,
    SchemaVersionMismatch,
    TabletDeleted,
    TabletFailed,
    TabletNotFound,
    Throttled,
    TimedOut,
    Unauthenticated,
    Unavailable,
)

LogcentricError = RpcError

__all__ = [
    "AlreadyExists",
    "AlreadyInProgress",
    "BadRequest",
    "Cancelled",
    "CasFailed",
    "ConditionFailed",
    "Corruption",
    "IllegalState",
    "Internal",
    "InvalidName",
    "InvalidTerm",
    "LeaderHintValue",
    "LogcentricError",
    "NoSpace",
    "NotFound",
    "NotLeader",
    "PermissionDenied",
    "RpcError",
    "SchemaVersionMismatch",
    "TabletDeleted",
    "TabletFailed",
    "TabletNotFound",
    "Throttled",
    "TimedOut",
    "Unauthenticated",
    "Unavailable",
]
