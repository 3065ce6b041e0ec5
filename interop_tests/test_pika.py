"""pika (BlockingConnection) against the broker: the most thorough of the client suites.

Covers: declare/bind/publish/get/consume/ack, nack and reject with requeue (redelivered flag and
queue position), server-named queues, passive declare 404, exclusive queue 405, inequivalent
redeclare 406, default-exchange and reserved-name rules 403, direct/fanout/topic exchanges
(including RabbitMQ's empty-word topic semantics), alternate exchanges, mandatory -> Basic.Return
312 NO_ROUTE, publisher confirms and reject-publish nacks, prefetch (per consumer and global),
dead-lettering with x-death (queue TTL, per-message TTL, rejection, max-length drop-head),
priorities, broker-initiated consumer cancel (``add_on_cancel_callback``), heartbeats, Connection.Start capabilities, authentication failure, unknown vhost 530,
1 MiB bodies and a quorum queue on a single broker (406 for its refused arguments).

Sources: AMQP 0-9-1 specification (amqp0-9-1.xml, section 1.x method semantics and reply codes);
RabbitMQ docs: "dlx", "ttl", "maxlength", "priority", "consumer-cancel", "consumers" (single
active consumer, exclusivity), "confirms", "consumer-prefetch", "ae", "e2e", "heartbeats",
"specification" (spec differences), "queues" (server-named, exclusive, inequivalent args),
"access-control" (authentication failure notifications).
"""

from __future__ import annotations

import datetime
import time

import pika
import pika.exceptions as pe
import pytest

TIMEOUT = 5.0


@pytest.fixture
def conn(broker):
    params = pika.URLParameters(broker.uri)
    params.socket_timeout = 10
    params.blocked_connection_timeout = 30
    c = pika.BlockingConnection(params)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def ch(conn):
    """A channel in confirm mode: basic_publish returns once the broker has routed/enqueued the
    message, so an immediate basic_get / passive declare sees it (RabbitMQ gives no such
    guarantee for unconfirmed publishes)."""
    c = conn.channel()
    c.confirm_delivery()
    return c


@pytest.fixture
def declared(broker):
    """(kind, name) pairs to delete after the test, best effort, on a fresh connection."""
    names: list[tuple[str, str]] = []
    yield names
    c = pika.BlockingConnection(pika.URLParameters(broker.uri))
    for kind, name in names:
        try:
            getattr(c.channel(), f"{kind}_delete")(name)
        except pe.AMQPError:
            pass
    c.close()


@pytest.fixture
def declare(ch, declared):
    """declare(name, **queue_declare kwargs) -> queue name; deleted at teardown."""

    def _declare(name, **kw):
        declared.append(("queue", ch.queue_declare(name, **kw).method.queue))
        return declared[-1][1]

    return _declare


@pytest.fixture
def exchange(ch, declared):
    def _exchange(name, kind="direct", **kw):
        ch.exchange_declare(name, kind, **kw)
        declared.append(("exchange", name))
        return name

    return _exchange


def wait_get(ch, queue, timeout=TIMEOUT, auto_ack=True):
    """basic_get, polling until a message shows up (for asynchronous routes such as DLX)."""
    deadline = time.monotonic() + timeout
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            return method, props, body
        if time.monotonic() > deadline:
            pytest.fail(f"no message arrived on {queue!r} within {timeout}s")
        ch.connection.sleep(0.02)


def drain(ch, queue):
    bodies = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def expect_channel_error(code, fn, *args, **kw) -> pe.ChannelClosedByBroker:
    with pytest.raises(pe.ChannelClosedByBroker) as info:
        fn(*args, **kw)
    assert info.value.reply_code == code, info.value
    return info.value


# ------------------------------------------------------------------ basics


