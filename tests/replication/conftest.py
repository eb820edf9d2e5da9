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


@pytest.fixture
def throttled(tmp_path):
    """Three servers whose tablet copies are limited to 0.5 MB/s: a copy is surely seen in
    progress (and a source killed in the middle of one)."""
    t = TServerTrio(tmp_path, n=3, extra_args=["--copy-rate-mb", "0.5"])
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()
