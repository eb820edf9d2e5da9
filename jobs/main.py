"""The main job (`./dev main`): a local cluster of real processes and a workload across a failover.

1. `coordinator local-cluster up`: 3 coordinator nodes (embedded replicated log, cluster
   password) and 3 tablet servers (durable WALs), each its own process.
2. Create a table through the client library, write rows in sessions, and kill -9 the
   coordinator leader in the middle of the writes and table operations; the client follows the
   new leader and no acknowledged row or operation is lost or doubled.
3. Scan and aggregate the table, print the cluster status and the lease history (who led
   when), and stop the cluster.

Everything lives under --dir (default .run/main, wiped first); logs are kept there.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import pyarrow as pa

from coordinator.client.client import Client, Column
from coordinator.localcluster import LocalCluster, _wipe
from rpc import errors

log = logging.getLogger("main-job")
REGIONS = ["north", "south", "east", "west"]


def say(text: str) -> None:
    print(text, flush=True)


def batch(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": [REGIONS[i % 4] for i in ids],
            "amount": pa.array([(i % 97) * 1.5 for i in ids], pa.float64()),
            "units": pa.array([i % 7 for i in ids], pa.int32()),
            "paid": [i % 3 != 0 for i in ids],
            "note": [None if i % 5 else f"n{i}" for i in ids],
        }
    )


def run(cluster: LocalCluster, rows: int, batch_rows: int) -> None:
    addresses = cluster.spec.coordinator_addresses
    with Client(addresses, timeout_s=60) as client:
        client.create_table(
            "sales",
            [
                Column("id", "int64", key=True),
                Column("region", "string"),
                Column("amount", "double"),
                Column("units", "int32"),
                Column("paid", "bool"),
                Column("note", "string", nullable=True),
            ],
            num_tablets=6,
            replication_factor=1,
        )
        table = client.table("sales")
        say(
            f"table sales: {len(table.tablets())} tablets over {len(cluster.spec.tservers)} servers"
        )
        written = 0
        killed_at = None
        started = time.monotonic()
        with client.new_session(flush_rows_max=batch_rows) as session:
            for start in range(0, rows, batch_rows):
                if killed_at is None and start >= rows // 2:
                    with cluster.client() as meta:
                        leader = cluster.leader(meta)
                    assert leader is not None
                    say(
                        f"kill -9 the coordinator leader {leader.name} ({leader.rpc}) "
                        f"after {written} rows"
                    )
                    cluster.kill(leader)
                    killed_at = time.monotonic()
                    # A table operation right after the kill: the client finds the new leader.
                    client.create_table(
                        "sales_by_region",
                        [Column("region", "string", key=True), Column("total", "double")],
                        num_tablets=2,
                    )
                    took = time.monotonic() - killed_at
                    say(f"create-table after the kill answered in {took:.2f}s by the new leader")
                # Upserts: a batch resent after a lost answer cannot double a row.
                session.upsert(table, batch(start, min(rows, start + batch_rows)))
                written = min(rows, start + batch_rows)
        elapsed = time.monotonic() - started
        if session.errors:
            raise SystemExit(f"row errors: {session.errors[:5]}")
        say(f"{written} rows written in {elapsed:.1f}s ({written / elapsed:,.0f} rows/s)")

        # Scanned buffers arrive in zmq frames at any alignment; Arrow's group-by wants them
        # aligned, so copy once into fresh buffers.
        data = table.to_arrow(projection=["region", "amount"]).combine_chunks()
        assert data.num_rows == rows, f"expected {rows} rows, scanned {data.num_rows}"
        totals = data.group_by("region").aggregate([("amount", "sum"), ("amount", "count")])
        out = client.table("sales_by_region")
        with client.new_session() as session:
            session.upsert(
                out,
                pa.table({"region": totals["region"], "total": totals["amount_sum"]}),
            )
        result = sorted(out.to_arrow().to_pylist(), key=lambda r: r["region"])
        say(f"scanned {data.num_rows} rows (every one written, none doubled); totals by region:")
        for row in result:
            say(f"  {row['region']:6} {row['total']:14,.1f}")
        say(f"tables: {', '.join(client.list_tables())}")

    cluster.start_coordinator(cluster.spec.coordinators.index(leader))
    cluster.wait_ready(60)
    say("restarted the killed node; cluster status:")
    for line in cluster.status_lines()[0]:
        say(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev main", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".run/main"), help="working directory")
    parser.add_argument("--rows", type=int, default=200_000, help="rows to write")
    parser.add_argument("--batch-rows", type=int, default=5_000, help="rows per write batch")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.rows < 2 or args.batch_rows < 1:
        parser.error("--rows must be >= 2 and --batch-rows >= 1")
    root = args.dir.resolve()
    _wipe(root)
    cluster = LocalCluster.create(root, coordinators=3, tservers=3, lease_timeout_s=1.5)
    say(f"starting a local cluster in {root} (logs in {cluster.log_dir})")
    started = time.monotonic()
    try:
        cluster.up()
        say(
            f"cluster up in {time.monotonic() - started:.1f}s: "
            f"coordinators {','.join(cluster.spec.coordinator_addresses)}"
        )
        run(cluster, args.rows, args.batch_rows)
    except errors.RpcError as err:
        say(f"main job failed: {err}")
        return 1
    finally:
        if not args.keep:
            cluster.down()
            say("cluster stopped")
    say("main job: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
