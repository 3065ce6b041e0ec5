"""The plain listener (``server.plain_socket`` + ``connection_io.serve_plain``) over real sockets,
with a broker served by ``run_broker``: what a client sees of heartbeats, of input split at any
byte, of a client that stops reading, and of closing.

Heartbeats received while the reader waits skip the reader task (``Connection.heartbeat_received``);
these tests pin down that a client sending nothing but heartbeats stays connected (and one sending
nothing is dropped after two intervals, spec §4.2.7), and that heartbeat-shaped bytes in the middle
of a frame are still part of that frame.
"""

from __future__ import annotations

import asyncio
import struct

import anyio
import pytest
from pamqp import commands as cmd
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp.body import ContentBody

from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.conftest import SETTINGS
from amqp_broker.protocol.constants import HEARTBEAT_FRAME
from amqp_broker.server.listener import run_broker

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

_HEAD = struct.Struct(">BHI")


class Raw:
    """A raw AMQP client over asyncio streams (pamqp for the frames)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.heartbeats = 0

    @classmethod
    async def connect(cls, port: int, heartbeat: int) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        writer.write(b"AMQP\x00\x00\x09\x01")
        await raw.expect(cmd.Connection.Start)
        raw.send(0, cmd.Connection.StartOk(response="\0guest\0guest"))
        tune = await raw.expect(cmd.Connection.Tune)
        raw.send(0, cmd.Connection.TuneOk(tune.channel_max, tune.frame_max, heartbeat))
        raw.send(0, cmd.Connection.Open("/"))
        await raw.expect(cmd.Connection.OpenOk)
        return raw

    async def channel_with_queue(self, queue: str) -> None:
        """Open channel 1 and declare ``queue`` on it."""
        self.send(1, cmd.Channel.Open())
        await self.expect(cmd.Channel.OpenOk)
        self.send(1, cmd.Queue.Declare(queue=queue))
        await self.expect(cmd.Queue.DeclareOk)

    def send(self, channel: int, frame: object) -> None:
        self.writer.write(pframe.marshal(frame, channel))

    async def frame(self) -> tuple[int, object]:
        """The next frame other than a heartbeat (those are counted); EOF raises."""
        while True:
            head = await self.reader.readexactly(7)
            ftype, channel, size = _HEAD.unpack(head)
            rest = await self.reader.readexactly(size + 1)
            if ftype == 8:
                self.heartbeats += 1
                continue
            _, _, value = pframe.unmarshal(head + rest)
            return channel, value

    async def expect(self, kind: type) -> object:
        _, value = await self.frame()
        assert isinstance(value, kind), value
        return value

    async def closed_by_broker(self) -> bool:
        """Reads until the broker closes the socket: True when it did."""
        try:
            while True:
                await self.frame()
        except (asyncio.IncompleteReadError, ConnectionError):
            return True


async def serving(tg: anyio.abc.TaskGroup) -> tuple[Broker, int]:
    broker = Broker(SETTINGS)
    ready = anyio.Event()
    port: list[int] = []

    def on_ready(p: int) -> None:
        port.append(p)
        ready.set()

    tg.start_soon(run_broker, broker, "127.0.0.1", 0, on_ready)
    await ready.wait()
    return broker, port[0]


async def test_heartbeats_alone_keep_a_connection_open_and_silence_closes_it(anyio_backend):
    """Heartbeat 1 s: a client that sends only heartbeats for 3.5 s is still served afterwards and
    got the broker's heartbeats; a client that sends nothing is closed after two intervals."""
    async with anyio.create_task_group() as tg:
        broker, port = await serving(tg)
        beating = await Raw.connect(port, heartbeat=1)
        silent = await Raw.connect(port, heartbeat=1)
        reading = asyncio.ensure_future(beating.frame())
        for _ in range(7):
            beating.writer.write(HEARTBEAT_FRAME)
            await anyio.sleep(0.5)
        assert not reading.done()   # nothing but heartbeats came back
        beating.send(1, cmd.Channel.Open())
        with anyio.fail_after(5):
            channel, value = await reading
        assert (channel, type(value)) == (1, cmd.Channel.OpenOk)
        assert beating.heartbeats >= 3
        with anyio.fail_after(10):
            assert await silent.closed_by_broker()
        assert len(broker.connections) == 1
        beating.writer.close()
        tg.cancel_scope.cancel()


