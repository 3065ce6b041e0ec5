"""py-amqp (``amqp``, the transport under kombu and celery) against the broker.

Covers: Connection.Start server properties and capabilities, both login mechanisms py-amqp
speaks (AMQPLAIN, its default, and PLAIN), wrong password -> AccessRefused 403, unknown vhost
-> NotAllowed 530, heartbeats (``heartbeat_tick`` over an idle connection, the broker's own
heartbeat frames, and the broker dropping a client that stops heartbeating), every basic
property round-tripped, user_id validation 406, publish to a missing exchange 404, acking an
unknown delivery tag 406, basic.get counts and reject/requeue, consume/cancel via
``drain_events``, exclusive consumers (403 both ways), basic.recover, queue.purge and queue.delete counts, delete if-unused /
if-empty 406, x-expires, x-max-length-bytes (oldest dropped), and a dead-letter cycle (reject -> TTL -> back) with RabbitMQ's x-death
bookkeeping (entries per queue+reason, count incremented, most recent first).

Sources: AMQP 0-9-1 specification (connection negotiation, heartbeat, basic and queue
classes, reply codes); RabbitMQ docs "heartbeats", "access-control" (authentication failure
notifications), "validated-user-id", "dlx" (x-death, cycles), "ttl" (queue expiry); py-amqp
documentation (Connection, Channel, heartbeat_tick).
"""

from __future__ import annotations

import datetime
import time

import amqp
import amqp.exceptions as ae
import pytest

TIMEOUT = 5.0


def connect(broker, **kw):
    opts = dict(userid=broker.user, password=broker.password, virtual_host=broker.vhost,
                connect_timeout=10)  # fmt: skip
    opts.update(kw)
    c = amqp.Connection(f"{broker.host}:{broker.port}", **opts)
    c.connect()
    return c


@pytest.fixture
def conn(broker):
    c = connect(broker)
    yield c
    try:
        c.close()
    except (OSError, ae.AMQPError):
        pass


@pytest.fixture
def ch(conn):
    return conn.channel()


def get_eventually(ch, queue, timeout=TIMEOUT, no_ack=True):
    deadline = time.monotonic() + timeout
    while True:
        msg = ch.basic_get(queue, no_ack=no_ack)
        if msg is not None:
            return msg
        if time.monotonic() > deadline:
            pytest.fail(f"no message on {queue!r} within {timeout}s")
        time.sleep(0.02)


def tmp_queue(ch, **kw):
    return ch.queue_declare("", exclusive=True, **kw).queue


# ------------------------------------------------------------------ connection


def test_server_properties_and_capabilities(conn, broker):
    props = conn.server_properties
    for key in ("product", "version", "platform"):
        assert isinstance(props.get(key), str) and props[key], key
    caps = conn.server_capabilities
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "authentication_failure_close",
                "per_consumer_qos"):  # fmt: skip
        assert caps.get(cap) is True, cap
    assert broker.server_properties["capabilities"] == caps  # raw handshake agrees


@pytest.mark.parametrize("mechanism", ["AMQPLAIN", "PLAIN"])
def test_login_mechanisms(broker, mechanism):
    c = connect(broker, login_method=mechanism)
    try:
        q = tmp_queue(c.channel())
        assert q.startswith("amq.gen-")
    finally:
        c.close()


def test_wrong_password_access_refused(broker):
    with pytest.raises(ae.AccessRefused) as info:
        connect(broker, password="not-the-password")
    assert info.value.reply_code == 403
    assert "ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost_not_allowed(broker, unique_name):
    with pytest.raises(ae.NotAllowed) as info:
        connect(broker, virtual_host=unique_name)
    assert info.value.reply_code == 530
    assert "NOT_ALLOWED" in str(info.value)


def test_heartbeat_tick_keeps_connection_and_broker_sends_heartbeats(broker):
    c = connect(broker, heartbeat=1)
    try:
        assert c.heartbeat == 1
        frames_before = c.bytes_recv  # py-amqp counts frames received here
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            c.heartbeat_tick()  # raises ConnectionForced if the broker went quiet
            try:
                c.drain_events(timeout=0.2)
            except TimeoutError:  # socket.timeout
                pass
        assert c.bytes_recv - frames_before >= 2, "broker sent no heartbeats while idle"
        ch = c.channel()
        q = tmp_queue(ch)
        ch.basic_publish(amqp.Message(b"alive"), "", q)
        assert get_eventually(ch, q).body == b"alive"
    finally:
        c.close()


def test_broker_drops_client_that_stops_heartbeating(broker):
    c = connect(broker, heartbeat=1)
    time.sleep(5)  # no heartbeats from us: the broker must give up on the connection
    with pytest.raises((OSError, ae.AMQPError)):
        c.drain_events(timeout=3)
        c.channel().queue_declare("", exclusive=True)  # if the read alone did not notice
    try:
        c.collect()
    except Exception:
        pass


