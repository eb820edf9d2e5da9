"""Suite-wide test hooks."""

from __future__ import annotations

import os
import tempfile

import pytest

from optools.localcluster import LocalCluster

# Tests never read or write the user's clusters file (~/.config/logcentric/clusters.toml):
# every run gets its own, and the environment names no cluster unless a test says so.
_CONFIG_DIR = tempfile.mkdtemp(prefix="logcentric-test-config-")
os.environ["LOGCENTRIC_CONFIG"] = os.path.join(_CONFIG_DIR, "clusters.toml")
os.environ.pop("LOGCENTRIC_COORDINATORS", None)
os.environ.pop("LOGCENTRIC_CLUSTER", None)


# Test groups that share machine-wide state and must never run at the same time on two
# xdist workers: the nemesis tests make network namespaces with fixed names, iptables rules
# and FUSE mounts. Path prefix (relative to tests/) -> group.
_SHARED_STATE_GROUPS = {"nemesis/": "nemesis"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `pytest -n N --dist loadgroup` (./dev test), a module's tests stay on one worker
    (its module-scoped clusters are started once, as in a serial run), and the groups above
    stay on one worker whole. Without xdist the marks change nothing."""
    root = os.path.dirname(__file__)
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        rel = os.path.relpath(str(item.path), root)
        group = next((g for p, g in _SHARED_STATE_GROUPS.items() if rel.startswith(p)), rel)
        item.add_marker(pytest.mark.xdist_group(group))


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
