"""Stream queues (``x-queue-type: stream``) seen from pika, with RabbitMQ's semantics.

Covers (issue 4; "RabbitMQ: Streams"; every expectation here also passes against RabbitMQ 3.10 with
``AMQP_TEST_URI``, except the tests marked ours-only): declaration rules (406 for non-durable,
exclusive, auto-delete and arguments of other queue types), publishing with confirms, consumers at
"first", "last", "next", a numeric offset, a timestamp and an interval, each reading independently
with ``x-stream-offset`` headers; prefetch credit (acks return credit, nothing is removed; nack with
requeue redelivers nothing); Basic.Get and no-ack consumers refused (540), consumers without a
prefetch refused (406); retention by x-max-length-bytes removes head segments; a kill -9 keeps the
stream and consumers resume from an offset. Every wait is bounded.
"""

from __future__ import annotations

import datetime
import time

import pika
import pytest

STREAM = {"x-queue-type": "stream"}
WAIT = 10.0  # seconds any single wait for deliveries may take


def _connect(uri: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(uri))


def _declare(ch, name: str, **arguments) -> None:
    ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments})


def _publish(ch, name: str, bodies) -> None:
    """Publish with confirms (BlockingChannel waits for each confirm)."""
    for body in bodies:
        ch.basic_publish("", name, body)


