"""Behaviour tests for queues.queue.Queue: publish and dispatch, Basic.Get, priorities, single
active consumer and re-entrant calls from inside deliver.

Split out of test_queue.py (settlement is in test_queue_settlement.py, TTL and length limits in
test_queue_limits.py). Expected behaviour: RabbitMQ classic queues (guides: Consumers, Consumer
Prefetch, Priority Queue Support).
"""

from __future__ import annotations

import pytest

from queues import PublishResult, UnknownEntry
from queues.tests.fakes import FakeConsumer, msg
from queues.tests.queue_factory import bodies, make

# --- publish and dispatch ------------------------------------------------------------------

def test_publish_without_consumer_enqueues():
    q = make()
    assert q.publish(msg(b"abc")) is PublishResult.ROUTED
    assert q.publish(msg(b"de")) is PublishResult.ROUTED
    assert (q.message_count, q.message_bytes, q.unacked_count) == (2, 5, 0)
    assert bodies(q.ready_entries()) == [b"abc", b"de"]
    assert [e.seq for e in q.ready_entries()] == [0, 1]


def test_publish_delivers_synchronously_to_ready_consumer():
    q = make()
    c = FakeConsumer("c")
    q.add_consumer(c)
    q.publish(msg(b"1"))
    assert c.bodies() == [b"1"]
    assert (q.message_count, q.message_bytes, q.unacked_count) == (0, 0, 1)
    assert c.delivered[0].delivery_count == 1 and not c.delivered[0].redelivered


def test_no_ack_delivery_is_forgotten():
    q = make()
    c = FakeConsumer("c", no_ack=True)
    q.add_consumer(c)
    q.publish(msg())
    assert (q.message_count, q.unacked_count) == (0, 0)
    with pytest.raises(UnknownEntry):
        q.ack(c.delivered[0])


def test_add_consumer_dispatches_backlog():
    q = make()
    for i in range(3):
        q.publish(msg(str(i)))
    c = FakeConsumer("c")
    q.add_consumer(c)
    assert c.bodies() == [b"0", b"1", b"2"]
    assert q.message_count == 0 and q.unacked_count == 3
    assert q.consumer_count == 1 and q.consumers() == (c,) and q.had_consumers


def test_prefetch_respected_and_dispatch_after_ack():
    q = make()
    c = FakeConsumer("c", prefetch=2)
    q.add_consumer(c)
    for i in range(5):
        q.publish(msg(str(i)))
    assert c.bodies() == [b"0", b"1"] and q.message_count == 3
    q.ack(c.take(c.delivered[0]))
    assert q.dispatch() == 1
    assert c.bodies() == [b"0", b"1", b"2"]
    assert q.dispatch() == 0
    assert c.max_unacked_seen == 2


def test_round_robin_between_consumers():
    q = make()
    a, b = FakeConsumer("a"), FakeConsumer("b")
    q.add_consumer(a)
    q.add_consumer(b)
    for i in range(4):
        q.publish(msg(str(i)))
    assert a.bodies() == [b"0", b"2"] and b.bodies() == [b"1", b"3"]


def test_blocked_consumer_skipped_without_losing_turn():
    q = make()
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    for x in (a, b, c):
        q.add_consumer(x)
    a.blocked = True
    q.publish(msg(b"1"))
    q.publish(msg(b"2"))
    a.blocked = False
    q.publish(msg(b"3"))
    assert (a.bodies(), b.bodies(), c.bodies()) == ([b"3"], [b"1"], [b"2"])


def test_consumer_priority():
    q = make()
    lo, hi = FakeConsumer("lo"), FakeConsumer("hi", priority=10, prefetch=2)
    q.add_consumer(lo)
    q.add_consumer(hi)
    for i in range(4):
        q.publish(msg(str(i)))
    assert hi.bodies() == [b"0", b"1"] and lo.bodies() == [b"2", b"3"]


def test_dispatch_returns_zero_without_consumers_or_messages():
    q = make()
    assert q.dispatch() == 0
    q.publish(msg())
    assert q.dispatch() == 0
    c = FakeConsumer("c")
    c.blocked = True
    q.add_consumer(c)
    assert q.dispatch() == 0
    c.blocked = False
    assert q.dispatch() == 1


# --- Basic.Get ------------------------------------------------------------------------------

