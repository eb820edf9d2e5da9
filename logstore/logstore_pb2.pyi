from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryPB(_message.Message):
    __slots__ = ("id", "data", "invalidates")
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    INVALIDATES_FIELD_NUMBER: _ClassVar[int]
    id: int
    data: bytes
    invalidates: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[int] = ..., data: _Optional[bytes] = ..., invalidates: _Optional[_Iterable[int]] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("log", "data", "expected_id", "invalidates")
    LOG_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ID_FIELD_NUMBER: _ClassVar[int]
    INVALIDATES_FIELD_NUMBER: _ClassVar[int]
    log: str
    data: bytes
    expected_id: int
    invalidates: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, log: _Optional[str] = ..., data: _Optional[bytes] = ..., expected_id: _Optional[int] = ..., invalidates: _Optional[_Iterable[int]] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class ConditionFailedDetail(_message.Message):
    __slots__ = ("last_id",)
    LAST_ID_FIELD_NUMBER: _ClassVar[int]
    last_id: int
    def __init__(self, last_id: _Optional[int] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("log", "from_id", "limit")
    LOG_FIELD_NUMBER: _ClassVar[int]
    FROM_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    log: str
    from_id: int
    limit: int
    def __init__(self, log: _Optional[str] = ..., from_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryPB]
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryPB, _Mapping]]] = ...) -> None: ...

class LastIdRequest(_message.Message):
    __slots__ = ("log",)
    LOG_FIELD_NUMBER: _ClassVar[int]
    log: str
    def __init__(self, log: _Optional[str] = ...) -> None: ...

class LastIdResponse(_message.Message):
    __slots__ = ("last_id",)
    LAST_ID_FIELD_NUMBER: _ClassVar[int]
    last_id: int
    def __init__(self, last_id: _Optional[int] = ...) -> None: ...

class BarrierRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BarrierResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LogLastId(_message.Message):
    __slots__ = ("log", "last_id")
    LOG_FIELD_NUMBER: _ClassVar[int]
    LAST_ID_FIELD_NUMBER: _ClassVar[int]
    log: str
    last_id: int
    def __init__(self, log: _Optional[str] = ..., last_id: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("uuid", "rpc_address", "raft_address", "role", "leader", "term", "commit_index", "applied_index", "members", "journal_entries", "journal_bytes", "snapshot_bytes", "live_entries", "live_bytes", "logs", "journal_syncs", "journal_first_index", "connected", "last_log_index", "last_log_term", "snapshots_loaded")
    UUID_FIELD_NUMBER: _ClassVar[int]
    RPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIVE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_SYNCS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_LOADED_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    rpc_address: str
    raft_address: str
    role: str
    leader: str
    term: int
    commit_index: int
    applied_index: int
    members: _containers.RepeatedScalarFieldContainer[str]
    journal_entries: int
    journal_bytes: int
    snapshot_bytes: int
    live_entries: int
    live_bytes: int
    logs: _containers.RepeatedCompositeFieldContainer[LogLastId]
    journal_syncs: int
    journal_first_index: int
    connected: _containers.RepeatedScalarFieldContainer[str]
    last_log_index: int
    last_log_term: int
    snapshots_loaded: int
    def __init__(self, uuid: _Optional[str] = ..., rpc_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., journal_entries: _Optional[int] = ..., journal_bytes: _Optional[int] = ..., snapshot_bytes: _Optional[int] = ..., live_entries: _Optional[int] = ..., live_bytes: _Optional[int] = ..., logs: _Optional[_Iterable[_Union[LogLastId, _Mapping]]] = ..., journal_syncs: _Optional[int] = ..., journal_first_index: _Optional[int] = ..., connected: _Optional[_Iterable[str]] = ..., last_log_index: _Optional[int] = ..., last_log_term: _Optional[int] = ..., snapshots_loaded: _Optional[int] = ...) -> None: ...

class MemberRequest(_message.Message):
    __slots__ = ("raft_address",)
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    def __init__(self, raft_address: _Optional[str] = ...) -> None: ...

class MemberResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("raft_address",)
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    def __init__(self, raft_address: _Optional[str] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: str
    def __init__(self, leader: _Optional[str] = ...) -> None: ...
