"""Per-tablet fixed costs (issue 28): disk, idle CPU, restart and create latency at N tablets.

A local cluster (one coordinator, three tablet servers) gets N one-tablet tables of
replication 3 (N replicas on every tablet server), created through the client package
(`logcentric`), empty. The bench prints, for a baseline of `--baseline` tables (10) measured
in the same run and for N, with their ratio:
- disk per empty replica: the growth of the tablet servers' fs roots (blocks allocated, as
  du counts them) divided by the replicas created;
- idle CPU of a tablet server, % of one core: user + system time from /proc/PID/stat over
  `--idle-window-s` with no client traffic, averaged over the three servers, and the
  elections started meanwhile (from the servers' logs: there should be none); the
  coordinator's idle CPU over the same window, and the machine's load average then;
- restart to serving every tablet: one tablet server killed with -9 (`--restart kill`, the
  default) or stopped with SIGTERM (`--restart stop`: the server that leads the most
  tablets, which hands their leadership over before it exits) and restarted; seconds from
  the signal until every tablet has been seen RUNNING there with a leader somewhere, and
  the candidacies logged meanwhile (`--restart both`: a kill, then a stop, one after the
  other on the same cluster);
- create-table latency p50/p99: `--samples` more tables created one after another through
  the client once the cluster holds its tables (`--tables`, by default as many as tablets),
  and the coordinator leader's mean time a create in its steps (`commit_point`, `complete`
  and within it `calls` and `done`: design/operability.md, the step metric);
- tablet lookups per second at the coordinator (`tablet_locations`, not cached by the
  client), once the timed creates' tablets serve and `--settle-s` more has passed, 4
  callers asking `--lookups-per-caller` (2,000) times each for tables spread over the
  catalog (4,000 tables at 10,000). The baseline's cluster stays up (idle) until N's
  lookups are done, and the two are measured in turns, so that both see the same machine:
  a first pass over tables not asked for since their creation read their tablets
  (`create_tables`), the baseline's then N's, then `--lookup-rounds` (15) rounds of passes
  for the same tables again, each round the baseline's, N's and a control's (N's cluster
  asked for as many tables as the baseline has, spread over its catalog: the same catalog
  with the baseline's working set), in an order that turns by one each round; each pass
  and each ratio to the baseline's pass of its round is printed, the medians of the passes
  are the figures, and the ratios' median with its 95% interval (`median_interval`) and a
  verdict: "lower" only when the whole interval is below 1 (one pair's ratio fell anywhere
  in 0.7-1.25 with both sides idle and asked alike, session 25). The coordinators' CPU a
  lookup is printed per pass and as the ratio of the two medians. It is brought down
  before N's restarts. The coordinator keeps an answer per table
  (coordinator/locations.py), so at either size both passes are answered from its cache.
  Measured one after the other, minutes apart, the ratio moved between 0.6 and 1.6 with
  the machine (session 23: on one idle 10,000-table cluster, passes every 2 s ran at
  9,400-19,400/s while none of its processes used more than 3% of a core between them);
  paired passes see the same moments.

- with `--coordinators 3` (the default is one), at the end, once the tablet server's
  restarts have settled (no candidacy for `--settle-s`): `--failovers` (3) kill -9 of the
  coordinator leader, each timed until a client's next create-table succeeds (the client
  follows hints and retries), and the killed node started again, timed until it answers
  with the whole catalog (its status counts every table: its log reopened and replayed).

    .venv/bin/python bench/scale.py [--tablets 50] [--tables N] [--baseline 10]
        [--samples 30] [--idle-window-s 10] [--settle-s 5] [--restart kill|stop|both]
        [--coordinators 1|3] [--failovers 3] [--lookup-rounds 15] [--lookups-per-caller 2000]

The machine this runs on is small and shared: the defaults are small; the issue's targets
are 10,000 tablets per server and 10,000 tables.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster_probe import list_tablets, serving  # noqa: E402,F401  (bench/, first on sys.path)

import logcentric  # noqa: E402
from logcentric import Column  # noqa: E402
from optools.localcluster import LocalCluster  # noqa: E402
from rpc import observe  # noqa: E402
from rpc.errors import RpcError  # noqa: E402

COLUMNS = [Column("id", "int64", key=True), Column("v", "string", nullable=True)]
CREATE_THREADS = 4
LOOKUP_THREADS = 4
LOOKUPS_PER_THREAD = 2000  # (--lookups-per-caller)
# Pairs of passes of "the same tables again" (each size's median is its figure): a pass is
# 8,000 calls, 0.4-0.6 s, and single passes on one cluster moved by 1.5-2x with the machine:
# one pair's ratio fell anywhere in 0.7-1.25 with both clusters idle and asked alike
# (session 25), so the median of 7 pairs moved by 0.1 from run to run. 15 pairs, and the
# median's interval printed (`median_interval`). (--lookup-rounds)
LOOKUP_ROUNDS = 15
POLL_S = 0.2
# A restart's probe lists the replicas not serving yet (design/consensus.md, session 22):
# ~4 us of the restarting server's GIL each, ~40 ms a call while thousands are, 12-14% of
# its samples at a poll every 0.2 s (py-spy, session 25). The next poll waits this long per
# replica the last one listed (0.36 s after a call that listed 10,000: under a tenth of the
# server's time), POLL_S once fewer than ~2,000 are left. By their count, not the call's
# length: a call that waited for the busy server's GIL would space the next one out by
# seconds and the restart's end would be seen late.
PROBE_S_PER_LISTED = 36e-6
SETTLE_TIMEOUT_S = 900.0
RESTART_TIMEOUT_S = 900.0
FAILOVER_TIMEOUT_S = 120.0  # a create-table after a kill of the leader; a node's catch-up
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    tablets: int
    disk_per_replica_bytes: float = float("nan")
    idle_cpu_pct: float = float("nan")
    idle_elections: float = float("nan")
    idle_coordinator_cpu_pct: float = float("nan")
    load_average: str = ""
    restart_all_s: float = float("nan")
    restart_candidacies: float = float("nan")
    stop_restart_all_s: float = float("nan")
    stop_s: float = float("nan")  # the SIGTERM'd server's stop alone (hand-over and close)
    stop_restart_candidacies: float = float("nan")
    create_p50_ms: float = float("nan")
    create_p99_ms: float = float("nan")
    lookups_per_s: float = float("nan")
    lookups_again_per_s: float = float("nan")  # the median of LOOKUP_ROUNDS passes
    lookups_again_passes: list[float] = field(default_factory=list)
    lookup_builds_first: float = float("nan")  # answers the coordinator built, first pass
    lookup_builds_again: float = float("nan")  # and in all the passes again
    # The coordinators' CPU per call in each pass again (/proc, all nodes; 10 ms ticks).
    lookup_cpu_us: list[float] = field(default_factory=list)
    # The control: N's cluster asked for as many tables as the baseline has (spread over
    # its catalog), in the same rounds; its passes and CPU a call.
    lookup_few_passes: list[float] = field(default_factory=list)
    lookup_few_cpu_us: list[float] = field(default_factory=list)
    # The timed creates' steps on the coordinator leader (design/operability.md,
    # logcentric_coordinator_operation_step_seconds): step -> mean ms a create.
    create_steps_ms: dict[str, float] = field(default_factory=dict)
    failovers_s: list[float] = field(default_factory=list)  # kill -9 of the leader to a create
    coordinator_restarts_s: list[float] = field(default_factory=list)  # start to whole catalog
    notes: list[str] = field(default_factory=list)

    @property
    def failover_median_s(self) -> float:
        return statistics.median(self.failovers_s) if self.failovers_s else float("nan")

    @property
    def failover_max_s(self) -> float:
        return max(self.failovers_s, default=float("nan"))

    @property
    def coordinator_restart_median_s(self) -> float:
        rs = self.coordinator_restarts_s
        return statistics.median(rs) if rs else float("nan")


def disk_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass  # removed meanwhile
    return total


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def elections(cluster: LocalCluster) -> int:
    """Elections started so far, from the tablet servers' logs (a replica logging that it
    became a pre-candidate or candidate). None should start while the cluster is idle."""
    n = 0
    for path in cluster.log_dir.glob("tserver-*.log"):
        with open(path, errors="replace") as f:
            n += sum(1 for line in f if "CANDIDATE in term" in line)
    return n


def wait_serving(victims: list[str], tablet_ids: set[str], timeout_s: float):
    """Until every tablet has been seen serving (at some poll, not all at one: on a loaded
    machine some elections go on all the time, and some tablet is always between leaders)."""
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while True:
        seen |= serving(victims, tablet_ids) or set()
        if len(seen) == len(tablet_ids):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"tablets not serving: {len(seen)}/{len(tablet_ids)}")
        time.sleep(POLL_S)


def create_tables(client, names: list[str]) -> set[str]:
    """One-tablet tables of replication 3, created CREATE_THREADS at a time; their tablet ids."""
    with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
        for f in [
            pool.submit(client.create_table, nm, COLUMNS, num_tablets=1, replication_factor=3)
            for nm in names
        ]:
            f.result()
    tablet_ids: set[str] = set()
    for name in names:
        tablet_ids |= {t.tablet_id for t in client.table(name).tablets()}
    return tablet_ids


def lookups(client, names: list[str]) -> float:
    """Tablet-location lookups a second at the coordinator (uncached: the client's
    `tablet_locations`), LOOKUP_THREADS callers, each asking LOOKUPS_PER_THREAD times for
    tables spread over the whole catalog."""
    step = max(1, len(names) // LOOKUPS_PER_THREAD)

    def caller(k: int) -> None:
        for i in range(LOOKUPS_PER_THREAD):
            client.tablet_locations(names[(k + i * step) % len(names)])

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(LOOKUP_THREADS) as pool:
        for f in [pool.submit(caller, k) for k in range(LOOKUP_THREADS)]:
            f.result()
    return LOOKUP_THREADS * LOOKUPS_PER_THREAD / (time.monotonic() - t0)


@dataclass
class Baseline:
    """The baseline's cluster, kept up (idle) after its own figures so that its lookups run
    in turns with N's (`paired_lookups`)."""

    cluster: LocalCluster
    names: list[str]
    fig: Figures


