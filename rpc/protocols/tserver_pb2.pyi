from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_UNKNOWN: _ClassVar[DataType]
    INT64: _ClassVar[DataType]
    INT32: _ClassVar[DataType]
    DOUBLE: _ClassVar[DataType]
    BOOL: _ClassVar[DataType]
    STRING: _ClassVar[DataType]
    BINARY: _ClassVar[DataType]
    TIMESTAMP: _ClassVar[DataType]

class DataState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_STATE_UNKNOWN: _ClassVar[DataState]
    READY: _ClassVar[DataState]
    COPYING: _ClassVar[DataState]
    DELETED: _ClassVar[DataState]

class MemberType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_TYPE_UNKNOWN: _ClassVar[MemberType]
    VOTER: _ClassVar[MemberType]
    NON_VOTER: _ClassVar[MemberType]

class EntryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_TYPE_UNKNOWN: _ClassVar[EntryType]
    WRITE: _ClassVar[EntryType]
    NO_OP: _ClassVar[EntryType]
    CONFIG_CHANGE: _ClassVar[EntryType]

class OpType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_TYPE_UNKNOWN: _ClassVar[OpType]
    INSERT: _ClassVar[OpType]
    UPSERT: _ClassVar[OpType]
    UPDATE: _ClassVar[OpType]
    DELETE: _ClassVar[OpType]

class PredicateOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREDICATE_OP_UNKNOWN: _ClassVar[PredicateOp]
    EQ: _ClassVar[PredicateOp]
    LT: _ClassVar[PredicateOp]
    LE: _ClassVar[PredicateOp]
    GT: _ClassVar[PredicateOp]
    GE: _ClassVar[PredicateOp]
    IN: _ClassVar[PredicateOp]
    IS_NULL: _ClassVar[PredicateOp]
    IS_NOT_NULL: _ClassVar[PredicateOp]

class ReplicaStatusPB(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_OK: _ClassVar[ReplicaStatusPB]
    REPLICA_TABLET_NOT_FOUND: _ClassVar[ReplicaStatusPB]
    REPLICA_TABLET_DELETED: _ClassVar[ReplicaStatusPB]
    REPLICA_TABLET_FAILED: _ClassVar[ReplicaStatusPB]

class ConfigChangeTypePB(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_CHANGE_UNKNOWN: _ClassVar[ConfigChangeTypePB]
    ADD_SERVER: _ClassVar[ConfigChangeTypePB]
    REMOVE_SERVER: _ClassVar[ConfigChangeTypePB]
    CHANGE_ROLE: _ClassVar[ConfigChangeTypePB]
TYPE_UNKNOWN: DataType
INT64: DataType
INT32: DataType
DOUBLE: DataType
BOOL: DataType
STRING: DataType
BINARY: DataType
TIMESTAMP: DataType
DATA_STATE_UNKNOWN: DataState
READY: DataState
COPYING: DataState
DELETED: DataState
MEMBER_TYPE_UNKNOWN: MemberType
VOTER: MemberType
NON_VOTER: MemberType
ENTRY_TYPE_UNKNOWN: EntryType
WRITE: EntryType
NO_OP: EntryType
CONFIG_CHANGE: EntryType
OP_TYPE_UNKNOWN: OpType
INSERT: OpType
UPSERT: OpType
UPDATE: OpType
DELETE: OpType
PREDICATE_OP_UNKNOWN: PredicateOp
EQ: PredicateOp
LT: PredicateOp
LE: PredicateOp
GT: PredicateOp
GE: PredicateOp
IN: PredicateOp
IS_NULL: PredicateOp
IS_NOT_NULL: PredicateOp
REPLICA_OK: ReplicaStatusPB
REPLICA_TABLET_NOT_FOUND: ReplicaStatusPB
REPLICA_TABLET_DELETED: ReplicaStatusPB
REPLICA_TABLET_FAILED: ReplicaStatusPB
CONFIG_CHANGE_UNKNOWN: ConfigChangeTypePB
ADD_SERVER: ConfigChangeTypePB
REMOVE_SERVER: ConfigChangeTypePB
CHANGE_ROLE: ConfigChangeTypePB

class InstancePB(_message.Message):
    __slots__ = ("uuid", "format_time_ms")
    UUID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    format_time_ms: int
    def __init__(self, uuid: _Optional[str] = ..., format_time_ms: _Optional[int] = ...) -> None: ...

class ColumnSchemaPB(_message.Message):
    __slots__ = ("id", "name", "type", "nullable", "is_key")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    IS_KEY_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    type: DataType
    nullable: bool
    is_key: bool
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[DataType, str]] = ..., nullable: _Optional[bool] = ..., is_key: _Optional[bool] = ...) -> None: ...

