"""Quorum queues with RabbitMQ 4's semantics (issue 25), with pika, against our broker and,
where RabbitMQ 3.10 has the behaviour, against it too (the same outcome from both).

3.10 and 4.x alike: per-message ``expiration`` (the lower of it and x-message-ttl; a message
expires once it reaches the head), requeued messages first in the order they were returned and,
over an explicit ``x-delivery-limit``, dead-lettered with reason ``delivery_limit``,
``x-dead-letter-strategy: at-least-once``. Only 4.x, so ours only:
two-level priorities favoured 2:1, the default delivery limit of 20, -1 (no limit) requeueing to
the back, no ``x-delivery-count`` on a first Basic.Get, an unrouted at-least-once dead letter held
(counted against max-length) and sent once its target is bound (RabbitMQ retries after 180 s),
and the fallback warning. Sources: RabbitMQ "Quorum Queues" 4.0 (priorities, poison
message handling, repeated requeues, at-least-once dead-lettering), "Time-To-Live and
Expiration"; ``rabbit_quorum_queue.erl`` ``dlh/5`` (the warning's text).
"""

from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import NackError

from interop_tests.conftest import skip_if_rabbitmq

QUORUM = {"x-queue-type": "quorum"}
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def ch(broker):
    params = pika.URLParameters(broker.uri)
    params.socket_timeout = 10
    conn = pika.BlockingConnection(params)
    channel = conn.channel()
    channel.confirm_delivery()
    yield channel
    if conn.is_open:
        conn.close()


def _dead_letter_queue(ch, name: str) -> tuple[str, str]:
    """A fanout exchange and a classic queue bound to it: (exchange, queue)."""
    ch.exchange_declare(f"{name}.dlx", "fanout", auto_delete=True)
    ch.queue_declare(f"{name}.dead", auto_delete=False)
    ch.queue_bind(f"{name}.dead", f"{name}.dlx")
    return f"{name}.dlx", f"{name}.dead"


