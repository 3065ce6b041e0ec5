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
