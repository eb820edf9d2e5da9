"""Size-limited tmpfs file systems for the tests of full disks: real mounts (tests run as
root; a test is skipped with the reason when mount is refused), a filler file that leaves a
given number of bytes free, and the free bytes as a tablet server sees them (statvfs)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MB = 1 << 20
CMD_TIMEOUT_S = 30


@contextmanager
def tmpfs_mounter(root: Path) -> Iterator:
    """`mount(size) -> Path`: a new tmpfs of `size` bytes under `root`; all unmounted (lazily,
    so a process still in one cannot keep it) at the end."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        m = root / f"fs{len(mounted)}"
        m.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(m)],
            capture_output=True,
            text=True,
            timeout=CMD_TIMEOUT_S,
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
        mounted.append(m)
        return m

    try:
        yield mount
    finally:
        for m in mounted:
            subprocess.run(["umount", "-l", str(m)], capture_output=True, timeout=CMD_TIMEOUT_S)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int) -> Path:
    """Grow `path`/filler (fsynced) until only `leave` bytes of the file system are free."""
    filler = path / "filler"
    size = free_bytes(path) - leave
    assert size > 0, (free_bytes(path), leave)
    chunk = b"\0" * MB
    with open(filler, "ab") as f:
        while size > 0:
            n = min(size, len(chunk))
            f.write(chunk[:n])
            size -= n
        f.flush()
        os.fsync(f.fileno())
    return filler
