"""The acknowledged relay without sockets (issue 10): the sender's outbox (sent, settled, requeued
when the link goes) and the receiver's inbox and relay policies, on a broker with a fake clock.

The sink is a spy standing for the peer link (it records what would go over it); the receiving
side's peer link is an ordinary test connection whose channel 1 receives the Basic.Ack / Nack /
Reject the receiver sends back. Source: DESIGN.md §4a, Qpid ClusteringHA proposal.
"""

from __future__ import annotations

import pytest
from pamqp import commands as cmd

from amqp_broker.core import relay
from amqp_broker.core.broker import Broker
from amqp_broker.core.relay_inbox import receive_relayed
from amqp_broker.core.settings import RelayPolicy, parse_relay_policy
from queues.message import Message


class SpySink:
    """Stands for the peer links: records relays; ``up`` says whether the link takes more."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes, int, bool]] = []
        self.up = True

    def can_relay(self, node: str) -> bool:
        return self.up

    def relay(self, node: str, vhost: str, queue: str, message: Message, delivery_tag: int = 0,
              redelivered: bool = False) -> None:
        self.sent.append((node, queue, message.body, delivery_tag, redelivered))


def _sender(broker: Broker, client, messages: int, consumers: int = 1) -> SpySink:
    sink = SpySink()
    broker.relay_sink = sink
    client.declare_queue(1, "shared")
    relay.set_remote_consumers(broker.vhosts["/"], "shared", "B", consumers)
    for i in range(messages):
        client.publish(1, "", "shared", f"m{i}".encode())
    broker.run_dispatch()
    return sink


# ------------------------------------------------------------------------------- sender side
def test_relayed_messages_stay_unacked_until_the_receiver_acks(broker, client) -> None:
    sink = _sender(broker, client, 3)
    q = broker.vhosts["/"].queues["shared"]
    assert [s[2] for s in sink.sent] == [b"m0", b"m1", b"m2"]
    tags = [s[3] for s in sink.sent]
    assert len(set(tags)) == 3 and all(t > 0 for t in tags)
    assert q.unacked_count == 3 and q.message_count == 0
    assert relay.settle_relayed(broker, "B", tags[1], False, relay.ACK) == 1
    assert q.unacked_count == 2
    assert relay.settle_relayed(broker, "B", tags[2], True, relay.ACK) == 2  # multiple
    assert q.unacked_count == 0 and broker.relay_outbox.unsettled("B") == 0


def test_unknown_or_repeated_settles_are_ignored(broker, client) -> None:
    sink = _sender(broker, client, 1)
    tag = sink.sent[0][3]
    assert relay.settle_relayed(broker, "B", tag + 100, False, relay.ACK) == 0
    assert relay.settle_relayed(broker, "C", tag, False, relay.ACK) == 0
    assert relay.settle_relayed(broker, "B", tag, False, relay.ACK) == 1
    assert relay.settle_relayed(broker, "B", tag, False, relay.ACK) == 0


def test_link_loss_requeues_in_place_redelivered_and_deals_again(broker, client) -> None:
    sink = _sender(broker, client, 4)
    q = broker.vhosts["/"].queues["shared"]
    first = sink.sent[0][3]
    relay.settle_relayed(broker, "B", first, False, relay.ACK)  # m0 done
    sink.up = False
    sink.sent.clear()
    assert relay.requeue_node(broker, "B") == 3
    assert [e.message.body for e in q.ready_entries()] == [b"m1", b"m2", b"m3"]
    assert all(e.redelivered for e in q.ready_entries())
    sink.up = True
    broker.run_dispatch()  # the link is back: dealt again, under new tags, marked redelivered
    assert [(s[2], s[4]) for s in sink.sent] == [(b"m1", True), (b"m2", True), (b"m3", True)]
    assert min(s[3] for s in sink.sent) > first


def test_requeue_outcome_puts_it_back_and_reject_drops_it(broker, client) -> None:
    sink = _sender(broker, client, 2)
    q = broker.vhosts["/"].queues["shared"]
    sink.up = False
    (t0, t1) = (s[3] for s in sink.sent)
    relay.settle_relayed(broker, "B", t0, False, relay.REQUEUE)
    relay.settle_relayed(broker, "B", t1, False, relay.REJECT)
    assert [e.message.body for e in q.ready_entries()] == [b"m0"]
    assert q.unacked_count == 0


def test_credit_window_bounds_what_one_remote_consumer_holds(broker, client) -> None:
    sink = _sender(broker, client, relay.RELAY_WINDOW + 10)
    q = broker.vhosts["/"].queues["shared"]
    assert len(sink.sent) == relay.RELAY_WINDOW
    assert q.message_count == 10
    relay.settle_relayed(broker, "B", sink.sent[4][3], True, relay.ACK)  # five settled
    broker.run_dispatch()
    assert len(sink.sent) == relay.RELAY_WINDOW + 5


# ----------------------------------------------------------------------------- receiver side
def _receiver(make_client, policy: RelayPolicy | None = None):
    """Peer link = client ``link`` (its channel 1 gets the settles); consumer client ``app``."""
    link = make_client()
    app = make_client()
    app.declare_queue(1, "shared")
    broker = link.conn.broker
    if policy is not None:
        broker.relay_inbox.policy = policy
    return broker, link, app


def _relay(broker: Broker, link, tag: int, body: bytes, redelivered: bool = False) -> None:
    channel = link.conn.channels[1]
    msg = Message.build("", "shared", body, cmd.Basic.Properties())
    receive_relayed(broker.vhosts["/"], channel, "shared", msg, tag, redelivered)
    broker.run_dispatch()


def _settles(link) -> list[tuple[str, int, bool | None]]:
    out = []
    for _ch, m in link.methods():
        out.append((type(m).__name__, m.delivery_tag, getattr(m, "requeue", None)))
    return out


def test_receiver_acks_to_the_sender_when_its_consumer_acks(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    _relay(broker, link, 7, b"hello", redelivered=True)
    (msg,) = app.messages()
    assert msg.body == b"hello" and msg.method.redelivered
    assert _settles(link) == []  # not before the consumer settles
    app.send(1, cmd.Basic.Ack(msg.method.delivery_tag, False))
    assert _settles(link) == [("Ack", 7, None)]
    q = broker.vhosts["/"].queues["shared"]
    assert q.message_count == 0 and q.unacked_count == 0


def test_acks_of_one_batch_go_back_as_one_multiple_ack(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    for tag in (11, 12, 13):
        _relay(broker, link, tag, b"m%d" % tag)
    msgs = app.messages()
    app.send(1, cmd.Basic.Ack(msgs[-1].method.delivery_tag, True))  # the consumer acks all three
    ((_ch, ack),) = link.methods()
    assert (type(ack).__name__, ack.delivery_tag, ack.multiple) == ("Ack", 13, True)


def test_acks_are_not_coalesced_over_a_transfer_still_held(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    for tag in (21, 22, 23):
        _relay(broker, link, tag, b"x")
    first, second, third = app.messages()
    app.send(1, cmd.Basic.Ack(second.method.delivery_tag, False),
             cmd.Basic.Ack(third.method.delivery_tag, False))  # 21 still held by the consumer
    assert [(m.delivery_tag, m.multiple) for _ch, m in link.methods()] == [(22, False),
                                                                          (23, False)]
    app.send(1, cmd.Basic.Ack(first.method.delivery_tag, False))
    assert [(m.delivery_tag, m.multiple) for _ch, m in link.methods()] == [(21, True)]


def test_with_a_delayed_flush_acks_wait_for_it_or_for_a_full_batch(make_client) -> None:
    """With an I/O layer that flushes later (``on_acks_pending``), acks gather across batches of
    input: they go when it flushes, or at once when a link has ``ACK_BATCH`` of them."""
    from amqp_broker.core.relay_inbox import ACK_BATCH

    broker, link, app = _receiver(make_client)
    inbox = broker.relay_inbox
    asked: list[int] = []
    inbox.on_acks_pending = lambda: asked.append(1)
    app.consume(1, "shared", "c1", no_ack=True)  # settles each relay as it is delivered
    for tag in (1, 2, 3):
        _relay(broker, link, tag, b"x")
    assert len(app.messages()) == 3
    assert link.methods() == [] and asked == [1]  # asked once, nothing sent yet
    inbox.flush_acks()
    assert [(m.delivery_tag, m.multiple) for _ch, m in link.methods()] == [(3, True)]
    for tag in range(4, 4 + ACK_BATCH):
        channel = link.conn.channels[1]
        receive_relayed(broker.vhosts["/"], channel, "shared",
                        Message.build("", "shared", b"y", cmd.Basic.Properties()), tag, False)
    broker.run_dispatch()  # one batch of input with ACK_BATCH acks: they go without the flush
    got = [(m.delivery_tag, m.multiple) for _ch, m in link.methods()]
    assert got == [(3 + ACK_BATCH, True)]
    assert asked == [1]  # nothing left waiting: no flush asked for
    assert inbox.pending_acks == []


def test_gathered_acks_of_a_link_that_closed_meanwhile_are_dropped(make_client) -> None:
    """The sender requeued what we had not settled when the link's channel closed: a delayed
    flush then sends nothing on it and the broker goes on."""
    broker, link, app = _receiver(make_client)
    broker.relay_inbox.on_acks_pending = lambda: None
    app.consume(1, "shared", "c1", no_ack=True)
    _relay(broker, link, 5, b"x")
    link.send(1, cmd.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    assert [type(m).__name__ for _ch, m in link.methods()] == ["CloseOk"]
    broker.relay_inbox.flush_acks()
    assert link.methods() == [] and broker.relay_inbox.pending_acks == []
    assert len(app.messages()) == 1  # the consumer was served; the broker still serves it
    app.declare_queue(1, "after")


def test_tags_out_of_order_are_never_coalesced(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    _relay(broker, link, 35, b"x")
    _relay(broker, link, 31, b"y")  # not what a sender does; then each ack goes on its own
    msgs = app.messages()
    app.send(1, cmd.Basic.Ack(msgs[-1].method.delivery_tag, True))
    assert sorted((m.delivery_tag, m.multiple) for _ch, m in link.methods()) == [(31, False),
                                                                                (35, False)]


def test_receiver_passes_back_requeues_and_rejects(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    _relay(broker, link, 1, b"a")
    _relay(broker, link, 2, b"b")
    a, b = app.messages()
    app.send(1, cmd.Basic.Nack(a.method.delivery_tag, False, True))
    app.send(1, cmd.Basic.Reject(b.method.delivery_tag, False))
    assert _settles(link) == [("Nack", 1, True), ("Reject", 2, False)]
    assert broker.vhosts["/"].queues["shared"].message_count == 0  # never into our copy


def test_consumer_closing_with_relayed_deliveries_gives_them_back(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1")
    _relay(broker, link, 3, b"x")
    app.messages()
    app.send(1, cmd.Channel.Close(200, "bye", 0, 0))
    assert _settles(link) == [("Nack", 3, True)]


def test_no_ack_consumer_settles_at_once(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.consume(1, "shared", "c1", no_ack=True)
    _relay(broker, link, 9, b"x")
    assert [m.body for m in app.messages()] == [b"x"]
    assert _settles(link) == [("Ack", 9, None)]


def test_waits_for_credit_then_delivers_in_order(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.call(1, cmd.Basic.Qos(prefetch_count=1))
    app.consume(1, "shared", "c1")
    for tag in (1, 2, 3):
        _relay(broker, link, tag, f"m{tag}".encode())
    (first,) = app.messages()
    assert first.body == b"m1"
    app.send(1, cmd.Basic.Ack(first.method.delivery_tag, False))
    broker.run_dispatch()
    (second,) = app.messages()
    assert second.body == b"m2"
    assert _settles(link) == [("Ack", 1, None)]


def test_pass_on_gives_it_back_when_no_local_consumer(make_client) -> None:
    broker, link, _app = _receiver(make_client)
    _relay(broker, link, 5, b"orphan")
    assert _settles(link) == [("Nack", 5, True)]


def test_hold_keeps_it_for_a_new_consumer_within_the_time(make_client, clock) -> None:
    broker, link, app = _receiver(make_client, RelayPolicy("hold", 5.0))
    _relay(broker, link, 5, b"held")
    assert _settles(link) == []
    clock.advance(3)
    broker.tick()
    app.consume(1, "shared", "late")
    broker.run_dispatch()
    assert [m.body for m in app.messages()] == [b"held"]


def test_hold_passes_it_on_after_the_time(make_client, clock) -> None:
    broker, link, _app = _receiver(make_client, RelayPolicy("hold", 5.0))
    _relay(broker, link, 6, b"held")
    clock.advance(5.1)
    broker.tick()
    assert _settles(link) == [("Nack", 6, True)]


def test_drop_settles_it_as_done(make_client) -> None:
    broker, link, _app = _receiver(make_client, RelayPolicy("drop"))
    _relay(broker, link, 8, b"dropped")
    assert _settles(link) == [("Ack", 8, None)]


def test_consumer_leaving_with_messages_waiting_passes_them_on(make_client) -> None:
    broker, link, app = _receiver(make_client)
    app.call(1, cmd.Basic.Qos(prefetch_count=1))
    app.consume(1, "shared", "c1")
    _relay(broker, link, 1, b"a")
    _relay(broker, link, 2, b"b")  # waits: no credit
    app.messages()
    app.call(1, cmd.Basic.Cancel("c1"))
    broker.run_dispatch()
    assert ("Nack", 2, True) in _settles(link)


def test_a_relay_for_a_missing_queue_goes_back(make_client) -> None:
    broker, link, _app = _receiver(make_client)
    msg = Message.build("", "gone", b"x", cmd.Basic.Properties())
    receive_relayed(broker.vhosts["/"], link.conn.channels[1], "gone", msg, 4, False)
    assert _settles(link) == [("Nack", 4, True)]


@pytest.mark.parametrize("text,expected", [
    ("pass-on", RelayPolicy("pass-on")), ("drop", RelayPolicy("drop")),
    ("hold:2.5", RelayPolicy("hold", 2.5))])
def test_parse_relay_policy(text, expected) -> None:
    assert parse_relay_policy(text) == expected


@pytest.mark.parametrize("text", ["hold", "hold:0", "hold:x", "keep", ""])
def test_parse_relay_policy_refuses(text) -> None:
    with pytest.raises(ValueError):
        parse_relay_policy(text)
