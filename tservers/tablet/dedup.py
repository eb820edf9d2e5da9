"""A tablet's write dedup table: which logical writes (client id, seq) it has applied.

Part of the tablet's replicated state (design/tservers.md, "Exactly-once writes"): every
replica changes it only when it applies a log entry, from that entry's content alone, so all
replicas hold the same table at the same applied index, and WAL replay rebuilds it. Nothing
here reads a clock. A write whose id the table holds is a no-op when applied again; its answer
is the one of the entry that applied it.

Per client: `done`, seq -> (op id, rows) of its applied writes, and `floor_seq`: every seq
below it is finished (the client said so with `first_incomplete_seq`, or it was evicted) and
forgotten; a resend of one is STALE (refused: its outcome can no longer be told).

Bounds (all from log entries, deterministic):
- ENTRIES_PER_CLIENT_MAX applied writes per client (the lowest seq goes first, the floor
  rises past it): a Session has one write in flight, so it holds about one.
- CLIENTS_MAX clients per tablet; past it the client whose last applied write has the lowest
  log index goes (its later resends would be applied again: it would have to stay silent
  while CLIENTS_MAX other clients write to this tablet).
Persisted in the superblock: about 60 bytes per client plus 30 per entry, so a full table of
CLIENTS_MAX one-entry clients is about 360 KB (well under the metafile's 16 MB cap).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rpc.errors import Corruption
from rpc.protocols.tserver_pb2 import DedupClientPB, DedupDonePB, OpIdPB, RequestIdPB

CLIENT_ID_BYTES = 16
ENTRIES_PER_CLIENT_MAX = 64
CLIENTS_MAX = 4096


@dataclass(frozen=True, slots=True)
class RequestId:
    client_id: bytes
    seq: int
    first_incomplete_seq: int

    @staticmethod
    def from_pb(pb: RequestIdPB) -> RequestId:
        return RequestId(bytes(pb.client_id), pb.seq, pb.first_incomplete_seq)

    def to_pb(self) -> RequestIdPB:
        return RequestIdPB(
            client_id=self.client_id, seq=self.seq, first_incomplete_seq=self.first_incomplete_seq
        )

    def problem(self) -> str | None:
        """Why a client's request id is malformed (None: well formed)."""
        if len(self.client_id) != CLIENT_ID_BYTES:
            return f"request id's client id has {len(self.client_id)} bytes, not {CLIENT_ID_BYTES}"
        if self.seq < 1:
            return "request id's seq must be at least 1"
        if self.first_incomplete_seq > self.seq:
            return (
                f"request id's first incomplete seq {self.first_incomplete_seq} is above "
                f"its seq {self.seq}"
            )
        return None


@dataclass(frozen=True, slots=True)
class Done:
    """An applied write: the answer to each of its resends."""

    term: int
    index: int
    rows: int


class Stale:
    """A write below its client's floor: finished and forgotten."""

    __slots__ = ()


STALE = Stale()


class _Client:
    __slots__ = ("floor_seq", "last_index", "done")

    def __init__(self, floor_seq: int = 0, last_index: int = 0) -> None:
        self.floor_seq = floor_seq
        self.last_index = last_index
        self.done: dict[int, Done] = {}


class DedupTable:
    """client id -> its applied writes; clients in order of their last applied index."""

    def __init__(
        self,
        *,
        entries_per_client_max: int = ENTRIES_PER_CLIENT_MAX,
        clients_max: int = CLIENTS_MAX,
    ) -> None:
        assert entries_per_client_max >= 1 and clients_max >= 1
        self.entries_per_client_max = entries_per_client_max
        self.clients_max = clients_max
        self._clients: OrderedDict[bytes, _Client] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clients)

    def entries(self) -> int:
        return sum(len(c.done) for c in self._clients.values())

    def lookup(self, rid: RequestId) -> Done | Stale | None:
        """The outcome of `rid` if it was applied (Done) or is forgotten (STALE); None: new."""
        c = self._clients.get(rid.client_id)
        if c is None:
            return None
        d = c.done.get(rid.seq)
        if d is not None:
            return d
        return STALE if rid.seq < c.floor_seq else None

    def record(self, rid: RequestId, done: Done) -> None:
        """`rid` was applied by the entry at `done.index` (in index order: never lower than
        any index recorded before). Then forget what the client finished, and evict."""
        c = self._clients.get(rid.client_id)
        if c is None:
            c = self._clients[rid.client_id] = _Client()
        else:
            assert done.index > c.last_index, "dedup records out of index order"
            self._clients.move_to_end(rid.client_id)
        assert self.lookup(rid) is None, "recording an applied or forgotten write"
        c.done[rid.seq] = done
        c.last_index = done.index
        floor = max(c.floor_seq, rid.first_incomplete_seq)
        if len(c.done) > self.entries_per_client_max:
            over = sorted(c.done)[: len(c.done) - self.entries_per_client_max]
            floor = max(floor, over[-1] + 1)
        if floor > c.floor_seq:
            c.floor_seq = floor
            for s in [s for s in c.done if s < floor]:
                del c.done[s]
        while len(self._clients) > self.clients_max:
            self._clients.popitem(last=False)

    # ---------------------------------------------------------------- superblock
    def to_pb(self) -> list[DedupClientPB]:
        return [
            DedupClientPB(
                client_id=cid,
                floor_seq=c.floor_seq,
                last_index=c.last_index,
                done=[
                    DedupDonePB(seq=s, op_id=OpIdPB(term=d.term, index=d.index), rows=d.rows)
                    for s, d in sorted(c.done.items())
                ],
            )
            for cid, c in self._clients.items()
        ]

    @classmethod
    def from_pb(cls, clients, **bounds) -> DedupTable:
        """The table a superblock holds; Corruption if it breaks a rule `record` keeps."""
        t = cls(**bounds)
        problem = check_pb(clients, t.entries_per_client_max, t.clients_max)
        if problem:
            raise Corruption(f"write dedup table: {problem}")
        for pb in sorted(clients, key=lambda c: c.last_index):
            c = _Client(pb.floor_seq, pb.last_index)
            for d in pb.done:
                c.done[d.seq] = Done(d.op_id.term, d.op_id.index, d.rows)
            t._clients[bytes(pb.client_id)] = c
        return t


def check_pb(
    clients,
    entries_per_client_max: int = ENTRIES_PER_CLIENT_MAX,
    clients_max: int = CLIENTS_MAX,
) -> str | None:
    """What is wrong with a persisted (or copied) dedup table; None if nothing."""
    if len(clients) > clients_max:
        return f"{len(clients)} clients, at most {clients_max}"
    seen: set[bytes] = set()
    for pb in clients:
        cid = bytes(pb.client_id)
        if len(cid) != CLIENT_ID_BYTES or cid in seen:
            return f"client id {cid.hex()[:64]!r} is malformed or repeated"
        seen.add(cid)
        if len(pb.done) > entries_per_client_max:
            n = len(pb.done)
            return f"client {cid.hex()} has {n} entries, at most {entries_per_client_max}"
        seqs = [d.seq for d in pb.done]
        if len(set(seqs)) != len(seqs) or any(s < pb.floor_seq for s in seqs):
            return f"client {cid.hex()} has repeated entries or entries below its floor"
        if any(d.op_id.index > pb.last_index for d in pb.done):
            return f"client {cid.hex()} has an entry above its last index"
    return None
