"""Behaviour tests for queues.queue.Queue: publish/dispatch, settlement, TTL, limits, priorities,
single active consumer, purge/delete, dead-lettering and re-entrancy.

Expected behaviour: RabbitMQ classic queues (guides cited per test group).
"""

from __future__ import annotations

import datetime

import pytest

from queues import PublishResult, Queue, QueueDeleted, UnknownEntry, parse_arguments
from queues.dead_letter import is_death_cycle
from queues.tests.fakes import DeadLetters, FakeClock, FakeConsumer, msg


def make(args=None, *, name="q", clock=None, dead_letter=None, discards=None, **kw) -> Queue:
    on_discard = None if discards is None else (lambda e, r: discards.append((e.seq, r)))
    return Queue(name, parse_arguments(args), clock=clock or FakeClock(),
                 wall_clock=lambda: 1_700_000_000.0, dead_letter=dead_letter,
                 on_discard=on_discard, arguments=args, **kw)


def bodies(entries) -> list[bytes]:
    return [e.message.body for e in entries]


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


# --- settlement -----------------------------------------------------------------------------

def test_ack_unknown_and_double_ack():
    q = make()
    c = FakeConsumer("c")
    q.add_consumer(c)
    q.publish(msg())
    e = c.delivered[0]
    q.ack(e)
    assert q.unacked_count == 0
    with pytest.raises(UnknownEntry):
        q.ack(e)
    with pytest.raises(UnknownEntry):
        q.reject(e)
    with pytest.raises(UnknownEntry):
        q.requeue(e)
    other = make(name="other")
    other.publish(msg())
    foreign = other.get(no_ack=False)
    with pytest.raises(UnknownEntry):
        q.ack(foreign)


def test_requeue_returns_to_original_order():
    q = make()
    c = FakeConsumer("c", prefetch=3)
    q.add_consumer(c)
    for i in range(1, 6):
        q.publish(msg(str(i)))
    first = list(c.delivered)  # 1, 2, 3
    c.blocked = True
    for e in first:
        q.requeue(c.take(e))
    assert bodies(q.ready_entries()) == [b"1", b"2", b"3", b"4", b"5"]
    assert [e.redelivered for e in q.ready_entries()] == [True, True, True, False, False]
    c.blocked = False
    q.dispatch()
    assert c.bodies()[3:] == [b"1", b"2", b"3"]


def test_requeue_in_reverse_order_and_interleaved():
    q = make()
    for i in range(6):
        q.publish(msg(str(i)))
    got = [q.get(no_ack=False) for _ in range(4)]  # 0..3 unacked, 4, 5 ready
    q.requeue(got[3])
    q.requeue(got[1])
    q.requeue_many([got[2], got[0]])
    assert bodies(q.ready_entries()) == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert q.message_bytes == 6 and q.unacked_count == 0


def test_requeue_many_is_atomic_on_error():
    q = make()
    q.publish(msg(b"a"))
    q.publish(msg(b"b"))
    a = q.get(no_ack=False)
    b = q.get(no_ack=True)
    with pytest.raises(UnknownEntry):
        q.requeue_many([a, b])
    with pytest.raises(UnknownEntry):
        q.requeue_many([a, a])
    assert q.unacked_count == 1 and q.message_count == 0
    q.requeue_many([])
    q.requeue_many([a])
    assert q.message_count == 1


def test_reject_dead_letters_when_dlx():
    dls, discards = DeadLetters(), []
    q = make({"x-dead-letter-exchange": "dlx"}, dead_letter=dls, discards=discards)
    q.publish(msg(b"a", routing_key="rk"))
    e = q.get(no_ack=False)
    q.reject(e)
    assert q.unacked_count == 0 and q.message_count == 0
    (dead, exchange, keys), = dls.calls
    assert exchange == "dlx" and keys == ["rk"] and dead.exchange == "dlx"
    death = dead.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", "q", 1)
    assert death["time"] == datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC)
    assert discards == [(0, "rejected")]


