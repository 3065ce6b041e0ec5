"""Flow control: a publisher that floods faster than the broker can hold is slowed, not buffered.

Covers: the memory alarm (RabbitMQ "Memory Alarms" and "Blocked Connection Notifications"): above
the high watermark publishing connections stop being read and clients that announced the
``connection.blocked`` capability get Connection.Blocked, then Connection.Unblocked once consumers
drained the queue; a raw-socket flooder cannot push the broker's memory past the watermark plus a
bounded slack; a consumer that does not read its socket cannot make the broker buffer without bound
(credit flow: its deliveries stop at the connection's high-water mark); a non-publishing connection
keeps working during the alarm. Source: DESIGN.md §5 (anyio does not pause reading by itself).
"""

from __future__ import annotations

import socket
import time

import pika
import psutil
import pytest
from pamqp import commands

from interop_tests.rawamqp import FRAME_BODY, FRAME_HEADER, connect_and_handshake, raw_frame

WATERMARK = 64 * 1024 * 1024
SLACK = 160 * 1024 * 1024  # interpreter, socket buffers, one read chunk, one 50 ms check interval
BODY = 64 * 1024


def _publish_bytes(queue: str, count: int) -> bytes:
    method = raw_frame(1, 1, b"\x00\x3c\x00\x28\x00\x00\x00" + bytes([len(queue)]) + queue.encode()
                       + b"\x00")
    header = raw_frame(FRAME_HEADER, 1, b"\x00\x3c\x00\x00" + BODY.to_bytes(8, "big") + b"\x00\x00")
    body = raw_frame(FRAME_BODY, 1, b"x" * BODY)
    return (method + header + body) * count


def _ready_count(uri: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


@pytest.mark.timeout(90)
def test_flooding_publisher_is_blocked_and_memory_stays_bounded(broker_factory):
    broker = broker_factory("--memory-high-watermark", str(WATERMARK))
    proc = psutil.Process(broker.pid)
    queue = "flood"
    raw = connect_and_handshake(broker.host, broker.port, frame_max=131072)
    raw.send_method(commands.Queue.Declare(queue=queue), 1)
    assert isinstance(raw.read_method()[1], commands.Queue.DeclareOk)

    # A well-behaved pika publisher announcing connection.blocked sees Blocked, then Unblocked.
    notices: list[str] = []
    watcher = pika.BlockingConnection(pika.URLParameters(broker.uri))
    watcher.add_on_connection_blocked_callback(lambda *_: notices.append("blocked"))
    watcher.add_on_connection_unblocked_callback(lambda *_: notices.append("unblocked"))
    watcher.channel().basic_publish("", queue, b"first")

    batch = _publish_bytes(queue, 16)  # 1 MiB per send
    sent = 0
    peak_rss = 0
    progress: list[tuple[float, int]] = []
    start = time.monotonic()
    while time.monotonic() - start < 10 and sent < 3 * 1024 ** 3:
        sent += raw.send_draining(batch, timeout=0.25)
        progress.append((time.monotonic(), sent))
        peak_rss = max(peak_rss, proc.memory_info().rss)
        watcher.process_data_events(0)
    # The flooder wrote freely at first, then made no progress for its last seconds.
    late = [n for t, n in progress if t > start + 7]
    assert late and late[-1] - late[0] < 8 * 1024 * 1024, "the flooder was never slowed"
    assert sent < WATERMARK + SLACK, f"the broker accepted {sent / 2**20:.0f} MiB"
    assert peak_rss < WATERMARK + SLACK, f"broker RSS reached {peak_rss / 2**20:.0f} MiB"
    held = _ready_count(broker.uri, queue) * BODY
    assert held < WATERMARK + 32 * 1024 * 1024, f"queue holds {held / 2**20:.0f} MiB"
    end = time.monotonic() + 5
    while "blocked" not in notices and time.monotonic() < end:
        watcher.process_data_events(0.1)
    assert "blocked" in notices

    # A consumer (a connection that does not publish) still works and drains the queue; the alarm
    # clears, the publisher is unblocked and the broker reads the flooder again.
    raw.close()
    consumer = pika.BlockingConnection(pika.URLParameters(broker.uri))
    ch = consumer.channel()
    drained = 0
    end = time.monotonic() + 30
    while time.monotonic() < end:
        method, _props, _body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        drained += 1
    assert drained > 0
    end = time.monotonic() + 5
    while "unblocked" not in notices and time.monotonic() < end:
        watcher.process_data_events(0.1)
    assert notices[:2] == ["blocked", "unblocked"]
    consumer.close()
    watcher.close()


@pytest.mark.timeout(60)
def test_consumer_that_never_reads_does_not_make_the_broker_buffer(broker_factory):
    broker = broker_factory("--memory-high-watermark", "0")
    proc = psutil.Process(broker.pid)
    queue = "slow-reader"
    setup = pika.BlockingConnection(pika.URLParameters(broker.uri))
    setup.channel().queue_declare(queue)
    # A raw consumer with no_ack that never reads its socket.
    sleeper = connect_and_handshake(broker.host, broker.port)
    sleeper.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sleeper.send_method(commands.Basic.Consume(queue=queue, no_ack=True), 1)
    publisher = connect_and_handshake(broker.host, broker.port)
    total = 0
    batch = _publish_bytes(queue, 16)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and total < 1024 ** 3:
        total += publisher.send_draining(batch, timeout=0.25)
    # Messages beyond the sleeper's credit stay in the queue (and count for the alarm), they are
    # not encoded into an ever-growing output buffer.
    ready = setup.channel().queue_declare(queue, passive=True).method.message_count
    assert ready * BODY > total // 2, "deliveries piled up in the broker's output buffer"
    assert proc.memory_info().rss < total + 200 * 1024 * 1024
    sleeper.close()
    publisher.close()
    setup.close()


def test_a_consumer_that_stops_reading_gets_everything_once_it_reads_again(broker, unique_name):
    # A no-ack consumer whose client stops reading its socket: the broker holds the deliveries
    # back (TCP back pressure) while a publisher on another connection goes on and is confirmed;
    # once the consumer reads again it gets every message, in order.
    reader = pika.BlockingConnection(pika.URLParameters(broker.uri))
    publisher = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        rch = reader.channel()
        rch.queue_declare(unique_name, auto_delete=True)
        got: list[bytes] = []
        rch.basic_consume(unique_name, lambda _c, _m, _p, body: got.append(body[:8]),
                          auto_ack=True)
        pch = publisher.channel()
        pch.confirm_delivery()
        pad = b"." * (16384 - 8)
        for i in range(1500):   # 24 MiB, more than the socket buffers hold
            pch.basic_publish("", unique_name, b"%08d" % i + pad)
        deadline = time.monotonic() + 60
        while len(got) < 1500 and time.monotonic() < deadline:
            reader.process_data_events(time_limit=0.2)
        assert got == [b"%08d" % i for i in range(1500)]
    finally:
        reader.close()
        publisher.close()
