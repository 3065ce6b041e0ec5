"""Cluster views committed in the metadata log (issue 23): the machine's compare-and-set rule
(``cluster.metadata.views``), its snapshot, and the membership node's side
(``cluster.committed_views``): a round's view is installed and announced only once the log
committed it; of two rounds from one view only the first committed counts.

The partition case on whole clusters is in ``test_membership_sim``
(``test_random_faults_views_committed_in_the_log``)."""

from __future__ import annotations

import itertools

from cluster import actions as a
from cluster.codec import Join, Membership
from cluster.membership import Node, Status
from cluster.metadata import codec, snapshot
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import Refused, Stored


def _view(base: int, view: int, *names: str) -> m.InstallView:
    return m.InstallView(base, view, names, tuple(f"{n}:5672" for n in names))


def test_two_views_from_one_base_only_the_first_committed_counts():
    machines = [MetadataMachine(), MetadataMachine()]
    index = itertools.count(1)
    log = [_view(0x10000, 0x20000, "n1", "n2"),      # the first proposal to commit
           _view(0x10000, 0x20001, "n2", "n3"),      # another round from the same view
           _view(0x20000, 0x30000, "n1", "n2", "n3")]
    outcomes = []
    for cmd in log:
        i = next(index)
        outcomes.append([mc.apply_entry(i, codec.encode(cmd)) for mc in machines])
    assert [type(o[0]) for o in outcomes] == [Stored, Refused, Stored]
    assert outcomes[1][0] == outcomes[1][1] and "0x10000" in outcomes[1][0].text
    for mc in machines:
        assert mc.state.view == 0x30000
        assert [n for n, _ in mc.state.view_members] == ["n1", "n2", "n3"]
    image = machines[0].snapshot()
    assert image == machines[1].snapshot() and image[0] == 3
    restored = MetadataMachine()
    restored.restore(image)
    assert restored.state.view_members == machines[0].state.view_members
    # a restored machine goes on with the same rule
    assert isinstance(restored.apply(9, _view(0x20000, 0x40000, "n1")), Refused)


def test_a_malformed_view_changes_nothing():
    mc = MetadataMachine()
    for bad in (m.InstallView(0, 0x20000, ("n1", "n2"), ("a:1",)),
                m.InstallView(0, 0x20000, (), ()),
                m.InstallView(0, 0x20000, ("n1", "n1"), ("a:1", "a:1"))):
        out = mc.apply(1, bad)
        assert isinstance(out, Refused) and out.code == 541
    assert mc.state.view == 0 and snapshot.encode(mc.state)[0] == 1


def test_a_round_installs_its_view_only_once_committed():
    """A leader's round for a joiner: ``ProposeView``, no install and no Membership until the
    log committed it; then the joiner is told and the view installed. A refusal installs
    nothing; the next round waits ``Timing.retry`` and the joiner's next Join."""
    node = Node("n1", "n1:5672", "c")
    node.commit_views = True
    node.bootstrap(0.0)
    base = node.view
    node.receive("n2", Join("n2", "n2:5672", "c", ""), 0.1)
    out = node.tick(0.2)
    proposals = [x for x in out if isinstance(x, a.ProposeView)]
    assert len(proposals) == 1 and proposals[0].base == base
    proposed = proposals[0]
    assert [n for n, _ in proposed.members] == ["n1", "n2"]
    assert node.view == base and not any(
        isinstance(x, a.Send) and isinstance(x.method, Membership) for x in out)
    assert not any(isinstance(x, a.ProposeView) for x in node.tick(0.5))   # one in flight
    refused = node.view_refused(proposed.view, proposed.members, 0.6)
    assert node.view == base and not any(isinstance(x, a.ViewInstalled) for x in refused)
    assert not any(isinstance(x, a.ProposeView) for x in node.tick(0.7))   # retry later
    node.receive("n2", Join("n2", "n2:5672", "c", ""), 1.9)   # the joiner asks again
    again = [x for x in node.tick(2.0) if isinstance(x, a.ProposeView)]
    assert len(again) == 1
    done = node.view_committed(again[0].view, again[0].members, 2.1)
    assert node.view == again[0].view and node.status is Status.MEMBER
    told = [x.to for x in done if isinstance(x, a.Send) and isinstance(x.method, Membership)]
    assert told == ["n2"]
    assert any(isinstance(x, a.ViewInstalled) for x in done)


def test_a_member_installs_a_committed_view_it_was_not_told_of():
    node = Node("n2", "n2:5672", "c")
    node.commit_views = True
    node.bootstrap(0.0)
    members = (("n1", "n1:5672"), ("n2", "n2:5672"))
    newer = node.view + 0x10000
    out = node.view_committed(newer, members, 1.0)
    assert node.view == newer and node.leader == "n1"
    assert any(isinstance(x, a.ViewInstalled) for x in out)
    assert not node.view_committed(newer - 1, members, 1.1) or node.view == newer


def test_a_view_whose_majority_died_shrinks_while_the_log_has_a_majority():
    """CI failure of stop 30 (``test_stream_processes``, add/delete_replica then two restarts):
    n2 restarts at once after a crash and n1 dies just after the leader's round dropped the
    restarted n2 (to re-admit it in the next view). The view n0, n1 has lost its majority (n0
    alone of two), but the metadata log's configuration (n0, n1, n2: n2 was back before anyone
    could remove it) still has one, n0 and the re-joining n2: the leader's round verifies that
    n1 is silent, the log commits the view without it and with the joiner, and both serve.
    With the view's majority rule of the vote rounds the leader waited forever and the joiner
    never served a client."""
    from .sim import Sim

    sim = Sim(["n0", "n1", "n2"], seed=7, committed_log=True)
    sim.form()
    sim.crash("n2")
    sim.restart("n2")
    leader = sim.nodes["n0"]
    assert sim.run_while(lambda: leader.names != ["n0", "n1"], sim.now + 20), sim.describe()
    sim.crash("n1")
    assert sim.config == {"n0", "n1", "n2"}
    assert sim.run_while(lambda: not sim.converged({"n0", "n2"}), sim.now + 30), sim.describe()
    views = {}
    for cmd in sim.log_views:   # one member list per view number, in the log's order
        assert views.setdefault(cmd.view, cmd.members) == cmd.members