def test_get():
    q = make()
    assert q.get(no_ack=False) is None
    q.publish(msg(b"a"))
    q.publish(msg(b"b"))
    e = q.get(no_ack=False)
    assert e.message.body == b"a" and e.delivery_count == 1
    assert (q.message_count, q.unacked_count) == (1, 1)
    e2 = q.get(no_ack=True)
    assert e2.message.body == b"b"
    assert (q.message_count, q.unacked_count, q.message_bytes) == (0, 1, 0)
    q.requeue(e)
    e3 = q.get(no_ack=True)
    assert e3 is e and e.redelivered and e.delivery_count == 2


# --- priorities -----------------------------------------------------------------------------

def test_priority_queue_orders_and_caps():
    q = make({"x-max-priority": 5})
    for body, p in [(b"p0", None), (b"p3", 3), (b"p9", 9), (b"p5", 5), (b"p3b", 3)]:
        q.publish(msg(body, priority=p) if p is not None else msg(body))
    entries = q.ready_entries()
    assert bodies(entries) == [b"p9", b"p5", b"p3", b"p3b", b"p0"]
    assert [e.priority for e in entries] == [5, 5, 3, 3, 0]
    c = FakeConsumer("c")
    q.add_consumer(c)
    assert c.bodies() == [b"p9", b"p5", b"p3", b"p3b", b"p0"]


def test_priority_ignored_without_max_priority():
    q = make()
    q.publish(msg(b"a", priority=1))
    q.publish(msg(b"b", priority=9))
    assert bodies(q.ready_entries()) == [b"a", b"b"]


def test_priority_requeue_keeps_place_within_priority():
    q = make({"x-max-priority": 10})
    for body, p in [(b"h1", 7), (b"h2", 7), (b"l1", 1)]:
        q.publish(msg(body, priority=p))
    h1 = q.get(no_ack=False)
    q.publish(msg(b"h3", priority=7))
    q.requeue(h1)
    assert bodies(q.ready_entries()) == [b"h1", b"h2", b"h3", b"l1"]


# --- single active consumer -----------------------------------------------------------------

def test_single_active_consumer():
    q = make({"x-single-active-consumer": True})
    a, b = FakeConsumer("a", prefetch=1), FakeConsumer("b")
    q.add_consumer(a)
    q.add_consumer(b)
    assert q.active_consumer is a
    for i in range(3):
        q.publish(msg(str(i)))
    assert a.bodies() == [b"0"] and b.bodies() == [] and q.message_count == 2
    q.remove_consumer(a)
    assert q.active_consumer is b
    assert b.bodies() == [b"1", b"2"]  # dispatch continues with the new active consumer
    q.requeue(a.take(a.delivered[0]))  # the core requeues a's unacked
    assert b.bodies() == [b"1", b"2", b"0"]


def test_remove_consumer():
    q = make()
    a = FakeConsumer("a")
    q.add_consumer(a)
    with pytest.raises(ValueError):
        q.add_consumer(a)
    assert q.remove_consumer(a) is True
    assert q.remove_consumer(a) is False
    assert q.consumer_count == 0 and q.had_consumers


# --- re-entrancy ----------------------------------------------------------------------------

class AckingConsumer(FakeConsumer):
    """Acks from inside deliver (what an auto-ack-like core path might do)."""

    def deliver(self, queue, entry):
        super().deliver(queue, entry)
        self.unacked.remove(entry)
        queue.ack(entry)


def test_ack_from_inside_deliver():
    q = make()
    c = AckingConsumer("c", prefetch=1)
    for i in range(3):
        q.publish(msg(str(i)))
    q.add_consumer(c)
    assert c.bodies() == [b"0", b"1", b"2"] and q.unacked_count == 0


class RepublishingConsumer(FakeConsumer):
    """Publishes a follow-up message to the same queue from inside deliver."""

    def deliver(self, queue, entry):
        super().deliver(queue, entry)
        if entry.message.body.startswith(b"first"):
            queue.publish(msg(b"follow-up"))


def test_publish_from_inside_deliver_keeps_order():
    q = make()
    c = RepublishingConsumer("c", no_ack=True)
    q.add_consumer(c)
    q.publish(msg(b"first"))
    assert c.bodies() == [b"first", b"follow-up"]
    q.publish(msg(b"first-again"))
    q.publish(msg(b"last"))
    assert c.bodies() == [b"first", b"follow-up", b"first-again", b"follow-up", b"last"]
    assert q.message_count == 0