async def test_heartbeat_bytes_in_the_middle_of_a_frame_belong_to_the_frame(anyio_backend):
    """A publish whose body holds the heartbeat frame's 8 bytes, sent so that those bytes arrive
    on their own between the body's other bytes: the message is whole when fetched."""
    async with anyio.create_task_group() as tg:
        broker, port = await serving(tg)
        c = await Raw.connect(port, heartbeat=0)
        await c.channel_with_queue("hb-bytes")
        body = b"before" + HEARTBEAT_FRAME + b"after"
        wire = (pframe.marshal(cmd.Basic.Publish(routing_key="hb-bytes"), 1)
                + pframe.marshal(pheader.ContentHeader(0, len(body)), 1)
                + pframe.marshal(ContentBody(body), 1))
        cut = wire.index(HEARTBEAT_FRAME)
        for piece in (wire[:cut], wire[cut:cut + 8], wire[cut + 8:]):
            c.writer.write(piece)
            await c.writer.drain()
            await anyio.sleep(0.1)   # each piece its own read
        c.send(1, cmd.Basic.Get(queue="hb-bytes", no_ack=True))
        await c.expect(cmd.Basic.GetOk)
        await c.expect(pheader.ContentHeader)
        got = await c.expect(ContentBody)
        assert got.value == body
        c.writer.close()
        tg.cancel_scope.cancel()


async def test_a_client_that_stops_reading_gets_everything_once_it_reads(anyio_backend):
    """2,000 deliveries of 64 KiB to a consumer that reads nothing for a while (the kernel stops
    taking our writes): once it reads, every message arrives, in order, and the broker serves
    another client meanwhile."""
    async with anyio.create_task_group() as tg:
        broker, port = await serving(tg)
        c = await Raw.connect(port, heartbeat=0)
        await c.channel_with_queue("slow")
        c.send(1, cmd.Basic.Consume(queue="slow", no_ack=True))
        await c.expect(cmd.Basic.ConsumeOk)
        other = await Raw.connect(port, heartbeat=0)
        other.send(1, cmd.Channel.Open())
        await other.expect(cmd.Channel.OpenOk)
        count, size = 2000, 65536
        for i in range(count):
            body = i.to_bytes(4, "big") * (size // 4)
            other.send(1, cmd.Basic.Publish(routing_key="slow"))
            other.send(1, pheader.ContentHeader(0, size))
            other.send(1, ContentBody(body))
            if i % 50 == 49:
                await other.writer.drain()
        other.send(1, cmd.Queue.Declare(queue="still-served"))
        with anyio.fail_after(30):
            await other.expect(cmd.Queue.DeclareOk)
        got = []
        with anyio.fail_after(60):
            while len(got) < count:
                _, value = await c.frame()
                if isinstance(value, cmd.Basic.Deliver):
                    await c.expect(pheader.ContentHeader)
                    data = b""
                    while len(data) < size:
                        data += (await c.expect(ContentBody)).value
                    got.append(int.from_bytes(data[:4], "big"))
        assert got == list(range(count))
        c.writer.close()
        other.writer.close()
        tg.cancel_scope.cancel()


async def test_a_client_closing_its_socket_frees_its_connection(anyio_backend):
    async with anyio.create_task_group() as tg:
        broker, port = await serving(tg)
        c = await Raw.connect(port, heartbeat=0)
        c.send(1, cmd.Channel.Open())
        await c.expect(cmd.Channel.OpenOk)
        assert len(broker.connections) == 1
        c.writer.close()
        with anyio.fail_after(5):
            while broker.connections:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
