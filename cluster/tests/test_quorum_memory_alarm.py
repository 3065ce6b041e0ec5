"""What the memory alarm counts for a quorum queue and a stream (``Broker.queue_memory``): the
messages they hold in RAM, not their backlog on disk. Found by ``benchmarks.quorum_rss`` at 10
million 1 KiB messages: with no ``in_memory`` a quorum queue counted every ready body plus 512 B
a message, so at about 7 million (10.7 GB "in memory" against the default watermark of 0.4 of
24 GiB) the alarm blocked the publishers for good, while the broker's RSS was about 40 B a
message; a stream counted 512 B a message too (the alarm at some 20 million). RabbitMQ's quorum
queues keep bodies on disk and count only what is in memory ("Quorum Queues", memory use)."""

from __future__ import annotations

from pathlib import Path

from amqp_broker.core.broker import Broker
from cluster.tests.quorum_fake import Net
from queues.arguments import QueueSettings
from queues.message import Message
from queues.stream.log import StreamLog
from queues.stream.queue import StreamQueue

COUNT = 2000
SIZE = 1024


def _not_read(index: int) -> tuple[bytes, bytes]:
    raise AssertionError(f"body {index} read: nothing consumes in this test")


def test_a_paged_quorum_backlog_counts_its_records_not_its_bodies() -> None:
    net = Net(("a",))
    net.run_until(lambda: net.leader() is not None)
    member = net.members["a"]
    fifo = member.group.machine.fifo
    fifo.read = _not_read                 # paging on, as quorum_paging.page does
    fifo.page_bytes = 64 * SIZE
    for i in range(COUNT):
        member.queue.publish(Message.build("", "q", str(i).encode().ljust(SIZE, b".")))
        if i % 100 == 99:
            net.step()
    net.run_until(lambda: member.queue.message_count == COUNT)
    counted = Broker.queue_memory(member.queue)
    assert counted <= fifo.page_bytes + COUNT * Broker.PAGED_OVERHEAD + 64 * Broker.MESSAGE_OVERHEAD
    assert counted < COUNT * SIZE // 10   # the bodies (2 MB) are in the log, not counted


def test_an_unpaged_quorum_queue_counts_every_body() -> None:
    net = Net(("a",))
    net.run_until(lambda: net.leader() is not None)
    member = net.members["a"]
    for _ in range(100):
        member.queue.publish(Message.build("", "q", b"x" * SIZE))
    net.run_until(lambda: member.queue.message_count == 100)
    assert Broker.queue_memory(member.queue) == 100 * (SIZE + Broker.MESSAGE_OVERHEAD)


def test_a_stream_counts_no_message_in_memory(tmp_path: Path) -> None:
    log = StreamLog(tmp_path)
    stream = StreamQueue("s", QueueSettings(), log, clock=lambda: 0)
    for i in range(COUNT):
        log.append(Message.build("", "s", str(i).encode().ljust(SIZE, b".")))
    assert stream.message_count == COUNT
    assert Broker.queue_memory(stream) == COUNT * Broker.PAGED_OVERHEAD
    log.close()
