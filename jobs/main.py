"""The main job (`./dev main`): a local cluster, a Spark pipeline, a failover in the middle.

1. `coordinator local-cluster up`: 3 coordinator nodes (embedded replicated log, cluster
   password) and 3 tablet servers (durable WALs), each its own process, under --dir; secure
   (CURVE on every link, the tablet servers admitted, design/security.md section 5) unless
   --insecure. Every client of the job (the library, the data source's option
   `credentials`, `coordinator status`) is the admin of `<dir>/admin.credentials`.
2. The Spark pipeline (`jobs/pipeline.py`) on `local[*]` (or --master): sample orders made
   by the job, ingested into a table through the "logcentric" data source, read back,
   aggregated in Spark, and written to a second table. In the middle of the ingest the
   coordinator leader is killed with kill -9; the job goes on through the new leader.
3. The counts are verified (every generated order exactly once; the aggregate read back from
   the cluster equals the one computed from the Parquet file alone).
4. `coordinator log --summary` and `--leases` show the log the coordinators wrote, with the
   failover in the lease history; the killed node is restarted and `coordinator status`
   checks the cluster; then the cluster is stopped.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from optools import admin, logtool
from optools.localcluster import INSECURE_WARNING, LocalCluster, _wipe
from rpc import errors
from rpc.console import add_version

log = logging.getLogger("main-job")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C
RESTART_CATCH_UP_S = 120.0  # a restarted coordinator node catching up with the log


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev main", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".run/main"), help="working directory")
    parser.add_argument("--rows", type=int, default=100_000, help="orders to generate")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark.master, else local[*])"
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="a plaintext cluster without authentication (default: secure, CURVE)",
    )
    add_version(parser, "./dev main")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.rows < 100:
        parser.error("--rows must be at least 100")
    root = args.dir.resolve()
    try:
        _wipe(root)
    except errors.BadRequest as err:
        parser.error(f"{err} (choose another --dir)")
    cluster = LocalCluster.create(
        root, coordinators=3, tservers=3, lease_timeout_s=1.5, secure=not args.insecure
    )
    mode = (
        f"secure (CURVE), admin credentials in {cluster.spec.admin_credentials}"
        if cluster.spec.secure
        else "INSECURE (plaintext, no authentication)"
    )
    say(f"== local cluster in {root}, {mode} (process logs in {cluster.log_dir})")
    if not cluster.spec.secure:
        print(INSECURE_WARNING.format(root=root), file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        cluster.up()
        coordinators = ",".join(cluster.spec.coordinator_addresses)
        say(f"up in {time.monotonic() - started:.1f}s: coordinators {coordinators}")
        ok = run(cluster, coordinators, root, args.rows, args.master)
    except errors.RpcError as err:
        say(f"main job failed: {err}")
        return 1
    except KeyboardInterrupt:
        print("main job: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if not args.keep:
            cluster.down()
            say("cluster stopped")
    say("main job: OK" if ok else "main job: FAILED")
    return 0 if ok else 1


def run(
    cluster: LocalCluster, coordinators: str, root: Path, rows: int, master: str | None
) -> bool:
    from jobs.pipeline import PipelineError, run_pipeline, summary
    from logcentric.spark.session import build_session

    killed: list = []
    creds = str(cluster.spec.admin_credentials) if cluster.spec.secure else None

    def kill_leader() -> None:
        with cluster.client() as meta:
            leader = cluster.leader(meta)
        if leader is None:
            say("   (no leader to kill right now)")
            return
        say(f"   kill -9 the coordinator leader {leader.name} ({leader.rpc}) mid-ingest")
        cluster.kill(leader)
        killed.append(leader)

    spark = build_session(master, "logcentric-main-job")
    say(
        f"== Spark pipeline on {spark.sparkContext.master}: {rows} orders, "
        "a coordinator failover mid-ingest"
    )
    try:
        result = run_pipeline(
            spark,
            coordinators,
            root / "pipeline",
            rows=rows,
            on_ingest_midpoint=kill_leader,
            credentials=creds,
        )
    except PipelineError as err:
        say(f"pipeline failed: {err}")
        return False
    finally:
        spark.stop()
    say(summary(result))
    ok = bool(result.ok and killed)
    if not killed:
        say("the failover did not happen: no leader was found at the midpoint")

    leader_dir = next(n.data for n in cluster.spec.coordinators if n not in killed)
    say("== coordinator log --summary")
    logtool.main(["--data-dir", leader_dir, "--summary"])
    say("== coordinator log --leases (who led when)")
    logtool.main(["--data-dir", leader_dir, "--leases"])

    for node in killed:
        cluster.start_coordinator(cluster.spec.coordinators.index(node))
    cluster.wait_ready(120)
    # A restarted node catches up with the log (by snapshot) before it follows: wait for
    # the cluster check to pass (bounded), then print it once.
    deadline = time.monotonic() + RESTART_CATCH_UP_S
    while time.monotonic() < deadline:
        if admin.check_cluster(coordinators.split(","), 10.0, cluster.credentials()).healthy:
            break
        time.sleep(1.0)
    say("== restarted the killed node; coordinator status")
    status_args = ["status", "--coordinators", coordinators]
    if creds:
        status_args += ["--credentials", creds]
    healthy = admin.main(status_args) == 0
    return ok and healthy


if __name__ == "__main__":
    sys.exit(main())