def test_reject_without_dlx_drops():
    discards = []
    q = make(discards=discards)
    q.publish(msg())
    q.reject(q.get(no_ack=False))
    assert discards == [(0, "rejected")] and q.message_count == 0


def test_dlx_without_callback_drops():
    q = make({"x-dead-letter-exchange": "dlx"})
    q.publish(msg())
    q.reject(q.get(no_ack=False))
    assert q.unacked_count == 0


def test_dead_letter_routing_key_used():
    dls = DeadLetters()
    q = make({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking"},
             dead_letter=dls)
    q.publish(msg(routing_key="rk", headers={"CC": ["other"]}))
    q.reject(q.get(no_ack=False))
    (dead, exchange, keys), = dls.calls
    assert (exchange, keys, dead.routing_key) == ("", ["parking"], "parking")


# --- TTL ------------------------------------------------------------------------------------

def test_queue_ttl_expires_and_dead_letters():
    clock, dls = FakeClock(), DeadLetters()
    q = make({"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"}, clock=clock,
             dead_letter=dls)
    q.publish(msg(b"a"))
    clock.advance(50)
    q.publish(msg(b"b"))
    assert q.next_expiry() == clock.now + 50
    clock.advance(49)
    assert q.expire() == 0
    clock.advance(1)
    assert q.expire() == 1
    assert dls.reasons() == ["expired"] and q.message_count == 1 and q.message_bytes == 1
    clock.advance(50)
    assert q.expire() == 1 and q.message_count == 0 and q.next_expiry() is None


def test_expired_messages_not_delivered_on_dispatch_or_get():
    clock, discards = FakeClock(), []
    q = make({"x-message-ttl": 10}, clock=clock, discards=discards)
    q.publish(msg(b"old"))
    clock.advance(10)
    q.publish(msg(b"new"))  # publishing with a TTL also drops expired heads
    assert discards == [(0, "expired")] and q.message_count == 1
    clock.advance(10)
    c = FakeConsumer("c")
    q.add_consumer(c)
    assert c.bodies() == [] and discards[-1] == (1, "expired")
    q.publish(msg(b"x"))
    assert c.bodies() == [b"x"]
    q2 = make({"x-message-ttl": 10}, clock=clock)
    q2.publish(msg(b"old"))
    clock.advance(10)
    assert q2.get(no_ack=True) is None and q2.message_count == 0


def test_per_message_ttl_lower_of_both():
    clock = FakeClock()
    q = make({"x-message-ttl": 1000}, clock=clock)
    q.publish(msg(expiration="50"))
    q.publish(msg(expiration="5000"))
    q.publish(msg())
    assert [e.expires_at - clock.now for e in q.ready_entries()] == [50, 1000, 1000]
    q2 = make(clock=clock)
    q2.publish(msg(expiration="20"))
    q2.publish(msg())
    q2.publish(msg(expiration="bogus"))
    assert [e.expires_at for e in q2.ready_entries()] == [clock.now + 20, None, None]


def test_per_message_ttl_only_expires_at_head():
    clock, discards = FakeClock(), []
    q = make(clock=clock, discards=discards)
    q.publish(msg(b"long", expiration="1000"))
    q.publish(msg(b"short", expiration="10"))
    clock.advance(20)
    assert q.expire() == 0 and q.message_count == 2  # "short" is behind "long"
    assert q.next_expiry() == clock.now - 20 + 1000
    e = q.get(no_ack=True)
    assert e.message.body == b"long"
    assert q.expire() == 1 and discards == [(1, "expired")]


def test_ttl_zero_delivered_if_consumer_can_take_it_else_expires():
    dls = DeadLetters()
    q = make({"x-dead-letter-exchange": "dlx"}, dead_letter=dls)
    q.publish(msg(b"nobody", expiration="0"))
    assert q.message_count == 0 and dls.reasons() == ["expired"]
    c = FakeConsumer("c")
    q.add_consumer(c)
    q.publish(msg(b"taken", expiration="0"))
    assert c.bodies() == [b"taken"] and len(dls.calls) == 1
    q0 = make({"x-message-ttl": 0})
    q0.publish(msg())
    assert q0.message_count == 0


def test_requeued_message_keeps_its_expiry():
    clock, discards = FakeClock(), []
    q = make({"x-message-ttl": 100}, clock=clock, discards=discards)
    q.publish(msg())
    e = q.get(no_ack=False)
    clock.advance(100)
    q.requeue(e)
    assert q.message_count == 0 and discards == [(0, "expired")]


def test_expired_dead_letter_carries_original_expiration():
    clock, dls = FakeClock(), DeadLetters()
    q = make({"x-dead-letter-exchange": "dlx"}, clock=clock, dead_letter=dls)
    q.publish(msg(expiration="30"))
    clock.advance(30)
    q.expire()
    dead = dls.messages[0]
    assert dead.expiration is None
    assert dead.headers["x-death"][0]["original-expiration"] == "30"


# --- length limits --------------------------------------------------------------------------

def test_drop_head_max_length():
    dls, discards = DeadLetters(), []
    q = make({"x-max-length": 2, "x-dead-letter-exchange": "dlx"}, dead_letter=dls,
             discards=discards)
    for i in range(4):
        assert q.publish(msg(str(i))) is PublishResult.ROUTED
    assert bodies(q.ready_entries()) == [b"2", b"3"]
    assert dls.reasons() == ["maxlen", "maxlen"] and [m.body for m in dls.messages] == [b"0", b"1"]
    assert discards == [(0, "maxlen"), (1, "maxlen")]


def test_drop_head_max_length_bytes():
    q = make({"x-max-length-bytes": 10})
    q.publish(msg(b"aaaa"))
    q.publish(msg(b"bbbb"))
    q.publish(msg(b"cccc"))
    assert bodies(q.ready_entries()) == [b"bbbb", b"cccc"] and q.message_bytes == 8
    q.publish(msg(b"x" * 11))  # bigger than the limit: everything goes, itself included
    assert q.message_count == 0 and q.message_bytes == 0


def test_only_ready_messages_count_towards_limit():
    q = make({"x-max-length": 1})
    c = FakeConsumer("c", prefetch=2)
    q.add_consumer(c)
    for i in range(3):
        q.publish(msg(str(i)))
    assert q.unacked_count == 2 and q.message_count == 1
    assert q.publish(msg(b"3")) is PublishResult.ROUTED
    assert bodies(q.ready_entries()) == [b"3"]


def test_max_length_zero_still_delivers_to_ready_consumer():
    q = make({"x-max-length": 0})
    q.publish(msg())
    assert q.message_count == 0
    c = FakeConsumer("c")
    q.add_consumer(c)
    q.publish(msg(b"ok"))
    assert c.bodies() == [b"ok"]


def test_reject_publish():
    dls = DeadLetters()
    q = make({"x-max-length": 2, "x-overflow": "reject-publish", "x-dead-letter-exchange": "d"},
             dead_letter=dls)
    assert [q.publish(msg(str(i))) for i in range(3)] == [PublishResult.ROUTED] * 2 + [
        PublishResult.REJECTED]
    assert bodies(q.ready_entries()) == [b"0", b"1"] and dls.calls == []


def test_reject_publish_dlx():
    dls = DeadLetters()
    q = make({"x-max-length-bytes": 3, "x-overflow": "reject-publish-dlx",
              "x-dead-letter-exchange": "d"}, dead_letter=dls)
    assert q.publish(msg(b"abc")) is PublishResult.ROUTED
    assert q.publish(msg(b"d")) is PublishResult.REJECTED
    assert [m.body for m in dls.messages] == [b"d"] and dls.reasons() == ["maxlen"]
    assert q.message_count == 1


def test_reject_publish_checked_before_delivery():
    # RabbitMQ refuses on a full queue even when a consumer could take the message.
    q = make({"x-max-length": 0, "x-overflow": "reject-publish"})
    c = FakeConsumer("c")
    q.add_consumer(c)
    assert q.publish(msg()) is PublishResult.REJECTED
    assert c.delivered == []


def test_requeue_applies_drop_head_but_not_reject_publish():
    q = make({"x-max-length": 1})
    q.publish(msg(b"a"))
    a = q.get(no_ack=False)
    q.publish(msg(b"b"))
    q.requeue(a)  # a goes back in front of b, then the head (a) is dropped
    assert bodies(q.ready_entries()) == [b"b"]
    q2 = make({"x-max-length": 1, "x-overflow": "reject-publish"})
    q2.publish(msg(b"a"))
    a = q2.get(no_ack=False)
    q2.publish(msg(b"b"))
    q2.requeue(a)
    assert bodies(q2.ready_entries()) == [b"a", b"b"]


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


# --- purge and delete -----------------------------------------------------------------------

def test_purge_drops_ready_only_and_does_not_dead_letter():
    dls, discards = DeadLetters(), []
    q = make({"x-dead-letter-exchange": "dlx"}, dead_letter=dls, discards=discards)
    for i in range(3):
        q.publish(msg(str(i)))
    e = q.get(no_ack=False)
    assert q.purge() == 2
    assert (q.message_count, q.message_bytes, q.unacked_count) == (0, 0, 1)
    assert dls.calls == [] and discards == [(1, "purged"), (2, "purged")]
    q.ack(e)


def test_delete():
    dls, discards = DeadLetters(), []
    q = make({"x-dead-letter-exchange": "dlx"}, dead_letter=dls, discards=discards,
             durable=True, auto_delete=True, exclusive_owner="conn")
    assert (q.durable, q.auto_delete, q.exclusive_owner) == (True, True, "conn")
    c = FakeConsumer("c", prefetch=1)
    q.add_consumer(c)
    for i in range(3):
        q.publish(msg(str(i)))
    dropped = q.delete()
    assert bodies(dropped) == [b"1", b"2"] and q.deleted
    assert dls.calls == [] and discards == [(1, "deleted"), (2, "deleted")]
    assert (q.message_count, q.unacked_count, q.consumer_count) == (0, 0, 0)
    q.ack(c.delivered[0])  # ignored after delete
    q.reject(c.delivered[0])
    q.requeue(c.delivered[0])
    assert q.delete() == []
    assert q.dispatch() == 0
    with pytest.raises(QueueDeleted):
        q.publish(msg())
    with pytest.raises(QueueDeleted):
        q.add_consumer(FakeConsumer("d"))
    with pytest.raises(QueueDeleted):
        q.get(no_ack=True)


def test_arguments_kept_verbatim():
    args = {"x-message-ttl": 5, "x-custom": "y"}
    q = make(args)
    assert q.arguments == args and q.settings.message_ttl == 5
    assert "q" in repr(q)


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


def test_dead_letter_cycle_back_to_same_queue_is_stopped_by_core_check():
    queues = {}

    def route_dead_letter(message, exchange, routing_keys):
        for key in routing_keys:  # default exchange: key is the queue name
            if not is_death_cycle(key, message):
                queues[key].publish(message)

    q = make({"x-max-length": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"},
             dead_letter=route_dead_letter)
    queues["q"] = q
    q.publish(msg(b"a"))
    q.publish(msg(b"b"))  # a is dropped, dead-lettered back to q: a cycle, so dropped
    assert bodies(q.ready_entries()) == [b"b"]


def test_rejected_dead_letter_back_to_same_queue_is_not_a_cycle():
    queues = {}

    def route_dead_letter(message, exchange, routing_keys):
        for key in routing_keys:
            if not is_death_cycle(key, message):
                queues[key].publish(message)

    q = make({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"},
             dead_letter=route_dead_letter)
    queues["q"] = q
    q.publish(msg(b"a"))
    q.reject(q.get(no_ack=False))
    e = q.get(no_ack=False)
    assert e.message.body == b"a" and e.message.headers["x-death"][0]["count"] == 1
    q.reject(e)
    assert q.get(no_ack=True).message.headers["x-death"][0]["count"] == 2
