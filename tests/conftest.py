"""Suite-wide test hooks."""

from __future__ import annotations

import pytest

from optools.localcluster import LocalCluster


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
