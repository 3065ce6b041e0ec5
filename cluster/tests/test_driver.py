"""The driver's propagation bookkeeping (cluster.driver): the client's answer waits for the reply
policy's number of members; a member leaving the view stops being waited for; a lost link alone
does not settle anything (the member is suspected and leaves the view, or answers later); a member's
refusal reaches the client with its reply code; a propagation unanswered for PROPAGATION_TIMEOUT
gets 541. Source: Qpid ClusteringHA proposal "Outline" (answer the client after n replies)."""

from __future__ import annotations

import types

from pamqp import commands as cmd

from cluster import driver as driver_module
from cluster.actions import ViewInstalled
from cluster.driver import ClusterDriver, reply_quorum
from cluster.membership import Node


class Links:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, node, address, method, on_reply=None):
        self.sent.append((node, method, on_reply))

    def close(self, node):
        pass

    def can_send(self, node):
        return True

    def connect(self, node, address):
        pass

    def send_raw(self, node, data):
        pass

    def send_batch(self, node, batch):
        pass


def _driver(policy="all"):
    now = [100.0]
    node = Node("a", "h:1")
    node.members = (("a", "h:1"), ("b", "h:2"), ("c", "h:3"))
    broker = types.SimpleNamespace(run_dispatch=lambda: None, cluster_properties={},
                                   accepting_clients=True)
    links = Links()
    d = ClusterDriver(node, broker, links, lambda shared: [], lambda: now[0], policy)
    return d, links, now


def _reply(links, node, error=None):
    for name, _method, cb in links.sent:
        if name == node and cb is not None:
            cb(error)


def test_answer_waits_for_all_then_a_member_leaving_settles_it():
    d, links, _ = _driver()
    done: list = []
    d.propagate("/", cmd.Queue.Declare(queue="q"), done.append)
    assert {n for n, _m, _cb in links.sent} == {"b", "c"}
    _reply(links, "b")
    _reply(links, "c", (320, "CONNECTION_FORCED - link lost"))
    assert done == []  # a lost link alone settles nothing
    d._do_ViewInstalled(ViewInstalled(2 << 16, (("a", "h:1"), ("b", "h:2")), (), ("c",)))
    assert done == [None]


def test_a_members_refusal_reaches_the_client():
    d, links, _ = _driver()
    done: list = []
    d.propagate("/", cmd.Exchange.Declare(exchange="x"), done.append)
    _reply(links, "b", (406, "PRECONDITION_FAILED - inequivalent arg 'type'"))
    assert done == [(406, "PRECONDITION_FAILED - inequivalent arg 'type'")]


def test_unanswered_propagation_times_out_with_541():
    d, links, now = _driver()
    done: list = []
    d.propagate("/", cmd.Queue.Declare(queue="q"), done.append)
    now[0] += driver_module.PROPAGATION_TIMEOUT + 1
    d.tick()
    assert len(done) == 1 and done[0][0] == 541


def test_policy_none_answers_at_once_and_majority_needs_half():
    d, links, _ = _driver("none")
    done: list = []
    d.propagate("/", cmd.Queue.Declare(queue="q"), done.append)
    assert done == [None] and len(links.sent) == 2
    assert reply_quorum("majority", 2) == 1  # 2 of 3 members, counting us
    assert reply_quorum("majority", 4) == 2  # 3 of 5
    assert reply_quorum("all", 4) == 4 and reply_quorum("7", 4) == 4


def test_the_published_view_is_its_voters_of_the_metadata_configuration():
    """Connection.Start's cluster_members / cluster_member_names (what cluster-status, the API
    and clients see) list a view member only once ``in_configuration`` admits it (the metadata
    log's committed configuration); this member always lists itself; nothing is published
    while it is in no view."""
    d, _links, _ = _driver()
    d.node.view = 7
    voters = {"a", "b"}
    d.in_configuration = lambda name: name in voters
    d.publish_view()
    props = d.broker.cluster_properties
    assert props["cluster_member_names"] == ["a", "b"]
    assert props["cluster_members"] == ["h:1", "h:2"] and props["cluster_view"] == 7
    voters.add("c")   # its configuration change committed
    d.publish_view()
    assert props["cluster_member_names"] == ["a", "b", "c"]
    d.node.members = ()
    d.publish_view()
    assert props["cluster_member_names"] == ["a", "b", "c"]
