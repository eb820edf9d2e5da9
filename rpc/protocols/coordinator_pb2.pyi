from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ColumnType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_UNKNOWN: _ClassVar[ColumnType]
    INT64: _ClassVar[ColumnType]
    INT32: _ClassVar[ColumnType]
    DOUBLE: _ClassVar[ColumnType]
    BOOL: _ClassVar[ColumnType]
    STRING: _ClassVar[ColumnType]
    BINARY: _ClassVar[ColumnType]
    TIMESTAMP: _ClassVar[ColumnType]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNKNOWN: _ClassVar[Phase]
    STARTED: _ClassVar[Phase]
    DONE: _ClassVar[Phase]
TYPE_UNKNOWN: ColumnType
INT64: ColumnType
INT32: ColumnType
DOUBLE: ColumnType
BOOL: ColumnType
STRING: ColumnType
BINARY: ColumnType
TIMESTAMP: ColumnType
PHASE_UNKNOWN: Phase
STARTED: Phase
DONE: Phase

class ColumnSchema(_message.Message):
    __slots__ = ("id", "name", "type", "nullable", "is_key")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    IS_KEY_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    type: ColumnType
    nullable: bool
    is_key: bool
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[ColumnType, str]] = ..., nullable: _Optional[bool] = ..., is_key: _Optional[bool] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("version", "columns", "next_column_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_COLUMN_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    columns: _containers.RepeatedCompositeFieldContainer[ColumnSchema]
    next_column_id: int
    def __init__(self, version: _Optional[int] = ..., columns: _Optional[_Iterable[_Union[ColumnSchema, _Mapping]]] = ..., next_column_id: _Optional[int] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("hash_bucket", "num_buckets")
    HASH_BUCKET_FIELD_NUMBER: _ClassVar[int]
    NUM_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    hash_bucket: int
    num_buckets: int
    def __init__(self, hash_bucket: _Optional[int] = ..., num_buckets: _Optional[int] = ...) -> None: ...

class TabletPlacement(_message.Message):
    __slots__ = ("tablet_id", "partition", "replica_uuids")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICA_UUIDS_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    partition: Partition
    replica_uuids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tablet_id: _Optional[str] = ..., partition: _Optional[_Union[Partition, _Mapping]] = ..., replica_uuids: _Optional[_Iterable[str]] = ...) -> None: ...

class RequestId(_message.Message):
    __slots__ = ("client_id", "seq")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    seq: int
    def __init__(self, client_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class OpHeader(_message.Message):
    __slots__ = ("op_id", "request_id", "phase")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    op_id: int
    request_id: RequestId
    phase: Phase
    def __init__(self, op_id: _Optional[int] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ..., phase: _Optional[_Union[Phase, str]] = ...) -> None: ...

class SupersededRequest(_message.Message):
    __slots__ = ("request_id", "table_id", "schema_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    table_id: str
    schema_version: int
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., table_id: _Optional[str] = ..., schema_version: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("holder_uuid", "holder_address", "epoch", "takeover", "written_unix_ms", "holder_http_address")
    HOLDER_UUID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    holder_uuid: str
    holder_address: str
    epoch: int
    takeover: bool
    written_unix_ms: int
    holder_http_address: str
    def __init__(self, holder_uuid: _Optional[str] = ..., holder_address: _Optional[str] = ..., epoch: _Optional[int] = ..., takeover: _Optional[bool] = ..., written_unix_ms: _Optional[int] = ..., holder_http_address: _Optional[str] = ...) -> None: ...

class CreateTable(_message.Message):
    __slots__ = ("header", "table_id", "name", "schema", "replication_factor", "tablets", "skipped_replicas")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    table_id: str
    name: str
    schema: Schema
    replication_factor: int
    tablets: _containers.RepeatedCompositeFieldContainer[TabletPlacement]
    skipped_replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., table_id: _Optional[str] = ..., name: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., replication_factor: _Optional[int] = ..., tablets: _Optional[_Iterable[_Union[TabletPlacement, _Mapping]]] = ..., skipped_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class DropTable(_message.Message):
    __slots__ = ("header", "table_id", "name", "tablets", "moot_record_ids", "superseded", "skipped_replicas")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    MOOT_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    table_id: str
    name: str
    tablets: _containers.RepeatedCompositeFieldContainer[TabletPlacement]
    moot_record_ids: _containers.RepeatedScalarFieldContainer[int]
    superseded: _containers.RepeatedCompositeFieldContainer[SupersededRequest]
    skipped_replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., table_id: _Optional[str] = ..., name: _Optional[str] = ..., tablets: _Optional[_Iterable[_Union[TabletPlacement, _Mapping]]] = ..., moot_record_ids: _Optional[_Iterable[int]] = ..., superseded: _Optional[_Iterable[_Union[SupersededRequest, _Mapping]]] = ..., skipped_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterTable(_message.Message):
    __slots__ = ("header", "table_id", "old_name", "new_name", "old_schema", "new_schema", "add_columns", "drop_columns", "tablets", "previous_alter_id", "superseded", "skipped_replicas")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_NAME_FIELD_NUMBER: _ClassVar[int]
    NEW_NAME_FIELD_NUMBER: _ClassVar[int]
    OLD_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NEW_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ADD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DROP_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ALTER_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    table_id: str
    old_name: str
    new_name: str
    old_schema: Schema
    new_schema: Schema
    add_columns: _containers.RepeatedCompositeFieldContainer[ColumnSchema]
    drop_columns: _containers.RepeatedScalarFieldContainer[str]
    tablets: _containers.RepeatedCompositeFieldContainer[TabletPlacement]
    previous_alter_id: int
    superseded: _containers.RepeatedCompositeFieldContainer[SupersededRequest]
    skipped_replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., table_id: _Optional[str] = ..., old_name: _Optional[str] = ..., new_name: _Optional[str] = ..., old_schema: _Optional[_Union[Schema, _Mapping]] = ..., new_schema: _Optional[_Union[Schema, _Mapping]] = ..., add_columns: _Optional[_Iterable[_Union[ColumnSchema, _Mapping]]] = ..., drop_columns: _Optional[_Iterable[str]] = ..., tablets: _Optional[_Iterable[_Union[TabletPlacement, _Mapping]]] = ..., previous_alter_id: _Optional[int] = ..., superseded: _Optional[_Iterable[_Union[SupersededRequest, _Mapping]]] = ..., skipped_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class EnlistServer(_message.Message):
    __slots__ = ("header", "server_uuid", "address", "previous_record_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    server_uuid: str
    address: str
    previous_record_id: int
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., server_uuid: _Optional[str] = ..., address: _Optional[str] = ..., previous_record_id: _Optional[int] = ...) -> None: ...

class ServerDown(_message.Message):
    __slots__ = ("header", "server_uuid", "previous_record_id", "reason", "address")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    server_uuid: str
    previous_record_id: int
    reason: str
    address: str
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., server_uuid: _Optional[str] = ..., previous_record_id: _Optional[int] = ..., reason: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class RemoveServer(_message.Message):
    __slots__ = ("header", "server_uuid", "previous_record_id", "retire_record_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    RETIRE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    server_uuid: str
    previous_record_id: int
    retire_record_id: int
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., server_uuid: _Optional[str] = ..., previous_record_id: _Optional[int] = ..., retire_record_id: _Optional[int] = ...) -> None: ...

class RetireServer(_message.Message):
    __slots__ = ("header", "server_uuid", "retired", "previous_record_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    server_uuid: str
    retired: bool
    previous_record_id: int
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., server_uuid: _Optional[str] = ..., retired: _Optional[bool] = ..., previous_record_id: _Optional[int] = ...) -> None: ...

class SetReplication(_message.Message):
    __slots__ = ("header", "table_id", "replication_factor", "old_replication_factor", "previous_record_id", "superseded")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    OLD_REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    table_id: str
    replication_factor: int
    old_replication_factor: int
    previous_record_id: int
    superseded: _containers.RepeatedCompositeFieldContainer[SupersededRequest]
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., table_id: _Optional[str] = ..., replication_factor: _Optional[int] = ..., old_replication_factor: _Optional[int] = ..., previous_record_id: _Optional[int] = ..., superseded: _Optional[_Iterable[_Union[SupersededRequest, _Mapping]]] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("header", "action", "name", "kind", "public_key", "roles", "state", "previous_record_id", "old_roles", "old_state", "superseded", "expires_unix_ms", "join_token", "join_token_record_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_ROLES_FIELD_NUMBER: _ClassVar[int]
    OLD_STATE_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    header: OpHeader
    action: str
    name: str
    kind: str
    public_key: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    state: str
    previous_record_id: int
    old_roles: _containers.RepeatedScalarFieldContainer[str]
    old_state: str
    superseded: _containers.RepeatedCompositeFieldContainer[RequestId]
    expires_unix_ms: int
    join_token: str
    join_token_record_id: int
    def __init__(self, header: _Optional[_Union[OpHeader, _Mapping]] = ..., action: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., public_key: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., previous_record_id: _Optional[int] = ..., old_roles: _Optional[_Iterable[str]] = ..., old_state: _Optional[str] = ..., superseded: _Optional[_Iterable[_Union[RequestId, _Mapping]]] = ..., expires_unix_ms: _Optional[int] = ..., join_token: _Optional[str] = ..., join_token_record_id: _Optional[int] = ...) -> None: ...

class LogRecord(_message.Message):
    __slots__ = ("lease", "create_table", "drop_table", "alter_table", "enlist_server", "server_down", "remove_server", "set_replication", "retire_server", "principal")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TABLE_FIELD_NUMBER: _ClassVar[int]
    DROP_TABLE_FIELD_NUMBER: _ClassVar[int]
    ALTER_TABLE_FIELD_NUMBER: _ClassVar[int]
    ENLIST_SERVER_FIELD_NUMBER: _ClassVar[int]
    SERVER_DOWN_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SERVER_FIELD_NUMBER: _ClassVar[int]
    SET_REPLICATION_FIELD_NUMBER: _ClassVar[int]
    RETIRE_SERVER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    create_table: CreateTable
    drop_table: DropTable
    alter_table: AlterTable
    enlist_server: EnlistServer
    server_down: ServerDown
    remove_server: RemoveServer
    set_replication: SetReplication
    retire_server: RetireServer
    principal: Principal
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., create_table: _Optional[_Union[CreateTable, _Mapping]] = ..., drop_table: _Optional[_Union[DropTable, _Mapping]] = ..., alter_table: _Optional[_Union[AlterTable, _Mapping]] = ..., enlist_server: _Optional[_Union[EnlistServer, _Mapping]] = ..., server_down: _Optional[_Union[ServerDown, _Mapping]] = ..., remove_server: _Optional[_Union[RemoveServer, _Mapping]] = ..., set_replication: _Optional[_Union[SetReplication, _Mapping]] = ..., retire_server: _Optional[_Union[RetireServer, _Mapping]] = ..., principal: _Optional[_Union[Principal, _Mapping]] = ...) -> None: ...

class TableSummary(_message.Message):
    __slots__ = ("table_id", "name", "state")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    name: str
    state: str
    def __init__(self, table_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ReplicaLocation(_message.Message):
    __slots__ = ("server_uuid", "address", "is_leader", "server_state", "member_type", "public_key")
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_TYPE_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    server_uuid: str
    address: str
    is_leader: bool
    server_state: str
    member_type: str
    public_key: str
    def __init__(self, server_uuid: _Optional[str] = ..., address: _Optional[str] = ..., is_leader: _Optional[bool] = ..., server_state: _Optional[str] = ..., member_type: _Optional[str] = ..., public_key: _Optional[str] = ...) -> None: ...

class TabletLocation(_message.Message):
    __slots__ = ("tablet_id", "partition", "replicas", "config_index", "replication_factor")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    partition: Partition
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaLocation]
    config_index: int
    replication_factor: int
    def __init__(self, tablet_id: _Optional[str] = ..., partition: _Optional[_Union[Partition, _Mapping]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaLocation, _Mapping]]] = ..., config_index: _Optional[int] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class CreateTableRequest(_message.Message):
    __slots__ = ("request_id", "name", "schema", "num_tablets", "replication_factor")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NUM_TABLETS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    schema: Schema
    num_tablets: int
    replication_factor: int
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., num_tablets: _Optional[int] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class CreateTableResponse(_message.Message):
    __slots__ = ("table_id",)
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    def __init__(self, table_id: _Optional[str] = ...) -> None: ...

class DropTableRequest(_message.Message):
    __slots__ = ("request_id", "name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class DropTableResponse(_message.Message):
    __slots__ = ("table_id",)
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    def __init__(self, table_id: _Optional[str] = ...) -> None: ...

class AlterTableRequest(_message.Message):
    __slots__ = ("request_id", "name", "new_name", "add_columns", "drop_columns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEW_NAME_FIELD_NUMBER: _ClassVar[int]
    ADD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DROP_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    new_name: str
    add_columns: _containers.RepeatedCompositeFieldContainer[ColumnSchema]
    drop_columns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ..., new_name: _Optional[str] = ..., add_columns: _Optional[_Iterable[_Union[ColumnSchema, _Mapping]]] = ..., drop_columns: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterTableResponse(_message.Message):
    __slots__ = ("table_id", "schema_version")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    schema_version: int
    def __init__(self, table_id: _Optional[str] = ..., schema_version: _Optional[int] = ...) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("tables",)
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[TableSummary]
    def __init__(self, tables: _Optional[_Iterable[_Union[TableSummary, _Mapping]]] = ...) -> None: ...

class DescribeTableRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribeTableResponse(_message.Message):
    __slots__ = ("table_id", "name", "schema", "num_tablets", "replication_factor", "state")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NUM_TABLETS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    name: str
    schema: Schema
    num_tablets: int
    replication_factor: int
    state: str
    def __init__(self, table_id: _Optional[str] = ..., name: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., num_tablets: _Optional[int] = ..., replication_factor: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class GetTabletLocationsRequest(_message.Message):
    __slots__ = ("name", "table_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    table_id: str
    def __init__(self, name: _Optional[str] = ..., table_id: _Optional[str] = ...) -> None: ...

class GetTabletLocationsResponse(_message.Message):
    __slots__ = ("table_id", "schema_version", "tablets")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    schema_version: int
    tablets: _containers.RepeatedCompositeFieldContainer[TabletLocation]
    def __init__(self, table_id: _Optional[str] = ..., schema_version: _Optional[int] = ..., tablets: _Optional[_Iterable[_Union[TabletLocation, _Mapping]]] = ...) -> None: ...

class ServerSummary(_message.Message):
    __slots__ = ("uuid", "address", "state", "replicas", "last_heartbeat_age_s", "retired", "fs_total_bytes", "fs_free_bytes", "fs_used_bytes", "fs_reserved_bytes", "fs_full", "fs_root_bytes")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    FS_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_FULL_FIELD_NUMBER: _ClassVar[int]
    FS_ROOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    state: str
    replicas: int
    last_heartbeat_age_s: float
    retired: bool
    fs_total_bytes: int
    fs_free_bytes: int
    fs_used_bytes: int
    fs_reserved_bytes: int
    fs_full: bool
    fs_root_bytes: int
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[str] = ..., replicas: _Optional[int] = ..., last_heartbeat_age_s: _Optional[float] = ..., retired: _Optional[bool] = ..., fs_total_bytes: _Optional[int] = ..., fs_free_bytes: _Optional[int] = ..., fs_used_bytes: _Optional[int] = ..., fs_reserved_bytes: _Optional[int] = ..., fs_full: _Optional[bool] = ..., fs_root_bytes: _Optional[int] = ...) -> None: ...

class ListServersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListServersResponse(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[ServerSummary]
    def __init__(self, servers: _Optional[_Iterable[_Union[ServerSummary, _Mapping]]] = ...) -> None: ...

class RemoveServerRequest(_message.Message):
    __slots__ = ("request_id", "server_uuid")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    server_uuid: str
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., server_uuid: _Optional[str] = ...) -> None: ...

class RemoveServerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnlistServerRequest(_message.Message):
    __slots__ = ("server_uuid", "address")
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    server_uuid: str
    address: str
    def __init__(self, server_uuid: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class EnlistServerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TabletReport(_message.Message):
    __slots__ = ("tablet_id", "data_state", "role", "term", "config_index", "config_uuids", "leader_uuid", "last_op_index", "schema_version", "config_member_types")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_STATE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONFIG_UUIDS_FIELD_NUMBER: _ClassVar[int]
    LEADER_UUID_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_MEMBER_TYPES_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    data_state: str
    role: str
    term: int
    config_index: int
    config_uuids: _containers.RepeatedScalarFieldContainer[str]
    leader_uuid: str
    last_op_index: int
    schema_version: int
    config_member_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tablet_id: _Optional[str] = ..., data_state: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., config_index: _Optional[int] = ..., config_uuids: _Optional[_Iterable[str]] = ..., leader_uuid: _Optional[str] = ..., last_op_index: _Optional[int] = ..., schema_version: _Optional[int] = ..., config_member_types: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("server_uuid", "address", "tablets", "http_address", "disk", "principals_version", "incremental", "vanished_tablet_ids")
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    PRINCIPALS_VERSION_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    VANISHED_TABLET_IDS_FIELD_NUMBER: _ClassVar[int]
    server_uuid: str
    address: str
    tablets: _containers.RepeatedCompositeFieldContainer[TabletReport]
    http_address: str
    disk: DiskReport
    principals_version: int
    incremental: bool
    vanished_tablet_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, server_uuid: _Optional[str] = ..., address: _Optional[str] = ..., tablets: _Optional[_Iterable[_Union[TabletReport, _Mapping]]] = ..., http_address: _Optional[str] = ..., disk: _Optional[_Union[DiskReport, _Mapping]] = ..., principals_version: _Optional[int] = ..., incremental: _Optional[bool] = ..., vanished_tablet_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DiskReport(_message.Message):
    __slots__ = ("total_bytes", "free_bytes", "used_bytes", "reserved_bytes", "full", "root_bytes")
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    ROOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    total_bytes: int
    free_bytes: int
    used_bytes: int
    reserved_bytes: int
    full: bool
    root_bytes: int
    def __init__(self, total_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., full: _Optional[bool] = ..., root_bytes: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("is_leader", "needs_enlist", "principals", "needs_full_report")
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    NEEDS_ENLIST_FIELD_NUMBER: _ClassVar[int]
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FULL_REPORT_FIELD_NUMBER: _ClassVar[int]
    is_leader: bool
    needs_enlist: bool
    principals: PrincipalsTable
    needs_full_report: bool
    def __init__(self, is_leader: _Optional[bool] = ..., needs_enlist: _Optional[bool] = ..., principals: _Optional[_Union[PrincipalsTable, _Mapping]] = ..., needs_full_report: _Optional[bool] = ...) -> None: ...

class PrincipalsTable(_message.Message):
    __slots__ = ("version", "entries")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    version: int
    entries: _containers.RepeatedCompositeFieldContainer[PrincipalEntry]
    def __init__(self, version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[PrincipalEntry, _Mapping]]] = ...) -> None: ...

class PrincipalEntry(_message.Message):
    __slots__ = ("name", "kind", "public_key", "roles", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    public_key: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    state: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., public_key: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ...) -> None: ...

class GetLeaderRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLeaderResponse(_message.Message):
    __slots__ = ("leader_uuid", "leader_address", "epoch", "serving")
    LEADER_UUID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    leader_uuid: str
    leader_address: str
    epoch: int
    serving: bool
    def __init__(self, leader_uuid: _Optional[str] = ..., leader_address: _Optional[str] = ..., epoch: _Optional[int] = ..., serving: _Optional[bool] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("uuid", "address", "role", "applied_id", "epoch", "leader_uuid", "leader_address", "tables", "tablets", "servers", "pending_ops", "raft_address", "log_members", "http_address", "public_key")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_UUID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_OPS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    role: str
    applied_id: int
    epoch: int
    leader_uuid: str
    leader_address: str
    tables: int
    tablets: int
    servers: int
    pending_ops: int
    raft_address: str
    log_members: _containers.RepeatedScalarFieldContainer[str]
    http_address: str
    public_key: str
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., applied_id: _Optional[int] = ..., epoch: _Optional[int] = ..., leader_uuid: _Optional[str] = ..., leader_address: _Optional[str] = ..., tables: _Optional[int] = ..., tablets: _Optional[int] = ..., servers: _Optional[int] = ..., pending_ops: _Optional[int] = ..., raft_address: _Optional[str] = ..., log_members: _Optional[_Iterable[str]] = ..., http_address: _Optional[str] = ..., public_key: _Optional[str] = ...) -> None: ...

class AddNodeRequest(_message.Message):
    __slots__ = ("raft_address",)
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    def __init__(self, raft_address: _Optional[str] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("raft_address",)
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    def __init__(self, raft_address: _Optional[str] = ...) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, members: _Optional[_Iterable[str]] = ...) -> None: ...

class SetReplicationRequest(_message.Message):
    __slots__ = ("request_id", "name", "replication_factor")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    replication_factor: int
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class SetReplicationResponse(_message.Message):
    __slots__ = ("table_id",)
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: str
    def __init__(self, table_id: _Optional[str] = ...) -> None: ...

class MoveReplicaRequest(_message.Message):
    __slots__ = ("tablet_id", "from_uuid", "to_uuid")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_UUID_FIELD_NUMBER: _ClassVar[int]
    TO_UUID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    from_uuid: str
    to_uuid: str
    def __init__(self, tablet_id: _Optional[str] = ..., from_uuid: _Optional[str] = ..., to_uuid: _Optional[str] = ...) -> None: ...

class MoveReplicaResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RetireServerRequest(_message.Message):
    __slots__ = ("server_uuid", "request_id", "cancel")
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    server_uuid: str
    request_id: RequestId
    cancel: bool
    def __init__(self, server_uuid: _Optional[str] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class RetireServerResponse(_message.Message):
    __slots__ = ("replicas",)
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    replicas: int
    def __init__(self, replicas: _Optional[int] = ...) -> None: ...

class ReplicationStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplicaMove(_message.Message):
    __slots__ = ("tablet_id", "from_uuid", "to_uuid")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_UUID_FIELD_NUMBER: _ClassVar[int]
    TO_UUID_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    from_uuid: str
    to_uuid: str
    def __init__(self, tablet_id: _Optional[str] = ..., from_uuid: _Optional[str] = ..., to_uuid: _Optional[str] = ...) -> None: ...

class ReplicationStatusResponse(_message.Message):
    __slots__ = ("tablets", "healthy_tablets", "under_replicated", "unknown", "moves", "retiring", "changes_sent", "changes_refused", "strays", "strays_deleted", "unhealthy", "stale_schemas", "schemas_caught_up")
    TABLETS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_TABLETS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    RETIRING_FIELD_NUMBER: _ClassVar[int]
    CHANGES_SENT_FIELD_NUMBER: _ClassVar[int]
    CHANGES_REFUSED_FIELD_NUMBER: _ClassVar[int]
    STRAYS_FIELD_NUMBER: _ClassVar[int]
    STRAYS_DELETED_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    STALE_SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    SCHEMAS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    tablets: int
    healthy_tablets: int
    under_replicated: int
    unknown: int
    moves: _containers.RepeatedCompositeFieldContainer[ReplicaMove]
    retiring: _containers.RepeatedScalarFieldContainer[str]
    changes_sent: int
    changes_refused: int
    strays: int
    strays_deleted: int
    unhealthy: _containers.RepeatedCompositeFieldContainer[UnhealthyTablet]
    stale_schemas: int
    schemas_caught_up: int
    def __init__(self, tablets: _Optional[int] = ..., healthy_tablets: _Optional[int] = ..., under_replicated: _Optional[int] = ..., unknown: _Optional[int] = ..., moves: _Optional[_Iterable[_Union[ReplicaMove, _Mapping]]] = ..., retiring: _Optional[_Iterable[str]] = ..., changes_sent: _Optional[int] = ..., changes_refused: _Optional[int] = ..., strays: _Optional[int] = ..., strays_deleted: _Optional[int] = ..., unhealthy: _Optional[_Iterable[_Union[UnhealthyTablet, _Mapping]]] = ..., stale_schemas: _Optional[int] = ..., schemas_caught_up: _Optional[int] = ...) -> None: ...

class UnhealthyTablet(_message.Message):
    __slots__ = ("tablet_id", "table_name", "reason")
    TABLET_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tablet_id: str
    table_name: str
    reason: str
    def __init__(self, tablet_id: _Optional[str] = ..., table_name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PrincipalSummary(_message.Message):
    __slots__ = ("name", "kind", "public_key", "roles", "state", "pending", "record_id", "expires_unix_ms", "join_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    public_key: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    state: str
    pending: bool
    record_id: int
    expires_unix_ms: int
    join_token: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., public_key: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., pending: _Optional[bool] = ..., record_id: _Optional[int] = ..., expires_unix_ms: _Optional[int] = ..., join_token: _Optional[str] = ...) -> None: ...

class AddPrincipalRequest(_message.Message):
    __slots__ = ("request_id", "name", "kind", "public_key", "roles", "ttl_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    kind: str
    public_key: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    ttl_s: int
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., public_key: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class AddPrincipalResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokePrincipalRequest(_message.Message):
    __slots__ = ("request_id", "name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class RevokePrincipalResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SetPrincipalRolesRequest(_message.Message):
    __slots__ = ("request_id", "name", "roles")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class SetPrincipalRolesResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class JoinServerRequest(_message.Message):
    __slots__ = ("request_id", "server_uuid", "public_key")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_UUID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    server_uuid: str
    public_key: str
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ..., server_uuid: _Optional[str] = ..., public_key: _Optional[str] = ...) -> None: ...

class JoinServerResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListPrincipalsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPrincipalsResponse(_message.Message):
    __slots__ = ("principals",)
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    principals: _containers.RepeatedCompositeFieldContainer[PrincipalSummary]
    def __init__(self, principals: _Optional[_Iterable[_Union[PrincipalSummary, _Mapping]]] = ...) -> None: ...