class Reader:
    """A stream consumer on its own channel, collecting (offset, body, redelivered, tag)."""

    def __init__(self, conn, queue: str, offset, prefetch: int = 100, ack: bool = True) -> None:
        self.conn = conn
        self.ch = conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.ack = ack
        self.got: list[tuple[int, bytes, bool, int]] = []
        args = {} if offset is None else {"x-stream-offset": offset}
        self.tag = self.ch.basic_consume(queue, self._on, auto_ack=False, arguments=args)

    def _on(self, ch, method, props, body) -> None:
        self.got.append((props.headers["x-stream-offset"], body, method.redelivered,
                         method.delivery_tag))
        if self.ack:
            ch.basic_ack(method.delivery_tag)

    def wait_for(self, count: int, timeout: float = WAIT) -> list[tuple[int, bytes, bool, int]]:
        """Pump I/O until ``count`` deliveries arrived or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.05)
        return self.got

    def wait_for_body(self, body: bytes, timeout: float = WAIT) -> list[tuple[int, bytes, bool, int]]:
        """Pump I/O until a delivery with ``body`` arrived or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while not any(g[1] == body for g in self.got) and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.05)
        return self.got

    def settle(self, seconds: float) -> list[tuple[int, bytes, bool, int]]:
        """Pump I/O for ``seconds`` (to see that nothing more arrives)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.05)
        return self.got

    def offsets(self) -> list[int]:
        return [g[0] for g in self.got]


@pytest.fixture
def conn(broker):
    c = _connect(broker.uri)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def stream(conn, unique_name):
    ch = conn.channel()
    _declare(ch, unique_name)
    yield unique_name
    if conn.is_open:
        conn.channel().queue_delete(unique_name)


def _refused(broker, action) -> tuple[int, str, bool]:
    """Run ``action(channel)`` on a fresh connection; (reply code, text, connection-level)."""
    c = _connect(broker.uri)
    try:
        action(c.channel())
        c.process_data_events(time_limit=0.3)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text, False
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return exc.reply_code, exc.reply_text, True
    finally:
        if c.is_open:
            c.close()
    raise AssertionError("the broker accepted it")


# --- declaration ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, arguments, needle", [
    ({"durable": False}, {}, "invalid property 'non-durable'"),
    ({"durable": True, "exclusive": True}, {}, "invalid property 'exclusive-owner'"),
    ({"durable": True, "auto_delete": True}, {}, "invalid property 'auto-delete'"),
    ({"durable": True}, {"x-message-ttl": 1000}, "invalid arg 'x-message-ttl'"),
    ({"durable": True}, {"x-max-length": 10}, "invalid arg 'x-max-length'"),
    ({"durable": True}, {"x-dead-letter-exchange": "dlx"}, "invalid arg 'x-dead-letter-exchange'"),
    ({"durable": True}, {"x-max-age": "1x"}, "invalid arg 'x-max-age'"),
    ({"durable": True}, {"x-initial-cluster-size": 0}, "invalid arg 'x-initial-cluster-size'"),
    ({"durable": True}, {"x-initial-cluster-size": "two"}, "invalid arg 'x-initial-cluster-size'"),
    ({"durable": True}, {"x-stream-max-segment-size-bytes": -1},
     "invalid arg 'x-stream-max-segment-size-bytes'"),
    ({"durable": True}, {"x-max-length-bytes": -5}, "invalid arg 'x-max-length-bytes'"),
    ({"durable": True}, {"x-queue-leader-locator": "nowhere"},
     "invalid arg 'x-queue-leader-locator'"),
])
def test_declare_refusals(broker, unique_name, kwargs, arguments, needle):
    code, text, connection_level = _refused(
        broker, lambda ch: ch.queue_declare(unique_name, arguments={**STREAM, **arguments},
                                            **kwargs))
    assert (code, connection_level) == (406, False)
    assert needle in text


def test_declare_equivalence(conn, unique_name):
    ch = conn.channel()
    _declare(ch, unique_name, **{"x-max-age": "7D", "x-max-length-bytes": 10**9})
    ok = ch.queue_declare(unique_name, durable=True, arguments={
        **STREAM, "x-max-age": "7D", "x-max-length-bytes": 10**9})
    assert ok.method.message_count == 0
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique_name, durable=True, arguments={**STREAM, "x-max-age": "1D",
                                                              "x-max-length-bytes": 10**9})
    assert info.value.reply_code == 406 and "x-max-age" in info.value.reply_text
    conn.channel().queue_delete(unique_name)


def test_message_count_is_the_number_of_messages_in_the_stream(conn, unique_name):
    """RabbitMQ 3.10 reports a stream's length in Declare-Ok (passive or not) and Delete-Ok
    counts nothing; its count follows the log a moment later, hence the bounded wait."""
    ch = conn.channel()
    _declare(ch, unique_name)
    ch.confirm_delivery()
    _publish(ch, unique_name, [b"a", b"b", b"c"])
    deadline = time.monotonic() + WAIT
    count = -1
    while count != 3 and time.monotonic() < deadline:
        count = ch.queue_declare(unique_name, passive=True).method.message_count
        if count != 3:
            time.sleep(0.1)
    assert count == 3
    assert ch.queue_declare(unique_name, durable=True,
                            arguments=STREAM).method.message_count == 3
    assert ch.queue_delete(unique_name).method.message_count == 0


# --- consuming ------------------------------------------------------------------------------------
def test_consumers_at_offsets_get_the_right_messages(conn, stream):
    pub = conn.channel()
    pub.confirm_delivery()
    _publish(pub, stream, (f"m{i}".encode() for i in range(1000)))
    first = Reader(conn, stream, "first")
    numeric = Reader(conn, stream, 990)
    last = Reader(conn, stream, "last")
    nxt = Reader(conn, stream, "next")
    default = Reader(conn, stream, None)  # RabbitMQ's default is "next"
    first.wait_for(1000)
    numeric.wait_for(10)
    last.wait_for(1)
    assert first.offsets() == list(range(1000))
    assert [g[1] for g in first.got] == [f"m{i}".encode() for i in range(1000)]
    assert numeric.offsets() == list(range(990, 1000))
    assert last.offsets()[0] <= 999 and last.offsets()[-1] == 999
    assert nxt.settle(0.3) == [] and default.got == []
    assert not any(g[2] for g in first.got)  # never redelivered
    _publish(pub, stream, [b"n0", b"n1", b"n2"])
    for reader in (nxt, default):
        reader.wait_for(3)
        assert [(o, b) for o, b, _, _ in reader.got] == [(1000, b"n0"), (1001, b"n1"),
                                                          (1002, b"n2")]
    assert first.wait_for(1003)[-1][:2] == (1002, b"n2")


def test_timestamp_and_interval_offsets(conn, stream):
    pub = conn.channel()
    pub.confirm_delivery()
    _publish(pub, stream, (b"old%d" % i for i in range(50)))
    time.sleep(1.2)
    ts = datetime.datetime.fromtimestamp(int(time.time()) + 1, datetime.UTC)
    while time.time() < ts.timestamp() + 0.05:  # bounded: at most ~2 s
        time.sleep(0.05)
    _publish(pub, stream, (b"new%d" % i for i in range(20)))
    at_ts = Reader(conn, stream, ts)
    got = at_ts.wait_for(70, timeout=2.0)
    bodies = [g[1] for g in got]
    assert bodies[-20:] == [b"new%d" % i for i in range(20)]
    assert all(b.startswith(b"old") for b in bodies[:-20])  # RabbitMQ: chunk granularity
    recent = Reader(conn, stream, "1h")  # an interval: everything from the last hour
    assert len(recent.wait_for(70)) == 70


def test_prefetch_credit_and_acks_remove_nothing(conn, stream):
    pub = conn.channel()
    pub.confirm_delivery()
    _publish(pub, stream, (b"%d" % i for i in range(30)))
    slow = Reader(conn, stream, "first", prefetch=5, ack=False)
    assert len(slow.settle(0.5)) == 5  # credit exhausted
    slow.ch.basic_ack(slow.got[-1][3], multiple=True)
    slow.wait_for(10)
    assert len(slow.settle(0.3)) == 10
    assert slow.offsets() == list(range(10))
    slow.ch.basic_ack(slow.got[-1][3], multiple=True)
    again = Reader(conn, stream, "first")  # acks removed nothing
    assert again.wait_for(30) and again.offsets() == list(range(30))


@pytest.mark.parametrize("settle", ["nack", "reject"])
def test_nack_and_reject_refused(broker, stream, settle):
    """RabbitMQ refuses Basic.Nack / Basic.Reject of stream deliveries: 540, connection error."""
    c = _connect(broker.uri)
    pub = c.channel()
    pub.confirm_delivery()
    _publish(pub, stream, [b"a", b"b"])
    reader = Reader(c, stream, "first", prefetch=1, ack=False)
    tag = reader.wait_for(1)[0][3]
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        if settle == "nack":
            reader.ch.basic_nack(tag, requeue=True)
        else:
            reader.ch.basic_reject(tag, requeue=False)
        reader.settle(1.0)
    assert info.value.reply_code == 540
    assert "basic.nack and basic.reject not supported" in info.value.reply_text


def test_basic_get_noack_and_missing_prefetch_refused(broker, stream):
    code, text, conn_level = _refused(broker, lambda ch: ch.basic_get(stream))
    assert (code, conn_level) == (540, True) and "basic.get not supported" in text

    def no_ack(ch):
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(stream, lambda *a: None, auto_ack=True)
    code, text, conn_level = _refused(broker, no_ack)
    assert (code, conn_level) == (540, True) and "automatic acknowledgement" in text
    code, text, conn_level = _refused(
        broker, lambda ch: ch.basic_consume(stream, lambda *a: None, auto_ack=False))
    assert (code, conn_level) == (406, False) and "prefetch count is not set" in text

    def global_only(ch):
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume(stream, lambda *a: None, auto_ack=False)
    assert _refused(broker, global_only)[:2] == (406, "PRECONDITION_FAILED - consumer prefetch "
                                                 f"count is not set for 'queue '{stream}' in "
                                                 "vhost '/''")


def test_purge_of_a_stream_refused(broker, stream):
    code, _text, conn_level = _refused(broker, lambda ch: ch.queue_purge(stream))
    assert (code, conn_level) == (540, True)


def test_retention_by_max_length_bytes_drops_head_segments(broker, conn, unique_name):
    ch = conn.channel()
    _declare(ch, unique_name, **{"x-max-length-bytes": 20_000,
                                 "x-stream-max-segment-size-bytes": 5_000})
    ch.confirm_delivery()
    _publish(ch, unique_name, (b"%05d" % i + b"." * 495 for i in range(300)))
    deadline = time.monotonic() + WAIT
    first_offset = 0
    while time.monotonic() < deadline:  # RabbitMQ applies retention asynchronously
        # A connection of its own, closed without cancelling: pika's channel close would nack
        # the pending deliveries, which RabbitMQ refuses on streams (540).
        # Prefetch 1 without acking: nothing is left pending when it closes.
        own = _connect(broker.uri)
        got = Reader(own, unique_name, "first", prefetch=1, ack=False).wait_for(1, timeout=2.0)
        first_offset = got[0][0] if got else 0
        own.close()
        if first_offset > 0:
            break
        ch.basic_publish("", unique_name, b"tick")
    assert first_offset > 200  # about 20 KB of the 150 KB published remain (RabbitMQ's
    # offsets may run a little past the message count: only their order is compared)
    ch.basic_publish("", unique_name, b"end")
    reader = Reader(conn, unique_name, 0)  # an offset behind the head starts at the head
    got = reader.wait_for_body(b"end")
    assert got[0][0] >= first_offset and got[-1][1] == b"end"
    assert [g[0] for g in got] == sorted(g[0] for g in got)
    if broker.data_dir is not None:
        segments = list((broker.data_dir / "streams").rglob("*.seg"))
        assert 1 <= len(segments) <= 6
    conn.channel().queue_delete(unique_name)


# --- ours only: restart ---------------------------------------------------------------------------
def test_kill_9_keeps_the_stream_and_consumers_resume(broker, broker_factory, tmp_path):
    if broker.pid is None:
        pytest.skip("kills and restarts our broker processes (this is the RabbitMQ run, or AMQP_TEST_URI names an external broker)")
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    c = _connect(b.uri)
    ch = c.channel()
    _declare(ch, "s.restart", **{"x-stream-max-segment-size-bytes": 8_000})
    ch.confirm_delivery()
    _publish(ch, "s.restart", (b"r%d" % i for i in range(300)))
    b.kill()
    b = broker_factory(data_dir=data, port=b.port)
    c = _connect(b.uri)
    ch = c.channel()
    _declare(ch, "s.restart", **{"x-stream-max-segment-size-bytes": 8_000})
    reader = Reader(c, "s.restart", 150)
    got = reader.wait_for(150)
    assert [(o, body) for o, body, _, _ in got] == [(i, b"r%d" % i) for i in range(150, 300)]
    ch.confirm_delivery()
    _publish(ch, "s.restart", [b"after"])
    assert reader.wait_for(151)[-1][:2] == (300, b"after")
    c.close()
