"""Benchmark of the rpc layer against raw pyzmq DEALER/ROUTER with the same payloads.

Starts two echo server processes on loopback, one built on rpc.server.RpcServer and one a
bare ROUTER loop, then measures from this process, for each payload size:
- round-trip latency of one call at a time (p50, p99), handler on the pool and inline
- pipelined calls per second (one thread keeping WINDOW calls in flight)
and then synchronous calls per second from THREADS threads at once (each thread its own
socket, as the coordinator's lookups), and prints each side by side with the ratio rpc/raw.

`--metrics on|off|both`: the rpc server keeps its per-method metrics (on, the default: and
serves /metrics, scraped once a second during the run) or not (off); `both` measures two
servers, one each way, in the same run and prints the ratio on/off (target >= 0.95).

`--cpu`: instead, CPU time per pipelined call (100 B, WINDOW in flight) of the calling
thread (this process) and of each thread of the server (/proc/PID/task/*/schedstat), for
the rpc server's pool and inline handlers and for raw pyzmq: the figure that moves least
with the machine's load (calls/s do, by 2x on a shared machine); and the voluntary context
switches per call of the server's threads and of the calling thread (a sleeping thread woken:
/proc/PID/task/*/status).
`--rounds N` repeats the three N times in turn (the order rotating) and prints the median
ratio of calls/s to raw's in the same round: load that comes and goes then moves all three.

`--caller`: instead, the caller's own CPU per pipelined call when it never waits (a ROUTER
in the calling thread answers each batch, untimed), rpc against raw pyzmq: the Python work
of `call_async` and `result()` with the least noise from the machine's load.

`--curve`: instead, CURVE beside plaintext in the same run (design/security.md §7): an rpc
server and a raw ROUTER each way, 100 B, 8 KiB and 1 MiB sidecars, pipelined calls/s and
MB/s, synchronous calls/s from THREADS threads, and the ratio CURVE/plaintext (target
>= 0.8).
Run: ./dev bench rpc [--seconds S] [--threads N] [--metrics both | --curve | --cpu | --caller]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scraper import Scraper  # noqa: E402  (bench/, first on sys.path when run)

from rpc.client import RpcClient  # noqa: E402
from rpc.keys import ClientCurve, KeyPair  # noqa: E402
from rpc.rpc_pb2 import PingResponse  # noqa: E402

UUID = "bench-echo"
RPC_SERVER = """
import sys, threading, zmq
from rpc import observe
from rpc.rpc_pb2 import PingResponse
from rpc.keys import KeyPair, ServerCurve
from rpc.server import Reply, RpcServer
def echo(request, ctx):
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))
uuid, bind, metrics = sys.argv[1], sys.argv[2], sys.argv[3] == "on"
curve = None
if len(sys.argv) > 5:  # CURVE: the server's secret key, the one client key admitted
    pair = KeyPair(zmq.curve_public(sys.argv[4].encode()).decode(), sys.argv[4])
    curve = ServerCurve(pair, {sys.argv[5]: "bench"}.get)
server = RpcServer(uuid, bind, service="echo", metrics=metrics, curve=curve)
server.register("Test.Echo", PingResponse, echo)
server.register("Test.EchoInline", PingResponse, echo, inline=True)
with server:
    http = ""
    if metrics:
        registry = observe.new_registry()
        registry.register(observe.ScrapeCollector(server.collect_metrics))
        http = observe.HttpEndpoint("127.0.0.1:0", registry, name="bench").start().url
    print("READY", server.address, http or "-", flush=True)
    # Which native thread is which (for --cpu): the I/O thread, the workers.
    print("THREADS", " ".join(f"{t.native_id}={t.name}" for t in threading.enumerate()), flush=True)
    threading.Event().wait()
"""
RAW_SERVER = """
import sys, zmq
ctx = zmq.Context(); s = ctx.socket(zmq.ROUTER)
if len(sys.argv) > 2:  # CURVE (no ZAP handler: any client key)
    s.curve_server = True
    s.curve_secretkey = sys.argv[2].encode()
    s.curve_publickey = zmq.curve_public(sys.argv[2].encode())
s.bind(sys.argv[1])
print("READY", s.last_endpoint.decode().removeprefix("tcp://"), flush=True)
while True:
    frames = s.recv_multipart(copy=False)
    s.send_multipart(frames, copy=False)