class SchemaPB(_message.Message):
    __slots__ = ("version", "columns", "next_column_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_COLUMN_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    columns: _containers.RepeatedCompositeFieldContainer[ColumnSchemaPB]
    next_column_id: int
    def __init__(self, version: _Optional[int] = ..., columns: _Optional[_Iterable[_Union[ColumnSchemaPB, _Mapping]]] = ..., next_column_id: _Optional[int] = ...) -> None: ...

class OpIdPB(_message.Message):
    __slots__ = ("term", "index")
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    term: int
    index: int
    def __init__(self, term: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class PartitionPB(_message.Message):
    __slots__ = ("start_key", "end_key")
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    start_key: bytes
    end_key: bytes
    def __init__(self, start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class SuperblockPB(_message.Message):
    __slots__ = ("tablet_id", "table_id", "table_name", "data_state", "schema", "partition", "blocks", "flushed_index", "last_op_id", "quarantine_path", "next_block_id", "flushed_term", "dedup")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_STATE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_ID_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_PATH_FIELD_NUMBER: _ClassVar[int]
    NEXT_BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_TERM_FIELD_NUMBER: _ClassVar[int]
    DEDUP_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    table_id: str
    table_name: str
    data_state: DataState
    schema: SchemaPB
    partition: PartitionPB
    blocks: _containers.RepeatedScalarFieldContainer[str]
    flushed_index: int
    last_op_id: OpIdPB
    quarantine_path: str
    next_block_id: int
    flushed_term: int
    dedup: _containers.RepeatedCompositeFieldContainer[DedupClientPB]
    def __init__(self, tablet_id: _Optional[str] = ..., table_id: _Optional[str] = ..., table_name: _Optional[str] = ..., data_state: _Optional[_Union[DataState, str]] = ..., schema: _Optional[_Union[SchemaPB, _Mapping]] = ..., partition: _Optional[_Union[PartitionPB, _Mapping]] = ..., blocks: _Optional[_Iterable[str]] = ..., flushed_index: _Optional[int] = ..., last_op_id: _Optional[_Union[OpIdPB, _Mapping]] = ..., quarantine_path: _Optional[str] = ..., next_block_id: _Optional[int] = ..., flushed_term: _Optional[int] = ..., dedup: _Optional[_Iterable[_Union[DedupClientPB, _Mapping]]] = ...) -> None: ...

class DedupClientPB(_message.Message):
    __slots__ = ("client_id", "floor_seq", "last_index", "done")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FLOOR_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    client_id: bytes
    floor_seq: int
    last_index: int
    done: _containers.RepeatedCompositeFieldContainer[DedupDonePB]
    def __init__(self, client_id: _Optional[bytes] = ..., floor_seq: _Optional[int] = ..., last_index: _Optional[int] = ..., done: _Optional[_Iterable[_Union[DedupDonePB, _Mapping]]] = ...) -> None: ...

class DedupDonePB(_message.Message):
    __slots__ = ("seq", "op_id", "rows")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    op_id: OpIdPB
    rows: int
    def __init__(self, seq: _Optional[int] = ..., op_id: _Optional[_Union[OpIdPB, _Mapping]] = ..., rows: _Optional[int] = ...) -> None: ...

class RequestIdPB(_message.Message):
    __slots__ = ("client_id", "seq", "first_incomplete_seq")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FIRST_INCOMPLETE_SEQ_FIELD_NUMBER: _ClassVar[int]
    client_id: bytes
    seq: int
    first_incomplete_seq: int
    def __init__(self, client_id: _Optional[bytes] = ..., seq: _Optional[int] = ..., first_incomplete_seq: _Optional[int] = ...) -> None: ...

class RaftPeerPB(_message.Message):
    __slots__ = ("uuid", "address", "member_type", "promote")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    member_type: MemberType
    promote: bool
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., member_type: _Optional[_Union[MemberType, str]] = ..., promote: _Optional[bool] = ...) -> None: ...

class RaftConfigPB(_message.Message):
    __slots__ = ("opid_index", "peers")
    OPID_INDEX_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    opid_index: int
    peers: _containers.RepeatedCompositeFieldContainer[RaftPeerPB]
    def __init__(self, opid_index: _Optional[int] = ..., peers: _Optional[_Iterable[_Union[RaftPeerPB, _Mapping]]] = ...) -> None: ...

class ConsensusMetaPB(_message.Message):
    __slots__ = ("tablet_id", "current_term", "voted_for", "committed_config")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TERM_FIELD_NUMBER: _ClassVar[int]
    VOTED_FOR_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_CONFIG_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    current_term: int
    voted_for: str
    committed_config: RaftConfigPB
    def __init__(self, tablet_id: _Optional[str] = ..., current_term: _Optional[int] = ..., voted_for: _Optional[str] = ..., committed_config: _Optional[_Union[RaftConfigPB, _Mapping]] = ...) -> None: ...

class HardStatePB(_message.Message):
    __slots__ = ("tablet_id", "term", "voted_for", "forget")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VOTED_FOR_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    term: int
    voted_for: str
    forget: bool
    def __init__(self, tablet_id: _Optional[str] = ..., term: _Optional[int] = ..., voted_for: _Optional[str] = ..., forget: _Optional[bool] = ...) -> None: ...

class HardStateRecordPB(_message.Message):
    __slots__ = ("states",)
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedCompositeFieldContainer[HardStatePB]
    def __init__(self, states: _Optional[_Iterable[_Union[HardStatePB, _Mapping]]] = ...) -> None: ...

class SegmentHeaderPB(_message.Message):
    __slots__ = ("tablet_id", "sequence", "created_ms")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    sequence: int
    created_ms: int
    def __init__(self, tablet_id: _Optional[str] = ..., sequence: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class SegmentFooterPB(_message.Message):
    __slots__ = ("num_entries", "min_index", "max_index", "closed_ms")
    NUM_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLOSED_MS_FIELD_NUMBER: _ClassVar[int]
    num_entries: int
    min_index: int
    max_index: int
    closed_ms: int
    def __init__(self, num_entries: _Optional[int] = ..., min_index: _Optional[int] = ..., max_index: _Optional[int] = ..., closed_ms: _Optional[int] = ...) -> None: ...

class RowBlockPB(_message.Message):
    __slots__ = ("op", "arrow_ipc")
    OP_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    op: OpType
    arrow_ipc: bytes
    def __init__(self, op: _Optional[_Union[OpType, str]] = ..., arrow_ipc: _Optional[bytes] = ...) -> None: ...

class WriteOpPB(_message.Message):
    __slots__ = ("schema_version", "blocks", "request_id")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    blocks: _containers.RepeatedCompositeFieldContainer[RowBlockPB]
    request_id: RequestIdPB
    def __init__(self, schema_version: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[RowBlockPB, _Mapping]]] = ..., request_id: _Optional[_Union[RequestIdPB, _Mapping]] = ...) -> None: ...

class LogEntryPB(_message.Message):
    __slots__ = ("term", "index", "type", "write", "config")
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    term: int
    index: int
    type: EntryType
    write: WriteOpPB
    config: RaftConfigPB
    def __init__(self, term: _Optional[int] = ..., index: _Optional[int] = ..., type: _Optional[_Union[EntryType, str]] = ..., write: _Optional[_Union[WriteOpPB, _Mapping]] = ..., config: _Optional[_Union[RaftConfigPB, _Mapping]] = ...) -> None: ...

class LogEntryBatchPB(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LogEntryPB]
    def __init__(self, entries: _Optional[_Iterable[_Union[LogEntryPB, _Mapping]]] = ...) -> None: ...

class ValuePB(_message.Message):
    __slots__ = ("is_null", "int_value", "double_value", "bool_value", "string_value", "binary_value")
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BINARY_VALUE_FIELD_NUMBER: _ClassVar[int]
    is_null: bool
    int_value: int
    double_value: float
    bool_value: bool
    string_value: str
    binary_value: bytes
    def __init__(self, is_null: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., bool_value: _Optional[bool] = ..., string_value: _Optional[str] = ..., binary_value: _Optional[bytes] = ...) -> None: ...

class PredicatePB(_message.Message):
    __slots__ = ("column", "op", "values")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    column: str
    op: PredicateOp
    values: _containers.RepeatedCompositeFieldContainer[ValuePB]
    def __init__(self, column: _Optional[str] = ..., op: _Optional[_Union[PredicateOp, str]] = ..., values: _Optional[_Iterable[_Union[ValuePB, _Mapping]]] = ...) -> None: ...

class CreateTabletRequest(_message.Message):
    __slots__ = ("tablet_id", "table_id", "table_name", "schema", "partition", "config")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    table_id: str
    table_name: str
    schema: SchemaPB
    partition: PartitionPB
    config: RaftConfigPB
    def __init__(self, tablet_id: _Optional[str] = ..., table_id: _Optional[str] = ..., table_name: _Optional[str] = ..., schema: _Optional[_Union[SchemaPB, _Mapping]] = ..., partition: _Optional[_Union[PartitionPB, _Mapping]] = ..., config: _Optional[_Union[RaftConfigPB, _Mapping]] = ...) -> None: ...

class CreateTabletResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: SchemaPB
    def __init__(self, schema: _Optional[_Union[SchemaPB, _Mapping]] = ...) -> None: ...

class DeleteTabletRequest(_message.Message):
    __slots__ = ("tablet_id", "cas_config_index")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    CAS_CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    cas_config_index: int
    def __init__(self, tablet_id: _Optional[str] = ..., cas_config_index: _Optional[int] = ...) -> None: ...

class DeleteTabletResponse(_message.Message):
    __slots__ = ("last_op_id",)
    LAST_OP_ID_FIELD_NUMBER: _ClassVar[int]
    last_op_id: OpIdPB
    def __init__(self, last_op_id: _Optional[_Union[OpIdPB, _Mapping]] = ...) -> None: ...

class AlterSchemaRequest(_message.Message):
    __slots__ = ("tablet_id", "expected_version", "add_columns", "drop_columns", "new_version", "next_column_id")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DROP_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    NEW_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_COLUMN_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    expected_version: int
    add_columns: _containers.RepeatedCompositeFieldContainer[ColumnSchemaPB]
    drop_columns: _containers.RepeatedScalarFieldContainer[str]
    new_version: int
    next_column_id: int
    def __init__(self, tablet_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., add_columns: _Optional[_Iterable[_Union[ColumnSchemaPB, _Mapping]]] = ..., drop_columns: _Optional[_Iterable[str]] = ..., new_version: _Optional[int] = ..., next_column_id: _Optional[int] = ...) -> None: ...

class AlterSchemaResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: SchemaPB
    def __init__(self, schema: _Optional[_Union[SchemaPB, _Mapping]] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("tablet_id", "schema_version", "ops", "request_id")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    schema_version: int
    ops: _containers.RepeatedScalarFieldContainer[OpType]
    request_id: RequestIdPB
    def __init__(self, tablet_id: _Optional[str] = ..., schema_version: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[OpType, str]]] = ..., request_id: _Optional[_Union[RequestIdPB, _Mapping]] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("op_id", "rows")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    op_id: OpIdPB
    rows: int
    def __init__(self, op_id: _Optional[_Union[OpIdPB, _Mapping]] = ..., rows: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("tablet_id", "projection", "predicates", "lower_bound", "upper_bound", "batch_rows_max", "limit", "scanner_id", "close", "unordered")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    UPPER_BOUND_FIELD_NUMBER: _ClassVar[int]
    BATCH_ROWS_MAX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SCANNER_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    UNORDERED_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    projection: _containers.RepeatedScalarFieldContainer[str]
    predicates: _containers.RepeatedCompositeFieldContainer[PredicatePB]
    lower_bound: _containers.RepeatedCompositeFieldContainer[ValuePB]
    upper_bound: _containers.RepeatedCompositeFieldContainer[ValuePB]
    batch_rows_max: int
    limit: int
    scanner_id: str
    close: bool
    unordered: bool
    def __init__(self, tablet_id: _Optional[str] = ..., projection: _Optional[_Iterable[str]] = ..., predicates: _Optional[_Iterable[_Union[PredicatePB, _Mapping]]] = ..., lower_bound: _Optional[_Iterable[_Union[ValuePB, _Mapping]]] = ..., upper_bound: _Optional[_Iterable[_Union[ValuePB, _Mapping]]] = ..., batch_rows_max: _Optional[int] = ..., limit: _Optional[int] = ..., scanner_id: _Optional[str] = ..., close: _Optional[bool] = ..., unordered: _Optional[bool] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("scanner_id", "has_more", "rows", "schema")
    SCANNER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    scanner_id: str
    has_more: bool
    rows: int
    schema: SchemaPB
    def __init__(self, scanner_id: _Optional[str] = ..., has_more: _Optional[bool] = ..., rows: _Optional[int] = ..., schema: _Optional[_Union[SchemaPB, _Mapping]] = ...) -> None: ...

class GetSchemaRequest(_message.Message):
    __slots__ = ("tablet_id",)
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    def __init__(self, tablet_id: _Optional[str] = ...) -> None: ...

class GetSchemaResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: SchemaPB
    def __init__(self, schema: _Optional[_Union[SchemaPB, _Mapping]] = ...) -> None: ...

class ListTabletsRequest(_message.Message):
    __slots__ = ("brief", "not_serving_only")
    BRIEF_FIELD_NUMBER: _ClassVar[int]
    NOT_SERVING_ONLY_FIELD_NUMBER: _ClassVar[int]
    brief: bool
    not_serving_only: bool
    def __init__(self, brief: _Optional[bool] = ..., not_serving_only: _Optional[bool] = ...) -> None: ...

class TabletReportPB(_message.Message):
    __slots__ = ("tablet_id", "table_id", "table_name", "data_state", "status", "error", "current_term", "committed_config", "last_op_id", "schema_version", "flushed_index", "memstore_rows", "blocks", "role", "leader_uuid", "leader_address", "commit_index", "applied_index")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TERM_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_CONFIG_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MEMSTORE_ROWS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_UUID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    table_id: str
    table_name: str
    data_state: DataState
    status: str
    error: str
    current_term: int
    committed_config: RaftConfigPB
    last_op_id: OpIdPB
    schema_version: int
    flushed_index: int
    memstore_rows: int
    blocks: int
    role: str
    leader_uuid: str
    leader_address: str
    commit_index: int
    applied_index: int
    def __init__(self, tablet_id: _Optional[str] = ..., table_id: _Optional[str] = ..., table_name: _Optional[str] = ..., data_state: _Optional[_Union[DataState, str]] = ..., status: _Optional[str] = ..., error: _Optional[str] = ..., current_term: _Optional[int] = ..., committed_config: _Optional[_Union[RaftConfigPB, _Mapping]] = ..., last_op_id: _Optional[_Union[OpIdPB, _Mapping]] = ..., schema_version: _Optional[int] = ..., flushed_index: _Optional[int] = ..., memstore_rows: _Optional[int] = ..., blocks: _Optional[int] = ..., role: _Optional[str] = ..., leader_uuid: _Optional[str] = ..., leader_address: _Optional[str] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ...) -> None: ...

class ListTabletsResponse(_message.Message):
    __slots__ = ("tablets", "replicas")
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    tablets: _containers.RepeatedCompositeFieldContainer[TabletReportPB]
    replicas: int
    def __init__(self, tablets: _Optional[_Iterable[_Union[TabletReportPB, _Mapping]]] = ..., replicas: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("uuid", "address", "tablets", "wal_groups", "wal_syncs", "wal_entries", "writes", "rows_written", "wal_sync_enabled", "copies")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    WAL_GROUPS_FIELD_NUMBER: _ClassVar[int]
    WAL_SYNCS_FIELD_NUMBER: _ClassVar[int]
    WAL_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    ROWS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    WAL_SYNC_ENABLED_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    tablets: int
    wal_groups: int
    wal_syncs: int
    wal_entries: int
    writes: int
    rows_written: int
    wal_sync_enabled: bool
    copies: _containers.RepeatedCompositeFieldContainer[CopyJobPB]
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., tablets: _Optional[int] = ..., wal_groups: _Optional[int] = ..., wal_syncs: _Optional[int] = ..., wal_entries: _Optional[int] = ..., writes: _Optional[int] = ..., rows_written: _Optional[int] = ..., wal_sync_enabled: _Optional[bool] = ..., copies: _Optional[_Iterable[_Union[CopyJobPB, _Mapping]]] = ...) -> None: ...

class VoteRequestPB(_message.Message):
    __slots__ = ("last_log_term", "last_log_index", "pre_vote", "leadership_transfer")
    LAST_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    last_log_term: int
    last_log_index: int
    pre_vote: bool
    leadership_transfer: bool
    def __init__(self, last_log_term: _Optional[int] = ..., last_log_index: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., leadership_transfer: _Optional[bool] = ...) -> None: ...

class VoteResponsePB(_message.Message):
    __slots__ = ("granted", "pre_vote", "status")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    pre_vote: bool
    status: ReplicaStatusPB
    def __init__(self, granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ..., status: _Optional[_Union[ReplicaStatusPB, str]] = ...) -> None: ...

class AppendRequestPB(_message.Message):
    __slots__ = ("prev_log_index", "prev_log_term", "entries", "leader_commit", "read_seq", "quiesce")
    PREV_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LEADER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    READ_SEQ_FIELD_NUMBER: _ClassVar[int]
    QUIESCE_FIELD_NUMBER: _ClassVar[int]
    prev_log_index: int
    prev_log_term: int
    entries: _containers.RepeatedCompositeFieldContainer[LogEntryPB]
    leader_commit: int
    read_seq: int
    quiesce: bool
    def __init__(self, prev_log_index: _Optional[int] = ..., prev_log_term: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[LogEntryPB, _Mapping]]] = ..., leader_commit: _Optional[int] = ..., read_seq: _Optional[int] = ..., quiesce: _Optional[bool] = ...) -> None: ...

class AppendResponsePB(_message.Message):
    __slots__ = ("success", "match_index", "reject_index", "hint_index", "read_seq", "status")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    REJECT_INDEX_FIELD_NUMBER: _ClassVar[int]
    HINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    READ_SEQ_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    success: bool
    match_index: int
    reject_index: int
    hint_index: int
    read_seq: int
    status: ReplicaStatusPB
    def __init__(self, success: _Optional[bool] = ..., match_index: _Optional[int] = ..., reject_index: _Optional[int] = ..., hint_index: _Optional[int] = ..., read_seq: _Optional[int] = ..., status: _Optional[_Union[ReplicaStatusPB, str]] = ...) -> None: ...

class TimeoutNowPB(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsensusMessagePB(_message.Message):
    __slots__ = ("tablet_id", "sender", "recipient", "term", "vote_request", "vote_response", "append_request", "append_response", "timeout_now", "sender_address")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    APPEND_REQUEST_FIELD_NUMBER: _ClassVar[int]
    APPEND_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NOW_FIELD_NUMBER: _ClassVar[int]
    SENDER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    sender: str
    recipient: str
    term: int
    vote_request: VoteRequestPB
    vote_response: VoteResponsePB
    append_request: AppendRequestPB
    append_response: AppendResponsePB
    timeout_now: TimeoutNowPB
    sender_address: str
    def __init__(self, tablet_id: _Optional[str] = ..., sender: _Optional[str] = ..., recipient: _Optional[str] = ..., term: _Optional[int] = ..., vote_request: _Optional[_Union[VoteRequestPB, _Mapping]] = ..., vote_response: _Optional[_Union[VoteResponsePB, _Mapping]] = ..., append_request: _Optional[_Union[AppendRequestPB, _Mapping]] = ..., append_response: _Optional[_Union[AppendResponsePB, _Mapping]] = ..., timeout_now: _Optional[_Union[TimeoutNowPB, _Mapping]] = ..., sender_address: _Optional[str] = ...) -> None: ...

class ConsensusRequest(_message.Message):
    __slots__ = ("messages", "opening")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OPENING_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConsensusMessagePB]
    opening: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[ConsensusMessagePB, _Mapping]]] = ..., opening: _Optional[bool] = ...) -> None: ...

class ConsensusResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    def __init__(self, accepted: _Optional[int] = ...) -> None: ...

class ChangeConfigRequest(_message.Message):
    __slots__ = ("tablet_id", "type", "peer", "cas_config_index")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    CAS_CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    type: ConfigChangeTypePB
    peer: RaftPeerPB
    cas_config_index: int
    def __init__(self, tablet_id: _Optional[str] = ..., type: _Optional[_Union[ConfigChangeTypePB, str]] = ..., peer: _Optional[_Union[RaftPeerPB, _Mapping]] = ..., cas_config_index: _Optional[int] = ...) -> None: ...

class ChangeConfigResponse(_message.Message):
    __slots__ = ("committed_config",)
    COMMITTED_CONFIG_FIELD_NUMBER: _ClassVar[int]
    committed_config: RaftConfigPB
    def __init__(self, committed_config: _Optional[_Union[RaftConfigPB, _Mapping]] = ...) -> None: ...

class StartTabletCopyRequest(_message.Message):
    __slots__ = ("tablet_id", "source_uuid", "source_address", "caller_term", "expected_state", "last_op_id")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_UUID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CALLER_TERM_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    source_uuid: str
    source_address: str
    caller_term: int
    expected_state: DataState
    last_op_id: OpIdPB
    def __init__(self, tablet_id: _Optional[str] = ..., source_uuid: _Optional[str] = ..., source_address: _Optional[str] = ..., caller_term: _Optional[int] = ..., expected_state: _Optional[_Union[DataState, str]] = ..., last_op_id: _Optional[_Union[OpIdPB, _Mapping]] = ...) -> None: ...

class StartTabletCopyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BeginCopySessionRequest(_message.Message):
    __slots__ = ("tablet_id",)
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    def __init__(self, tablet_id: _Optional[str] = ...) -> None: ...

class CopyFilePB(_message.Message):
    __slots__ = ("kind", "name", "size_bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    size_bytes: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class BeginCopySessionResponse(_message.Message):
    __slots__ = ("session_id", "superblock", "cmeta", "files")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERBLOCK_FIELD_NUMBER: _ClassVar[int]
    CMETA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    superblock: SuperblockPB
    cmeta: ConsensusMetaPB
    files: _containers.RepeatedCompositeFieldContainer[CopyFilePB]
    def __init__(self, session_id: _Optional[str] = ..., superblock: _Optional[_Union[SuperblockPB, _Mapping]] = ..., cmeta: _Optional[_Union[ConsensusMetaPB, _Mapping]] = ..., files: _Optional[_Iterable[_Union[CopyFilePB, _Mapping]]] = ...) -> None: ...

class FetchCopyChunkRequest(_message.Message):
    __slots__ = ("session_id", "kind", "name", "offset", "bytes_max")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTES_MAX_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    kind: str
    name: str
    offset: int
    bytes_max: int
    def __init__(self, session_id: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., offset: _Optional[int] = ..., bytes_max: _Optional[int] = ...) -> None: ...

class FetchCopyChunkResponse(_message.Message):
    __slots__ = ("crc32c",)
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    crc32c: int
    def __init__(self, crc32c: _Optional[int] = ...) -> None: ...

class EndCopySessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class EndCopySessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CopyJobPB(_message.Message):
    __slots__ = ("tablet_id", "source_uuid", "state", "files_done", "files_total", "bytes_done", "bytes_total", "rate_bytes_s", "error", "rate_limit_bytes_s")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_UUID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FILES_DONE_FIELD_NUMBER: _ClassVar[int]
    FILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_DONE_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RATE_BYTES_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_BYTES_S_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    source_uuid: str
    state: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    rate_bytes_s: float
    error: str
    rate_limit_bytes_s: int
    def __init__(self, tablet_id: _Optional[str] = ..., source_uuid: _Optional[str] = ..., state: _Optional[str] = ..., files_done: _Optional[int] = ..., files_total: _Optional[int] = ..., bytes_done: _Optional[int] = ..., bytes_total: _Optional[int] = ..., rate_bytes_s: _Optional[float] = ..., error: _Optional[str] = ..., rate_limit_bytes_s: _Optional[int] = ...) -> None: ...

class CancelTabletCopyRequest(_message.Message):
    __slots__ = ("tablet_id",)
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    def __init__(self, tablet_id: _Optional[str] = ...) -> None: ...

class CancelTabletCopyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
