"""One exception class per wire status code.

Every service raises these in its handlers and every client receives them back: the server
turns an `RpcError` into a response header (status, message, leader hint, retry hint, and
optionally a body with details), and the client turns that header back into the same class.
Programmer errors are not `RpcError`s: a handler that raises anything else answers INTERNAL.
"""

from __future__ import annotations

from dataclasses import dataclass

from rpc.rpc_pb2 import StatusCode


@dataclass(frozen=True, slots=True)
class LeaderHintValue:
    """Where a client should go instead: the leader's UUID, address and epoch."""

    uuid: str = ""
    address: str = ""
    epoch: int = 0

    def __bool__(self) -> bool:
        return bool(self.address or self.uuid)


class RpcError(Exception):
    """Base of every wire error; `status` is the StatusCode value of the class."""

    status: int = StatusCode.INTERNAL

    def __init__(
        self,
        message: str = "",
        *,
        leader_hint: LeaderHintValue | None = None,
        retry_after_ms: int = 0,
        body: bytes = b"",
        server_uuid: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.leader_hint = leader_hint or LeaderHintValue()
        self.retry_after_ms = retry_after_ms
        # A handler may attach a serialized response message with details (for example the
        # current last id of a log with CONDITION_FAILED); callers decode it with decode_body.
        self.body = body
        self.server_uuid = server_uuid

    @property
    def status_name(self) -> str:
        return StatusCode.Name(self.status)

    def decode_body(self, message_type):
        msg = message_type()
        msg.ParseFromString(self.body)
        return msg

    def __str__(self) -> str:
        text = f"{self.status_name}: {self.message}" if self.message else self.status_name
        if self.leader_hint:
            text += f" (leader hint: {self.leader_hint.uuid}@{self.leader_hint.address})"
        return text


class NotLeader(RpcError):
    status = StatusCode.NOT_LEADER


class InvalidName(RpcError):
    status = StatusCode.INVALID_NAME


class InvalidTerm(RpcError):
    status = StatusCode.INVALID_TERM


class ConditionFailed(RpcError):
    status = StatusCode.CONDITION_FAILED


class CasFailed(RpcError):
    status = StatusCode.CAS_FAILED


class AlreadyInProgress(RpcError):
    status = StatusCode.ALREADY_IN_PROGRESS


class IllegalState(RpcError):
    status = StatusCode.ILLEGAL_STATE


class NotFound(RpcError):
    status = StatusCode.NOT_FOUND


class AlreadyExists(RpcError):
    status = StatusCode.ALREADY_EXISTS


class TabletDeleted(RpcError):
    status = StatusCode.TABLET_DELETED


class TabletNotFound(RpcError):
    status = StatusCode.TABLET_NOT_FOUND


class Throttled(RpcError):
    status = StatusCode.THROTTLED


class TimedOut(RpcError):
    status = StatusCode.TIMED_OUT


class Unavailable(RpcError):
    status = StatusCode.UNAVAILABLE


class BadRequest(RpcError):
    status = StatusCode.BAD_REQUEST


class Internal(RpcError):
    status = StatusCode.INTERNAL


class Cancelled(RpcError):
    status = StatusCode.CANCELLED


class Corruption(RpcError):
    status = StatusCode.CORRUPTION


class TabletFailed(RpcError):
    status = StatusCode.TABLET_FAILED


class SchemaVersionMismatch(RpcError):
    status = StatusCode.SCHEMA_VERSION_MISMATCH


class Unauthenticated(RpcError):
    status = StatusCode.UNAUTHENTICATED


class NoSpace(RpcError):
    """A tablet server's file system is at or below its reserved free space: new tablets,
    copies onto it and writes are refused (not retried: the message names the server)."""

    status = StatusCode.NO_SPACE


class PermissionDenied(RpcError):
    """An authenticated caller whose roles may not call the method; the message names the
    role it needs. Not retried."""

    status = StatusCode.PERMISSION_DENIED


ERROR_CLASSES: dict[int, type[RpcError]] = {
    cls.status: cls
    for cls in (
        NotLeader,
        InvalidName,
        InvalidTerm,
        ConditionFailed,
        CasFailed,
        AlreadyInProgress,
        IllegalState,
        NotFound,
        AlreadyExists,
        TabletDeleted,
        TabletNotFound,
        Throttled,
        TimedOut,
        Unavailable,
        BadRequest,
        Internal,
        Cancelled,
        Corruption,
        TabletFailed,
        SchemaVersionMismatch,
        Unauthenticated,
        NoSpace,
        PermissionDenied,
    )
}


def error_class(status: int) -> type[RpcError]:
    """The exception class of a non-OK status; an unknown status maps to Internal."""
    return ERROR_CLASSES.get(status, Internal)


def error_from_header(header, body: bytes = b"") -> RpcError:
    """Rebuild the exception a server raised from its response header."""
    hint = header.leader_hint
    cls = error_class(header.status)
    err = cls(
        header.message,
        leader_hint=LeaderHintValue(hint.uuid, hint.address, hint.epoch),
        retry_after_ms=header.retry_after_ms,
        body=body,
        server_uuid=header.server_uuid,
    )
    if cls is Internal and header.status not in ERROR_CLASSES:
        err.message = f"unknown status {header.status}: {header.message}"
    return err