"""


def start(cmd: list[str]) -> subprocess.Popen:
    """A server process bound to a port of its choosing (no race for a free port on a shared
    machine); it says "READY ADDRESS [HTTP_URL|-]"."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    words = proc.stdout.readline().split()
    assert words and words[0] == "READY", words
    proc.address = words[1]  # type: ignore[attr-defined]
    http = words[2] if len(words) > 2 else "-"
    proc.http_url = "" if http == "-" else http  # type: ignore[attr-defined]
    return proc


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bench_rpc(
    address: str,
    payload: bytes,
    seconds: float,
    window: int,
    method: str = "Test.Echo",
    curve: ClientCurve | None = None,
    latency: bool = True,
) -> tuple[list[float], float]:
    """(latencies of calls one at a time, for `seconds`; pipelined calls/s, for `seconds`);
    without `latency` only the pipelined part runs."""
    with RpcClient(address, "bench", curve=curve) as c:
        request = PingResponse(uuid="x")
        for _ in range(50):
            c.call(UUID, method, request, PingResponse, sidecars=[payload])
        lat: list[float] = []
        end = time.monotonic() + seconds if latency else 0.0
        while time.monotonic() < end:
            t = time.perf_counter()
            c.call(UUID, method, request, PingResponse, sidecars=[payload])
            lat.append(time.perf_counter() - t)
        done = 0
        inflight = []
        t0 = time.perf_counter()
        end = time.monotonic() + seconds
        while time.monotonic() < end or inflight:
            while len(inflight) < window and time.monotonic() < end:
                inflight.append(
                    c.call_async(UUID, method, request, PingResponse, sidecars=[payload])
                )
            inflight.pop(0).result()
            done += 1
        return lat, done / (time.perf_counter() - t0)


def curve_client(s: zmq.Socket, keys: tuple[KeyPair, str] | None) -> None:
    if keys is not None:
        s.curve_publickey = keys[0].public.encode()
        s.curve_secretkey = keys[0].secret.encode()
        s.curve_serverkey = keys[1].encode()


def bench_raw(
    address: str,
    payload: bytes,
    seconds: float,
    window: int,
    keys: tuple[KeyPair, str] | None = None,
    latency: bool = True,
) -> tuple[list[float], float]:
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    curve_client(s, keys)
    s.connect(f"tcp://{address}")
    header = PingResponse(uuid="x").SerializeToString()
    try:
        for _ in range(50):
            s.send_multipart([header, b"", payload], copy=False)
            s.recv_multipart(copy=False)
        lat: list[float] = []
        end = time.monotonic() + seconds if latency else 0.0
        while time.monotonic() < end:
            t = time.perf_counter()
            s.send_multipart([header, b"", payload], copy=False)
            s.recv_multipart(copy=False)
            lat.append(time.perf_counter() - t)
        done = sent = 0
        t0 = time.perf_counter()
        end = time.monotonic() + seconds
        while time.monotonic() < end or sent > done:
            while sent - done < window and time.monotonic() < end:
                s.send_multipart([header, b"", payload], copy=False)
                sent += 1
            s.recv_multipart(copy=False)
            done += 1
        return lat, done / (time.perf_counter() - t0)
    finally:
        s.close()
        ctx.term()


def threaded(threads: int, seconds: float, make_call) -> float:
    """Synchronous calls per second from `threads` threads; make_call() gives each its own
    callable (and socket)."""
    calls = [make_call() for _ in range(threads)]
    for call in calls:
        call()
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        call, n = calls[k], 0
        while time.monotonic() < stop:
            call()
            n += 1
        counts[k] = n

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - t0)


def rpc_caller(
    address: str, payload: bytes, method: str, closers: list, curve: ClientCurve | None = None
):
    client = RpcClient(address, "bench", curve=curve)
    closers.append(client.close)
    request = PingResponse(uuid="x")
    return lambda: client.call(UUID, method, request, PingResponse, sidecars=[payload])


def raw_caller(
    address: str,
    payload: bytes,
    ctx: zmq.Context,
    closers: list,
    keys: tuple[KeyPair, str] | None = None,
):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    curve_client(s, keys)
    s.connect(f"tcp://{address}")
    closers.append(s.close)
    header = PingResponse(uuid="x").SerializeToString()

    def call() -> None:
        s.send_multipart([header, b"", payload], copy=False)
        s.recv_multipart(copy=False)

    return call


