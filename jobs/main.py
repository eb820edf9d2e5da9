"""The main job (`./dev main`): an end-to-end run on real local processes.

1. A three-replica logstore (`logstore serve` x3, password-protected Raft): conditional
   appends from a client, kill -9 of the Raft leader in the middle, appends go on, and every
   acknowledged entry is in the log exactly once afterwards.
2. A tablet server (`tserver fs format` + `tserver start`, durable WAL): a table of sample
   rows written in batches, scanned and aggregated with Arrow, kill -9 of the server, restart,
   and every acknowledged row is there.

Everything runs under --dir (default .run/main, wiped first); logs are kept there.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from jobs.procs import ProcessGroup, free_port
from rpc import errors

log = logging.getLogger("main-job")


def say(text: str) -> None:
    print(text, flush=True)


def run_logstore(group: ProcessGroup, root: Path, appends: int) -> None:
    from logstore.remote import RemoteLogStore

    say("== logstore: three replicas with a password ==")
    password_file = root / "logstore.password"
    password_file.write_text("main-job-secret\n")
    raft = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    rpc = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    procs = []
    for i in range(3):
        peers = ",".join(a for j, a in enumerate(raft) if j != i)
        procs.append(
            group.start(
                f"logstore-{i}",
                "logstore.cli",
                "serve",
                "--raft-address",
                raft[i],
                "--peers",
                peers,
                "--rpc-bind",
                rpc[i],
                "--data-dir",
                str(root / f"logstore-{i}"),
                "--password-file",
                str(password_file),
            )
        )
    for p in procs:
        p.wait_line(r"logstore serving", 60)
    with RemoteLogStore(rpc, caller_uuid="main-job") as store:
        leader_raft = wait_leader(store, rpc)
        say(f"replicas up: rpc {', '.join(rpc)}; Raft leader {leader_raft}")
        acknowledged: list[bytes] = []
        killed = False
        started = time.monotonic()
        i = 0
        while len(acknowledged) < appends:
            data = f"entry-{i}".encode()
            i += 1
            if not killed and len(acknowledged) == appends // 2:
                victim = raft.index(leader_raft)
                say(f"kill -9 the Raft leader (replica {victim}) after {len(acknowledged)} appends")
                procs[victim].kill9()
                killed = True
            try:
                expected = store.last_id("demo", timeout_s=10) + 1
                store.append("demo", data, expected_id=expected, timeout_s=10)
                acknowledged.append(data)
            except (errors.ConditionFailed, errors.Unavailable, errors.TimedOut) as err:
                # Unknown outcome: the entry may have landed. Check the log before going on.
                present = {e.data for e in read_all(store, "demo")}
                if data in present:
                    acknowledged.append(data)
                else:
                    log.info("append retried after %s", err)
        elapsed = time.monotonic() - started
        entries = read_all(store, "demo")
        datas = [e.data for e in entries]
        ids = [e.id for e in entries]
        assert sorted(set(datas)) == sorted(set(acknowledged)), "an acknowledged entry is missing"
        assert len(datas) == len(set(datas)), "an entry was appended twice"
        assert ids == list(range(1, len(ids) + 1)), "ids are not contiguous"
        say(
            f"{len(acknowledged)} conditional appends acknowledged in {elapsed:.1f}s across the "
            f"failover; log has {len(entries)} entries, ids 1..{ids[-1]}, none lost or doubled"
        )
        new_leader = wait_leader(store, [a for j, a in enumerate(rpc) if raft[j] != leader_raft])
        say(f"new Raft leader: {new_leader}")


def wait_leader(store, rpc_addresses: list[str], timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for address in rpc_addresses:
            try:
                status = store.status(address, timeout_s=2)
            except errors.RpcError:
                continue
            if status.role == "leader":
                return status.raft_address
        time.sleep(0.1)
    raise TimeoutError("no logstore leader")


def read_all(store, log_name: str) -> list:
    entries, next_id = [], 1
    while True:
        batch = store.read(log_name, next_id, 1000, timeout_s=10)
        if not batch:
            return entries
        entries.extend(batch)
        next_id = batch[-1].id + 1


def run_tserver(group: ProcessGroup, root: Path, rows: int) -> None:
    from coordinator.client.tablets import TabletServerClient, column
    from tservers.tserver_pb2 import OpType

    say("== tablet server: durable writes, kill -9, recovery ==")
    fs_root = root / "tserver-0"
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(fs_root)],
        check=True,
        capture_output=True,
    )
    bind = f"127.0.0.1:{free_port()}"

    def start():
        proc = group.start(
            "tserver-0", "tservers.cli", "start", "--fs-root", str(fs_root), "--bind", bind
        )
        proc.wait_line(r"serving on", 60)
        return proc

    proc = start()
    with TabletServerClient(bind) as ts:
        ts.create_tablet(
            "sales-0",
            [
                column("id", "int64", key=True),
                column("region", "string"),
                column("amount", "double"),
                column("units", "int32"),
                column("paid", "bool"),
                column("note", "string", nullable=True),
            ],
            table_name="sales",
        )
        regions = ["north", "south", "east", "west"]
        batch_rows = 1000
        started = time.monotonic()
        for start_id in range(0, rows, batch_rows):
            ids = list(range(start_id, min(rows, start_id + batch_rows)))
            table = pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "region": [regions[i % 4] for i in ids],
                    "amount": pa.array([(i % 97) * 1.5 for i in ids], pa.float64()),
                    "units": pa.array([i % 7 for i in ids], pa.int32()),
                    "paid": [i % 3 != 0 for i in ids],
                    "note": [None if i % 5 else f"n{i}" for i in ids],
                }
            )
            ts.write("sales-0", [(OpType.INSERT, table)])
        elapsed = time.monotonic() - started
        say(
            f"{rows} rows written and acknowledged in {elapsed:.1f}s ({rows / elapsed:,.0f} rows/s)"
        )
        before = aggregate(ts)
        say(f"by region: {before}")
    say("kill -9 the tablet server, then restart it on the same data")
    proc.kill9()
    start()
    with TabletServerClient(bind) as ts:
        after = aggregate(ts)
        total = sum(n for n, _ in after.values())
        assert after == before, f"data changed across the crash: {before} != {after}"
        say(f"after restart: {total} rows, aggregates identical: nothing acknowledged was lost")


def aggregate(ts) -> dict[str, tuple[int, float]]:
    table = pa.Table.from_batches(list(ts.scan("sales-0", projection=["region", "amount"])))
    grouped = table.group_by("region").aggregate([("amount", "count"), ("amount", "sum")])
    out = {}
    for row in grouped.to_pylist():
        out[row["region"]] = (row["amount_count"], round(row["amount_sum"], 3))
    assert pc.sum(grouped["amount_count"]).as_py() == table.num_rows
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev main", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".run/main"), help="working directory")
    parser.add_argument("--appends", type=int, default=400, help="logstore appends")
    parser.add_argument("--rows", type=int, default=100_000, help="rows written to the tablet")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.appends < 2 or args.rows < 1:
        parser.error("--appends must be >= 2 and --rows >= 1")
    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    say(f"working directory: {root} (process logs in {root / 'logs'})")
    with ProcessGroup(root / "logs") as group:
        run_logstore(group, root, args.appends)
        run_tserver(group, root, args.rows)
    say("main job: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
