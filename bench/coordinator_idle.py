"""The coordinator's idle CPU at N one-tablet tables of replication 3 (issue 28).

A local cluster (one coordinator, three tablet servers, plaintext) gets N tables through the
client package, waits until every tablet serves, lets it settle, then measures the
coordinator's user + system CPU (/proc/PID/stat) over `--window-s` with no client call, and
optionally samples it with py-spy meanwhile (`--py-spy OUT`: raw folded stacks of the
threads holding the GIL, 50 a second, during the first window).

    .venv/bin/python bench/coordinator_idle.py --tables 2000 [--window-s 20] [--py-spy out.txt]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scale import SETTLE_TIMEOUT_S, cpu_s, create_tables, wait_serving  # noqa: E402

import logcentric  # noqa: E402
from optools.localcluster import LocalCluster  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=2000)
    ap.add_argument("--window-s", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=10.0)
    ap.add_argument("--windows", type=int, default=3, help="idle windows measured")
    ap.add_argument("--py-spy", default="", help="raw py-spy output of the first window")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="coord-idle-"))
    cluster = LocalCluster.create(workdir / "c", 1, 3, lease_timeout_s=1.5, secure=False)
    cluster.up(timeout_s=180)
    try:
        with logcentric.connect(",".join(cluster.spec.coordinator_addresses), timeout_s=120) as c:
            names = [f"t{i:05d}" for i in range(args.tables)]
            t0 = time.monotonic()
            tablet_ids = create_tables(c, names)
        print(f"{len(names)} tables created in {time.monotonic() - t0:.1f} s", flush=True)
        victims = [node.rpc for node in cluster.spec.tservers]
        wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
        time.sleep(args.settle_s)
        coord = cluster.spec.coordinators[0].pid
        for i in range(args.windows):
            spy = None
            if args.py_spy and i == 0:
                spy = subprocess.Popen(
                    [str(ROOT / ".venv/bin/py-spy"), "record", "-d", str(int(args.window_s)),
                     "-r", "50", "--gil", "-f", "raw", "-o", args.py_spy, "-p", str(coord)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            k0, w0 = cpu_s(coord), time.monotonic()
            time.sleep(args.window_s)
            k1, w1 = cpu_s(coord), time.monotonic()
            if spy is not None:
                spy.wait(60)
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            pct = 100 * (k1 - k0) / (w1 - w0)
            print(f"N={args.tables} window {i}: coordinator idle CPU {pct:.2f}% of a core "
                  f"over {w1 - w0:.1f} s, load average {load}", flush=True)  # fmt: skip
    finally:
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
