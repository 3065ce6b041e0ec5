"""The plain listener's receive buffer (``server.read_buffer``, issue 28): a region handed out is
never written over while a view of it lives, and a buffer nothing refers to any more is used again;
over real sockets, bodies of every size published through the listener come out intact while the
reads that carried them share one buffer."""

from __future__ import annotations

import hashlib
import os

import anyio
import pytest
from pamqp import commands as cmd
from pamqp import header as pheader
from pamqp.body import ContentBody

from amqp_broker.server import plain_socket
from amqp_broker.server.read_buffer import BUFFER_SIZE, READ_MAX, READ_MIN, ReadBuffer

from .test_plain_socket import Raw, serving


def _read(buffers: ReadBuffer, fill: int, nbytes: int) -> memoryview:
    region = buffers.region()
    assert READ_MIN <= len(region) <= READ_MAX
    region[:nbytes] = bytes([fill]) * nbytes
    del region
    return buffers.commit(nbytes)


def test_views_kept_are_never_written_over() -> None:
    buffers = ReadBuffer()
    kept = [_read(buffers, i, READ_MAX) for i in range(3 * BUFFER_SIZE // READ_MAX)]
    assert buffers.buffers >= 3
    assert [bytes(v) == bytes([i]) * READ_MAX for i, v in enumerate(kept)] == [True] * len(kept)


def test_a_buffer_nothing_refers_to_is_used_again() -> None:
    buffers = ReadBuffer()
    for i in range(4 * BUFFER_SIZE // READ_MAX):
        view = _read(buffers, i % 256, READ_MAX)
        assert bytes(view[:1]) == bytes([i % 256])
        del view   # handled: the splitter copied what it needed
    assert buffers.buffers == 1


def _fill(buffers: ReadBuffer) -> None:
    """After a read of 100 bytes: reads as large as offered until the buffer is full (the next
    read wraps), none of them kept."""
    for _ in range(BUFFER_SIZE // READ_MAX):
        region = buffers.region()
        n = len(region)
        del region
        _read(buffers, 7, n)


def test_a_pinned_buffer_waits_in_the_pool_and_is_used_again_once_free() -> None:
    """Reads wrap three times: the first buffer is pinned by one view, so is the second, while
    the third fills the first's view goes: the next wrap reads into the first buffer again
    (what the view held is still intact until then), no fourth buffer is made."""
    buffers = ReadBuffer()
    first = _read(buffers, 1, 100)
    _fill(buffers)
    second = _read(buffers, 2, 100)   # the first buffer is pinned: a second one
    assert buffers.buffers == 2
    _fill(buffers)
    third = _read(buffers, 3, 100)   # both pinned: a third one
    assert buffers.buffers == 3
    assert bytes(first) == b"\x01" * 100
    del first
    _fill(buffers)
    again = _read(buffers, 4, 100)   # the first buffer is free again: no fourth
    assert buffers.buffers == 3
    assert (bytes(second), bytes(third), bytes(again)) == (b"\x02" * 100, b"\x03" * 100,
                                                           b"\x04" * 100)


def test_rewound_bytes_are_read_into_again() -> None:
    buffers = ReadBuffer()
    view = _read(buffers, 1, 8)
    del view
    buffers.rewind(8)
    assert bytes(_read(buffers, 2, 8)) == b"\x02" * 8
    region = buffers.region()
    assert len(region) == READ_MAX   # right after the 8 bytes kept


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", ("asyncio", {"use_uvloop": True})],
                         ids=["asyncio", "uvloop"])
async def test_bodies_of_every_size_come_out_as_published(anyio_backend) -> None:
    """Messages of 16 B to 1.5 MiB, interleaved and published back to back (reads of large and
    small frames mixed, bodies spanning reads and buffers), fetched with Basic.Get: each body's
    SHA-256 is the one published."""
    sizes = [16, 10_000, 200_000, 1_500_000, 65_536, 3, 131_064, 131_065] * 3
    bodies = [os.urandom(n) for n in sizes]
    async with anyio.create_task_group() as tg:
        _broker, port = await serving(tg)
        c = await Raw.connect(port, heartbeat=0)
        await c.channel_with_queue("sizes")
        for body in bodies:
            c.send(1, cmd.Basic.Publish(routing_key="sizes"))
            c.send(1, pheader.ContentHeader(0, len(body)))
            for i in range(0, len(body), 131064):   # frame_max 131072 (Raw's Tune-Ok)
                c.send(1, ContentBody(body[i:i + 131064]))
        await c.writer.drain()
        got = []
        with anyio.fail_after(60):
            for _ in bodies:
                c.send(1, cmd.Basic.Get(queue="sizes", no_ack=True))
                await c.expect(cmd.Basic.GetOk)
                head = await c.expect(pheader.ContentHeader)
                data = b""
                while len(data) < head.body_size:
                    data += (await c.expect(ContentBody)).value
                got.append(hashlib.sha256(data).hexdigest())
        assert got == [hashlib.sha256(b).hexdigest() for b in bodies]
        c.writer.close()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", ("asyncio", {"use_uvloop": True})],
                         ids=["asyncio", "uvloop"])
async def test_a_burst_of_small_messages_reads_into_two_buffers_at_most(anyio_backend,
                                                                        monkeypatch) -> None:
    """20,000 messages of 1 KiB (~22 MiB of frames) written in one burst, more than the kernel
    holds: every one is queued, and the listener's reads needed at most two buffers (before, the
    event loop read chunk after chunk ahead of the reader, each pinning its buffer until the
    reader got to it: a new 1 MiB buffer per wrap)."""
    made: list[ReadBuffer] = []

    class Recorded(ReadBuffer):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(plain_socket, "ReadBuffer", Recorded)
    body = os.urandom(1024)
    async with anyio.create_task_group() as tg:
        _broker, port = await serving(tg)
        c = await Raw.connect(port, heartbeat=0)
        await c.channel_with_queue("burst")
        for _ in range(20_000):
            c.send(1, cmd.Basic.Publish(routing_key="burst"))
            c.send(1, pheader.ContentHeader(0, len(body)))
            c.send(1, ContentBody(body))
        await c.writer.drain()
        with anyio.fail_after(60):
            while True:
                c.send(1, cmd.Queue.Declare(queue="burst", passive=True))
                ok = await c.expect(cmd.Queue.DeclareOk)
                if ok.message_count == 20_000:
                    break
                await anyio.sleep(0.05)
        assert [b.buffers for b in made] == [1] or [b.buffers for b in made] == [2]
        c.writer.close()
        tg.cancel_scope.cancel()