# ------------------------------------------------------------------ messages


def test_all_basic_properties_round_trip(ch, broker):
    q = tmp_queue(ch)
    stamp = 1_715_000_000  # py-amqp carries the timestamp property as POSIX seconds
    props = dict(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=4,
        correlation_id="corr", reply_to="replies", expiration="60000", message_id="mid",
        timestamp=stamp, type="kind", user_id=broker.user, app_id="interop",
        application_headers={"s": "x", "i": -5, "big": 2**40, "f": 1.5, "b": False,
                             "l": ["a", 1], "t": {"n": None}, "bin": b"\x00\xff"},
    )  # fmt: skip
    ch.basic_publish(amqp.Message(b'{"a": 1}', **props), "", q)
    msg = get_eventually(ch, q)
    assert msg.body == '{"a": 1}'  # py-amqp decodes bodies that carry a content_encoding
    for key, value in props.items():
        if key == "application_headers":
            continue
        assert msg.properties[key] == value, key
    headers = msg.headers
    assert {k: headers[k] for k in ("s", "i", "big", "f", "b", "l", "t")} == {
        "s": "x", "i": -5, "big": 2**40, "f": 1.5, "b": False, "l": ["a", 1], "t": {"n": None}}
    assert headers["bin"] in (b"\x00\xff", "\x00\xff")


def test_user_id_must_match_login_406(conn, ch):
    q = tmp_queue(ch)
    ch.basic_publish(amqp.Message(b"x", user_id="somebody-else"), "", q)
    with pytest.raises(ae.PreconditionFailed) as info:
        ch.queue_declare(q, passive=True)  # the async channel error surfaces here
    assert info.value.reply_code == 406
    assert conn.channel().basic_get(q) is None  # nothing was enqueued


def test_publish_to_missing_exchange_404(conn, ch, unique_name):
    ch.basic_publish(amqp.Message(b"x"), unique_name, "k")
    with pytest.raises(ae.NotFound) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 404 and "NOT_FOUND" in str(info.value)
    assert tmp_queue(conn.channel()).startswith("amq.gen-")


def test_ack_unknown_delivery_tag_406(ch):
    ch.basic_ack(99)
    with pytest.raises(ae.PreconditionFailed) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406 and "unknown delivery tag 99" in str(info.value)


def test_basic_get_counts_reject_and_requeue(ch):
    q = tmp_queue(ch)
    for body in (b"1", b"2", b"3"):
        ch.basic_publish_confirm(amqp.Message(body), "", q)
    m1 = ch.basic_get(q)
    assert m1.body == b"1" and m1.delivery_info["message_count"] == 2
    assert m1.delivery_info["redelivered"] is False
    ch.basic_reject(m1.delivery_tag, requeue=True)
    again = ch.basic_get(q, no_ack=True)
    assert (again.body, again.delivery_info["redelivered"]) == (b"1", True)
    m2 = ch.basic_get(q)
    ch.basic_reject(m2.delivery_tag, requeue=False)  # no DLX: discarded
    assert [ch.basic_get(q, no_ack=True).body] == [b"3"] and ch.basic_get(q) is None


def test_consume_drain_events_and_cancel(conn, ch):
    q = tmp_queue(ch)
    received = []
    tag = ch.basic_consume(q, callback=lambda m: (received.append(m.body), m.channel.basic_ack(
        m.delivery_tag)))  # fmt: skip
    assert ch.queue_declare(q, passive=True).consumer_count == 1
    for i in range(3):
        ch.basic_publish(amqp.Message(b"%d" % i), "", q)
    deadline = time.monotonic() + TIMEOUT
    while len(received) < 3 and time.monotonic() < deadline:
        try:
            conn.drain_events(timeout=0.5)
        except TimeoutError:  # socket.timeout
            pass
    assert received == [b"0", b"1", b"2"]
    assert ch.queue_declare(q, passive=True).message_count == 0
    ch.basic_cancel(tag)
    # py-amqp declares auto_delete=True by default: losing its last consumer deletes the queue
    with pytest.raises(ae.NotFound):
        ch.queue_declare(q, passive=True)


def test_exclusive_consumer_refuses_others_403(conn, ch):
    q = tmp_queue(ch)
    ch.basic_consume(q, callback=lambda m: None, exclusive=True)
    with pytest.raises(ae.AccessRefused) as info:
        conn.channel().basic_consume(q, callback=lambda m: None)
    assert info.value.reply_code == 403 and "ACCESS_REFUSED" in str(info.value)
    q2 = tmp_queue(ch)
    ch.basic_consume(q2, callback=lambda m: None)
    with pytest.raises(ae.AccessRefused):
        conn.channel().basic_consume(q2, callback=lambda m: None, exclusive=True)
    assert ch.is_open


