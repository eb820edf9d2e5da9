"""Bounded retention of quarantined replicas (design/tservers.md sections 1 and 4).

A deletion moves a replica's files into `quarantine/<tablet_id>.<n>/` (tablet/manager.py)
and touches that directory once everything is in: its mtime is the time of the deletion.
This module decides which of those directories to delete and deletes them:

- `scan(root)`: the entries on disk, each with its disk usage and mtime (I/O);
- `plan(entries, policy, now_s, busy_tablets)`: which to remove and why (pure: the time is
  an input, so tests need no clock);
- `remove_planned(root, removals)`: each entry renamed to `<name>.removing` (from then on
  it goes, even across a crash: a later pass finishes it) and deleted;
- `QuarantineReaper`: the tablet server's `quarantine-reaper` thread, which runs a pass at
  start, every `interval_s` and after each deletion, and leaves alone the entries of the
  tablets whose deletion is in progress (`filling`).

`tserver quarantine list | purge` (tservers/cli.py) use the same functions on a stopped
server's root. Anything else found under quarantine/ is left alone.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

RETENTION_S_DEFAULT = 86_400.0  # one day: time to look at what a deletion set aside
BYTES_MAX_DEFAULT = 10 << 30  # 10 GiB of quarantine per server, oldest removed first
SCAN_INTERVAL_S = 60.0  # besides the pass after every deletion
LOW_SPACE_INTERVAL_S = 1.0  # between passes while the server is at or below its reserve
ENTRIES_MAX = 100_000  # per scan: far above TABLETS_MAX deletions kept for a day
REMOVING_SUFFIX = ".removing"
# Tablet ids are 1-64 of [A-Za-z0-9_-] (tablet/manager.py: TABLET_ID_RE): no dots.
ENTRY_RE = re.compile(r"^(?P<tablet>[A-Za-z0-9_\-]{1,64})\.(?P<n>\d+)(?P<removing>\.removing)?$")


@dataclass(frozen=True, slots=True)
class Entry:
    """One quarantine directory as found on disk."""

    name: str  # <tablet_id>.<n>, or <tablet_id>.<n>.removing
    tablet_id: str
    size_bytes: int  # disk usage (allocated blocks, as du counts them)
    mtime_s: float  # time.time() scale: when the deletion finished moving the replica in
    removing: bool = False  # a removal began and did not finish (crash, error)

    def age_s(self, now_s: float) -> float:
        return now_s - self.mtime_s


@dataclass(frozen=True, slots=True)
class Policy:
    """What the quarantine may hold. None: no limit of that kind."""

    retention_s: float | None = RETENTION_S_DEFAULT  # 0: removed as soon as the move ends
    bytes_max: int | None = BYTES_MAX_DEFAULT

    def __post_init__(self) -> None:
        assert self.retention_s is None or self.retention_s >= 0, self.retention_s
        assert self.bytes_max is None or self.bytes_max >= 0, self.bytes_max


class Reason(enum.Enum):
    UNFINISHED = "unfinished removal"
    EXPIRED = "older than the retention"
    OVER_CAP = "over the byte cap"
    LOW_SPACE = "the server is at or below its reserved free space"


@dataclass(frozen=True, slots=True)
class Removal:
    entry: Entry
    reason: Reason


def plan(
    entries: Iterable[Entry],
    policy: Policy,
    now_s: float,
    busy_tablets: frozenset[str] = frozenset(),
    space_deficit_bytes: int = 0,
) -> list[Removal]:
    """The entries to remove, in the order to remove them: unfinished removals first, then
    the others oldest first. An entry is removed when its age reached the retention (any
    age with retention 0; an mtime in the future, from a clock set back, counts as new),
    and then, oldest first, while the total still passes the byte cap. Entries of
    `busy_tablets` (a deletion is filling one of them) are never removed, but count in the
    total."""
    ordered = sorted(entries, key=lambda e: (e.mtime_s, e.name))
    out: list[Removal] = []
    candidates: list[Entry] = []
    total_bytes = 0
    for e in ordered:
        if e.removing:
            out.append(Removal(e, Reason.UNFINISHED))  # nothing writes into these
            continue
        if e.tablet_id in busy_tablets:
            total_bytes += e.size_bytes
            continue
        if policy.retention_s is not None and (
            policy.retention_s == 0 or e.age_s(now_s) >= policy.retention_s
        ):
            out.append(Removal(e, Reason.EXPIRED))
            continue
        candidates.append(e)
        total_bytes += e.size_bytes
    if policy.bytes_max is not None:
        for e in candidates:  # oldest first
            if total_bytes <= policy.bytes_max:
                break
            out.append(Removal(e, Reason.OVER_CAP))
            total_bytes -= e.size_bytes
    # At or below the server's reserve (`space_deficit_bytes` > 0: the bytes it takes to get
    # above it), whatever the retention: oldest first, until that much is freed. Dropping
    # a table then frees space on a full server (its replicas come here first).
    deficit = space_deficit_bytes - sum(r.entry.size_bytes for r in out)
    if deficit > 0:
        planned = {r.entry.name for r in out}
        for e in candidates:  # oldest first
            if deficit <= 0:
                break
            if e.name in planned:
                continue
            out.append(Removal(e, Reason.LOW_SPACE))
            deficit -= e.size_bytes
    out.sort(key=lambda r: (not r.entry.removing, r.entry.mtime_s, r.entry.name))
    assert len({r.entry.name for r in out}) == len(out), "an entry planned twice"
    return out


# ==================================================================== disk
def scan(root: Path) -> list[Entry]:
    """The entries under `root` (the quarantine directory), oldest first. Entries that
    vanish while being looked at (removed meanwhile) are left out."""
    out: list[Entry] = []
    try:
        it = os.scandir(root)
    except FileNotFoundError:
        return out
    with it:
        for d in it:
            m = ENTRY_RE.match(d.name)
            if m is None:
                continue
            try:
                if not d.is_dir(follow_symlinks=False):
                    continue
                mtime_s = d.stat(follow_symlinks=False).st_mtime
                size = _disk_bytes(Path(d.path))
            except FileNotFoundError:
                continue
            out.append(
                Entry(d.name, m["tablet"], size, mtime_s, removing=m["removing"] is not None)
            )
            if len(out) >= ENTRIES_MAX:
                log.warning("quarantine: more than %d entries, looking at the first", ENTRIES_MAX)
                break
    out.sort(key=lambda e: (e.mtime_s, e.name))
    return out


def _disk_bytes(path: Path) -> int:
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for d in it:
                    try:
                        st = d.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    total += st.st_blocks * 512
                    if d.is_dir(follow_symlinks=False):
                        stack.append(Path(d.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return total


def _delete_tree(path: Path) -> None:
    shutil.rmtree(path)


def remove_planned(
    root: Path, removals: Iterable[Removal], stop: Callable[[], bool] = lambda: False
) -> Iterator[tuple[Removal, OSError | None]]:
    """Remove each planned entry, yielding it with None or the error that stopped it (the
    others are still tried). `stop` is asked before each entry."""
    for r in removals:
        if stop():
            return
        path = root / r.entry.name
        try:
            if not r.entry.removing:
                gone = root / f"{r.entry.name}{REMOVING_SUFFIX}"
                os.rename(path, gone)  # not fsynced: a lost rename only means a later pass
                path = gone
            _delete_tree(path)
        except OSError as e:
            yield r, e
            continue
        yield r, None


# ==================================================================== the server's thread
class QuarantineReaper:
    """The tablet server's `quarantine-reaper` thread (owned by the TabletManager).

    A pass runs when the thread starts (the server's startup), every `interval_s`, and
    after every deletion (`filling` wakes it), so retention 0 removes an entry right after
    its move. Each removed entry is logged at info; a failed one at warning and tried again
    at the next pass; the server runs on either way."""

    def __init__(
        self, root: Path, policy: Policy | None = None, *, interval_s: float = SCAN_INTERVAL_S
    ) -> None:
        assert interval_s > 0
        self.root = Path(root)
        self.policy = policy or Policy()
        self.interval_s = interval_s
        self._busy: dict[str, int] = {}  # tablet id -> deletions of it in progress
        self._busy_lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.removed_entries = 0
        self.removed_bytes = 0
        self.failures = 0
        # () -> (free bytes, reserved bytes) of the file system (tservers.fs.DiskSpace):
        # at or below the reserve a pass also removes entries oldest first (LOW_SPACE),
        # and passes come every LOW_SPACE_INTERVAL_S. None: no such rule.
        self.space: Callable[[], tuple[int, int]] | None = None

    def space_deficit(self) -> int:
        """Bytes to free to get above the reserve (0: above it, or no `space`)."""
        if self.space is None:
            return 0
        try:
            free, reserved = self.space()
        except OSError as e:
            log.warning("quarantine: cannot read the free space: %s", e)
            return 0
        return reserved - free + 1 if free <= reserved else 0

    def start(self) -> QuarantineReaper:
        assert self._thread is None, "started twice"
        p = self.policy
        log.info(
            "quarantine: entries kept %s, %s in all (the oldest removed first)",
            "with no age limit" if p.retention_s is None else f"for {p.retention_s:g} s",
            "no limit" if p.bytes_max is None else f"at most {format_bytes(p.bytes_max)}",
        )
        self._thread = threading.Thread(target=self._run, name="quarantine-reaper", daemon=True)
        self._thread.start()
        return self

    @contextmanager
    def filling(self, tablet_id: str):
        """Around a deletion's steps 2-6: no entry of this tablet is removed meanwhile (a
        directory being filled must not vanish under the deletion); wakes the thread after."""
        with self._busy_lock:
            self._busy[tablet_id] = self._busy.get(tablet_id, 0) + 1
        try:
            yield
        finally:
            with self._busy_lock:
                n = self._busy.pop(tablet_id) - 1
                if n:
                    self._busy[tablet_id] = n
            self._wake.set()

    def busy_tablets(self) -> frozenset[str]:
        with self._busy_lock:
            return frozenset(self._busy)

    def run_once(self, now_s: float | None = None) -> list[tuple[Removal, OSError | None]]:
        """One pass: scan, plan, remove; returns what was tried. `now_s` defaults to
        time.time() (ages of files on disk survive restarts: wall-clock time)."""
        with self._pass_lock:
            entries = scan(self.root)
            # Busy tablets are read after the scan: a deletion that began before the scan
            # and is still filling its directory is in the set; one that began after it
            # fills a directory the scan did not see (a new <tablet_id>.<n>).
            busy = self.busy_tablets()
            now_s = time.time() if now_s is None else now_s
            removals = plan(entries, self.policy, now_s, busy, self.space_deficit())
            done = []
            for r, err in remove_planned(self.root, removals, self._stop.is_set):
                e = r.entry
                if err is None:
                    self.removed_entries += 1
                    self.removed_bytes += e.size_bytes
                    log.info(
                        "quarantine: removed %s (tablet %s, %s, %s old, %s)",
                        e.name,
                        e.tablet_id,
                        format_bytes(e.size_bytes),
                        format_age(e.age_s(now_s)),
                        r.reason.value,
                    )
                else:
                    self.failures += 1
                    log.warning(
                        "quarantine: cannot remove %s (tablet %s, %s): %s; trying again "
                        "within %g s",
                        e.name,
                        e.tablet_id,
                        format_bytes(e.size_bytes),
                        err,
                        self.interval_s,
                    )
                done.append((r, err))
            self.passes += 1
            return done

    def _run(self) -> None:
        while True:
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:  # a bug here must not end the reclaiming for good
                log.exception("quarantine: pass failed")
            low = self.space_deficit() > 0
            self._wake.wait(min(self.interval_s, LOW_SPACE_INTERVAL_S) if low else self.interval_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop after the entry being removed (an rmtree is not interrupted)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("quarantine: reaper still removing after %g s", timeout_s)

    def __enter__(self) -> QuarantineReaper:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# ==================================================================== for people
def format_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_age(age_s: float) -> str:
    age_s = max(0.0, age_s)
    if age_s < 120:
        return f"{age_s:.0f} s"
    if age_s < 7200:
        return f"{age_s / 60:.0f} min"
    if age_s < 172_800:
        return f"{age_s / 3600:.1f} h"
    return f"{age_s / 86_400:.1f} d"
