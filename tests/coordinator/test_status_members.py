"""`coordinator status` checks the coordinator log's replicas (pure: no cluster)."""

from __future__ import annotations

from optools.admin import ClusterCheck, NodeCheck, check_log_members

MEMBERS = ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"]


def node(i: int, role="FOLLOWER", applied=500, members=MEMBERS, ok=True) -> NodeCheck:
    return NodeCheck(
        f"127.0.0.1:800{i}",
        ok,
        role,
        3,
        applied,
        raft_address=f"127.0.0.1:900{i}",
        log_members=list(members),
    )


def check(*nodes: NodeCheck) -> ClusterCheck:
    result = ClusterCheck(leader="127.0.0.1:8001", nodes=list(nodes))
    check_log_members(result)
    return result


def test_three_members_all_answering_and_following_is_healthy():
    result = check(node(1, "LEADER"), node(2), node(3, applied=480))
    assert result.healthy, result.problems
    assert result.log_members == MEMBERS


def test_a_member_that_does_not_answer_or_is_not_given_is_a_problem():
    result = check(node(1, "LEADER"), node(2))
    assert not result.healthy
    assert result.problems == [
        "log member 127.0.0.1:9003 did not answer (down, or its node is not given in "
        "--coordinators)"
    ]


def test_a_member_that_does_not_follow_is_a_problem():
    result = check(node(1, "LEADER", applied=50_000), node(2, applied=49_990), node(3, applied=0))
    assert [p.split(" (")[0] for p in result.problems] == ["log member 127.0.0.1:9003"]
    assert "cannot join: wrong password or --peers?" in result.problems[0]
    result = check(node(1, "LEADER", applied=50_000), node(2), node(3))
    assert len(result.problems) == 2  # 49,500 entries behind, both


def test_a_node_outside_the_log_and_a_node_that_disagrees_are_problems():
    wrong = ["127.0.0.1:9003", "127.0.0.1:9999"]
    result = check(node(1, "LEADER"), node(2), node(3, members=wrong), node(4))
    assert sorted(result.problems) == sorted(
        [
            "coordinator 127.0.0.1:8003 sees log members ['127.0.0.1:9003', '127.0.0.1:9999'], "
            f"the leader {MEMBERS}",
            "coordinator 127.0.0.1:8004 (raft 127.0.0.1:9004) is not a member of the log: add "
            "it with `coordinator add-node`, or stop it",
        ]
    )


def test_two_members_survive_no_failure_and_one_is_a_development_group():
    two = MEMBERS[:2]
    result = check(node(1, "LEADER", members=two), node(2, members=two))
    assert result.problems == [
        "the coordinator log has 2 replicas: it survives no failure (add a third node)"
    ]
    one = MEMBERS[:1]
    assert check(node(1, "LEADER", members=one)).healthy


def test_an_external_logstore_has_no_members_to_check_here():
    result = check(node(1, "LEADER", members=[]), node(2, members=[]))
    assert result.healthy and result.log_members == []
