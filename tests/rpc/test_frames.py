"""rpc/frames.py's headers built without protobuf are protobuf's bytes, byte for byte.

The server's OK answer header and the client's request header are precomputed but for
their call id (and time left): a decoder must read them as the same message, and a
serializer would write the same bytes (fields in number order, defaults omitted)."""

from __future__ import annotations

import random

import pytest

from rpc.frames import ok_header, request_header, varint
from rpc.rpc_pb2 import RequestHeader, ResponseHeader, StatusCode

# Every varint length from 1 to 10 bytes, and the edges between them.
EDGES = sorted({0, 1, *(v for k in range(1, 10) for v in (2 ** (7 * k) - 1, 2 ** (7 * k)))})
U64 = [n for n in EDGES if n < 2**64] + [2**64 - 1]
U32 = [n for n in EDGES if n < 2**32] + [2**32 - 1]


def test_varint_is_protobufs() -> None:
    rng = random.Random(28)
    assert varint(0) == b"\x00"
    for n in U64[1:] + [rng.getrandbits(rng.randint(1, 64)) or 1 for _ in range(2000)]:
        # call_id is a uint64 field (1): its bytes after the tag are the varint
        assert b"\x08" + varint(n) == ResponseHeader(call_id=n).SerializeToString()


@pytest.mark.parametrize("server_uuid", ["", "ts-1", "u" * 300])
def test_ok_header_is_protobufs(server_uuid: str) -> None:
    rest = ResponseHeader(status=StatusCode.OK, server_uuid=server_uuid).SerializeToString()
    for call_id in U64:
        built = ok_header(call_id, rest)
        assert (
            built
            == ResponseHeader(
                call_id=call_id, status=StatusCode.OK, server_uuid=server_uuid
            ).SerializeToString()
        )
        parsed = ResponseHeader.FromString(built)
        assert (parsed.call_id, parsed.status, parsed.server_uuid) == (
            call_id,
            StatusCode.OK,
            server_uuid,
        )


@pytest.mark.parametrize(
    "fields", [("Test.Echo", "bench-echo", "bench"), ("rpc.Ping", "", ""), ("", "", "c")]
)
def test_request_header_is_protobufs(fields: tuple[str, str, str]) -> None:
    method, recipient, caller = fields
    fixed = RequestHeader(
        method=method, recipient_uuid=recipient, caller_uuid=caller
    ).SerializeToString()
    for call_id in U64:
        for timeout_ms in U32:
            expected = RequestHeader(
                call_id=call_id,
                method=method,
                recipient_uuid=recipient,
                caller_uuid=caller,
                timeout_ms=timeout_ms,
            )
            built = request_header(call_id, fixed, timeout_ms)
            assert built == expected.SerializeToString()
            assert RequestHeader.FromString(built) == expected
