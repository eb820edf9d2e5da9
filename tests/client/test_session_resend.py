"""A Session resends a write whose answer was lost with the same request id: the tablet does
not apply it twice (design/client.md, "Sessions"; design/tservers.md, "Exactly-once writes").

Real coordinator and tablet server; the fault is in the client process: the first send of a
write really reaches the server and is applied, then its answer is "lost" (the call raises
TIMED_OUT, as a dropped connection or a deadline would), and in between another session
overwrites the row. The session's resend must be answered as the first send was: an upsert
is not applied again (the overwrite stays), an insert is not an ALREADY_EXISTS row error.
"""

from __future__ import annotations

import pytest

from logcentric.client import Client, Column
from logcentric.tablets import TabletServerClient
from rpc import errors
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("v", "string")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("resend"), coordinators=1, tservers=1) as c:
        yield c


def _lose_first_answer(monkeypatch, between=None) -> list:
    """The next TabletServerClient.write is applied, then raises TIMED_OUT (its answer
    lost), after running `between`; later writes go through. Returns the request ids sent."""
    real = TabletServerClient.write
    sent: list = []
    state = {"armed": True}

    def write(self, *args, **kwargs):
        sent.append(kwargs.get("request_id"))
        answer = real(self, *args, **kwargs)
        if state["armed"]:
            state["armed"] = False
            if between is not None:
                between()
            raise errors.TimedOut("the answer was lost (test)")
        return answer

    monkeypatch.setattr(TabletServerClient, "write", write)
    return sent


def _values(table) -> dict:
    return {r["id"]: r["v"] for r in table.to_arrow().to_pylist()}


def test_resent_upsert_is_not_applied_over_a_later_write(cluster, monkeypatch):
    with Client(
        cluster.spec.coordinator_addresses, timeout_s=30.0, credentials=cluster.credentials()
    ) as client:
        client.create_table("resend_u", COLUMNS, num_tablets=1, replication_factor=1)
        table = client.table("resend_u")

        def overwrite() -> None:  # another session, while the answer is lost
            with client.new_session() as other:
                other.upsert(table, [{"id": 1, "v": "new"}])
            assert other.errors == []

        sent = _lose_first_answer(monkeypatch, overwrite)
        with client.new_session() as s:
            s.upsert(table, [{"id": 1, "v": "old"}])
        assert s.errors == []
        assert _values(table) == {1: "new"}
        first, other, resend = sent
        assert first is not None and resend == first  # one id for the write and its resend
        assert other.client_id != first.client_id


def test_resent_insert_that_landed_is_not_a_row_error(cluster, monkeypatch):
    with Client(
        cluster.spec.coordinator_addresses, timeout_s=30.0, credentials=cluster.credentials()
    ) as client:
        client.create_table("resend_i", COLUMNS, num_tablets=1, replication_factor=1)
        table = client.table("resend_i")
        sent = _lose_first_answer(monkeypatch)
        with client.new_session() as s:
            s.insert(table, [{"id": i, "v": f"v{i}"} for i in range(10)])
        assert s.errors == []
        assert s.rows_written == 10
        assert len(sent) == 2 and sent[1] == sent[0]
        assert _values(table) == {i: f"v{i}" for i in range(10)}
        # The next write of the session is a new one (its own id): it is applied.
        with client.new_session() as s2:
            s2.insert(table, [{"id": 0, "v": "again"}])
        assert [e.status for e in s2.errors] == ["ALREADY_EXISTS"]


def test_a_flush_that_gave_up_resends_the_same_write_in_the_next_flush(cluster, monkeypatch):
    """Every answer of a flush is lost until the session gives up (Unavailable): the write
    did land, but its outcome is unknown, so the rows stay buffered. Another session then
    overwrites the row. The next flush must resend the very same write (same request id),
    which the tablet answers without applying it again; a new id would write 'old' back."""
    with Client(
        cluster.spec.coordinator_addresses, timeout_s=3.0, credentials=cluster.credentials()
    ) as client:
        client.create_table("resend_f", COLUMNS, num_tablets=1, replication_factor=1)
        table = client.table("resend_f")
        real = TabletServerClient.write
        sent: list = []
        lose = {"on": True}

        def write(self, *args, **kwargs):
            sent.append(kwargs.get("request_id"))
            answer = real(self, *args, **kwargs)
            if lose["on"]:
                raise errors.TimedOut("the answer was lost (test)")
            return answer

        monkeypatch.setattr(TabletServerClient, "write", write)
        s = client.new_session()
        s.upsert(table, [{"id": 1, "v": "old"}, {"id": 2, "v": "old"}])
        with pytest.raises(errors.Unavailable):
            s.flush()
        assert s.pending_rows() == 2  # not known to be written: kept
        first = sent[0]
        assert first is not None and all(r == first for r in sent)
        lose["on"] = False
        with client.new_session() as other:
            other.upsert(table, [{"id": 1, "v": "new"}])
        assert other.errors == []
        sent.clear()
        s.upsert(table, [{"id": 3, "v": "later"}])
        s.close()
        assert s.errors == []
        assert sent[0] == first  # the unknown write first, with its own id
        assert sent[1].seq > first.seq and sent[1].first_incomplete_seq == sent[1].seq
        assert _values(table) == {1: "new", 2: "old", 3: "later"}
