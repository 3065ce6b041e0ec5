"""Larger than RAM (issue 4) as pika sees it, plus the disk alarm.

Covers: with a small ``--queue-memory-budget`` a durable queue holding 20,000 persistent 1 KiB
messages makes the broker's RSS grow far less than the data it holds (bodies beyond the budget stay
on disk), and a consumer still gets every message intact and in order; with ``--disk-free-limit``
above the free space of the data directory's file system, a publishing pika connection gets
Connection.Blocked (RabbitMQ "Disk Alarms", "Blocked Connection Notifications"). Both need private
broker processes (``broker_factory``), so they are skipped against an external broker.
"""

from __future__ import annotations

import time

import pika
import psutil
import pytest

COUNT = 20_000
SIZE = 1024
BUDGET = 1024 * 1024


def _body(i: int) -> bytes:
    return (b"%08d" % i).ljust(SIZE, b".")


def _wait_for_depth(ch, queue: str, count: int, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ch.queue_declare(queue, durable=True, passive=True).method.message_count >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"queue {queue} did not reach {count} messages")


@pytest.mark.timeout(180)
def test_backlog_beyond_the_budget_stays_on_disk_and_comes_back_intact(broker_factory):
    broker = broker_factory("--queue-memory-budget", str(BUDGET))
    proc = psutil.Process(broker.pid)
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    ch = conn.channel()
    ch.queue_declare("backlog", durable=True)
    props = pika.BasicProperties(delivery_mode=2)
    # Warm up the paths (first page-in, buffers) so the baseline is not the bare interpreter.
    for _ in range(200):
        ch.basic_publish("", "backlog", b"w" * SIZE, props)
    ch.queue_purge("backlog")
    time.sleep(0.5)
    before = proc.memory_info().rss
    for i in range(COUNT):
        ch.basic_publish("", "backlog", _body(i), props)
    _wait_for_depth(ch, "backlog", COUNT)
    time.sleep(0.5)
    grown = proc.memory_info().rss - before
    data = COUNT * SIZE
    assert grown < data / 3, f"RSS grew {grown / 2**20:.1f} MiB for {data / 2**20:.1f} MiB of data"

    ch.basic_qos(prefetch_count=500)
    got = 0
    for method, _props, body in ch.consume("backlog", inactivity_timeout=10):
        assert method is not None, f"stalled after {got} messages"
        assert body == _body(got), f"message {got} differs"
        got += 1
        if got % 500 == 0 or got == COUNT:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == COUNT:
            break
    ch.cancel()
    assert ch.queue_declare("backlog", durable=True, passive=True).method.message_count == 0
    conn.close()


@pytest.mark.timeout(60)
def test_disk_alarm_blocks_a_publisher(broker_factory):
    broker = broker_factory("--disk-free-limit", str(1 << 62))  # more than any disk has free
    reasons: list[str] = []
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    conn.add_on_connection_blocked_callback(lambda _c, frame: reasons.append(frame.method.reason))
    ch = conn.channel()
    ch.queue_declare("disk-alarm")  # not blocked before publishing: RabbitMQ tells publishers
    ch.basic_publish("", "disk-alarm", b"one")
    end = time.monotonic() + 10
    while not reasons and time.monotonic() < end:
        conn.process_data_events(0.1)
    assert reasons == ["low on disk"]
    # A blocked publishing connection is no longer read (so a graceful close would wait for the
    # alarm to clear, as with RabbitMQ); the broker is stopped with the connection still open.
