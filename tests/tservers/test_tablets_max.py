"""A tablet server at its tablet limit (issue 28): a create is refused with NO_SPACE, which
the coordinator does not retry (it skips the replica and places it elsewhere), not with
UNAVAILABLE, which it retried until its deadline: in the 10,000-table run every create past
the old limit of 10,000 replicas per server waited out its 5 s deadline and the client's
8 s one. Real files, an in-process manager with the limit lowered."""

from __future__ import annotations

import pytest

from rpc.errors import NoSpace
from tests.tservers.helpers import create, open_manager
from tservers.tablet import manager as manager_mod


def test_a_create_past_the_limit_is_no_space(tmp_path, monkeypatch):
    monkeypatch.setattr(manager_mod, "TABLETS_MAX", 3)
    m = open_manager(tmp_path / "fs")
    try:
        for i in range(3):
            create(m, f"t{i}")
        with pytest.raises(NoSpace, match=r"hosts 3 tablet replicas, its limit \(3\)"):
            create(m, "t3")
        assert "t3" not in m.replicas
        m.delete_tablet("t0")  # a tombstone still counts: it keeps voting
        with pytest.raises(NoSpace):
            create(m, "t3")
    finally:
        m.close()


def test_the_limit_is_above_the_target():
    assert manager_mod.TABLETS_MAX >= 2 * 10_000  # issue 28: 10,000 replicas per server
