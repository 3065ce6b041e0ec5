"""Behaviour tests for queues.queue.Queue: message TTL (per queue and per message) and length
limits (drop-head, reject-publish, reject-publish-dlx).

Split out of test_queue.py (publish/dispatch is in test_queue_dispatch.py, settlement in
test_queue_settlement.py). Expected behaviour: RabbitMQ classic queues (guides: Time-To-Live and
Expiration, Queue Length Limit).
"""

from __future__ import annotations

from queues import PublishResult
from queues.tests.fakes import DeadLetters, FakeClock, FakeConsumer, msg
from queues.tests.queue_factory import bodies, make

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
