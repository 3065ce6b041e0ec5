"""Suspicions (``cluster.suspicion``): retry of a suspicion, the takeover candidate, passing over
a candidate that does nothing. Source: Qpid ClusteringHA proposal, "Failure Analysis"."""

from cluster.suspicion import Suspicions


def test_a_suspicion_is_acted_on_again_only_after_retry_unless_forwarded():
    s = Suspicions()
    assert s.act_on("n3", 10.0, 1.0, False)
    assert not s.act_on("n3", 10.5, 1.0, False)
    assert s.act_on("n3", 10.5, 1.0, True)     # another member forwarded it
    assert s.act_on("n3", 11.6, 1.0, False)


def test_the_candidate_is_the_first_after_the_leader_not_suspected_nor_passed_over():
    s = Suspicions()
    names = ["n1", "n2", "n3", "n4"]
    assert s.candidate(names, "n4") == "n2"
    s.act_on("n2", 0.0, 1.0, False)
    assert s.candidate(names, "n4") == "n3"
    s.delegated["n3"] = 0.0
    assert not s.pass_over_idle(0.5, 1.0)        # not idle for retry yet
    assert s.pass_over_idle(1.0, 1.0)
    assert s.bypassed == {"n3"} and not s.delegated
    assert s.candidate(names, "n4") == "n4"      # us: we take over
    s.leader_alive("n1")
    assert s.bypassed == set() and not s.want_takeover and "n2" in s.since
