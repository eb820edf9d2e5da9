"""The repeats of a quiet leader's probe of a server heard from again (the driver's
`_probe_returned`, design/consensus.md "Restart without a storm") go only to a member that
has not answered since the last probe: at a kill -9 restart of 10,000 replicas, probes to
replicas that had already answered were a tenth of each survivor's busy samples. Plain
function calls on the pure core."""

from __future__ import annotations

from tests.consensus.test_quiescence import _quiet_cluster, _restarted
from tservers.consensus import AppendRequest


def _probes(core) -> list:
    return [m for m in core.ready().messages if isinstance(m, AppendRequest)]


def test_a_repeat_goes_only_to_a_member_that_has_not_answered():
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    c.down = {"c"}
    a.peer_down("c")
    b.peer_down("c")
    cc = _restarted(c, "c")
    # The first probe is lost (its replica still opening): the repeat goes out.
    assert a.probe("c")
    assert [m.recipient for m in _probes(a)] == ["c"]
    assert a.probe("c", repeat=True)
    sent = _probes(a)
    assert [m.recipient for m in sent] == ["c"]
    c.down = set()
    for m in sent:
        cc.step(m)
    c.settle()  # c answers: it matches, learns its leader and goes quiet
    assert cc.leader_uuid == "a" and a.quiesced
    # Answered: the repeats send nothing; a new first probe (a new return) does.
    assert not a.probe("c", repeat=True)
    assert not a.has_ready()
    assert a.probe("c")
    assert [m.recipient for m in _probes(a)] == ["c"]
