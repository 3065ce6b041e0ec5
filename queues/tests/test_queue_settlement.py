"""Behaviour tests for queues.queue.Queue: settlement (ack, requeue, reject and dead-lettering on
reject), purge and delete, and dead-letter cycles back into the same queue.

Split out of test_queue.py (publish/dispatch is in test_queue_dispatch.py, TTL and length limits
in test_queue_limits.py). Expected behaviour: RabbitMQ classic queues (guides: Consumer
Acknowledgements and Publisher Confirms, Dead Letter Exchanges, Queues).
"""

from __future__ import annotations

import datetime

import pytest

from queues import QueueDeleted, UnknownEntry
from queues.dead_letter import is_death_cycle
from queues.tests.fakes import DeadLetters, FakeConsumer, msg
from queues.tests.queue_factory import bodies, make

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


# --- re-entrancy: dead-lettering back into the same queue -----------------------------------

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