def test_basic_recover_requeue(ch):
    q = tmp_queue(ch)
    ch.basic_publish_confirm(amqp.Message(b"r"), "", q)
    assert ch.basic_get(q).delivery_info["redelivered"] is False
    ch.basic_recover(requeue=True)
    again = get_eventually(ch, q)
    assert (again.body, again.delivery_info["redelivered"]) == (b"r", True)


# ------------------------------------------------------------------ queue management


def test_purge_and_delete_return_counts(ch, unique_name):
    ch.queue_declare(unique_name, auto_delete=False)
    for _ in range(7):
        ch.basic_publish_confirm(amqp.Message(b"p"), "", unique_name)
    assert ch.queue_purge(unique_name) == 7
    assert ch.queue_declare(unique_name, passive=True).message_count == 0
    for _ in range(2):
        ch.basic_publish_confirm(amqp.Message(b"d"), "", unique_name)
    assert ch.queue_delete(unique_name) == 2
    with pytest.raises(ae.NotFound):
        ch.queue_declare(unique_name, passive=True)


def test_delete_if_unused_and_if_empty_406(conn, ch, unique_name):
    ch.queue_declare(unique_name, auto_delete=False)
    ch2 = conn.channel()
    try:
        ch.basic_publish_confirm(amqp.Message(b"keep"), "", unique_name)
        with pytest.raises(ae.PreconditionFailed) as info:
            ch.queue_delete(unique_name, if_empty=True)
        assert "not empty" in str(info.value)
        tag = ch2.basic_consume(unique_name, callback=lambda m: None)
        with pytest.raises(ae.PreconditionFailed) as info:
            conn.channel().queue_delete(unique_name, if_unused=True)
        assert "in use" in str(info.value)
        ch2.basic_cancel(tag)
        ch2.close()  # requeues the message the consumer had been sent
        check = conn.channel()
        deadline = time.monotonic() + TIMEOUT
        while (ok := check.queue_declare(unique_name, passive=True)).message_count == 0:
            assert time.monotonic() < deadline, "message not requeued after channel close"
            time.sleep(0.02)
        assert (ok.message_count, ok.consumer_count) == (1, 0)  # both refusals kept it
    finally:
        conn.channel().queue_delete(unique_name)


def test_queue_expires_when_unused(ch, unique_name):
    ch.queue_declare(unique_name, auto_delete=False, arguments={"x-expires": 300})
    assert ch.queue_declare(unique_name, passive=True).queue == unique_name
    time.sleep(1.5)
    with pytest.raises(ae.NotFound):
        ch.queue_declare(unique_name, passive=True)


def test_max_length_bytes_drops_oldest(ch):
    q = tmp_queue(ch, arguments={"x-max-length-bytes": 10})  # bodies only count
    for body in (b"aaaaa", b"bbbbb", b"ccccc"):
        ch.basic_publish_confirm(amqp.Message(body, application_headers={"pad": "x" * 100}), "", q)
    assert ch.queue_declare(q, passive=True).message_count == 2
    assert [ch.basic_get(q, no_ack=True).body for _ in range(2)] == [b"bbbbb", b"ccccc"]
    assert ch.basic_get(q) is None


def test_dead_letter_cycle_x_death_bookkeeping(conn, ch, unique_name):
    a, b = unique_name + ".a", unique_name + ".b"
    ch.queue_declare(a, auto_delete=False,
                     arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
    ch.queue_declare(b, auto_delete=False, arguments={"x-message-ttl": 20, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": a})  # fmt: skip
    try:
        ch.basic_publish(amqp.Message(b"loop", application_headers={"k": "v"}), "", a)
        first = get_eventually(ch, a, no_ack=False)
        assert "x-death" not in (first.headers or {})
        ch.basic_reject(first.delivery_tag, requeue=False)
        second = get_eventually(ch, a, no_ack=False)

        def deaths(msg):
            return [(d["queue"], d["reason"], d["count"], d["routing-keys"], d["exchange"])
                    for d in msg.headers["x-death"]]  # fmt: skip

        assert deaths(second) == [(b, "expired", 1, [b], ""), (a, "rejected", 1, [a], "")]
        ch.basic_reject(second.delivery_tag, requeue=False)
        third = get_eventually(ch, a)
        assert deaths(third) == [(b, "expired", 2, [b], ""), (a, "rejected", 2, [a], "")]
        h = third.headers
        assert (h["x-first-death-queue"], h["x-first-death-reason"]) == (a, "rejected")
        assert h["x-first-death-exchange"] == "" and h["k"] == "v"
        assert all(isinstance(d["time"], datetime.datetime) for d in h["x-death"])
    finally:
        conn.channel().queue_delete(a)
        conn.channel().queue_delete(b)