def test_declare_bind_publish_get_ack(ch, declare, exchange, unique_name):
    ex = exchange(unique_name + ".ex", "direct")
    q = declare(unique_name, durable=True)
    ch.queue_bind(q, ex, routing_key="rk")
    props = pika.BasicProperties(
        content_type="text/plain", delivery_mode=2, correlation_id="c-1", message_id="m-1",
        headers={"int": 7, "str": "v", "list": [1, "two"], "nested": {"k": True}}, priority=3,
    )  # fmt: skip
    ch.basic_publish(ex, "rk", b"hello", props)
    ch.basic_publish(ex, "other-key", b"not routed")
    method, got, body = wait_get(ch, q, auto_ack=False)
    assert body == b"hello"
    assert (method.exchange, method.routing_key, method.redelivered) == (ex, "rk", False)
    assert method.message_count == 0
    assert (got.content_type, got.delivery_mode, got.correlation_id) == ("text/plain", 2, "c-1")
    assert got.message_id == "m-1" and got.priority == 3
    assert got.headers == {"int": 7, "str": "v", "list": [1, "two"], "nested": {"k": True}}
    ch.basic_ack(method.delivery_tag)
    ok = ch.queue_declare(q, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (0, 0)


def test_consume_generator_in_order_and_ack(ch, declare, unique_name):
    q = declare(unique_name)
    for i in range(5):
        ch.basic_publish("", q, b"m%d" % i)
    seen = []
    for method, _props, body in ch.consume(q, inactivity_timeout=TIMEOUT):
        assert method is not None, "consumer timed out"
        seen.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(seen) == 5:
            break
    ch.cancel()
    assert seen == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert ch.queue_declare(q, passive=True).method.message_count == 0


@pytest.mark.parametrize("how", ["nack", "reject"])
def test_requeue_redelivers_in_original_place(ch, declare, unique_name, how):
    q = declare(unique_name)
    for body in (b"a", b"b", b"c"):
        ch.basic_publish("", q, body)
    m_a, _, _ = wait_get(ch, q, auto_ack=False)
    m_b, _, body_b = wait_get(ch, q, auto_ack=False)
    assert body_b == b"b"
    if how == "nack":
        ch.basic_nack(m_b.delivery_tag, requeue=True)
    else:
        ch.basic_reject(m_b.delivery_tag, requeue=True)
    ch.basic_ack(m_a.delivery_tag)
    again, _, body = wait_get(ch, q)
    assert (body, again.redelivered) == (b"b", True)
    nxt, _, body = wait_get(ch, q)
    assert (body, nxt.redelivered) == (b"c", False)


def test_server_named_queue(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    assert q.startswith("amq.gen-") and len(q) > len("amq.gen-")
    ch.basic_publish("", q, b"to me")
    assert wait_get(ch, q)[2] == b"to me"


def test_default_exchange_routes_by_queue_name_and_refuses_binding(conn, ch, declare, unique_name):
    q = declare(unique_name)
    ch.basic_publish("", q, b"direct to queue")
    assert wait_get(ch, q)[2] == b"direct to queue"
    err = expect_channel_error(403, ch.queue_bind, q, "", routing_key="x")
    assert err.reply_text.startswith("ACCESS_REFUSED")
    ch2 = conn.channel()
    err = expect_channel_error(403, ch2.exchange_declare, "amq." + unique_name, "direct")
    assert err.reply_text.startswith("ACCESS_REFUSED")


# ------------------------------------------------------------------ errors


def test_passive_declare_missing_queue_404_connection_survives(conn, ch, unique_name):
    err = expect_channel_error(404, ch.queue_declare, unique_name, passive=True)
    assert err.reply_text.startswith("NOT_FOUND") and unique_name in err.reply_text
    assert ch.is_closed and conn.is_open
    ch2 = conn.channel()
    q = ch2.queue_declare("", exclusive=True).method.queue
    ch2.basic_publish("", q, b"still works")
    assert wait_get(ch2, q)[2] == b"still works"
    err = expect_channel_error(404, conn.channel().exchange_declare, unique_name, passive=True)
    assert err.reply_text.startswith("NOT_FOUND")


def test_exclusive_queue_from_other_connection_is_405(broker, ch, unique_name):
    ch.queue_declare(unique_name, exclusive=True)
    other = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        err = expect_channel_error(405, other.channel().queue_declare, unique_name)
        assert err.reply_text.startswith("RESOURCE_LOCKED")
        expect_channel_error(405, other.channel().basic_consume, unique_name, lambda *a: None)
        assert other.is_open
    finally:
        other.close()


def test_inequivalent_redeclare_is_406(conn, declare, exchange, unique_name):
    declare(unique_name, arguments={"x-message-ttl": 1000})
    err = expect_channel_error(406, conn.channel().queue_declare, unique_name,
                               arguments={"x-message-ttl": 2000})  # fmt: skip
    assert err.reply_text.startswith("PRECONDITION_FAILED") and "x-message-ttl" in err.reply_text
    expect_channel_error(406, conn.channel().queue_declare, unique_name, durable=True,
                         arguments={"x-message-ttl": 1000})  # fmt: skip
    exchange(unique_name + ".ex", "direct")
    expect_channel_error(406, conn.channel().exchange_declare, unique_name + ".ex", "fanout")
    # an identical redeclare is fine and reports the queue's state
    c = conn.channel()
    c.confirm_delivery()
    c.basic_publish("", unique_name, b"x")
    ok = c.queue_declare(unique_name, arguments={"x-message-ttl": 1000}).method
    assert ok.queue == unique_name and ok.message_count == 1


def test_x_queue_type_quorum_on_a_single_broker(broker, conn, unique_name):
    # RabbitMQ serves quorum queues on one node; so do we (a Raft group of one, persisted)
    ch = conn.channel()
    ch.queue_declare(unique_name, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    ch.basic_publish("", unique_name, b"g", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("", unique_name, b"q", pika.BasicProperties(delivery_mode=2))
    for _ in range(100):
        if ch.queue_declare(unique_name, passive=True).method.message_count == 2:
            break
        time.sleep(0.05)
    method, _props, body = ch.basic_get(unique_name, auto_ack=True)
    assert body == b"g"
    method, _props, body = next(ch.consume(unique_name, inactivity_timeout=5))
    assert body == b"q" and not method.redelivered
    ch.basic_ack(method.delivery_tag)
    ch.cancel()
    err = expect_channel_error(406, conn.channel().queue_declare, unique_name + ".x",
                               durable=False, arguments={"x-queue-type": "quorum"})
    assert err.reply_text.startswith("PRECONDITION_FAILED")
    err = expect_channel_error(406, conn.channel().queue_declare, unique_name + ".p",
                               durable=True, arguments={"x-queue-type": "quorum",
                                                        "x-max-priority": 5})
    assert err.reply_text.startswith("PRECONDITION_FAILED")
    ch.queue_delete(unique_name)
    assert conn.is_open



def test_queue_purge_of_a_quorum_queue_counts_what_it_removed(broker, conn, unique_name):
    # RabbitMQ answers a quorum queue's Purge-Ok once the purge is applied, with the number of
    # ready messages it removed; unacked deliveries stay, and later publishes are kept
    ch = conn.channel()
    ch.queue_declare(unique_name, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for body in (b"a", b"b", b"c", b"d"):
        ch.basic_publish("", unique_name, body, pika.BasicProperties(delivery_mode=2))
    method, _props, body = ch.basic_get(unique_name)   # held unacked: not purged
    assert body == b"a"
    assert ch.queue_purge(unique_name).method.message_count == 3
    ch.basic_publish("", unique_name, b"e", pika.BasicProperties(delivery_mode=2))
    ch.basic_nack(method.delivery_tag, requeue=True)
    got = set()
    for m, _props, b in ch.consume(unique_name, auto_ack=True, inactivity_timeout=5):
        if m is None:
            break
        got.add(b)
        if len(got) == 2:
            break
    assert got == {b"a", b"e"}
    ch.cancel()
    ch.queue_delete(unique_name)

# ------------------------------------------------------------------ exchanges


def test_direct_and_fanout(ch, declare, exchange, unique_name):
    d, f = exchange(unique_name + ".d", "direct"), exchange(unique_name + ".f", "fanout")
    q1, q2 = declare(unique_name + ".1"), declare(unique_name + ".2")
    ch.queue_bind(q1, d, "red")
    ch.queue_bind(q2, d, "red")
    ch.queue_bind(q2, d, "blue")
    ch.queue_bind(q1, f, "ignored")
    ch.queue_bind(q2, f)
    ch.basic_publish(d, "red", b"r")
    ch.basic_publish(d, "blue", b"b")
    ch.basic_publish(d, "green", b"g")
    ch.basic_publish(f, "anything", b"f")
    assert drain(ch, q1) == [b"r", b"f"]
    assert drain(ch, q2) == [b"r", b"b", b"f"]
    ch.queue_unbind(q2, d, "red")
    ch.basic_publish(d, "red", b"r2")
    assert (drain(ch, q1), drain(ch, q2)) == ([b"r2"], [])


TOPIC_CASES = {
    # routing key -> binding keys that match it (RabbitMQ semantics: "" has zero words,
    # "." has two empty words, "#" matches zero or more words, "*" exactly one)
    "a": {"*", "#", "a.#"},
    "a.b": {"#", "a.*", "a.#", "#.b", "*.*", "a.*.#"},
    "a.b.c": {"#", "a.#", "a.*.#"},
    "x.b": {"#", "#.b", "*.*"},
    "": {"#"},
    "a..b": {"#", "a.#", "#.b", "a.*.#", "a.*.b"},
}


def test_topic_wildcards(ch, declare, exchange, unique_name):
    ex = exchange(unique_name, "topic")
    bindings = ["*", "#", "a.*", "a.#", "#.b", "*.*", "a.*.#", "a.*.b"]
    queues = {}
    for i, key in enumerate(bindings):
        queues[key] = declare(f"{unique_name}.{i}")
        ch.queue_bind(queues[key], ex, key)
    for rk, expected in TOPIC_CASES.items():
        ch.basic_publish(ex, rk, rk.encode())
        got = {key for key, q in queues.items() if drain(ch, q)}
        assert got == expected, f"routing key {rk!r}"


def test_alternate_exchange(ch, declare, exchange, unique_name):
    ae = exchange(unique_name + ".ae", "fanout")
    main = exchange(unique_name + ".main", "direct", arguments={"alternate-exchange": ae})
    routed, unrouted = declare(unique_name + ".routed"), declare(unique_name + ".unrouted")
    ch.queue_bind(routed, main, "known")
    ch.queue_bind(unrouted, ae)
    ch.basic_publish(main, "known", b"1")
    ch.basic_publish(main, "unknown", b"2")
    assert drain(ch, routed) == [b"1"]
    method, _, body = wait_get(ch, unrouted)
    assert (body, method.exchange, method.routing_key) == (b"2", main, "unknown")


def test_mandatory_unroutable_returns_312(conn, ch, exchange, unique_name):
    ex = exchange(unique_name, "direct")
    returned = []
    plain = conn.channel()  # no confirms: the return arrives through the callback
    plain.add_on_return_callback(lambda _c, method, props, body: returned.append((method, body)))
    plain.basic_publish(ex, "nowhere", b"lost?", mandatory=True)
    plain.basic_publish(ex, "nowhere", b"silently dropped", mandatory=False)
    deadline = time.monotonic() + TIMEOUT
    while len(returned) < 1 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    conn.process_data_events(time_limit=0.2)
    assert len(returned) == 1
    method, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key, body) == (ex, "nowhere", b"lost?")
    # with confirms on, pika surfaces the return as UnroutableError
    with pytest.raises(pe.UnroutableError) as info:
        ch.basic_publish(ex, "nowhere", b"x", mandatory=True)
    assert info.value.messages[0].method.reply_code == 312


# ------------------------------------------------------------------ confirms, qos


def test_publisher_confirms_and_reject_publish_nack(ch, declare, unique_name):
    q = declare(unique_name, arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)  # raises unless acked
    with pytest.raises(pe.NackError):
        ch.basic_publish("", q, b"overflow")
    assert drain(ch, q) == [b"0", b"1", b"2"]
    ch.basic_publish("", q, b"room again")
    assert drain(ch, q) == [b"room again"]


def _consume_into(ch, q, sink, **kw):
    return ch.basic_consume(q, lambda c, m, p, b: sink.append((c, m, b)), **kw)


def pump(conn, until, timeout=TIMEOUT, settle=0.3):
    """Process I/O until ``until()`` holds (fail after timeout), then a little longer so that
    deliveries beyond the expected ones would show up."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out waiting for deliveries"
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=settle)


def test_prefetch_count_limits_unacked(conn, ch, declare, unique_name):
    q = declare(unique_name)
    ch.basic_qos(prefetch_count=2)
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    got = []
    _consume_into(ch, q, got)
    pump(conn, lambda: len(got) >= 2)
    assert [b for _, _, b in got] == [b"0", b"1"]
    ch.basic_ack(got[0][1].delivery_tag)
    pump(conn, lambda: len(got) >= 3)
    assert [b for _, _, b in got] == [b"0", b"1", b"2"]
    ch.basic_ack(got[2][1].delivery_tag, multiple=True)
    pump(conn, lambda: len(got) >= 5)
    assert [b for _, _, b in got] == [b"0", b"1", b"2", b"3", b"4"]


def test_global_qos_is_shared_by_channel_consumers(conn, ch, declare, unique_name):
    q1, q2 = declare(unique_name + ".1"), declare(unique_name + ".2")
    for _ in range(4):
        ch.basic_publish("", q1, b"x")
        ch.basic_publish("", q2, b"y")
    ch.basic_qos(prefetch_count=3, global_qos=True)
    got = []
    _consume_into(ch, q1, got)
    _consume_into(ch, q2, got)
    pump(conn, lambda: len(got) >= 3, settle=0.5)
    assert len(got) == 3  # one limit for both consumers on the channel
    ch.basic_ack(0, multiple=True)  # delivery tag 0 + multiple: everything outstanding
    pump(conn, lambda: len(got) >= 6, settle=0.5)
    assert len(got) == 6


# ------------------------------------------------------------------ dead lettering


def assert_x_death(props, *, reason, queue, exchange, routing_keys):
    h = props.headers
    assert (h["x-first-death-reason"], h["x-first-death-queue"]) == (reason, queue)
    assert h["x-first-death-exchange"] == exchange
    [death] = h["x-death"]
    assert death["count"] == 1
    assert (death["reason"], death["queue"], death["exchange"]) == (reason, queue, exchange)
    assert death["routing-keys"] == routing_keys
    assert isinstance(death["time"], datetime.datetime)
    return death


@pytest.fixture
def dlx(ch, declare, exchange, unique_name):
    """A fanout DLX with one queue bound: returns (exchange, queue)."""
    ex = exchange(unique_name + ".dlx", "fanout")
    q = declare(unique_name + ".dead")
    ch.queue_bind(q, ex)
    return ex, q


def test_queue_ttl_dead_letters_expired(ch, declare, exchange, dlx, unique_name):
    src = exchange(unique_name + ".src", "direct")
    q = declare(unique_name, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": dlx[0]})
    ch.queue_bind(q, src, "k")
    ch.basic_publish(src, "k", b"stale", pika.BasicProperties(headers={"mine": 1}))
    method, props, body = wait_get(ch, dlx[1])
    assert body == b"stale" and method.exchange == dlx[0] and method.routing_key == "k"
    assert props.headers["mine"] == 1
    assert_x_death(props, reason="expired", queue=q, exchange=src, routing_keys=["k"])
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_per_message_expiration_dead_letters(ch, declare, dlx, unique_name):
    q = declare(unique_name, arguments={"x-dead-letter-exchange": dlx[0],
                                        "x-dead-letter-routing-key": "dl-key"})  # fmt: skip
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="30"))
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="60000"))
    method, props, body = wait_get(ch, dlx[1])
    assert (body, method.routing_key) == (b"short", "dl-key")
    death = assert_x_death(props, reason="expired", queue=q, exchange="", routing_keys=[q])
    assert death["original-expiration"] == "30"
    assert props.expiration is None
    assert drain(ch, q) == [b"long"]


def test_reject_without_requeue_dead_letters(ch, declare, dlx, unique_name):
    q = declare(unique_name, arguments={"x-dead-letter-exchange": dlx[0]})
    ch.basic_publish("", q, b"bad")
    ch.basic_publish("", q, b"worse")
    m1, _, _ = wait_get(ch, q, auto_ack=False)
    ch.basic_reject(m1.delivery_tag, requeue=False)
    m2, _, _ = wait_get(ch, q, auto_ack=False)
    ch.basic_nack(m2.delivery_tag, requeue=False)
    for expected in (b"bad", b"worse"):
        _, props, body = wait_get(ch, dlx[1])
        assert body == expected
        assert_x_death(props, reason="rejected", queue=q, exchange="", routing_keys=[q])


def test_max_length_drop_head_dead_letters_oldest(ch, declare, dlx, unique_name):
    q = declare(unique_name, arguments={"x-max-length": 2, "x-dead-letter-exchange": dlx[0]})
    for body in (b"1", b"2", b"3", b"4"):
        ch.basic_publish("", q, body)
    assert drain(ch, q) == [b"3", b"4"]
    for expected in (b"1", b"2"):
        _, props, body = wait_get(ch, dlx[1])
        assert body == expected
        assert_x_death(props, reason="maxlen", queue=q, exchange="", routing_keys=[q])


def test_priority_queue_delivers_highest_first(ch, declare, unique_name):
    q = declare(unique_name, arguments={"x-max-priority": 10})
    for body, prio in ((b"low", 1), (b"none", None), (b"high", 9), (b"mid-a", 5), (b"mid-b", 5)):
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    assert drain(ch, q) == [b"high", b"mid-a", b"mid-b", b"low", b"none"]


# ------------------------------------------------------------------ consumers


def test_consumer_cancel_notification_on_queue_delete(conn, ch, unique_name):
    q = ch.queue_declare(unique_name).method.queue
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = ch.basic_consume(q, lambda *a: None)
    assert ch.consumer_tags == [tag]
    conn.channel().queue_delete(q)
    deadline = time.monotonic() + TIMEOUT
    while not cancelled and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert [m.consumer_tag for m in cancelled] == [tag]
    assert isinstance(cancelled[0], pika.spec.Basic.Cancel)
    assert ch.consumer_tags == [] and ch.is_open


# ------------------------------------------------------------------ connection level


def test_heartbeat_keeps_idle_connection_alive(broker, unique_name):
    params = pika.URLParameters(broker.uri_with(query="heartbeat=1"))
    c = pika.BlockingConnection(params)
    try:
        assert c._impl.params.heartbeat == 1  # negotiated value
        c.sleep(3.5)  # idle, but pika's I/O loop answers and sends heartbeats
        assert c.is_open
        chan = c.channel()
        q = chan.queue_declare("", exclusive=True).method.queue
        chan.basic_publish("", q, b"alive")
        assert wait_get(chan, q)[2] == b"alive"
    finally:
        c.close()


def test_server_capabilities(conn):
    assert conn.publisher_confirms_supported
    assert conn.basic_nack_supported
    assert conn.consumer_cancel_notify_supported
    assert conn.exchange_exchange_bindings_supported
    caps = conn._impl.server_capabilities
    for cap in ("connection.blocked", "authentication_failure_close", "per_consumer_qos"):
        assert caps.get(cap) is True, cap


def test_wrong_password_is_access_refused(broker):
    params = pika.URLParameters(broker.uri_with(password="definitely-wrong"))
    params.connection_attempts = 1
    with pytest.raises((pe.ProbableAuthenticationError, pe.AuthenticationError)) as info:
        pika.BlockingConnection(params)
    assert "403" in str(info.value) and "ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost_is_530_not_allowed(broker, unique_name):
    params = pika.URLParameters(broker.uri_with(vhost=unique_name))
    with pytest.raises(pe.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "530" in str(info.value) and "NOT_ALLOWED" in str(info.value)


def test_one_mib_message_intact(ch, declare, unique_name):
    q = declare(unique_name)
    body = bytes(range(256)) * 4096  # 1 MiB, spans many frames at frame_max 131072
    ch.basic_publish("", q, body, pika.BasicProperties(content_type="application/octet-stream"))
    method, props, got = wait_get(ch, q)
    assert len(got) == len(body) and got == body
    assert props.content_type == "application/octet-stream"