def measure(rpc_address: str, raw_address: str, args, label: str) -> dict[str, float]:
    """The table for one rpc server (pipelined per payload, then threads); its figures."""
    out: dict[str, float] = {}
    print(f"-- rpc server with metrics {label}")
    print("rpc = handlers on the worker pool (the default); inline = handlers on the I/O thread")
    print(
        f"{'payload':>9} | {'p50 rpc':>9} {'p50 inl':>9} {'p50 raw':>9} | "
        f"{'p99 rpc':>9} {'p99 inl':>9} {'p99 raw':>9} | "
        f"{'calls/s rpc':>11} {'calls/s raw':>11} {'ratio':>6} | {'inline/s':>9} {'ratio':>6}"
    )
    for size in (100, 4096, 65536):
        payload = b"p" * size
        lat_rpc, tput_rpc = bench_rpc(rpc_address, payload, args.seconds, args.window)
        lat_raw, tput_raw = bench_raw(raw_address, payload, args.seconds, args.window)
        lat_inl, tput_inline = bench_rpc(
            rpc_address, payload, args.seconds, args.window, "Test.EchoInline"
        )
        out[f"pipelined {size}B pool"] = tput_rpc
        out[f"pipelined {size}B inline"] = tput_inline
        p50 = [statistics.median(v) * 1e6 for v in (lat_rpc, lat_inl, lat_raw)]
        p99 = [percentile(v, 0.99) * 1e6 for v in (lat_rpc, lat_inl, lat_raw)]
        print(
            f"{size:>8}B | {p50[0]:>7.0f}us {p50[1]:>7.0f}us {p50[2]:>7.0f}us | "
            f"{p99[0]:>7.0f}us {p99[1]:>7.0f}us {p99[2]:>7.0f}us | "
            f"{tput_rpc:>11.0f} {tput_raw:>11.0f} {tput_rpc / tput_raw:>6.2f} | "
            f"{tput_inline:>9.0f} {tput_inline / tput_raw:>6.2f}"
        )
    print(
        f"synchronous calls/s from {args.threads} threads (a socket each), 400B payload: "
        f"{'rpc':>8} {'inline':>8} {'raw':>8} | ratio rpc, inline"
    )
    payload = b"p" * 400
    closers: list = []
    ctx = zmq.Context()
    try:
        sync = [
            threaded(
                args.threads,
                args.seconds,
                lambda m=m: rpc_caller(rpc_address, payload, m, closers),
            )
            for m in ("Test.Echo", "Test.EchoInline")
        ]
        sync.append(
            threaded(
                args.threads,
                args.seconds,
                lambda: raw_caller(raw_address, payload, ctx, closers),
            )
        )
    finally:
        for close in closers:
            close()
        ctx.term()
    out["threads pool"], out["threads inline"] = sync[0], sync[1]
    print(
        f"{'':>71}{sync[0]:>8.0f} {sync[1]:>8.0f} {sync[2]:>8.0f} | "
        f"{sync[0] / sync[2]:.2f}, {sync[1] / sync[2]:.2f}"
    )
    return out


CURVE_SIZES = (100, 8192, 1 << 20)


