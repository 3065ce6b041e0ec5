"""``MetadataMachine`` decides as one RabbitMQ broker does: outcomes per command kind, with
RabbitMQ's reply codes and texts, and the conflicts of issue 23 played as two members' commands
committed in one order: every member that applies that order ends with the same definitions,
and the client whose command came second gets what one broker would have answered it."""

from __future__ import annotations

import itertools

import pytest

from cluster.metadata import codec
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import (
    Bound,
    Declared,
    Deleted,
    Refused,
    Stored,
    timeout_refusal,
)
from cluster.quorum import config as qconfig


class Member:
    """One member's machine, fed committed commands with increasing log indexes."""

    def __init__(self, members: tuple[str, ...] = ("n0", "n1", "n2")) -> None:
        self.machine = MetadataMachine()
        self.machine.configure(members)
        self.index = itertools.count(1)
        self.apply(m.AddVhost("/"))

    def apply(self, cmd: m.Command) -> object:
        return self.machine.apply_entry(next(self.index), codec.encode(cmd))

    @property
    def vhost(self):  # noqa: ANN201
        return self.machine.state.vhosts["/"]


def play(log: list[m.Command], members: int = 3) -> tuple[list[object], list[bytes]]:
    """Apply ``log`` (the committed order) on ``members`` members: the outcomes (the same on
    each, asserted) and each member's snapshot."""
    results = []
    for _ in range(members):
        node = Member()
        results.append(([node.apply(cmd) for cmd in log], node.machine.snapshot()))
    assert all(r[0] == results[0][0] for r in results)
    return results[0][0], [r[1] for r in results]


# ------------------------------------------------------------------ the conflicts of issue 23
def test_two_declares_with_different_max_length_second_gets_rabbitmqs_406() -> None:
    outcomes, snapshots = play([
        m.DeclareQueue("/", "orders", arguments={"x-max-length": 10}, connection="n0/1"),
        m.DeclareQueue("/", "orders", arguments={"x-max-length": 20}, connection="n1/1"),
    ])
    assert outcomes[0] == Declared("orders", True)
    assert outcomes[1] == Refused(406, "PRECONDITION_FAILED - inequivalent arg 'x-max-length' "
                                       "for queue 'orders' in vhost '/': received '20' but "
                                       "current is '10'")
    assert len(set(snapshots)) == 1
    node = Member()
    node.machine.restore(snapshots[0])
    assert node.vhost.queues["orders"].arguments == {"x-max-length": 10}


@pytest.mark.parametrize("delete_first", [False, True])
def test_declare_and_bind_racing_a_delete_give_one_outcome(delete_first: bool) -> None:
    declare = m.DeclareExchange("/", "events", "fanout")
    bind = m.Bind("/", "events", "q", connection="n0/1")
    delete = m.DeleteExchange("/", "events")
    log = [m.DeclareQueue("/", "q"), declare] + ([delete, bind] if delete_first
                                                  else [bind, delete])
    outcomes, snapshots = play(log)
    assert len(set(snapshots)) == 1
    node = Member()
    node.machine.restore(snapshots[0])
    assert node.vhost.routing.get_exchange("events") is None   # gone everywhere
    assert list(node.vhost.routing.bindings()) == []
    if delete_first:
        assert outcomes[3] == Refused(404, "NOT_FOUND - no exchange 'events' in vhost '/'")
    else:
        assert outcomes[2:] == [Bound(True), Deleted(True)]


def test_two_user_puts_last_committed_wins_everywhere() -> None:
    outcomes, snapshots = play([m.PutUser("svc", "hash-from-n0"), m.PutUser("svc", "hash-from-n1",
                                                                           tags=("monitoring",))])
    assert outcomes == [Stored(True), Stored(False)]
    assert len(set(snapshots)) == 1
    node = Member()
    node.machine.restore(snapshots[0])
    user = node.machine.state.users["svc"]
    assert (user.password_hash, user.tags) == ("hash-from-n1", ("monitoring",))


