"""The background compaction policy of a tablet server (design/storage.md, "Compaction" and
"Key-disjoint runs").

A tablet's blocks form sorted runs (a flushed block, or the key-disjoint blocks one
compaction wrote); an existence check asks one block per run. Each round, the scheduler
takes the RUNNING tablets with at least `compaction_blocks_min` runs, most runs first, and
runs their size-tiered compaction (`Tablet.compact(tiered=True)`: adjacent runs of one
size class, the newest such, `compaction_window`, merged into one run listed where they
were). Two threads (`threads`): the first runs any compaction, the others only those of
at most `small_rows_max` flushes of rows, so that while a long merge of big runs goes on
(minutes at 50M rows) the runs of new flushes keep being merged (a tablet lets a
compaction of runs newer than a busy one's go on beside it, `Tablet.compaction_plan`).
Flushes stay on the manager's maintenance thread and are never held back by a merge (the
tablet takes its flush lock only to pick and to commit).

Memory: at most `threads` compactions at a time per server, each merging its runs in
bounded slabs and writing its blocks as they come (`blockindex.write_merged_run`): a
merge holds about COMPACT_SLAB_ROWS rows and one output batch whatever the runs' size, and
each new block's filter is built a segment at a time (its hashes, 8 bytes a key, are what
grows: at most `run_block_rows` keys). A compaction merges at most `run_blocks_max` runs
(K: the sources of a slab) and, if set, `run_bytes_max` bytes of block files (B, off by
default: runs must stay few, and a byte budget leaves the big ones apart; what it bounds
is the disk a compaction needs until it unlinks its inputs, at most the tablet's size
without it). A size-tiered plan of more than K runs has its newest K merged (a pile of
flushes that outran the merges goes down K - 1 runs a time); one over B bytes is left alone
(counted in `deferred`, logged once).

Rate limit: a budget of `rate_bytes_s` bytes written per second over all tablets, one for
the first thread and one for the small ones (else the debt of a long merge, a minute of
budget after 2 GB, stopped the merges of new runs and they piled up: 98 blocks seen 5
minutes into a 50M load). A compaction that wrote X bytes and started at t lets the next
one of its budget start at t + X / rate at the earliest; over any stretch of time,
compactions write at most 2 x rate x time bytes plus one compaction per thread (one under
way is not cut in the middle). 0: unthrottled.

Crash safety is the tablet's: a compaction writes its blocks and filters (fsynced), then
the superblock that lists them (the commit point), then unlinks the merged blocks; a crash
at any step leaves either the old blocks or the new run listed (crash points `compact.*`),
and unlisted files are removed at open.

Key overlap (design/storage.md, "Compaction of overlapping runs"). Size tiers alone leave
runs of different classes apart however much they overlap (3 runs of 280k rows and 3 of
40-60k at 1M rows: every key covered 6 times, and every scan merges 6 runs by key). So a
second term: the *height* of a tablet is the most runs whose key ranges (first block's min
key to last block's max key) cover one key, from the blocks' metadata. A tablet whose
height is at least `overlap_height` (3), with no tiered compaction to run, and that has
applied no write and changed no block for `overlap_idle_s` (10 s: ingest has stopped; while
writes go on the tiered policy alone runs, its write amplification log_fanout), gets the
newest runs merged
(a suffix of the runs: runs shadow older ones by their order, so only adjacent runs merge)
that leaves the lowest height, the shortest such suffix, under two bounds: at most K runs
and B bytes (as above), and no run in it holds more than `overlap_ratio` (4) times the
rows of the others together. The last bound is the write amplification's: a run rewritten
by this term comes out at least 1 + 1/ratio times bigger, so a row is rewritten by it at
most log_1.25(tablet rows / flush rows) times, and a big run that overlaps a few small ones
is left alone (the small ones are merged together instead). Key-disjoint runs (sequential
keys) have height 1 and are never merged by it. Each compaction merges at least two runs,
so a tablet left alone converges to a height below the bound (1 when the ratio allows)
in at most as many compactions as it has runs.

Changed tablets only (issue 28). A round does not look at every tablet: it looks at the
tablets whose blocks changed since the last round (a flush; a compaction that ended, its
runs free again: `Tablet.on_blocks`, set on a tablet the first time a round lists it),
the tablets new to the listing (opened with blocks at start-up, copied, created), and the
ones it must look at again whatever happens: those the overlap term waits on (its clock,
the only time-based trigger: the tablet's blocks and applied index unchanged for
`overlap_idle_s`, checked every round as before) and those whose compaction was given up
(a copy session, a shutdown, a failure: tried again each round as before). A tablet found
with nothing to do is not looked at again until its blocks change: the policy (runs, size
classes, height, the bounds K and B) depends on its blocks only. New tablets: a Tablet is
put in `tablet.UNLISTED` when made, and a round takes the manager's list of running
tablets (sets: new ones hooked, gone ones forgotten; at 10,000 replicas 6-7 ms of the
round's thread, all an idle round cost before) only while one of those is RUNNING, while
it knows no tablet, and for the sweep; a tablet shut down tells its hook and is forgotten.
Every FULL_SWEEP_S the first thread's round looks at every tablet (a backstop, should a
change reach no hook). `examined` counts the tablets looked at.

Metrics: compactions run (by reason: `tiered`, `overlap`), bytes written, seconds spent
waiting for the budget.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tservers.tablet import tablet as tablet_mod
from tservers.tablet.blockindex import BlockIndex, runs_of
from tservers.tablet.tablet import Tablet, TabletStatus

log = logging.getLogger(__name__)

# 32 MB/s: a few percent of a disk's sequential bandwidth, far above what a tablet server's
# flushes produce (a flush of 200k rows of ~50 bytes each every few seconds at most).
RATE_BYTES_S_DEFAULT = 32_000_000
ROUND_INTERVAL_S_DEFAULT = 0.2
# Rounds that ran nothing wait longer each time, up to this (doubling from the interval);
# a flush (`poke`) or a compaction that ran brings the interval back: an idle server with
# thousands of replicas does not list them all five times a second (issue 28).
IDLE_ROUND_INTERVAL_S_MAX = 5.0
# A backstop: the first thread's round looks at every tablet this often (module doc).
FULL_SWEEP_S = 300.0
RUN_BLOCKS_MAX_DEFAULT = 16  # runs merged at once (the sources of a slab)
# 0: no bound. A compaction merges the newest runs into one (key-disjoint runs: a key is
# checked against one block per run, so runs must stay few, and a byte budget would leave
# the big ones apart: 26 runs at 50M rows under 128 MiB). What it needs in disk until it
# unlinks its inputs is their size, at most the tablet's.
RUN_BYTES_MAX_DEFAULT = 0
# Key overlap (module doc): a tablet with a key covered by this many runs is merged down
# once it has taken no write and its blocks have not changed for OVERLAP_IDLE_S_DEFAULT
# (not merely between two flushes: a tablet rewritten after every flush of a trickle of
# writes wrote 2.2x the bytes of the tiered policy alone, bench/compaction.py
# --amplification); 0 turns the term off.
OVERLAP_HEIGHT_DEFAULT = 3
OVERLAP_IDLE_S_DEFAULT = 10.0
OVERLAP_RATIO_DEFAULT = 4.0


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    rate_bytes_s: int = RATE_BYTES_S_DEFAULT  # 0: unthrottled
    round_interval_s: float = ROUND_INTERVAL_S_DEFAULT
    blocks_min: int = 4  # a tablet with fewer runs (of blocks) is not looked at
    run_blocks_max: int = RUN_BLOCKS_MAX_DEFAULT  # K: runs merged at once, at most
    run_bytes_max: int = RUN_BYTES_MAX_DEFAULT  # B: bytes of block files merged at once (0: any)
    # Compaction threads. The first runs any compaction; the others only those of at most
    # `small_rows_max` rows (x the tablet's flush threshold), so that the newest runs keep
    # being merged while a long merge of big runs goes on (a flush every few seconds would
    # otherwise pile up runs, each one more block for every existence check to ask).
    threads: int = 2
    small_rows_max: int = 64
    # Key overlap (module doc): the height that triggers a merge (0: off), how long a
    # tablet's blocks must have stayed as they are, and the bound on a run's share.
    overlap_height: int = OVERLAP_HEIGHT_DEFAULT
    overlap_idle_s: float = OVERLAP_IDLE_S_DEFAULT
    overlap_ratio: float = OVERLAP_RATIO_DEFAULT


def run_ranges(runs: Sequence[Sequence[BlockIndex]]) -> list[tuple | None]:
    """Each run's key range (its first block's min key, its last block's max key; the
    blocks of a run are in key order), None for a run of empty blocks."""
    out: list[tuple | None] = []
    for r in runs:
        keyed = [b for b in r if b.min_key is not None]
        out.append((keyed[0].min_key, keyed[-1].max_key) if keyed else None)
    return out


def height(ranges: Sequence[tuple | None]) -> int:
    """The most of `ranges` (closed key intervals; None: empty) that cover one key."""
    events = []
    for rg in ranges:
        if rg is not None:
            events.append((rg[0], 0))  # a start before an end at the same key: closed
            events.append((rg[1], 1))
    events.sort()
    h = top = 0
    for _, end in events:
        h += -1 if end else 1
        top = max(top, h)
    return top


def overlap_start(
    runs: Sequence[Sequence[BlockIndex]],
    *,
    height_min: int,
    ratio: float,
    runs_max: int,
    bytes_max: int = 0,
    run_bytes: Callable[[Sequence[BlockIndex]], int] | None = None,
) -> int | None:
    """Where the newest runs to merge for key overlap start (module doc), or None: when
    the runs' height is at least `height_min`, the suffix of the runs (at most `runs_max`
    runs and, if set, `bytes_max` bytes, no run over `ratio` times the rest's rows) whose
    merge leaves the lowest height, the shortest of those; None when none lowers it."""
    if height_min <= 0 or len(runs) < 2:
        return None
    ranges = run_ranges(runs)
    now = height(ranges)
    if now < height_min:
        return None
    rows = [sum(b.num_rows for b in r) for r in runs]
    best: tuple[int, int] | None = None  # (height after, -start)
    total = 0
    n = len(runs)
    for start in range(n - 2, max(-1, n - 1 - runs_max), -1):
        tail = rows[start:]
        big = max(tail)
        if big > ratio * (sum(tail) - big):
            continue
        if bytes_max and run_bytes is not None:
            total = sum(run_bytes(r) for r in runs[start:])
            if total > bytes_max:
                break  # longer suffixes only hold more
        merged = [rg for rg in ranges[start:] if rg is not None]
        union = (min(rg[0] for rg in merged), max(rg[1] for rg in merged)) if merged else None
        after = height([*ranges[:start], union])
        if after < now and (best is None or after < best[0]):
            best = (after, start)
    return None if best is None else best[1]


# What became of a tablet looked at by a round (`CompactionScheduler._compact`).
_RAN, _NONE, _WAIT, _RETRY = "ran", "none", "wait", "retry"
# Free space a compaction leaves at least, after writing up to its inputs' size: half the
# server's reserve, at most this.
COMPACTION_FREE_MARGIN_MAX = 64 << 20


def _block_bytes(data_dir: Path, names: Sequence[str]) -> int:
    total = 0
    for name in names:
        try:
            total += (data_dir / name).stat().st_size
        except OSError:
            pass  # unlinked meanwhile (a concurrent deletion of the tablet)
    return total


class CompactionScheduler:
    """Runs compactions in the background under a byte-rate budget; see the module doc."""

    def __init__(
        self,
        tablets: Callable[[], list[Tablet]],
        opts: CompactionOptions | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        space: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """`space`: (free bytes, reserved bytes) of the server's file system, now; a
        compaction whose inputs would not fit above half the reserve (at most
        COMPACTION_FREE_MARGIN_MAX) waits: its output is up to their size until it unlinks
        them."""
        self.opts = opts or CompactionOptions()
        self._space = space
        assert self.opts.rate_bytes_s >= 0, self.opts.rate_bytes_s
        self._tablets = tablets
        self._clock = clock
        self._stop = threading.Event()
        self._poked = threading.Event()  # new blocks (a flush): look again now
        self._big = threading.Event()  # a compaction over the small bound is under way
        self._threads: list[threading.Thread] = []
        # The budgets, the first thread's and the small threads': no compaction starts
        # before this. Apart, so that the debt of a long merge (minutes of budget after a
        # 2 GB merge) does not stop the merges of new runs meanwhile.
        self._next_at = [0.0, 0.0]
        self._lock = threading.Lock()
        self.compactions = 0
        self.bytes_written = 0
        self.bytes_read = 0
        self.throttled_s = 0.0  # time spent waiting for the budget
        self.waited_for_space = 0  # compactions put off: not enough free space (tests)
        self.failures = 0
        self.deferred = 0  # runs left alone for being over K blocks or B bytes
        self._over: dict[str, tuple[str, ...]] = {}  # tablet id -> the run over a bound
        # Compactions run, by why they were picked: "tiered" (size classes) or "overlap"
        # (key-range height, module doc).
        self.reasons: dict[str, int] = {"tiered": 0, "overlap": 0}
        # tablet id -> ((its block names, its applied index), when this scheduler first
        # saw them so): the overlap term waits for a tablet unchanged `overlap_idle_s`.
        self._seen: dict[str, tuple[tuple, float]] = {}
        # Changed tablets only (module doc). The tablets listed by the last round (their
        # `on_blocks` has `_changed`); per thread kind (0: the first thread, 1: the small
        # ones), the tablets changed since its last round and those it looks at again.
        self._known: set[Tablet] = set()
        self._list_lock = threading.Lock()
        self._dirty: tuple[set[Tablet], set[Tablet]] = (set(), set())
        self._again: tuple[set[Tablet], set[Tablet]] = (set(), set())
        self._sweep_at = self._clock() + FULL_SWEEP_S
        self.examined = 0  # tablets looked at by rounds (their status and runs), in all
        self.examined_last = 0  # by the last round

    # ------------------------------------------------------------ thread
    def start(self) -> CompactionScheduler:
        assert not self._threads
        for i in range(max(1, self.opts.threads)):
            th = threading.Thread(
                target=self._run if i == 0 else self._run_small,
                name=f"tablet-compaction-{i}",
                daemon=True,
            )
            self._threads.append(th)
            th.start()
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._poked.set()
        self._big.set()
        deadline = time.monotonic() + timeout_s
        for th in self._threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def poke(self) -> None:
        """A tablet has new blocks: the next round starts now, not after an idle wait."""
        self._poked.set()

    def _run_small(self) -> None:
        """The other threads: idle (no rounds) unless a big compaction is under way; then
        rounds of small compactions only, every round interval."""
        while not self._stop.is_set():
            if not self._big.wait(IDLE_ROUND_INTERVAL_S_MAX):
                continue
            if self._stop.is_set():
                return
            try:
                ran = self.run_once(small_only=True)
            except Exception:  # a bug must not stop compactions for good
                log.exception("compaction round failed")
                ran = 0
            if not ran:
                self._stop.wait(self.opts.round_interval_s)

    def _run(self) -> None:
        wait = self.opts.round_interval_s
        while not self._stop.is_set():
            try:
                ran = self.run_once()
            except Exception:  # a bug must not stop compactions for good
                log.exception("compaction round failed")
                ran = 0
            if ran:
                wait = self.opts.round_interval_s
                continue
            if self._poked.wait(wait):
                self._poked.clear()
                wait = self.opts.round_interval_s
            else:
                wait = min(max(wait, self.opts.round_interval_s) * 2, IDLE_ROUND_INTERVAL_S_MAX)

    # ------------------------------------------------------------ one round
    def _least(self) -> int:
        least = self.opts.blocks_min
        if self.opts.overlap_height > 0:
            least = max(2, min(least, self.opts.overlap_height))
        return least

    def _runs(self, tablets) -> dict[Tablet, int]:
        """The candidates among `tablets` and their runs."""
        least = self._least()
        runs = {}
        for t in tablets:
            if t.status is TabletStatus.RUNNING and len(t.blocks) >= least:
                n = len(runs_of(list(t.blocks)))
                if n >= least:
                    runs[t] = n
        return runs

    def candidates(self) -> list[Tablet]:
        """RUNNING tablets with at least `blocks_min` runs of blocks (or `overlap_height`,
        when that term is on and lower), most runs first: every tablet looked at (the
        manager's `run_maintenance_once(compact=True)`; rounds look at changed ones)."""
        runs = self._runs(self._tablets())
        ids = {t.tablet_id for t in runs}
        with self._lock:  # tablets no longer candidates (merged, deleted): start again
            for tid in [tid for tid in self._seen if tid not in ids]:
                del self._seen[tid]
        return sorted(runs, key=lambda t: (-runs[t], t.tablet_id))

    def _changed(self, t: Tablet) -> None:
        """`Tablet.on_blocks`: its blocks changed, or a compaction of it ended."""
        with self._lock:
            self._dirty[0].add(t)
            self._dirty[1].add(t)

    def _listing_due(self) -> bool:
        """Whether a tablet made since may be in the manager's list: one in
        `tablet.UNLISTED` is RUNNING (those that failed or shut down before any listing
        are dropped from it)."""
        with tablet_mod.UNLISTED_LOCK:
            due = False
            for t in list(tablet_mod.UNLISTED):
                status = t.status
                if status is TabletStatus.RUNNING:
                    due = True
                elif status is not TabletStatus.BOOTSTRAPPING:
                    tablet_mod.UNLISTED.discard(t)
            return due

    def _listed(self, force: bool = False) -> None:
        """Take the manager's list of running tablets with `force`, while it knows none
        (a list that costs nothing), and when a tablet made since may be in it
        (`_listing_due`): new ones are hooked and looked at, gone ones forgotten (sets: no
        look at each tablet)."""
        with self._list_lock:  # both thread kinds list: one at a time
            if force or not self._known or self._listing_due():
                self._listed_locked()

    def _listed_locked(self) -> None:
        now = set(self._tablets())
        with tablet_mod.UNLISTED_LOCK:  # seen: no reason to list again for these
            for t in [t for t in tablet_mod.UNLISTED if t in now]:
                tablet_mod.UNLISTED.discard(t)
        with self._lock:
            new = now - self._known
            gone = self._known - now
            self._known = now
            for d in (*self._dirty, *self._again):
                d.difference_update(gone)
                d.update(new)
            if gone:  # deleted or shut down (not another object of the same id): forgotten
                ids = {t.tablet_id for t in gone} - {t.tablet_id for t in new}
                for tid in ids:
                    self._seen.pop(tid, None)
                    self._over.pop(tid, None)
        for t in gone:
            self._unhook(t)
        for t in new:
            t.on_blocks.append(self._changed)

    def _unhook(self, t: Tablet) -> None:
        try:
            t.on_blocks.remove(self._changed)
        except ValueError:
            pass

    def _forget(self, t: Tablet) -> None:
        """`t` shut down or failed (found so by a round): forgotten until listed again."""
        with self._lock:
            if t not in self._known:
                return
            self._known.discard(t)
            for d in (*self._dirty, *self._again):
                d.discard(t)
            self._seen.pop(t.tablet_id, None)
            self._over.pop(t.tablet_id, None)
        self._unhook(t)

    def _round_candidates(self, small: bool) -> list[Tablet]:
        """The candidates of this round: among the tablets changed since the last round of
        this thread kind, new, or to be looked at again (module doc), most runs first."""
        sweep = not small and self._clock() >= self._sweep_at
        self._listed(force=sweep)
        k = int(small)
        with self._lock:
            if sweep:
                self._sweep_at = self._clock() + FULL_SWEEP_S
                todo = set(self._known)
            else:
                todo = self._dirty[k] | self._again[k]
            self._dirty[k].clear()
            self._again[k].clear()
            self.examined += len(todo)
            self.examined_last = len(todo)
        runs = self._runs(todo)
        with self._lock:  # tablets looked at that are no candidates: start again
            for t in todo:
                if t not in runs:
                    self._seen.pop(t.tablet_id, None)
        for t in todo:
            if t.status in (TabletStatus.SHUTDOWN, TabletStatus.FAILED):
                self._forget(t)
        return sorted(runs, key=lambda t: (-runs[t], t.tablet_id))

    def _again_next(self, t: Tablet, small: bool) -> None:
        with self._lock:
            if t in self._known:
                self._again[int(small)].add(t)

    def _idle(self, t: Tablet) -> bool:
        """Whether `t` has applied no write and its blocks have stayed as they are for
        `overlap_idle_s` (as seen by this scheduler's rounds)."""
        names = (tuple(b.name for b in t.blocks), t.applied_index)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(t.tablet_id)
            if seen is None or seen[0] != names:
                self._seen[t.tablet_id] = (names, now)
                return self.opts.overlap_idle_s <= 0
            return now - seen[1] >= self.opts.overlap_idle_s

    def overlap_pick(self, t: Tablet) -> Callable[[list[list[BlockIndex]]], int | None]:
        """The overlap term's `pick` for `t.compaction_plan` (module doc)."""
        data_dir = t.fs.data_dir(t.tablet_id)
        o = self.opts

        def pick(runs: list[list[BlockIndex]]) -> int | None:
            return overlap_start(
                runs,
                height_min=o.overlap_height,
                ratio=o.overlap_ratio,
                runs_max=o.run_blocks_max,
                bytes_max=o.run_bytes_max,
                run_bytes=lambda r: _block_bytes(data_dir, [b.name for b in r]),
            )

        return pick

    def height(self, t: Tablet) -> int:
        """`t`'s height now: the most runs whose key ranges cover one key."""
        return height(run_ranges(runs_of(list(t.blocks))))

    def _wait_budget(self, small: bool = False) -> bool:
        """Wait until the budget (the small threads' own with `small`) allows the next
        compaction; False when stopped meanwhile."""
        with self._lock:
            wait = self._next_at[int(small)] - self._clock()
        if wait > 0:
            t0 = self._clock()
            if self._stop.wait(wait):
                return False
            with self._lock:
                self.throttled_s += self._clock() - t0
        return True

    def run_once(self, *, small_only: bool = False) -> int:
        """At most one compaction per candidate tablet (with `small_only`, only those of
        at most `small_rows_max` x the flush threshold rows) among the tablets changed
        since the last round (module doc); returns how many ran."""
        ran = 0
        todo = self._round_candidates(small_only)
        for t in todo:
            if self._stop.is_set():
                break
            rows_max = None
            if small_only:
                rows_max = self.opts.small_rows_max * t.opts.flush_rows_threshold
                if not t.compaction_plan(tiered=True, rows_max=rows_max):
                    continue
            if not self._wait_budget(small_only):
                break
            outcome = self._compact(t, rows_max, small_only)
            if outcome == _RAN:
                ran += 1
            if outcome != _NONE:  # ran (more may follow), waited on, or given up
                self._again_next(t, small_only)
        return ran

    def planned_runs(self, t: Tablet) -> list[list[str]]:
        """The runs (their blocks) `t.compact(tiered=True)` would merge now ([] when none)."""
        return [[b.name for b in r] for r in t.compaction_plan(tiered=True)]

    def planned_run(self, t: Tablet) -> list[str]:
        """The blocks `t.compact(tiered=True)` would merge now ([] when none)."""
        return [n for r in self.planned_runs(t) for n in r]

    def compact(self, t: Tablet, rows_max: int | None = None, small: bool = False) -> bool:
        """One tiered compaction of `t` if it merges at most K runs and B bytes (0: any)
        (and `rows_max` rows), counted and charged to the budget."""
        return self._compact(t, rows_max, small) == _RAN

    def _compact(self, t: Tablet, rows_max: int | None, small: bool) -> str:
        """`compact`, and why not: _NONE (nothing to do while its blocks stay as they
        are), _WAIT (the overlap term waits for it to stay unchanged), _RETRY (given up:
        a copy session, a shutdown, a failure)."""
        data_dir = t.fs.data_dir(t.tablet_id)
        plan = t.compaction_plan(tiered=True, rows_max=rows_max)
        reason, pick = "tiered", None
        if not plan and rows_max is None and self.opts.overlap_height > 0:
            if not self._idle(t):
                return _WAIT
            pick = self.overlap_pick(t)
            plan = t.compaction_plan(tiered=True, pick=pick)
            reason = "overlap"
        if not plan:
            return _NONE
        runs_max = None
        if pick is None and len(plan) > self.opts.run_blocks_max:
            # More runs of a class than K (flushes faster than merges: 350 runs 14 minutes
            # into a 50M-row load, when such a plan was left alone like one over B bytes,
            # and every later plan was longer still): the oldest K of them, now, listed
            # where they were. Each such merge leaves K - 1 runs fewer, so the pile goes
            # down, and the runs left, newer, stay smaller than its output (the newest K,
            # before, left a big run newest and small ones behind it that no suffix
            # gathered: design/storage.md, "Runs stuck behind a newer big run").
            runs_max = self.opts.run_blocks_max
            plan = t.compaction_plan(tiered=True, rows_max=rows_max, runs_max=runs_max)
            if not plan:
                return _NONE
        runs = [[b.name for b in r] for r in plan]
        rows = sum(b.num_rows for r in plan for b in r)
        run = [n for r in runs for n in r]
        sizes = {n: _block_bytes(data_dir, [n]) for n in run}  # one stat per block
        run_bytes = sum(sizes.values())
        over_bytes = self.opts.run_bytes_max and run_bytes > self.opts.run_bytes_max
        if len(runs) > self.opts.run_blocks_max or over_bytes:
            with self._lock:
                known = self._over.get(t.tablet_id) == tuple(run)
                self._over[t.tablet_id] = tuple(run)
                if not known:
                    self.deferred += 1
            if not known:
                log.info(
                    "tablet %s: compaction of %d runs (%d bytes) left alone: over the "
                    "bound of %d runs and %d bytes merged at once",
                    t.tablet_id,
                    len(runs),
                    run_bytes,
                    self.opts.run_blocks_max,
                    self.opts.run_bytes_max,
                )
            return _NONE
        with self._lock:
            self._over.pop(t.tablet_id, None)
        if self._space is not None:
            free, reserved = self._space()
            if free - run_bytes < min(reserved // 2, COMPACTION_FREE_MARGIN_MAX):
                # Compactions go on past the reserve (they free space), but a merge writes
                # up to its inputs' size before it frees them: it waits until that leaves
                # half the reserve free, at most COMPACTION_FREE_MARGIN_MAX (a tablet of
                # many small runs took a 24 MiB reserve down to 7 MiB free in
                # tests/tservers/test_disk_reserve.py).
                with self._lock:
                    self.waited_for_space += 1
                return _WAIT
        started = self._clock()
        report: list = []
        small_rows = self.opts.small_rows_max * t.opts.flush_rows_threshold
        big = rows_max is None and rows > small_rows
        if big:
            self._big.set()  # the small threads merge newer runs meanwhile
        try:
            done = t.compact(
                tiered=True, rows_max=rows_max, report=report, pick=pick, runs_max=runs_max
            )
        except Exception as e:  # the tablet keeps serving from its old blocks
            with self._lock:
                self.failures += 1
            log.exception("tablet %s: compaction failed: %s", t.tablet_id, e)
            return _RETRY
        finally:
            if big:
                self._big.clear()
        if not done:
            return _RETRY
        ((merged, new),) = report
        written = _block_bytes(data_dir, new)
        log.info(
            "tablet %s: %s compaction of %d runs (%d rows) into %d blocks, %d bytes%s",
            t.tablet_id,
            reason,
            len(runs),
            rows,
            len(new),
            written,
            f" (height {self.height(t)} now)" if reason == "overlap" else "",
        )
        with self._lock:
            self.compactions += 1
            self.reasons[reason] += 1
            if reason == "overlap" and t.tablet_id in self._seen:
                # Its own output does not restart the idle wait.
                self._seen[t.tablet_id] = (
                    (tuple(b.name for b in t.blocks), t.applied_index),
                    self._seen[t.tablet_id][1],
                )
            self.bytes_written += written
            # A block flushed between the plan and the compaction may be in the run.
            self.bytes_read += sum(sizes.get(n, 0) for n in merged)
            if self.opts.rate_bytes_s:
                at = max(self._next_at[int(small)], started) + written / self.opts.rate_bytes_s
                self._next_at[int(small)] = at
        return _RAN