@contextlib.contextmanager
def own_collections(phase: str) -> Iterator[None]:
    """A timed phase with this process's heap (10,000 tables' creation left it large: names,
    ids, the client's tables) out of its collector's way (`gc.freeze`): a full collection of
    it in a create or a pass would be timed as the cluster's. Its collections meanwhile are
    counted by the daemons' own hook (`observe.GcPauses`) and printed."""
    gc.collect()
    gc.freeze()
    pauses = observe.GcPauses()
    gc.callbacks.append(pauses.hook)
    try:
        yield
    finally:
        gc.callbacks.remove(pauses.hook)
        print(f"  this bench's own garbage collections during {phase}: {sum(pauses.count)}, "
              f"the longest {1000 * max(pauses.longest):.1f} ms", flush=True)  # fmt: skip


CREATE_STEPS = ("commit_point", "complete", "calls", "done")


def metric_samples(http: str, prefix: str) -> dict[str, float]:
    """The samples of a node's /metrics whose line starts with `prefix`: the rest of the
    sample's name and labels (what follows `prefix`) -> its value."""
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(prefix):
                name, _, value = line[len(prefix) :].rpartition(" ")
                out[name] = float(value)
    return out


def step_sums(http: str) -> dict[str, float]:
    """CreateTable's step sums (s) on one coordinator node (step -> sum)."""
    prefix = 'logcentric_coordinator_operation_step_seconds_sum{kind="create_table",step="'
    return {k.split('"', 1)[0]: v for k, v in metric_samples(http, prefix).items()}