# ------------------------------------------------------------------ exchanges
def test_exchange_declare_rules() -> None:
    n = Member()
    assert n.apply(m.DeclareExchange("/", "x", "direct")) == Declared("x", True)
    assert n.apply(m.DeclareExchange("/", "x", "direct")) == Declared("x", False)
    assert n.apply(m.DeclareExchange("/", "x", "fanout")) == Refused(
        406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': "
             "received 'fanout' but current is 'direct'")
    assert n.apply(m.DeclareExchange("/", "x", "direct", durable=True)) == Refused(
        406, "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '/': "
             "received 'true' but current is 'false'")
    assert n.apply(m.DeclareExchange("/", "amq.mine", "direct")) == Refused(
        403, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'")
    assert n.apply(m.DeclareExchange("/", "amq.topic", "topic", durable=True)) == \
        Declared("amq.topic", False)
    assert n.apply(m.DeclareExchange("/", "", "direct")) == Refused(
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    assert n.apply(m.DeclareExchange("/", "x", "nonsense")) == Refused(
        503, "COMMAND_INVALID - unknown exchange type 'nonsense'", connection_level=True)
    assert n.apply(m.DeclareExchange("/", "y", arguments={"alternate-exchange": 5})).code == 406


def test_exchange_delete_rules() -> None:
    n = Member()
    assert n.apply(m.DeleteExchange("/", "never")) == Deleted(False)
    assert n.apply(m.DeleteExchange("/", "amq.direct")) == Refused(
        403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")
    n.apply(m.DeclareExchange("/", "x", "fanout"))
    n.apply(m.DeclareExchange("/", "ad", "fanout", auto_delete=True))
    n.apply(m.Bind("/", "x", "ad", m.EXCHANGE))
    assert n.apply(m.DeleteExchange("/", "x", if_unused=True)) == Refused(
        406, "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use")
    # the auto-delete destination loses nothing: only a source goes with its last binding
    assert n.apply(m.DeleteExchange("/", "x")) == Deleted(True)
    assert n.vhost.routing.get_exchange("ad") is not None


# ------------------------------------------------------------------ queues
def test_queue_declare_rules() -> None:
    n = Member()
    assert n.apply(m.DeclareQueue("/", "amq.q")) == Refused(
        403, "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'")
    assert n.apply(m.DeclareQueue("/", "amq.gen-abc")) == Declared("amq.gen-abc", True)
    assert n.apply(m.DeclareQueue("/", "q", arguments={"x-message-ttl": -1})) == Refused(
        406, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
             "{value_negative,-1}")
    n.apply(m.DeclareQueue("/", "q", durable=True))
    assert n.apply(m.DeclareQueue("/", "q")) == Refused(
        406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
             "received 'false' but current is 'true'")
    assert n.apply(m.DeclareQueue("/", "s", arguments={"x-queue-type": "stream"})) == Refused(
        406, "PRECONDITION_FAILED - invalid property 'non-durable' for queue 's' in vhost '/'")
    assert n.apply(m.DeclareQueue("/", "qq", True, arguments={
        "x-queue-type": "quorum", "x-max-priority": 5})) == Refused(
        406, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'qq' in vhost '/' "
             "of queue type rabbit_quorum_queue")


def test_exclusive_queue_belongs_to_its_connection() -> None:
    n = Member()
    own = m.DeclareQueue("/", "mine", exclusive=True, connection="n1#5/3", home="n1")
    assert n.apply(own) == Declared("mine", True)
    assert n.apply(own) == Declared("mine", False)
    locked = Refused(405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue "
                          "'mine' in vhost '/'. It could be originally declared on another "
                          "connection or the exclusive property value does not match that of "
                          "the original declaration.")
    assert n.apply(m.DeclareQueue("/", "mine", exclusive=True, connection="n0#1/1",
                                  home="n0")) == locked
    assert n.apply(m.Bind("/", "amq.direct", "mine", connection="n0#1/1")) == locked
    assert n.apply(m.DeleteQueue("/", "mine", connection="n0#1/1")) == locked
    assert n.vhost.queues["mine"].home == "n1"


def test_quorum_queue_gets_replicas_from_the_configuration_and_a_group_from_its_index() -> None:
    n = Member(("n0", "n1", "n2", "n3", "n4"))
    n.apply(m.DeclareQueue("/", "qq", True, arguments={"x-queue-type": "quorum"}))
    q = n.vhost.queues["qq"]
    members = qconfig.choose_members(("n0", "n1", "n2", "n3", "n4"), 3, "/", "qq")
    assert q.queue_type == "quorum" and q.replicas == members
    assert q.group == qconfig.group_id("/", "qq", members, 2)   # declared at log index 2
    # deleted and declared again later: a new group, so an old replica is never mixed in
    n.apply(m.DeleteQueue("/", "qq"))
    n.apply(m.DeclareQueue("/", "qq", True, arguments={"x-queue-type": "quorum"}))
    assert n.vhost.queues["qq"].group != q.group


def test_policy_applies_at_declare_and_to_existing_classic_queues() -> None:
    n = Member()
    n.apply(m.DeclareQueue("/", "q-old"))
    assert n.apply(m.SetPolicy("/", "limit", "^q-", {"max-length": 5})) == Stored(True)
    assert n.vhost.queues["q-old"].arguments["x-max-length"] == 5
    n.apply(m.DeclareQueue("/", "q-new", arguments={"x-max-length": 7}))   # the client's wins
    assert n.vhost.queues["q-new"].arguments["x-max-length"] == 7
    assert n.apply(m.DeclareQueue("/", "q-new", arguments={"x-max-length": 7})) == \
        Declared("q-new", False)   # what a policy added is not compared
    n.apply(m.SetPolicy("/", "mirror", "^m", {"ha-mode": "all"}, priority=1))
    n.apply(m.DeclareQueue("/", "m1", durable=True))
    assert n.vhost.queues["m1"].queue_type == "quorum"
    assert n.vhost.queues["m1"].replicas == ("n0", "n1", "n2")
    assert n.apply(m.ClearPolicy("/", "limit")) == Deleted(True)
    assert "x-max-length" not in n.vhost.queues["q-old"].arguments
    assert n.apply(m.SetPolicy("/", "bad", "(", {"max-length": 1})).code == 400
    assert n.apply(m.SetPolicy("nope", "p", ".*", {"max-length": 1})) == Refused(
        404, "NOT_FOUND - no vhost 'nope'")


# ------------------------------------------------------------------ bindings
def test_binding_rules() -> None:
    n = Member()
    n.apply(m.DeclareQueue("/", "q"))
    n.apply(m.DeclareExchange("/", "h", "headers"))
    assert n.apply(m.Bind("/", "x", "q")) == Refused(404, "NOT_FOUND - no exchange 'x' in "
                                                          "vhost '/'")
    assert n.apply(m.Bind("/", "amq.direct", "nope")) == Refused(
        404, "NOT_FOUND - no queue 'nope' in vhost '/'")
    assert n.apply(m.Bind("/", "", "q", routing_key="q")) == Refused(
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    assert n.apply(m.Bind("/", "h", "q", arguments={"x-match": "bad"})).code == 406
    assert n.apply(m.Bind("/", "h", "q", arguments={"x-match": "any", "a": 1})) == Bound(True)
    assert n.apply(m.Bind("/", "h", "q", arguments={"x-match": "any", "a": 1})) == Bound(False)
    # Unbind is idempotent: missing source, destination or binding are Ok
    assert n.apply(m.Unbind("/", "x", "q")) == Bound(False)
    assert n.apply(m.Unbind("/", "amq.direct", "nope")) == Bound(False)
    assert n.apply(m.Unbind("/", "h", "q", arguments={"x-match": "any", "a": 1})) == Bound(True)


def test_auto_delete_exchanges_go_with_their_last_binding() -> None:
    n = Member()
    n.apply(m.DeclareQueue("/", "q"))
    n.apply(m.DeclareExchange("/", "ad", "fanout", auto_delete=True))
    n.apply(m.Bind("/", "ad", "q"))
    assert n.apply(m.Unbind("/", "ad", "q")) == Bound(True, ("ad",))
    n.apply(m.DeclareExchange("/", "ad", "fanout", auto_delete=True))
    n.apply(m.Bind("/", "ad", "q"))
    assert n.apply(m.DeleteQueue("/", "q")) == Deleted(True, ("ad",))


def test_member_gone_deletes_its_private_queues() -> None:
    n = Member()
    n.apply(m.DeclareExchange("/", "ad", "fanout", auto_delete=True))
    n.apply(m.DeclareQueue("/", "p1", exclusive=True, connection="n1#1/1", home="n1"))
    n.apply(m.DeclareQueue("/", "p0", exclusive=True, connection="n0#1/1", home="n0"))
    n.apply(m.DeclareQueue("/", "shared"))
    n.apply(m.Bind("/", "ad", "p1", connection="n1#1/1"))
    assert n.apply(m.MemberGone("n1")) == Deleted(True, ("ad",))
    assert sorted(n.vhost.queues) == ["p0", "shared"]
    assert n.apply(m.MemberGone("n1")) == Deleted(False)


# ------------------------------------------------------------------ vhosts, users, permissions
def test_a_missing_vhost_is_530_on_the_connection() -> None:
    n = Member()
    assert n.apply(m.DeclareQueue("gone", "q")) == Refused(
        530, "NOT_ALLOWED - vhost gone not found", connection_level=True)


def test_vhosts_users_and_permissions() -> None:
    n = Member()
    n.apply(m.PutUser("ann", "h"))
    assert n.apply(m.AddVhost("v", "desc", ("t",), creator="ann")) == Stored(True)
    assert n.machine.state.permissions[("ann", "v")].configure == ".*"
    assert n.apply(m.AddVhost("v", "other")) == Stored(False)
    assert n.machine.state.vhosts["v"].description == "other"
    assert n.apply(m.SetPermission("bob", "v")) == Refused(404, "NOT_FOUND - no user 'bob'")
    assert n.apply(m.SetPermission("ann", "w")) == Refused(404, "NOT_FOUND - no vhost 'w'")
    n.apply(m.SetPolicy("v", "p", ".*", {"max-length": 1}))
    n.apply(m.DeclareQueue("v", "q"))
    assert n.apply(m.DeleteVhost("v")) == Deleted(True)
    assert ("ann", "v") not in n.machine.state.permissions
    assert n.machine.state.policies.list("v") == []
    assert n.apply(m.DeleteVhost("v")) == Deleted(False)
    n.apply(m.SetPermission("ann", "/"))
    assert n.apply(m.DeleteUser("ann")) == Deleted(True)
    assert n.machine.state.permissions == {}
    assert n.apply(m.ClearPermission("ann", "/")) == Deleted(False)


# ------------------------------------------------------------------ snapshots, bad entries
def test_a_restored_member_goes_on_exactly_as_one_that_replayed() -> None:
    log = [m.DeclareExchange("/", "t", "topic"), m.DeclareQueue("/", "q"),
           m.Bind("/", "t", "q", routing_key="a.*"), m.Bind("/", "t", "q", routing_key="b"),
           m.DeclareExchange("/", "ad", "direct", auto_delete=True), m.Bind("/", "ad", "q")]
    tail = [m.Unbind("/", "ad", "q"), m.DeleteExchange("/", "t"), m.DeclareQueue("/", "q")]
    replayed, restored = Member(), Member()
    for cmd in log:
        replayed.apply(cmd)
        restored.apply(cmd)
    restored.machine.restore(restored.machine.snapshot())
    assert [replayed.apply(c) for c in tail] == [restored.apply(c) for c in tail]
    assert replayed.machine.snapshot() == restored.machine.snapshot()


def test_a_malformed_entry_is_refused_alike_and_changes_nothing() -> None:
    n = Member()
    before = n.machine.snapshot()
    out = n.machine.apply_entry(9, b"\x01\x63junk")
    assert isinstance(out, Refused) and out.code == 541 and out.connection_level
    assert n.machine.snapshot() == before


def test_minority_timeout_answers_as_rabbitmq_4() -> None:
    assert timeout_refusal(m.DeclareQueue("/", "q"), "rabbit@n1") == Refused(
        541, "INTERNAL_ERROR - Could not declare queue 'q' in vhost '/' on node 'rabbit@n1' "
             "because the metadata store operation timed out", connection_level=True)
    assert timeout_refusal(m.DeclareExchange("/", "x"), "n").text == (
        "INTERNAL_ERROR - failed to declare exchange 'x' in vhost '/' because the operation "
        "timed out")
    assert timeout_refusal(m.Unbind("/", "x", "q"), "n").text == \
        "INTERNAL_ERROR - Could not remove binding due to timeout"
