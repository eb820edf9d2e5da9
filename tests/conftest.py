"""Suite-wide test hooks."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import threading
import warnings

import pytest

from optools.localcluster import LocalCluster

# Tests never read or write the user's clusters file (~/.config/logcentric/clusters.toml):
# every run gets its own, and the environment names no cluster unless a test says so.
_CONFIG_DIR = tempfile.mkdtemp(prefix="logcentric-test-config-")
atexit.register(shutil.rmtree, _CONFIG_DIR, True)  # not left behind in /tmp, one per worker
os.environ["LOGCENTRIC_CONFIG"] = os.path.join(_CONFIG_DIR, "clusters.toml")
os.environ.pop("LOGCENTRIC_COORDINATORS", None)
os.environ.pop("LOGCENTRIC_CLUSTER", None)

# Under pytest-xdist (./dev test), each worker picks ports from its own slice of the server
# port range, so two workers starting clusters at once never choose the same free port
# between the choice and the bind ("Address already in use"). Processes the tests start
# inherit it.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and _worker[2:].isdigit():
    from rpc.addresses import PORT_RANGE_ENV, SERVER_PORTS

    _count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    _size = len(SERVER_PORTS) // _count
    _lo = SERVER_PORTS.start + int(_worker[2:]) % _count * _size
    os.environ[PORT_RANGE_ENV] = f"{_lo}-{_lo + _size - 1}"


# A suite started in the background of a non-interactive shell (`./dev test &`, `( ... &)`)
# runs with SIGINT and SIGQUIT ignored (POSIX: asynchronous commands without job control),
# and every process a test starts inherits the ignored SIGINT: the Ctrl-C tests' children
# then never see their Ctrl-C (the deadline test waited 60 s for one; its orphan showed
# SigIgn 0x...006). Tests start with Python's own handler whatever the suite inherited.
if threading.current_thread() is threading.main_thread():
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _sigint_not_left_ignored(request):
    """A test that leaves SIGINT ignored makes every process later tests start ignore
    Ctrl-C (an ignored disposition is inherited): put back to Python's handler, and named
    in the warnings summary so the test can be found."""
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        warnings.warn(f"{request.node.nodeid} left SIGINT ignored; put back", stacklevel=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """When a test that uses a local cluster fails, attach the end of its process logs."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, LocalCluster):
            for log in sorted(value.log_dir.glob("*.log")):
                text = log.read_text(errors="replace").splitlines()
                report.sections.append((f"log {log.name}", "\n".join(text[-80:])))
