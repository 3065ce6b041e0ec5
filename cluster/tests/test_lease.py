"""The leader's quorum check (cluster/lease.py): a majority of answers renews the lease."""

from cluster.lease import CheckStep, LeaderCheck


def test_a_majority_of_answers_confirms_and_a_minority_fails_after_the_timeout():
    check = LeaderCheck(confirm_period=1.0, verify_timeout=0.5)
    assert check.tick(0.0, 5) is CheckStep.PING
    check.heard("n2")
    check.heard("n3")
    assert check.tick(0.2, 5) is CheckStep.NOTHING      # 3 of 5 so far, others may answer
    assert check.tick(0.6, 5) is CheckStep.CONFIRMED    # timeout: leader + 2 = majority
    assert check.tick(0.9, 5) is CheckStep.NOTHING      # next check due at 1.0
    assert check.tick(1.0, 5) is CheckStep.PING
    check.heard("n2")
    assert check.tick(1.6, 5) is CheckStep.FAILED       # leader + 1 of 5


def test_all_answers_end_the_check_at_once_and_a_view_of_one_needs_none():
    check = LeaderCheck(confirm_period=1.0, verify_timeout=0.5)
    assert check.tick(0.0, 3) is CheckStep.PING
    check.heard("n2")
    check.heard("n3")
    assert check.tick(0.01, 3) is CheckStep.CONFIRMED
    assert check.tick(0.5, 3) is CheckStep.NOTHING      # next check due at 1.0
    check.reset(5.0)
    assert check.tick(5.0, 1) is CheckStep.CONFIRMED
