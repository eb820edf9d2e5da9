"""`coordinator log --follow` against a real local cluster, as a user runs it: over a window
of lease renewals, nothing about them is printed without `--renewals` (neither the renewals
nor the "gone" ranges each leaves behind once the next invalidates it), and with the flag
they are there."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading

import pytest

from tests.cli.helpers import COMMAND_TIMEOUT_S, env_with, kill_group, run, spawn, wait_for

pytestmark = pytest.mark.integration

RENEWAL_LINES_MIN = 15  # the window: this many renewal lines seen by the --renewals follower
WINDOW_TIMEOUT_S = 120.0  # renewals come every lease timeout / 5 (0.3 s here)
RENEWAL = re.compile(r" renewal epoch=| gone ")
EPOCH = re.compile(r" renewal epoch=(\d+)")


class _Lines:
    """A process's stdout lines and its stderr, read by two threads as they come. These
    threads are the only readers of the pipes: `interrupt` (tests/cli/helpers.py) calls
    communicate(), which would read stdout too and take whatever the process printed last
    (the count of what it hid, said at Ctrl-C) away from `lines`."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _read_err(self) -> None:
        self._err.append(self.proc.stderr.read())

    def interrupt(self) -> str:
        """Ctrl-C (SIGINT to the process group); once it has ended and both pipes are read
        to their end, its stderr."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            raise AssertionError(f"no exit within {COMMAND_TIMEOUT_S}s of SIGINT") from None
        for t in self._threads:
            t.join(30)
            assert not t.is_alive(), "a pipe still open 30 s after the process ended"
        return "".join(self._err)


def test_follow_hides_renewals_and_their_gone_ranges_unless_asked(tmp_path):
    env = env_with(tmp_path / "clusters.toml")
    root = tmp_path / "cluster"
    up = run("coordinator", "local-cluster", "up", "--dir", str(root), "--coordinators", "1",
             "--tservers", "0", "--insecure", env=env)  # fmt: skip
    assert up.returncode == 0, up.stderr
    quiet = loud = None
    try:
        quiet = spawn("coordinator", "log", "--cluster", "local", "--follow", env=env)
        loud = spawn("coordinator", "log", "--cluster", "local", "--follow", "--renewals",
                     env=env)  # fmt: skip
        quiet_out, loud_out = _Lines(quiet), _Lines(loud)
        # The window: the same renewals pass under both followers.
        wait_for(
            lambda: (
                sum(1 for ln in loud_out.lines if RENEWAL.search(ln)) >= RENEWAL_LINES_MIN
                or quiet.poll() is not None
                or loud.poll() is not None
            ),
            WINDOW_TIMEOUT_S,
            f"{RENEWAL_LINES_MIN} renewal lines from --follow --renewals",
        )
        assert quiet.poll() is None and loud.poll() is None
        quiet_err = quiet_out.interrupt()
        loud_err = loud_out.interrupt()
    finally:
        for proc in (quiet, loud):
            if proc is not None:
                kill_group(proc)
        run("coordinator", "local-cluster", "down", "--dir", str(root), env=env)
    assert quiet.returncode == 130 and loud.returncode == 130, (quiet_err, loud_err)
    assert "Traceback" not in quiet_err + loud_err
    # At most one line per epoch: its takeover, or (the takeover already gone when the
    # follower started) its first renewal; never a gone range.
    assert not [ln for ln in quiet_out.lines if " gone " in ln], quiet_out.lines
    renewal_epochs = [m.group(1) for ln in quiet_out.lines if (m := EPOCH.search(ln))]
    assert len(renewal_epochs) == len(set(renewal_epochs)), quiet_out.lines
    assert any(" epoch=" in ln for ln in quiet_out.lines), quiet_out.lines
    # What it hid, it says (the count lines).
    assert any("lease renewals hidden" in ln for ln in quiet_out.lines), quiet_out.lines
    assert sum(1 for ln in loud_out.lines if RENEWAL.search(ln)) >= RENEWAL_LINES_MIN


def _lease(id_: int, epoch: int, takeover: bool, live: bool = True):
    from coordinator.records import LeaseInfo, RecordView, Status

    return RecordView(
        id=id_,
        status=Status.LIVE if live else Status.INVALIDATED,
        type="lease",
        size_bytes=48,
        lease=LeaseInfo("u", "127.0.0.1:1", epoch, takeover),
    )


def _gone(first: int, last: int, by: int):
    from coordinator.records import TYPE_GONE, RecordView, Status

    return RecordView(id=first, id_to=last, status=Status.INVALIDATED, type=TYPE_GONE,
                      size_bytes=0, invalidated_by=by)  # fmt: skip


def test_a_new_epoch_shows_even_when_its_takeover_is_already_gone():
    """The polls a follower sees across a leader change: renewals of the known epoch and
    the gone ranges they leave are hidden; a takeover is shown; and when the takeover was
    itself gone by the time of the poll, the first renewal of the new epoch is shown."""
    from optools.logtool import RenewalHider

    hider = RenewalHider()
    shown, hidden = hider.select([_lease(1, 1, True), _lease(2, 1, False)])
    assert [v.id for v in shown] == [1] and hidden == 1
    # A follower started after epoch 1's takeover was gone: its first renewal shows.
    late = RenewalHider()
    shown, hidden = late.select([_gone(1, 1, 2), _lease(2, 1, False), _lease(3, 1, False)])
    assert [v.id for v in shown] == [2] and hidden == 2
    # Renewals #3, #4 of epoch 1: #2 and #3 gone (each invalidated by the next).
    shown, hidden = hider.select([_gone(3, 3, 4), _lease(4, 1, False)])
    assert shown == [] and hidden == 2
    # A takeover (epoch 2) seen live: shown.
    shown, hidden = hider.select([_lease(5, 2, True), _lease(6, 2, False)])
    assert [v.id for v in shown] == [5] and hidden == 1
    # Epoch 3's takeover #8 already gone (invalidated by its renewal #9): #9 shows the change.
    shown, hidden = hider.select([_gone(7, 8, 0), _lease(9, 3, False)])
    assert [v.id for v in shown] == [9] and hidden == 1
    # A gone range invalidated by something that is not a lease record is shown.
    shown, hidden = hider.select([_gone(10, 10, 11)])
    assert [v.id for v in shown] == [10] and hidden == 0
