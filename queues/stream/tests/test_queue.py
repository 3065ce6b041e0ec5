"""Tests of ``StreamQueue``: consumers at first/last/next/numeric/timestamp offsets each get the right
messages with ``x-stream-offset``, prefetch credit is respected and acks only return credit,
requeue redelivers nothing, publish from inside a delivery, retention through ``expire``, delete
removes the files, and argument validation (``stream_settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queues.arguments import parse_arguments
from queues.entry import QueueEntry
from queues.errors import InvalidArgument, QueueDeleted
from queues.message import Message
from queues.protocols import PublishResult
from queues.stream.log import StreamLog
from queues.stream.queue import OffsetSpec, StreamQueue, StreamSettings, stream_settings
from queues.tests.fakes import FakeClock, FakeConsumer

from .test_log import Clock, body_index, msg


class ArgConsumer(FakeConsumer):
    """A FakeConsumer with Basic.Consume arguments (where the queue reads x-stream-offset)."""

    def __init__(self, tag: str, offset: object = None, prefetch: int = 10) -> None:
        super().__init__(tag, prefetch=prefetch)
        self.arguments = {} if offset is None else {"x-stream-offset": offset}

    def ack_all(self, q: StreamQueue) -> None:
        for entry in self.unacked:
            q.ack(entry)
        self.unacked.clear()


def make(tmp_path: Path, **log_args: Any) -> tuple[StreamQueue, Clock]:
    wall = Clock()
    log = StreamLog(tmp_path / "s", wall_clock=wall, **log_args)
    q = StreamQueue("s", parse_arguments({"x-queue-type": "stream"}), log,
                    arguments={"x-queue-type": "stream"}, clock=FakeClock(), wall_clock=wall)
    return q, wall


def drain(q: StreamQueue, c: ArgConsumer, rounds: int = 1000) -> list[int]:
    """Ack and dispatch until nothing more comes; returns offsets received."""
    for _ in range(rounds):
        c.ack_all(q)
        if not q.dispatch():
            break
    return [e.seq for e in c.delivered]


def test_offsets_first_last_next_numeric(tmp_path: Path) -> None:
    q, _ = make(tmp_path)
    for i in range(20):
        assert q.publish(msg(i)) is PublishResult.ROUTED
    first, last, nxt, num = (ArgConsumer("a", "first"), ArgConsumer("b", "last"),
                             ArgConsumer("c", "next"), ArgConsumer("d", 15))
    for c in (first, last, nxt, num):
        q.add_consumer(c)
    assert q.consumer_count == 4 and q.message_count == 20 and q.length == 20
    assert [e.seq for e in first.delivered] == list(range(10))  # prefetch 10
    assert drain(q, first) == list(range(20))
    assert drain(q, last) == [19]
    assert drain(q, nxt) == []
    assert drain(q, num) == [15, 16, 17, 18, 19]
    for i in range(20, 25):
        q.publish(msg(i))
    assert drain(q, nxt) == [20, 21, 22, 23, 24]
    assert drain(q, first)[-1] == 24
    for c in (first, last, nxt, num):
        got = c.delivered
        assert [e.message.headers["x-stream-offset"] for e in got] == [e.seq for e in got]
        assert [body_index(e.message) for e in got] == [e.seq for e in got]
        assert all(not e.redelivered for e in got)


def test_numeric_offset_clamped_and_timestamp(tmp_path: Path) -> None:
    q, wall = make(tmp_path)
    for i in range(10):
        wall.now = 1_000.0 + i
        q.publish(msg(i))
    far, behind = ArgConsumer("far", 1000), ArgConsumer("neg", -3)
    q.add_consumer(far)
    q.add_consumer(behind)
    assert far.delivered == [] and q.consumer_offset(far) == 10
    assert [e.seq for e in behind.delivered] == list(range(10))
    import datetime
    ts = ArgConsumer("ts", datetime.datetime.fromtimestamp(1_006, datetime.UTC))
    q.add_consumer(ts)
    assert [e.seq for e in ts.delivered] == [6, 7, 8, 9]
    wall.now = 1_009.5
    interval = ArgConsumer("iv", "2s")
    q.add_consumer(interval)
    assert [e.seq for e in interval.delivered] == [8, 9]


def test_acks_only_return_credit_and_requeue_redelivers_nothing(tmp_path: Path) -> None:
    q, _ = make(tmp_path)
    c = ArgConsumer("c", "first", prefetch=3)
    q.add_consumer(c)
    for i in range(10):
        q.publish(msg(i))
    assert [e.seq for e in c.delivered] == [0, 1, 2] and q.unacked_count == 3
    q.requeue_many(c.unacked)  # nack requeue=true: settled, not redelivered
    c.unacked.clear()
    q.dispatch()
    assert [e.seq for e in c.delivered] == [0, 1, 2, 3, 4, 5]
    q.reject(c.unacked.pop())
    q.ack(c.unacked.pop())
    q.dispatch()
    assert [e.seq for e in c.delivered] == list(range(8))
    assert q.length == 10  # nothing was removed
    other = ArgConsumer("o", "first", prefetch=100)
    q.add_consumer(other)
    assert [e.seq for e in other.delivered] == list(range(10))


def test_remove_consumer_and_publish_from_delivery(tmp_path: Path) -> None:
    q, _ = make(tmp_path)

    class Republisher(ArgConsumer):
        def deliver(self, queue: Any, entry: QueueEntry) -> None:
            super().deliver(queue, entry)
            if entry.seq < 5:
                queue.publish(msg(entry.seq + 100))

    c = Republisher("r", "next", prefetch=100)
    q.add_consumer(c)
    q.publish(msg(0))
    assert [e.seq for e in c.delivered] == [0, 1, 2, 3, 4, 5]
    assert q.remove_consumer(c) and not q.remove_consumer(c)
    q.publish(msg(9))
    assert len(c.delivered) == 6 and q.consumer_count == 0


def test_lagging_consumer_reads_from_disk(tmp_path: Path) -> None:
    q, _ = make(tmp_path, max_segment_bytes=4096, cache_bytes=200)
    for i in range(500):
        q.publish(msg(i, 30))
    c = ArgConsumer("c", 3, prefetch=50)
    q.add_consumer(c)
    assert drain(q, c) == list(range(3, 500))


def test_retention_and_consumer_behind_the_head(tmp_path: Path) -> None:
    q, wall = make(tmp_path, max_segment_bytes=4096, max_age_ms=10_000)
    slow = ArgConsumer("slow", "first", prefetch=1)
    q.add_consumer(slow)
    for i in range(300):
        q.publish(msg(i, 40))
    assert q.next_expiry() is None
    wall.now += 11
    q.publish(msg(300, 40))
    assert q.next_expiry() is not None
    assert q.expire() > 0 and q.log.first_offset > 0
    slow.ack_all(q)
    q.dispatch()
    # the delivered batch was already in memory; after it the reader jumps to the head
    offsets = drain(q, slow)
    assert offsets[-1] == 300 and q.log.first_offset in offsets


def test_delete_removes_files(tmp_path: Path) -> None:
    q, _ = make(tmp_path)
    c = ArgConsumer("c", "first")
    q.add_consumer(c)
    q.publish(msg(1))
    assert q.delete() == [] and q.deleted and q.consumer_count == 0
    assert not (tmp_path / "s").exists()
    with pytest.raises(QueueDeleted):
        q.publish(msg(2))
    with pytest.raises(QueueDeleted):
        q.add_consumer(ArgConsumer("d"))


def test_stream_settings() -> None:
    assert stream_settings({"x-queue-type": "stream"}) == StreamSettings()
    s = stream_settings({"x-max-length-bytes": 1000, "x-max-age": "7D",
                         "x-stream-max-segment-size-bytes": 5000})
    assert s == StreamSettings(1000, 7 * 86_400_000, 5000)
    for name, value in (("x-message-ttl", 1), ("x-max-length", 1), ("x-expires", 1),
                        ("x-dead-letter-exchange", "x"), ("x-single-active-consumer", True),
                        ("x-max-priority", 3), ("x-overflow", "drop-head")):
        with pytest.raises(InvalidArgument) as exc:
            stream_settings({name: value})
        assert exc.value.argument == name and exc.value.reason == "not allowed"
    with pytest.raises(InvalidArgument):
        stream_settings({"x-stream-max-segment-size-bytes": "abc"})
    with pytest.raises(InvalidArgument):
        stream_settings({"x-max-age": "1x"})


def test_explicit_offset_spec_and_duplicate_consumer(tmp_path: Path) -> None:
    q, _ = make(tmp_path)
    for i in range(5):
        q.publish(Message.build("", "s", str(i).encode()))
    c = ArgConsumer("c", "next")
    q.add_consumer(c, OffsetSpec("offset", 2))
    assert [e.seq for e in c.delivered] == [2, 3, 4]
    with pytest.raises(ValueError):
        q.add_consumer(c)