def measure_curve(args) -> None:
    """CURVE beside plaintext: rpc servers and raw ROUTERs each way, started here."""
    server_pair, client_pair = KeyPair.generate(), KeyPair.generate()
    any_port = "127.0.0.1:0"
    procs = [
        start([sys.executable, "-c", RPC_SERVER, UUID, any_port, "on"]),
        start(
            [
                sys.executable,
                "-c",
                RPC_SERVER,
                UUID,
                any_port,
                "on",
                server_pair.secret,
                client_pair.public,
            ]
        ),
        start([sys.executable, "-c", RAW_SERVER, f"tcp://{any_port}"]),
        start([sys.executable, "-c", RAW_SERVER, f"tcp://{any_port}", server_pair.secret]),
    ]
    addr = dict(
        zip(("rpc", "rpc-curve", "raw", "raw-curve"), (p.address for p in procs), strict=True)
    )
    curve = ClientCurve(client_pair, {UUID: server_pair.public})
    raw_keys = (client_pair, server_pair.public)
    try:
        print("CURVE against plaintext, same run; pipelined = one thread, calls in flight")
        print(
            f"{'payload':>9} | {'p50 plain':>9} {'p50 curve':>9} | "
            f"{'calls/s plain':>13} {'calls/s curve':>13} {'MB/s curve':>10} {'ratio':>6} | "
            f"{'raw plain/s':>11} {'raw curve/s':>11} {'ratio':>6}"
        )
        for size in CURVE_SIZES:
            payload = b"p" * size
            window = args.window if size <= 65536 else min(args.window, 8)
            lat_p, tput_p = bench_rpc(addr["rpc"], payload, args.seconds, window)
            lat_c, tput_c = bench_rpc(addr["rpc-curve"], payload, args.seconds, window, curve=curve)
            _, raw_p = bench_raw(addr["raw"], payload, args.seconds, window)
            _, raw_c = bench_raw(addr["raw-curve"], payload, args.seconds, window, raw_keys)
            p50 = [statistics.median(v) * 1e6 for v in (lat_p, lat_c)]
            mb_s = tput_c * size * 2 / 1e6  # both ways
            print(
                f"{size:>8}B | {p50[0]:>7.0f}us {p50[1]:>7.0f}us | "
                f"{tput_p:>13.0f} {tput_c:>13.0f} {mb_s:>10.1f} {tput_c / tput_p:>6.2f} | "
                f"{raw_p:>11.0f} {raw_c:>11.0f} {raw_c / raw_p:>6.2f}",
                flush=True,
            )
        for size in (100, 8192):
            payload = b"p" * size
            closers: list = []
            try:
                sync = [
                    threaded(
                        args.threads,
                        args.seconds,
                        partial(rpc_caller, addr[a], payload, "Test.Echo", closers, c),
                    )
                    for a, c in (("rpc", None), ("rpc-curve", curve))
                ]
            finally:
                for close in closers:
                    close()
            print(
                f"synchronous calls/s from {args.threads} threads, {size} B: plain {sync[0]:.0f}, "
                f"curve {sync[1]:.0f}, ratio {sync[1] / sync[0]:.2f}",
                flush=True,
            )
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


def thread_switches(pid: int | str) -> dict[int, int]:
    """Voluntary context switches so far of each thread of process `pid`, by native id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            out[int(task.name)] = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        except (OSError, ValueError, IndexError):
            pass  # the thread ended meanwhile
    return out


def thread_cpu_ns(pid: int | str) -> dict[int, int]:
    """CPU time so far of each thread of process `pid`, by native thread id (ns)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # the thread ended meanwhile
    return out


def thread_names(pid: int | str) -> dict[int, str]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:
            pass
    return out


def cpu_groups(before: dict, after: dict, names: dict[int, str]) -> dict[str, int]:
    """CPU ns spent between two thread_cpu_ns readings, added up by thread group: zmq's own
    threads, the rpc server's I/O thread and workers, the rest ("other")."""
    groups: dict[str, int] = {}
    for tid, ns in after.items():
        name = names.get(tid, "")
        if name.startswith("ZMQbg"):
            group = "zmq"
        elif name.endswith("-io"):
            group = "io"
        elif "-worker-" in name:
            group = "workers"
        else:
            group = "other"
        groups[group] = groups.get(group, 0) + ns - before.get(tid, 0)
    return groups


