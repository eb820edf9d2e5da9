"""`python -m tests.nemesis --seed N --faults partition,pause --duration S`: one seeded run.

Starts a NemesisCluster (3 coordinators, 3 tablet servers in network namespaces) under
--dir, runs the register, set and DDL workloads while the seeded schedule of the chosen
fault kinds is injected, heals, checks every history, prints a summary, and on an anomaly
writes the history, the schedule and a timeline next to the node logs. Same seed, same
schedule; `--schedule FILE` replays a saved schedule.json; `--print-schedule` only prints it.
Exit status 0 when every history checks out, 1 on an anomaly. Run as root.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from tests.nemesis.clock import ServingMonitor
from tests.nemesis.cluster import NemesisCluster, available
from tests.nemesis.faults import Schedule
from tests.nemesis.runner import FAULT_FACTORIES, make_faults, run
from tests.nemesis.workloads import Access, DdlWorkload, RegisterWorkload, SetWorkload

WORKLOADS = ("register", "set", "ddl")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.nemesis", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--faults", default="partition,pause",
                   help=f"comma-separated kinds: {','.join(sorted(FAULT_FACTORIES))}")  # fmt: skip
    p.add_argument("--duration", type=float, default=60.0, help="seconds of workload")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--schedule", type=Path,
                   help="replay this schedule.json (its seed and fault kinds)")  # fmt: skip
    p.add_argument("--dir", type=Path, help="cluster folder (default: a new temporary one)")
    p.add_argument("--print-schedule", action="store_true", help="print the schedule and exit")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    replayed = Schedule.load(args.schedule) if args.schedule else None
    if replayed is not None and replayed.steps:
        kinds = sorted({s.kind for s in replayed.steps})  # the kinds the schedule holds
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not kinds or not names or not set(names) <= set(WORKLOADS):
        p.error(f"--faults needs a kind, --workloads a subset of {WORKLOADS}")
    why = available()
    if why:
        print(f"nemesis: {why}", file=sys.stderr)
        return 2
    root = args.dir or Path(tempfile.mkdtemp(prefix="nemesis-"))
    cluster = NemesisCluster.build(root, lazy_disks="power" in kinds, secure=True)
    faults = make_faults(cluster, kinds)
    if replayed is not None:
        schedule = replayed
    else:
        schedule = Schedule.make(args.seed, args.duration, faults, cluster.node_names)
    print(f"schedule (seed {schedule.seed}, {len(schedule.steps)} faults):")
    for step in schedule.steps:
        print("  " + step.describe())
    if args.print_schedule:
        return 0
    access = Access.of(cluster)
    tag = f"s{schedule.seed}"
    workloads = [
        {"register": RegisterWorkload, "set": SetWorkload, "ddl": DdlWorkload}[n](access, tag)
        for n in names
    ]
    monitor = ServingMonitor(cluster, tag) if "clock" in kinds else None
    if monitor is not None:  # the clock's safety property: never two leaders at once
        workloads.append(monitor)
    with cluster:
        print(f"cluster up in {root} (node logs in {cluster.log_dir})")
        result = run(cluster, schedule, faults, workloads, tag)
    print(result.summary())
    if monitor is not None:
        print(monitor.summary())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
