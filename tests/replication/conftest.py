"""Fixtures of the replication tests: three real tablet server processes on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.replication.helpers import TServerTrio


@pytest.fixture
def trio(tmp_path):
    t = TServerTrio(tmp_path)
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()
