"""Large message bodies come back byte for byte, in order, against both brokers.

Covers the large-body paths of the broker (issue 14, 64 KiB): body frames that straddle socket
reads, deliveries of bodies over 8 KiB written as separate buffers in one gather write, bodies
split into several frames on the way in and out (a consumer's frame_max of 4096 cuts a 64 KiB
body into 17 frames), and a burst of them queued before the consumer starts, so that one write
carries many. Source: AMQP 0-9-1 §4.2.6 (content framing), RabbitMQ "Frame size".
"""

from __future__ import annotations

import os

import pika
import pytest

#: Around the broker's thresholds: over LARGE_BODY (8192), exactly one 131072-byte frame's body,
#: one byte more (two frames), several frames; small ones in between.
SIZES = [8193, 65536, 131064, 131065, 300000, 16, 1024, 65536]


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_burst_of_large_bodies_round_trips_intact(broker, unique_name, frame_max):
    bodies = [os.urandom(size) for size in SIZES * 3]
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri_with(
        query=f"frame_max={frame_max}")))
    try:
        ch = conn.channel()
        ch.queue_declare(unique_name, auto_delete=True)
        for body in bodies:
            ch.basic_publish("", unique_name, body)
        got: list[bytes] = []
        for method, _props, body in ch.consume(unique_name, auto_ack=True,
                                               inactivity_timeout=15):
            if method is None:
                break
            got.append(body)
            if len(got) == len(bodies):
                break
        ch.cancel()
        assert [len(b) for b in got] == [len(b) for b in bodies]
        assert got == bodies
    finally:
        conn.close()