def measure_cpu(args) -> None:
    """CPU per pipelined call, 100 B: client and server, by thread, pool / inline / raw."""
    rpc = subprocess.Popen(
        [sys.executable, "-c", RPC_SERVER, UUID, "127.0.0.1:0", args.metrics],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    raw = start([sys.executable, "-c", RAW_SERVER, "tcp://127.0.0.1:0"])
    try:
        words = rpc.stdout.readline().split()
        assert words and words[0] == "READY", words
        rpc_address = words[1]
        # The Python threads by name; zmq's by their comm, read at each run (a zmq thread
        # names itself once started: read at READY, it could still be "python", and its
        # CPU then went to "other").
        python_names = {}
        for item in rpc.stdout.readline().split()[1:]:
            tid, name = item.split("=", 1)
            python_names[int(tid)] = name
        payload = b"p" * 100
        print(
            f"CPU us per call, pipelined 100 B, {args.window} in flight, {args.seconds:g} s; "
            f"load average {Path('/proc/loadavg').read_text().split()[0]}"
        )
        print(
            f"{'':>7} {'calls/s':>8} | {'client':>7} | "
            f"{'server':>7} {'io':>6} {'workers':>7} {'zmq':>6} | "
            f"{'switches/call io':>16} {'workers':>7} {'client':>6}"
        )
        pipelined = partial(bench_rpc, rpc_address, payload, args.seconds, args.window)
        runs = [
            ("pool", rpc.pid, partial(pipelined, latency=False)),
            ("inline", rpc.pid, partial(pipelined, "Test.EchoInline", latency=False)),
            (
                "raw",
                raw.pid,
                partial(bench_raw, raw.address, payload, args.seconds, args.window, latency=False),
            ),
        ]
        ratios: dict[str, list[float]] = {"pool": [], "inline": []}
        caller_us: dict[str, list[float]] = {"pool": [], "inline": [], "raw": []}
        me = threading.get_native_id()  # the calling thread
        for round_ in range(args.rounds):
            tputs = {}
            for label, pid, run in runs:
                server_names = thread_names(pid)
                if pid == rpc.pid:
                    server_names.update(python_names)
                if pid == raw.pid:  # the raw server's one Python thread does its I/O
                    server_names = {
                        t: n if n.startswith("ZMQbg") else "raw-io" for t, n in server_names.items()
                    }
                s0, c0, v0 = thread_cpu_ns(pid), thread_cpu_ns("self"), thread_switches(pid)
                m0 = thread_switches("self").get(me, 0)
                _, tput = run()
                s1, c1, v1 = thread_cpu_ns(pid), thread_cpu_ns("self"), thread_switches(pid)
                m1 = thread_switches("self").get(me, 0)
                tputs[label] = tput
                calls = tput * args.seconds + 50  # the pipelined run and 50 warm-up calls
                server = cpu_groups(s0, s1, server_names)
                switches = cpu_groups(v0, v1, server_names)
                # The calling thread's (zmq's threads of this process end with each run's
                # context, so they are not in the second reading).
                client = cpu_groups(c0, c1, thread_names("self"))
                us = {k: v / 1e3 / calls for k, v in server.items()}
                cus = {k: v / 1e3 / calls for k, v in client.items()}
                caller_us[label].append(cus.get("other", 0))
                print(
                    f"{label:>7} {tput:>8.0f} | {cus.get('other', 0):>7.1f} | "
                    f"{sum(us.values()):>7.1f} {us.get('io', 0):>6.1f} "
                    f"{us.get('workers', 0):>7.1f} {us.get('zmq', 0):>6.1f} | "
                    f"{switches.get('io', 0) / calls:>16.2f} "
                    f"{switches.get('workers', 0) / calls:>7.2f} {(m1 - m0) / calls:>6.2f}",
                    flush=True,
                )
            for label in ratios:
                ratios[label].append(tputs[label] / tputs["raw"])
            if args.rounds > 1:
                print(
                    f"  round {round_ + 1}: ratio to raw pool {ratios['pool'][-1]:.2f}, "
                    f"inline {ratios['inline'][-1]:.2f}; "
                    f"load average {Path('/proc/loadavg').read_text().split()[0]}",
                    flush=True,
                )
            runs.append(runs.pop(0))  # the next round starts with the next one
        print(
            f"ratio to raw pyzmq (median of {args.rounds}): "
            f"pool {statistics.median(ratios['pool']):.2f}, "
            f"inline {statistics.median(ratios['inline']):.2f}; the caller's CPU per call "
            f"(median): pool {statistics.median(caller_us['pool']):.1f} us, "
            f"inline {statistics.median(caller_us['inline']):.1f} us, "
            f"raw {statistics.median(caller_us['raw']):.1f} us"
        )
    finally:
        for p in (rpc, raw):
            p.kill()
            p.wait(10)


def measure_caller(args) -> None:
    """The caller's CPU per pipelined call with no waiting: a ROUTER in this thread answers
    each batch of WINDOW calls (OK headers as the rpc server writes them), and only the
    caller's own work is timed (thread CPU): sending the batch, then collecting it once
    every answer is in. rpc (call_async, result_with_sidecars) against raw pyzmq
    (send_multipart, recv_multipart, as the raw bench)."""
    from rpc.frames import ok_header
    from rpc.rpc_pb2 import RequestHeader, ResponseHeader, StatusCode

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    rest = ResponseHeader(status=StatusCode.OK, server_uuid=UUID).SerializeToString()
    payload = b"p" * 100
    window = args.window

    def answer_batch(dealer: zmq.Socket) -> None:
        for _ in range(window):
            frames = router.recv_multipart()
            call_id = RequestHeader.FromString(frames[1]).call_id
            router.send_multipart([frames[0], ok_header(call_id, rest), *frames[2:]])
        while not dealer.poll(1000):  # the first answer is in; the rest follow it closely
            pass
        time.sleep(0.002)

    def timed(send, collect, dealer: zmq.Socket, batches: int) -> tuple[float, float]:
        sent = collected = 0.0
        for batch in range(batches + 5):  # 5 batches of warm-up
            t0 = time.thread_time()
            handles = send()
            t1 = time.thread_time()
            answer_batch(dealer)
            t2 = time.thread_time()
            collect(handles)
            t3 = time.thread_time()
            if batch >= 5:
                sent, collected = sent + t1 - t0, collected + t3 - t2
        calls = batches * window
        return sent / calls * 1e6, collected / calls * 1e6

    def rpc_run(batches: int) -> tuple[float, float]:
        with RpcClient(f"127.0.0.1:{port}", "bench") as c:
            request = PingResponse(uuid="x")

            def send() -> list:
                return [
                    c.call_async(UUID, "Test.Echo", request, PingResponse, sidecars=[payload])
                    for _ in range(window)
                ]

            def collect(handles: list) -> None:
                for handle in handles:
                    handle.result_with_sidecars()

            first = c.call_async(UUID, "Test.Echo", request, PingResponse)  # connects
            frames = router.recv_multipart()
            call_id = RequestHeader.FromString(frames[1]).call_id
            router.send_multipart([frames[0], ok_header(call_id, rest), b""])
            first.result()
            # The calling thread's socket, polled (not read) for the answers' arrival.
            d = c._transport._direct_socket(c.address)
            return timed(send, collect, d.socket, batches)

    def raw_run(batches: int) -> tuple[float, float]:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        header = RequestHeader(call_id=1, method="Test.Echo").SerializeToString()

        def send() -> None:
            for _ in range(window):
                s.send_multipart([header, b"", payload], copy=False)

        def collect(_handles) -> None:
            for _ in range(window):
                s.recv_multipart(copy=False)

        try:
            return timed(send, collect, s, batches)
        finally:
            s.close()

    batches = max(1, int(args.seconds * 100))
    print(
        f"the caller's CPU per pipelined call, answers all in (no waiting), 100 B, "
        f"{window} a batch, {batches} batches; load average "
        f"{Path('/proc/loadavg').read_text().split()[0]}"
    )
    try:
        for _ in range(args.rounds):
            for label, run in (("rpc", rpc_run), ("raw", raw_run)):
                sent, collected = run(batches)
                print(
                    f"{label:>4}: send {sent:5.2f} us, collect {collected:5.2f} us, "
                    f"total {sent + collected:5.2f} us",
                    flush=True,
                )
    finally:
        router.close()
        ctx.term()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--window", type=int, default=64, help="calls in flight when pipelined")
    parser.add_argument("--threads", type=int, default=8, help="threads of synchronous calls")
    parser.add_argument(
        "--metrics",
        choices=("on", "off", "both"),
        default="on",
        help="the rpc server's per-method metrics; both: side by side, ratio on/off",
    )
    parser.add_argument(
        "--curve", action="store_true", help="CURVE beside plaintext (ratios curve/plain)"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="CPU per pipelined call, by thread (see above)"
    )
    parser.add_argument(
        "--caller",
        action="store_true",
        help="the caller's CPU per pipelined call without waiting, rpc against raw",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --cpu: pool, inline, raw this many times; with --caller: rpc, raw",
    )
    args = parser.parse_args()
    if args.curve:
        measure_curve(args)
        return
    if args.cpu:
        measure_cpu(args)
        return
    if args.caller:
        measure_caller(args)
        return
    modes = ("on", "off") if args.metrics == "both" else (args.metrics,)
    procs = [start([sys.executable, "-c", RAW_SERVER, "tcp://127.0.0.1:0"])]
    try:
        servers = {}
        for mode in modes:
            procs.append(start([sys.executable, "-c", RPC_SERVER, UUID, "127.0.0.1:0", mode]))
            servers[mode] = (procs[-1].address, procs[-1].http_url)
        raw_address = procs[0].address
        figures = {}
        for mode in modes:
            address, http = servers[mode]
            with Scraper(http) as scraper:
                figures[mode] = measure(address, raw_address, args, mode)
            if http:
                print(f"(/metrics scraped {scraper.scrapes} times during the run)")
        if args.metrics == "both":
            print("metrics on / off (target >= 0.95):")
            for key, on in figures["on"].items():
                off = figures["off"][key]
                print(f"  {key:<24} {on:>10.0f} {off:>10.0f}  {on / off:.3f}")
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


if __name__ == "__main__":
    main()