def answers_built(cluster: LocalCluster) -> float:
    """Tablet-location answers the coordinator built so far (not from its cache), from its
    /metrics (`logcentric_coordinator_location_answers_total{source="built"}`)."""
    prefix = 'logcentric_coordinator_location_answers_total{source="built"}'
    got = metric_samples(cluster.spec.coordinators[0].http, prefix)
    return got.get("", float("nan"))


def paired_lookups(
    client, names: list[str], fig: Figures, base: Baseline, cluster: LocalCluster
) -> None:
    """The lookups of N (`client`, `names`, `fig`, `cluster`) and of the baseline, pass by
    pass in turns: the first passes, then LOOKUP_ROUNDS rounds of three passes, in an order
    that turns by one each round: the baseline's, N's, and N's asked for only as many tables
    as the baseline has (the control: the same catalog, the baseline's working set)."""
    coords = ",".join(base.cluster.spec.coordinator_addresses)
    with (
        own_collections("the lookup passes"),
        logcentric.connect(coords, timeout_s=120) as base_client,
    ):
        mine = (client, names, fig, cluster)
        theirs = (base_client, base.names, base.fig, base.cluster)
        for c, nm, f, cl in (theirs, mine):
            built = answers_built(cl)
            f.lookups_per_s = lookups(c, nm)
            f.lookup_builds_first = answers_built(cl) - built
        step = max(1, len(names) // len(base.names))
        few = [names[j * step] for j in range(min(len(base.names), len(names)))]
        built = answers_built(cluster)
        for k in range(LOOKUP_ROUNDS):
            turn = [(theirs, False), (mine, False), (mine, True)]
            for (c, nm, f, cl), control in turn[k % 3 :] + turn[: k % 3]:
                pids = [node.pid for node in cl.spec.coordinators]
                cpu0 = sum(cpu_s(p) for p in pids)
                rate = lookups(c, few if control else nm)
                cpu = (
                    1e6
                    * (sum(cpu_s(p) for p in pids) - cpu0)
                    / (LOOKUP_THREADS * LOOKUPS_PER_THREAD)
                )
                if control:
                    f.lookup_few_passes.append(rate)
                    f.lookup_few_cpu_us.append(cpu)
                else:
                    f.lookups_again_passes.append(rate)
                    f.lookup_cpu_us.append(cpu)
        fig.lookup_builds_again = answers_built(cluster) - built
    for f in (fig, base.fig):
        f.lookups_again_per_s = statistics.median(f.lookups_again_passes)


def coordinator_failovers(cluster: LocalCluster, kills: int, fig: Figures) -> None:
    """`kills` times: kill -9 the coordinator leader, time until a client's next create-table
    succeeds; then start the killed node again and time until its status counts every
    table of the catalog."""
    coords = ",".join(cluster.spec.coordinator_addresses)
    with (
        logcentric.connect(coords, timeout_s=FAILOVER_TIMEOUT_S) as client,
        cluster.client(timeout_s=5.0) as meta,
    ):
        for k in range(kills):
            deadline = time.monotonic() + FAILOVER_TIMEOUT_S
            while (leader := cluster.leader(meta)) is None:
                if time.monotonic() > deadline:
                    raise SystemExit("no coordinator leader")
                time.sleep(POLL_S)
            tables = meta.status(leader.rpc, timeout_s=5.0).tables
            t0 = time.monotonic()
            cluster.kill(leader)
            client.create_table(f"f{k:03d}", COLUMNS, num_tablets=1, replication_factor=3)
            fig.failovers_s.append(time.monotonic() - t0)
            print(f"  coordinator failover {k + 1}: {fig.failovers_s[-1]:.2f} s", flush=True)
            t1 = time.monotonic()
            cluster.start_coordinator(cluster.spec.coordinators.index(leader))
            deadline = t1 + FAILOVER_TIMEOUT_S
            while True:
                try:
                    if meta.status(leader.rpc, timeout_s=1.0).tables > tables:
                        break  # every table, the one created meanwhile too
                except RpcError:
                    pass  # not answering yet
                if time.monotonic() > deadline:
                    raise SystemExit(f"{leader.name} did not catch up after its restart")
                time.sleep(0.05)
            fig.coordinator_restarts_s.append(time.monotonic() - t1)
            print(f"  coordinator restart {k + 1}: {fig.coordinator_restarts_s[-1]:.2f} s to "
                  f"{tables + 1} tables", flush=True)  # fmt: skip


def per_round(passes: list[float], base: Figures) -> list[float]:
    """Each of N's lookup passes (its own or the control's) over the baseline's pass of the
    same round."""
    return [x / b for x, b in zip(passes, base.lookups_again_passes, strict=True)]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of what `values` sample: the k-th
    smallest and k-th largest of them, k the largest with P(Binomial(n, 1/2) < k) at most
    (1 - confidence) / 2 (the sign test's interval; it covers the median with at least
    `confidence`). Fewer than 6 values cover it with less than 95%: the whole range then."""
    s = sorted(values)
    n = len(s)
    k, below = 0, 0.0  # below: P(X < k+1) summed term by term
    while True:
        below += math.comb(n, k) / 2**n
        if below > (1 - confidence) / 2:
            break
        k += 1
    k = max(k, 1)
    return s[k - 1], s[n - k]


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def wait_no_elections(cluster: LocalCluster, quiet_s: float, timeout_s: float = 300.0) -> None:
    """Until no candidacy has been logged for `quiet_s` (at most `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    last = elections(cluster)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = elections(cluster)
        if now == last:
            return
        last = now
    print(f"  elections still going after {timeout_s:.0f} s", flush=True)


def leading_most(cluster: LocalCluster) -> int:
    """The index of the tablet server that leads the most tablets now."""
    led = []
    for node in cluster.spec.tservers:
        resp = list_tablets(node.rpc, timeout_s=10.0)
        led.append(0 if resp is None else sum(1 for t in resp.tablets if t.role == "LEADER"))
    print(f"  tablets led per server: {led}", flush=True)
    return max(range(len(led)), key=lambda k: led[k])


def restart_one(
    cluster: LocalCluster, i: int, how: str, tablet_ids: set[str], fig: Figures
) -> tuple[float, float, int]:
    """Kill -9 (`how` = "kill") or SIGTERM ("stop", waiting for the exit) tablet server `i`
    and start it again: seconds from the signal until every tablet has been seen serving
    with it back (see wait_serving), the stop's own seconds, and the candidacies logged
    from the signal to then."""
    node = cluster.spec.tservers[i]
    e0 = elections(cluster)
    others = [n.pid for n in cluster.spec.tservers if n is not node]
    coords = [n.pid for n in cluster.spec.coordinators]
    cpu0 = [cpu_s(p) for p in others + coords], _own_cpu_s()
    t0 = time.monotonic()
    if how == "kill":
        cluster.kill(node)
    else:
        cluster.stop(node)
    stop_s = time.monotonic() - t0
    cluster.start_tserver(i)
    deadline = t0 + RESTART_TIMEOUT_S
    seen: set[str] = set()  # each seen serving since the restart (see wait_serving)
    while time.monotonic() < deadline:
        now = serving([node.rpc], tablet_ids)
        seen |= now or set()
        if len(seen) == len(tablet_ids):
            took = time.monotonic() - t0
            break
        listed = len(tablet_ids) - len(now) if now is not None else 0  # not serving now
        time.sleep(max(POLL_S, listed * PROBE_S_PER_LISTED))
    else:
        took = float("nan")
        fig.notes.append(f"restart ({how}): timed out waiting for every tablet")
    wall = time.monotonic() - t0
    cpu1 = [cpu_s(p) for p in others + coords], _own_cpu_s()
    n = elections(cluster) - e0
    print(f"  restart by {how} of server {i}: all serving after {took:.2f} s (stop "
          f"{stop_s:.2f} s), {n} candidacies logged", flush=True)  # fmt: skip
    # Where the machine's CPU went meanwhile: is the restart bound by it?
    spent = [b - a for a, b in zip(cpu0[0], cpu1[0], strict=True)]
    restarted = cpu_s(node.pid)  # the new process, from its start
    bench = cpu1[1] - cpu0[1]
    total = restarted + sum(spent) + bench
    print(f"    CPU s meanwhile: restarted server {restarted:.1f}, the other servers "
          f"{', '.join(f'{x:.1f}' for x in spent[: len(others)])}, coordinators "
          f"{sum(spent[len(others):]):.1f}, this bench {bench:.1f}: {total:.1f} in "
          f"{wall:.1f} s, {total / wall:.2f} of {os.cpu_count()} cores", flush=True)  # fmt: skip
    return took, stop_s, n


def run_one(
    workdir: Path,
    n: int,
    tables: int,
    samples: int,
    idle_window_s: float,
    settle_s: float,
    restart: str = "kill",
    coordinators: int = 1,
    failovers: int = 0,
    keep_up: bool = False,
    base: Baseline | None = None,
) -> tuple[Figures, Baseline | None]:
    """N's figures. `keep_up`: the cluster is left up, its lookups not measured, and
    returned as the `Baseline` of the next call; `base`: that baseline, whose lookups are
    measured in turns with these, brought down after them."""
    fig = Figures(n)
    print(f"N={n}: building the cluster (plaintext: --insecure)", flush=True)
    cluster = LocalCluster.create(
        workdir / f"n{n}", coordinators, 3, lease_timeout_s=1.5, secure=False
    )
    cluster.up(timeout_s=180)
    try:
        roots = [Path(node.data) for node in cluster.spec.tservers]
        before = sum(disk_bytes(r) for r in roots)
        coords = ",".join(cluster.spec.coordinator_addresses)
        with logcentric.connect(coords, timeout_s=120) as client:
            names = [f"t{i:05d}" for i in range(max(n, tables))]
            t0 = time.monotonic()
            tablet_ids = create_tables(client, names)
            print(f"  {len(names)} tables created in {time.monotonic() - t0:.1f} s", flush=True)
            victims = [node.rpc for node in cluster.spec.tservers]
            wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
            fig.disk_per_replica_bytes = (sum(disk_bytes(r) for r in roots) - before) / (
                3 * len(tablet_ids)
            )

            # Idle CPU: no client calls during the window, after the creates' after-effects
            # (elections, first flushes) had time to pass.
            time.sleep(settle_s)
            pids = [node.pid for node in cluster.spec.tservers]
            coords_pids = [node.pid for node in cluster.spec.coordinators]
            e0 = elections(cluster)
            c0, k0, w0 = [cpu_s(p) for p in pids], [cpu_s(p) for p in coords_pids], time.monotonic()
            time.sleep(idle_window_s)
            c1, k1, w1 = [cpu_s(p) for p in pids], [cpu_s(p) for p in coords_pids], time.monotonic()
            fig.load_average = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            fig.idle_elections = elections(cluster) - e0
            fig.idle_cpu_pct = 100 * statistics.mean(
                (b - a) / (w1 - w0) for a, b in zip(c0, c1, strict=True)
            )
            fig.idle_coordinator_cpu_pct = 100 * max(  # the busiest node
                (b - a) / (w1 - w0) for a, b in zip(k0, k1, strict=True)
            )

            latencies_ms = []
            with cluster.client(timeout_s=5.0) as meta:
                leader = cluster.leader(meta)
            steps0 = step_sums(leader.http) if leader is not None else {}
            with own_collections("the timed creates"):
                for i in range(samples):
                    t = time.monotonic()
                    client.create_table(f"s{i:04d}", COLUMNS, num_tablets=1, replication_factor=3)
                    latencies_ms.append(1000 * (time.monotonic() - t))
            fig.create_p50_ms = percentile(latencies_ms, 50)
            fig.create_p99_ms = percentile(latencies_ms, 99)
            if leader is not None:  # (a leader that changed meanwhile: its share only)
                steps1 = step_sums(leader.http)
                fig.create_steps_ms = {
                    k: 1000 * (steps1.get(k, 0.0) - steps0.get(k, 0.0)) / samples
                    for k in CREATE_STEPS
                }
            for i in range(samples):
                tablet_ids |= {t.tablet_id for t in client.table(f"s{i:04d}").tablets()}
            # The lookups on a settled catalog, as the baseline's (whose creates were
            # minutes before): the timed creates' tablets led and reported, then the
            # settle. Right after them every answer is checked again once the new
            # tablets' reports come in (design/coordinator.md, section 9).
            wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
            time.sleep(settle_s)
            if base is not None:  # (the baseline's own run measures none: `keep_up`)
                paired_lookups(client, names, fig, base, cluster)
                base.cluster.down()  # N's restarts alone on the machine

        if restart in ("kill", "both"):
            wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
            fig.restart_all_s, _, fig.restart_candidacies = restart_one(
                cluster, 0, "kill", tablet_ids, fig
            )
        if restart in ("stop", "both"):
            wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
            wait_no_elections(cluster, settle_s)  # the kill's elections over first
            i = leading_most(cluster)
            fig.stop_restart_all_s, fig.stop_s, fig.stop_restart_candidacies = restart_one(
                cluster, i, "stop", tablet_ids, fig
            )
        if coordinators > 1 and failovers:
            # Once the restarts' elections are over (their reports reach every node):
            # the failovers of a settled cluster, as at the baseline's size.
            wait_serving(victims, tablet_ids, SETTLE_TIMEOUT_S)
            wait_no_elections(cluster, settle_s)
            coordinator_failovers(cluster, failovers, fig)
    except BaseException:
        cluster.down()
        raise
    if keep_up:
        return fig, Baseline(cluster, names, fig)
    cluster.down()
    return fig, None


def main() -> int:
    global LOOKUP_ROUNDS, LOOKUPS_PER_THREAD
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tablets", type=int, default=50, help="replicas per tablet server")
    ap.add_argument("--tables", type=int, default=0, help="tables (default: --tablets)")
    ap.add_argument("--baseline", type=int, default=10, help="tables of the baseline")
    ap.add_argument("--samples", type=int, default=30, help="creates timed one by one")
    ap.add_argument("--idle-window-s", type=float, default=10.0)
    ap.add_argument("--settle-s", type=float, default=5.0, help="quiet time before the window")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--restart",
        choices=("kill", "stop", "both"),
        default="kill",
        help="restart one tablet server after kill -9, after SIGTERM, or both in turn",
    )
    ap.add_argument(
        "--coordinators", type=int, default=1, choices=(1, 3),
        help="coordinator nodes (3: their failover and restart are timed too)",
    )  # fmt: skip
    ap.add_argument("--failovers", type=int, default=3, help="kills of the coordinator leader")
    ap.add_argument(
        "--lookup-rounds", type=int, default=LOOKUP_ROUNDS,
        help="rounds of lookup passes: the baseline's, N's and the control's, in turns",
    )  # fmt: skip
    ap.add_argument(
        "--lookups-per-caller", type=int, default=LOOKUPS_PER_THREAD,
        help=f"lookups of each of the {LOOKUP_THREADS} callers in a pass",
    )  # fmt: skip
    args = ap.parse_args()
    LOOKUP_ROUNDS, LOOKUPS_PER_THREAD = args.lookup_rounds, args.lookups_per_caller
    tables = args.tables or args.tablets
    workdir = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    try:
        opts = (args.samples, args.idle_window_s, args.settle_s, args.restart,
                args.coordinators, args.failovers)  # fmt: skip
        base, kept = run_one(workdir, args.baseline, args.baseline, *opts, keep_up=True)
        try:
            big, _ = run_one(workdir, args.tablets, tables, *opts, base=kept)
        finally:
            kept.cluster.down()  # already down unless N's run failed before its lookups
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    print(f"\nper-tablet fixed costs: {base.tablets} against {big.tablets} replicas per server")
    print(f"  {'':<36}{base.tablets:>10}{big.tablets:>10}     ratio")
    for label, attr, scale in (
        ("disk per empty replica (KB)", "disk_per_replica_bytes", 1 / 1000),
        ("idle CPU per tserver (% of a core)", "idle_cpu_pct", 1),
        ("idle CPU, busiest coordinator (%)", "idle_coordinator_cpu_pct", 1),
        ("elections started while idle", "idle_elections", 1),
        ("restart to all serving, kill -9 (s)", "restart_all_s", 1),
        ("  candidacies logged meanwhile", "restart_candidacies", 1),
        ("restart to all serving, SIGTERM (s)", "stop_restart_all_s", 1),
        ("  of which the stop (s)", "stop_s", 1),
        ("  candidacies logged meanwhile", "stop_restart_candidacies", 1),
        ("create-table p50 (ms)", "create_p50_ms", 1),
        ("create-table p99 (ms)", "create_p99_ms", 1),
        ("tablet lookups per second, first", "lookups_per_s", 1),
        ("  the same tables again", "lookups_again_per_s", 1),
        ("coordinator failover, median (s)", "failover_median_s", 1),
        ("  the slowest (s)", "failover_max_s", 1),
        ("coordinator restart to catalog (s)", "coordinator_restart_median_s", 1),
    ):
        b, g = getattr(base, attr) * scale, getattr(big, attr) * scale
        print(f"  {label:<36}{b:>10.2f}{g:>10.2f}{g / b if b else float('nan'):>10.2f}")
    for fig in (base, big):
        passes = ", ".join(f"{x:,.0f}" for x in fig.lookups_again_passes)
        print(f"  lookups per second, each pass over those tables again, N={fig.tablets}: {passes}")
    b, g = base, big
    print(f"  tablet-location answers built by the coordinator (not from its cache), first "
          f"pass / passes again: N={b.tablets} {b.lookup_builds_first:.0f} / -, "
          f"N={g.tablets} {g.lookup_builds_first:.0f} / {g.lookup_builds_again:.0f}")  # fmt: skip
    for fig in (base, big):
        cpu = ", ".join(f"{x:.0f}" for x in fig.lookup_cpu_us)
        print(f"  coordinator CPU us per lookup, each pass again, N={fig.tablets}: {cpu}; "
              f"median {statistics.median(fig.lookup_cpu_us):.1f}")  # fmt: skip
    cpu_b, cpu_g = (statistics.median(f.lookup_cpu_us) for f in (base, big))
    print(f"  coordinator CPU per lookup, medians, N={big.tablets} / N={base.tablets}: "
          f"{cpu_g / cpu_b:.2f}")  # fmt: skip
    for label, values in (
        (f"lookups again, N={big.tablets} against N={base.tablets} pass by pass (in turns)",
         per_round(big.lookups_again_passes, base)),
        (f"  the control, N={big.tablets} asked for {base.tablets} tables, against "
         f"N={base.tablets}", per_round(big.lookup_few_passes, base)),
    ):  # fmt: skip
        lo, hi = median_interval(values)
        verdict = "lower" if hi < 1 else "not lower" if lo < 1 else "higher"
        mid = statistics.median(values)
        print(f"  {label}: {', '.join(f'{x:.2f}' for x in values)}; median {mid:.2f}, "
              f"95% interval {lo:.2f}-{hi:.2f}: {verdict}")  # fmt: skip
    cpu_f = statistics.median(big.lookup_few_cpu_us)
    print(f"  the control's coordinator CPU per lookup, median, N={big.tablets}: {cpu_f:.1f} us "
          f"({cpu_f / cpu_b:.2f} of N={base.tablets}'s)")  # fmt: skip
    for fig in (base, big):
        steps = ", ".join(f"{k} {v:.2f}" for k, v in fig.create_steps_ms.items()) or "-"
        print(f"  the timed creates' steps on the coordinator leader, mean ms a create, "
              f"N={fig.tablets}: {steps}")  # fmt: skip
    for fig in (base, big):
        print(f"  load average (1, 5, 15 min) after the idle window, N={fig.tablets}: "
              f"{fig.load_average}")  # fmt: skip
    for fig in (base, big):
        for note in fig.notes:
            print(f"  note (N={fig.tablets}): {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
