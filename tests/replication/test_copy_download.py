"""The data path of a tablet copy (`tablet_copy.download_files`) against a real tablet
server process as the source: many small chunks across several files arrive byte for byte,
each kind is announced once in place and in order, and every failure (a write error, a
rename error, a fetch error, a cancel) surfaces as the download's error with no fetcher
thread and no open file left behind. The source refuses to serve a file shorter than its
session saw (a map past the end would kill it) and keeps serving."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    EndCopySessionRequest,
    EndCopySessionResponse,
    FetchCopyChunkRequest,
    FetchCopyChunkResponse,
    OpType,
    StartTabletCopyRequest,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tservers import tablet_copy
from tservers.fs import FsLayout
from tservers.tablet_copy import CopyCancelled, _Job, download_files

pytestmark = pytest.mark.integration

T = "dl"
CHUNK_BYTES = 16 << 10  # small chunks: every file takes many, fetched by several threads


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """One server with a tablet of two data blocks (small flushes; compaction would start
    at four) and its WAL, a few hundred KB each; the copies read it, nobody writes to it
    during the tests."""
    q = TServerTrio(tmp_path_factory.mktemp("src"), n=1, extra_args=["--flush-rows", "150"])

    def write(ids: range) -> None:
        ids = list(ids)
        t = pa.table(
            {"id": pa.array(ids, pa.int64()), "v": [f"{i:06d}" * 300 for i in ids]}  # 1.8 KB
        )
        q.client(0).write(T, [(OpType.INSERT, t)], schema_version=1)

    try:
        q.start_all()
        q.create_tablet(T, members=[0])
        q.leader(T)
        for b in range(2):
            write(range(b * 200, b * 200 + 200))
            wait_for(lambda b=b: q.report(0, T).blocks > b, 30, f"flush {b + 1} at the source")
        write(range(400, 500))  # and some in the WAL only
        yield q
    finally:
        q.stop_all()


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(tablet_copy, "FETCH_CHUNK_BYTES", CHUNK_BYTES)


def _begin(rc: RpcClient, uuid: str) -> BeginCopySessionResponse:
    return rc.call(
        uuid,
        "TServer.BeginCopySession",
        BeginCopySessionRequest(tablet_id=T),
        BeginCopySessionResponse,
        timeout_s=10,
    )


def _end(rc: RpcClient, uuid: str, sid: str) -> None:
    rc.call(
        uuid,
        "TServer.EndCopySession",
        EndCopySessionRequest(session_id=sid),
        EndCopySessionResponse,
    )


def _job(uuid: str) -> _Job:
    job = _Job(StartTabletCopyRequest(tablet_id=T, source_uuid=uuid))
    job.started = time.monotonic()  # the throttle counts from here
    return job


def _dests(root: Path) -> dict[str, Path]:
    dests = {"wal": root / "wal", "data": root / "data"}
    for d in dests.values():
        d.mkdir(parents=True)
    return dests


def _copy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tablet-copy-")]


def _open_files_under(root: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            found.append(target)
    return found


def test_many_chunks_across_files_arrive_intact(source: TServerTrio, small_chunks, tmp_path):
    p = source.procs[0]
    src = FsLayout(p.root, p.uuid)  # paths only
    dests = _dests(tmp_path / "copy")
    announced: list[str] = []

    def kind_done(kind: str) -> None:
        # Every file of the kind is in place (renamed) when it is announced.
        for f in begin.files:
            if f.kind == kind:
                assert (dests[kind] / f.name).is_file(), f.name
                assert not (dests[kind] / (f.name + ".tmp")).exists(), f.name
        announced.append(kind)

    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        try:
            files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
            assert {f.kind for f, _ in files} == {"wal", "data"}, begin.files
            assert len(files) >= 3
            job = _job(p.uuid)
            total = download_files(
                rc, job, begin.session_id, files, kinds=list(dests), on_kind_done=kind_done
            )
        finally:
            _end(rc, p.uuid, begin.session_id)
    sizes = [f.size_bytes for f, _ in files]
    assert sum(sizes) > 20 * CHUNK_BYTES  # many chunks
    assert all(s % CHUNK_BYTES for s in sizes)  # each file ends with a short chunk
    assert total == sum(sizes) == job.bytes_done
    assert job.files_done == len(files)
    assert announced == ["wal", "data"]
    for f, dest in files:
        # The session's view of each file: the open WAL segment up to its written offset.
        src_dir = src.wal_dir(T) if f.kind == "wal" else src.data_dir(T)
        want = (src_dir / f.name).read_bytes()[: f.size_bytes]
        assert len(want) == f.size_bytes, f.name
        assert (dest / f.name).read_bytes() == want, f.name
    assert not list((tmp_path / "copy").rglob("*.tmp"))
    assert _copy_threads() == []


@pytest.fixture
def shm_dir():
    """A directory on tmpfs, whose files refuse uncached writes (RWF_DONTCACHE)."""
    root = Path("/dev/shm")
    if not root.is_dir():
        pytest.skip("no /dev/shm")
    d = Path(tempfile.mkdtemp(prefix="copy-download-", dir=root))
    probe = d / "probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwritev(fd, [b"x"], 0, 0x80)
        pytest.skip("this kernel's tmpfs takes uncached writes: no fallback to exercise")
    except OSError as e:
        assert e.errno == errno.EOPNOTSUPP, e
    finally:
        os.close(fd)
        probe.unlink()
    try:
        yield d
    finally:
        shutil.rmtree(d)


def test_without_uncached_writes_chunks_are_written_back_as_they_come(
    source: TServerTrio, small_chunks, shm_dir, caplog
):
    p = source.procs[0]
    src = FsLayout(p.root, p.uuid)  # paths only
    dests = _dests(shm_dir / "copy")
    with RpcClient(p.address, "test") as rc, caplog.at_level(logging.INFO, tablet_copy.__name__):
        begin = _begin(rc, p.uuid)
        try:
            files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
            total = download_files(rc, _job(p.uuid), begin.session_id, files)
        finally:
            _end(rc, p.uuid, begin.session_id)
    assert "no uncached writes here" in caplog.text
    assert total == sum(f.size_bytes for f, _ in files)
    for f, dest in files:
        src_dir = src.wal_dir(T) if f.kind == "wal" else src.data_dir(T)
        assert (dest / f.name).read_bytes() == (src_dir / f.name).read_bytes()[: f.size_bytes]
    assert _copy_threads() == []


def test_a_write_error_surfaces_and_stops_every_fetcher(
    source: TServerTrio, small_chunks, tmp_path
):
    p = source.procs[0]
    dests = _dests(tmp_path / "copy")
    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        try:
            files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
            # The biggest file's `.tmp` is a device that answers every write with ENOSPC.
            f, dest = max(files, key=lambda x: x[0].size_bytes)
            (dest / (f.name + ".tmp")).symlink_to("/dev/full")
            job = _job(p.uuid)
            with pytest.raises(OSError) as e:
                download_files(rc, job, begin.session_id, files)
            assert e.value.errno == errno.ENOSPC
        finally:
            _end(rc, p.uuid, begin.session_id)
    assert _copy_threads() == []
    assert _open_files_under(tmp_path) == []
    assert not (dest / f.name).exists()  # never renamed into place


def test_a_rename_error_surfaces(source: TServerTrio, small_chunks, tmp_path):
    p = source.procs[0]
    dests = _dests(tmp_path / "copy")
    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        try:
            files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
            # A non-empty directory holds the place of the first data file: written and
            # fsynced, its rename fails.
            f, dest = next((f, d) for f, d in files if f.kind == "data")
            (dest / f.name / "x").mkdir(parents=True)
            with pytest.raises(OSError):
                download_files(rc, _job(p.uuid), begin.session_id, files)
        finally:
            _end(rc, p.uuid, begin.session_id)
    assert _copy_threads() == []
    assert _open_files_under(tmp_path) == []


def test_a_fetch_error_surfaces(source: TServerTrio, small_chunks, tmp_path):
    p = source.procs[0]
    dests = _dests(tmp_path / "copy")
    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        _end(rc, p.uuid, begin.session_id)  # the session is gone before the first fetch
        files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
        with pytest.raises(errors.NotFound):
            download_files(rc, _job(p.uuid), begin.session_id, files)
    assert _copy_threads() == []
    assert _open_files_under(tmp_path) == []


def test_cancel_mid_download_stops_every_fetcher(
    source: TServerTrio, small_chunks, monkeypatch, tmp_path
):
    monkeypatch.setattr(tablet_copy, "THROTTLED_CHUNK_BYTES_MIN", CHUNK_BYTES)
    p = source.procs[0]
    dests = _dests(tmp_path / "copy")
    job: _Job
    seen: list[int] = []

    def cancel_once_started() -> None:
        wait_for(lambda: job.bytes_done > 0, 30, "the first chunk written", interval_s=0.001)
        seen.append(job.bytes_done)
        job.cancel = True

    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        try:
            files = [(f, dests[k]) for k in dests for f in begin.files if f.kind == k]
            job = _job(p.uuid)
            # Throttled: one chunk at a time, two a second; the whole tablet would take
            # seconds, the cancel comes after the first chunk.
            rate = 2 * CHUNK_BYTES
            assert sum(f.size_bytes for f, _ in files) > 4 * CHUNK_BYTES
            canceller = threading.Thread(target=cancel_once_started)
            canceller.start()
            with pytest.raises(CopyCancelled):
                download_files(rc, job, begin.session_id, files, rate_limit_bytes_s=rate)
            canceller.join()
        finally:
            _end(rc, p.uuid, begin.session_id)
    assert seen and job.bytes_done < sum(f.size_bytes for f, _ in files)
    assert _copy_threads() == []
    assert _open_files_under(tmp_path) == []


def test_source_refuses_a_file_shorter_than_its_session(source: TServerTrio, tmp_path):
    """Run last in this module: it damages a closed file of the source's replica."""
    p = source.procs[0]
    src = FsLayout(p.root, p.uuid)  # paths only
    with RpcClient(p.address, "test") as rc:
        begin = _begin(rc, p.uuid)
        try:
            f = next(f for f in begin.files if f.kind == "data" and f.size_bytes > 1)
            path = src.data_dir(T) / f.name
            os.truncate(path, f.size_bytes // 2)
            with pytest.raises(errors.Internal, match="the session saw"):
                rc.call(
                    p.uuid,
                    "TServer.FetchCopyChunk",
                    FetchCopyChunkRequest(
                        session_id=begin.session_id, kind="data", name=f.name, offset=0
                    ),
                    FetchCopyChunkResponse,
                )
        finally:
            _end(rc, p.uuid, begin.session_id)
        assert rc.ping().uuid == p.uuid  # the source is alive (no fault on a map)
