"""A delivery larger than the output high-water mark leaves the connection in writes of about 1 MiB
(``Connection.take_output``) as the socket takes them, not as one copy of the whole body, and a body
of several frames comes out intact (issue 28)."""

from __future__ import annotations

import os

from pamqp import commands as cmd
from pamqp import frame

from amqp_broker.core.connection import TAKE_MAX

from .client import Client


def test_a_large_delivery_is_taken_in_bounded_writes(make_client) -> None:
    cl: Client = make_client()
    conn = cl.conn
    assert conn is not None
    cl.declare_queue(1, "big")
    body = os.urandom(5 * 1024 * 1024 + 7)
    cl.publish(1, "", "big", body)
    cl.frames()  # nothing but what the publish needed
    woken = []
    conn.on_writable = lambda: woken.append(1)
    cl.send(1, cmd.Basic.Consume(queue="big", consumer_tag="t", no_ack=True))
    takes = []
    for _ in range(100):  # bounded: 5 MiB in ~1 MiB takes
        piece = conn.take_output()
        if not piece:
            break
        takes.append(piece)
    # 1 MiB (and a frame) at a time while more than the high-water mark (4 MiB) waits, then the rest
    assert len(takes) >= 2 and len(takes[0]) <= TAKE_MAX + 131072
    assert all(len(piece) <= conn.high_water + 131072 for piece in takes)
    assert len(woken) >= len(takes) - 1   # the I/O layer is woken for each rest
    data = b"".join(takes)
    got = b""
    while data:
        consumed, _channel, value = frame.unmarshal(data)
        data = data[consumed:]
        if value.name == "ContentBody":
            got += value.value
    assert got == body


def test_output_parts_keep_large_bodies_apart_and_join_the_small_frames(make_client) -> None:
    """``take_output_parts`` (what the plain socket writes with one ``writev``): three deliveries
    of 64 KiB bodies come as the bodies themselves, each a buffer of its own (not copied into one
    joined write), between buffers of the small frames around them; in order they are the bytes
    ``take_output`` would have joined."""
    cl: Client = make_client()
    conn = cl.conn
    assert conn is not None
    cl.declare_queue(1, "parts")
    bodies = [os.urandom(65536) for _ in range(3)]
    for body in bodies:
        cl.publish(1, "", "parts", body)
    cl.frames()
    cl.send(1, cmd.Basic.Consume(queue="parts", consumer_tag="t", no_ack=True))
    parts = conn.take_output_parts()
    large = [bytes(p) for p in parts if len(p) >= 4096]
    assert large == bodies
    assert all(len(p) < 4096 for p in parts if len(p) < 65536)
    assert len(parts) <= 2 * len(bodies) + 1   # small frames joined between the bodies
    data = b"".join(parts)
    got = []
    while data:
        consumed, _channel, value = frame.unmarshal(data)
        data = data[consumed:]
        if value.name == "ContentBody":
            got.append(value.value)
    assert got == bodies
    assert conn.take_output_parts() == [] and conn.take_output() == b""
