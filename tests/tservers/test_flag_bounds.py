"""`tserver start` flags that used to be accepted and break the server later.

--fs-reserved-bytes 99999999999999999999999 was taken, then every heartbeat raised
ValueError (a uint64 field) and the server never enlisted; --compaction-rate-mb 1e-300
rounded to 0 bytes/s, which means unthrottled. Both are refused with argparse's one line
now; the reserve takes K/M/G/T suffixes, and a reserve at or above the file system's size
(the server would be full for ever) gets a warning at start.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest

from tests.support.procs import free_port
from tests.tservers.procs import TServerProcess
from tests.tservers.test_cli_errors import tserver, usage_error
from tservers.fs import DiskSpace

pytestmark = pytest.mark.integration

MB = 1 << 20


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    assert tserver("fs", "format", "--fs-root", str(r)).returncode == 0
    return r


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--fs-reserved-bytes", "99999999999999999999999", "above the largest size"),
        ("--fs-reserved-bytes", "9223372036854775808", "above the largest size"),
        ("--fs-reserved-bytes", "-1", "not a size in bytes"),
        ("--compaction-rate-mb", "1e-300", "must be 0 (unthrottled) or above, from 0.001"),
        ("--compaction-rate-mb", "1e300", "must be 0 (unthrottled) or above, from 0.001"),
        ("--copy-rate-mb", "1e-9", "must be 0 (unthrottled) or above, from 0.001"),
    ],
)
def test_start_refuses_out_of_range_flags(root, flag, value, says):
    r = tserver("start", "--fs-root", str(root), flag, value)
    assert says in usage_error(r, flag)
    assert not (root / "lock").exists()  # refused before the fs root was touched


def test_disk_space_refuses_a_reserve_past_uint64():
    with pytest.raises(ValueError, match="reserved bytes"):
        DiskSpace("/", "u", 1 << 64)


@pytest.fixture
def small_tmpfs(tmp_path):
    m = tmp_path / "small"
    m.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(m)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield m
    finally:
        subprocess.run(["umount", "-l", str(m)], capture_output=True, timeout=30)


def test_suffix_and_the_warning_of_a_reserve_past_the_file_system(small_tmpfs):
    root = small_tmpfs / "ts"
    assert tserver("fs", "format", "--fs-root", str(root)).returncode == 0
    # 1M: a reserve below the size; no warning.
    http = f"127.0.0.1:{free_port()}"
    p = TServerProcess(root, extra_args=["--fs-reserved-bytes", "1M", "--http", http]).start()
    try:
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        found = re.search(r"^logcentric_tserver_fs_reserved_bytes (\S+)$", metrics, re.M)
        assert found and float(found.group(1)) == 1 * MB, metrics
    finally:
        p.stop()
    assert "warning" not in p.err_path.read_text()
    # 1G on a 16 MiB file system: it starts, and says it is full for ever.
    p = TServerProcess(root, extra_args=["--fs-reserved-bytes", "1G"]).start()
    try:
        err = p.err_path.read_text()
        assert "tserver: warning: --fs-reserved-bytes 1073741824 is not below the size" in err
        assert "full for ever" in err
    finally:
        p.stop()
