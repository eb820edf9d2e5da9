from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[StatusCode]
    NOT_LEADER: _ClassVar[StatusCode]
    INVALID_NAME: _ClassVar[StatusCode]
    INVALID_TERM: _ClassVar[StatusCode]
    CONDITION_FAILED: _ClassVar[StatusCode]
    CAS_FAILED: _ClassVar[StatusCode]
    ALREADY_IN_PROGRESS: _ClassVar[StatusCode]
    ILLEGAL_STATE: _ClassVar[StatusCode]
    NOT_FOUND: _ClassVar[StatusCode]
    ALREADY_EXISTS: _ClassVar[StatusCode]
    TABLET_DELETED: _ClassVar[StatusCode]
    TABLET_NOT_FOUND: _ClassVar[StatusCode]
    THROTTLED: _ClassVar[StatusCode]
    TIMED_OUT: _ClassVar[StatusCode]
    UNAVAILABLE: _ClassVar[StatusCode]
    BAD_REQUEST: _ClassVar[StatusCode]
    INTERNAL: _ClassVar[StatusCode]
    CANCELLED: _ClassVar[StatusCode]
    CORRUPTION: _ClassVar[StatusCode]
    TABLET_FAILED: _ClassVar[StatusCode]
    SCHEMA_VERSION_MISMATCH: _ClassVar[StatusCode]
    UNAUTHENTICATED: _ClassVar[StatusCode]
    NO_SPACE: _ClassVar[StatusCode]
    PERMISSION_DENIED: _ClassVar[StatusCode]
OK: StatusCode
NOT_LEADER: StatusCode
INVALID_NAME: StatusCode
INVALID_TERM: StatusCode
CONDITION_FAILED: StatusCode
CAS_FAILED: StatusCode
ALREADY_IN_PROGRESS: StatusCode
ILLEGAL_STATE: StatusCode
NOT_FOUND: StatusCode
ALREADY_EXISTS: StatusCode
TABLET_DELETED: StatusCode
TABLET_NOT_FOUND: StatusCode
THROTTLED: StatusCode
TIMED_OUT: StatusCode
UNAVAILABLE: StatusCode
BAD_REQUEST: StatusCode
INTERNAL: StatusCode
CANCELLED: StatusCode
CORRUPTION: StatusCode
TABLET_FAILED: StatusCode
SCHEMA_VERSION_MISMATCH: StatusCode
UNAUTHENTICATED: StatusCode
NO_SPACE: StatusCode
PERMISSION_DENIED: StatusCode

class LeaderHint(_message.Message):
    __slots__ = ("uuid", "address", "epoch")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    epoch: int
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class RequestHeader(_message.Message):
    __slots__ = ("call_id", "method", "recipient_uuid", "caller_uuid", "timeout_ms", "one_way", "auth_tag")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_UUID_FIELD_NUMBER: _ClassVar[int]
    CALLER_UUID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ONE_WAY_FIELD_NUMBER: _ClassVar[int]
    AUTH_TAG_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    method: str
    recipient_uuid: str
    caller_uuid: str
    timeout_ms: int
    one_way: bool
    auth_tag: bytes
    def __init__(self, call_id: _Optional[int] = ..., method: _Optional[str] = ..., recipient_uuid: _Optional[str] = ..., caller_uuid: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., one_way: _Optional[bool] = ..., auth_tag: _Optional[bytes] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("call_id", "status", "message", "leader_hint", "retry_after_ms", "server_uuid")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_HINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: StatusCode
    message: str
    leader_hint: LeaderHint
    retry_after_ms: int
    server_uuid: str
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., leader_hint: _Optional[_Union[LeaderHint, _Mapping]] = ..., retry_after_ms: _Optional[int] = ..., server_uuid: _Optional[str] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("uuid", "service", "methods")
    UUID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    service: str
    methods: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, uuid: _Optional[str] = ..., service: _Optional[str] = ..., methods: _Optional[_Iterable[str]] = ...) -> None: ...