def _wait_get(ch, queue: str, seconds: float = 10.0):
    """The next message of ``queue`` (method, properties, body), polled for ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        time.sleep(0.05)
    pytest.fail(f"nothing arrived in {queue}")


def _cleanup(ch, *queues: str) -> None:
    for q in queues:
        ch.queue_delete(q)


def _reason(props) -> str:
    return props.headers["x-death"][0]["reason"].decode() if isinstance(
        props.headers["x-death"][0]["reason"], bytes) else props.headers["x-death"][0]["reason"]


def test_per_message_expiration_the_lower_ttl_wins_and_only_the_head_expires(broker, ch,
                                                                             unique_name):
    dlx, dead = _dead_letter_queue(ch, unique_name)
    args = {**QUORUM, "x-message-ttl": 60000, "x-dead-letter-exchange": dlx}
    ch.queue_declare(unique_name, durable=True, arguments=args)
    ch.basic_publish("", unique_name, b"keep", PERSISTENT)
    ch.basic_publish("", unique_name, b"short",
                     pika.BasicProperties(delivery_mode=2, expiration="1"))
    time.sleep(0.3)   # "short" is past its 1 ms but behind "keep": not at the head yet
    assert ch.queue_declare(unique_name, passive=True).method.message_count == 2
    method, _props, body = ch.basic_get(unique_name, auto_ack=True)
    assert body == b"keep"
    _method, props, body = _wait_get(ch, dead)   # at the head now: expired, dead-lettered
    assert (body, _reason(props)) == (b"short", "expired")
    assert ch.basic_get(unique_name) == (None, None, None)
    low = f"{unique_name}.low"   # x-message-ttl 1 below the message's own 60000
    ch.queue_declare(low, durable=True, arguments={**args, "x-message-ttl": 1})
    ch.basic_publish("", low, b"queue-ttl",
                     pika.BasicProperties(delivery_mode=2, expiration="60000"))
    _method, props, body = _wait_get(ch, dead)
    assert (body, _reason(props)) == (b"queue-ttl", "expired")
    _cleanup(ch, unique_name, low, dead)


def test_requeued_messages_come_back_first_in_return_order_and_over_the_limit_dead_letter(
        broker, ch, unique_name):
    """With a delivery limit, a requeued message waits in front of the others, in the order the
    requeues came (rabbit_fifo's returns queue, 3.10 and 4.x alike); returned once more than the
    limit allows, it is dead-lettered with reason ``delivery_limit``."""
    dlx, dead = _dead_letter_queue(ch, unique_name)
    ch.queue_declare(unique_name, durable=True, arguments={
        **QUORUM, "x-delivery-limit": 1, "x-dead-letter-exchange": dlx})
    for body in (b"a", b"b", b"c"):
        ch.basic_publish("", unique_name, body, PERSISTENT)
    first, _props, _body = _wait_get_unacked(ch, unique_name)
    second, _props, _body = _wait_get_unacked(ch, unique_name)
    ch.basic_reject(second.delivery_tag, requeue=True)   # b, then a
    ch.basic_reject(first.delivery_tag, requeue=True)
    _wait_count(ch, unique_name, 3)
    got = [_wait_get_unacked(ch, unique_name) for _ in range(3)]
    assert [(body, (props.headers or {}).get("x-delivery-count")) for _m, props, body in
            got[:2]] == [(b"b", 1), (b"a", 1)]
    assert got[2][2] == b"c"
    ch.basic_ack(got[2][0].delivery_tag)
    for method, _props, _body in got[:2]:   # their second return: over the limit of 1
        ch.basic_reject(method.delivery_tag, requeue=True)
    dead_letters = [_wait_get(ch, dead) for _ in range(2)]
    assert [(body, _reason(props)) for _m, props, body in dead_letters] == [
        (b"b", "delivery_limit"), (b"a", "delivery_limit")]
    assert ch.basic_get(unique_name) == (None, None, None)
    _cleanup(ch, unique_name, dead)


def _wait_count(ch, queue: str, count: int) -> None:
    """Wait (bounded) until ``queue`` reports ``count`` ready messages: a requeue is applied
    after a get that follows it at once on RabbitMQ (its returns are pipelined)."""
    for _ in range(200):
        if ch.queue_declare(queue, passive=True).method.message_count == count:
            return
        time.sleep(0.05)
    pytest.fail(f"{queue} never had {count} messages")


def _wait_get_unacked(ch, queue: str):
    for _ in range(200):
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return method, props, body
        time.sleep(0.05)
    pytest.fail(f"nothing in {queue}")


def test_at_least_once_dead_letters_reach_the_target_and_a_bad_strategy_is_refused(broker, ch,
                                                                                  unique_name):
    dlx, dead = _dead_letter_queue(ch, unique_name)
    target = f"{unique_name}.target"
    ch.queue_declare(target, durable=True, arguments=QUORUM)
    ch.queue_bind(target, dlx)
    args = {**QUORUM, "x-dead-letter-exchange": dlx, "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish"}
    ch.queue_declare(unique_name, durable=True, arguments=args)
    ch.basic_publish("", unique_name, b"rejected", PERSISTENT)
    method, _props, _body = _wait_get_unacked(ch, unique_name)
    ch.basic_reject(method.delivery_tag, requeue=False)
    _method, props, body = _wait_get(ch, target)
    assert (body, _reason(props)) == (b"rejected", "rejected")
    assert ch.basic_get(target) == (None, None, None)
    _cleanup(ch, unique_name, target, dead)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare(f"{unique_name}.bad", durable=True,
                         arguments={**args, "x-dead-letter-strategy": "twice"})
    assert refused.value.reply_code == 406
    assert "x-dead-letter-strategy" in refused.value.reply_text
    assert "invalid_dlx_strategy" in refused.value.reply_text


def test_two_priorities_favour_high_two_to_one_and_x_max_priority_is_refused(broker, ch,
                                                                             unique_name):
    skip_if_rabbitmq(broker, "RabbitMQ 3.10's quorum queues have no priorities (4.0 has two)")
    ch.queue_declare(unique_name, durable=True, arguments=QUORUM)
    for i in range(3):
        ch.basic_publish("", unique_name, b"n%d" % i,
                         pika.BasicProperties(delivery_mode=2, priority=4))
    for i in range(6):
        ch.basic_publish("", unique_name, b"h%d" % i,
                         pika.BasicProperties(delivery_mode=2, priority=5))
    got = [ch.basic_get(unique_name, auto_ack=True)[2] for _ in range(9)]
    assert got == [b"h0", b"h1", b"n0", b"h2", b"h3", b"n1", b"h4", b"h5", b"n2"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare(f"{unique_name}.p", durable=True,
                         arguments={**QUORUM, "x-max-priority": 10})
    assert refused.value.reply_code == 406   # as RabbitMQ 4.0 (4.3 takes it: 32 levels)


def test_default_delivery_limit_is_20_and_minus_one_requeues_to_the_back(broker, ch,
                                                                         unique_name):
    skip_if_rabbitmq(broker, "RabbitMQ 3.10 has no default delivery limit (4.0: 20)")
    dlx, dead = _dead_letter_queue(ch, unique_name)
    ch.queue_declare(unique_name, durable=True,
                     arguments={**QUORUM, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", unique_name, b"poison", PERSISTENT)
    counts = []
    for _ in range(21):
        method, props, _body = _wait_get_unacked(ch, unique_name)
        counts.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_reject(method.delivery_tag, requeue=True)
    assert counts == [None, *range(1, 21)]   # 4.x: no header on a first get
    _method, props, body = _wait_get(ch, dead)
    assert (body, _reason(props)) == (b"poison", "delivery_limit")
    back = f"{unique_name}.unlimited"
    ch.queue_declare(back, durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
    for body in (b"a", b"b"):
        ch.basic_publish("", back, body, PERSISTENT)
    method, _props, body = _wait_get_unacked(ch, back)
    assert body == b"a"
    ch.basic_reject(method.delivery_tag, requeue=True)
    order = [_wait_get(ch, back)[2] for _ in range(2)]
    assert order == [b"b", b"a"]   # no limit: a requeue goes to the back (RabbitMQ 4.0)
    _cleanup(ch, unique_name, back, dead)


def test_an_unrouted_at_least_once_dead_letter_is_held_sent_once_bound_and_fallback_is_logged(
        broker, ch, unique_name):
    skip_if_rabbitmq(broker, "RabbitMQ retries unrouted dead letters after 180 s (and 3.10 "
                             "notices a full reject-publish queue one message late)")
    ch.exchange_declare(f"{unique_name}.dlx", "fanout", auto_delete=False)
    args = {**QUORUM, "x-dead-letter-exchange": f"{unique_name}.dlx",
            "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
            "x-max-length": 1}
    ch.queue_declare(unique_name, durable=True, arguments=args)
    ch.basic_publish("", unique_name, b"later", PERSISTENT)
    method, _props, _body = _wait_get_unacked(ch, unique_name)
    ch.basic_reject(method.delivery_tag, requeue=False)
    for _ in range(100):   # held until routed, and counted against x-max-length
        try:
            ch.basic_publish("", unique_name, b"refused", PERSISTENT)
        except NackError:
            break
        ch.basic_get(unique_name, auto_ack=True)   # accepted before the reject applied
        time.sleep(0.05)
    else:
        pytest.fail("a publish was never refused while the dead letter was held")
    target = f"{unique_name}.target"
    ch.queue_declare(target, durable=True, arguments=QUORUM)
    ch.queue_bind(target, f"{unique_name}.dlx")
    _method, props, body = _wait_get(ch, target)
    assert (body, _reason(props)) == (b"later", "rejected")
    fallback = f"{unique_name}.fallback"
    ch.queue_declare(fallback, durable=True, arguments={**args, "x-overflow": "drop-head",
                                                        "x-max-length": 10})
    text = broker.log_path.read_text(errors="replace")
    assert (f"Falling back to dead-letter-strategy at-most-once for queue '{fallback}' in vhost "
            f"'/' because configured dead-letter-strategy at-least-once is incompatible with "
            f"effective overflow strategy drop-head.") in text
    ch.exchange_delete(f"{unique_name}.dlx")
    _cleanup(ch, unique_name, target, fallback)
