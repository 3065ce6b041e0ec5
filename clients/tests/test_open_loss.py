"""A connection lost while Channel.Open waits for its Open-Ok fails the open at once.

The broker process completes the handshake, is frozen with SIGSTOP (it reads nothing more, so
Channel.Open gets no answer), and is SIGKILLed once the Open is written: its socket closes, as
when the broker a Spark sink task had just connected to dies. The open must fail with the loss
(``ConnectionClosed``), and with ``reconnect=True`` succeed on the next connection, instead of
waiting ``operation_timeout`` for an answer that cannot come (``TimeoutError``; issue 22 item 7:
a retried Spark task hung 30 s in Channel.Open). Only our broker (a RabbitMQ can't be killed
from here).
"""

from __future__ import annotations

import signal

import anyio
import pytest

from clients.aio import Reconnected, connect
from clients.errors import ConnectionClosed

pytestmark = pytest.mark.anyio
T = 15


async def _open_when_the_broker_dies(conn, broker) -> list:
    """Freeze ``broker``, open a channel on ``conn``, SIGKILL the broker once Channel.Open is
    written; returns ``[channel]`` or ``[exception]`` of the open."""
    broker.proc.send_signal(signal.SIGSTOP)
    outcome: list = []

    async def open_channel() -> None:
        try:
            outcome.append(await conn.channel(confirm=True))
        except Exception as exc:  # noqa: BLE001 - recorded for the assert
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_channel)
        with anyio.fail_after(T):
            while not conn._channels:  # the channel took its number: Open is queued
                await anyio.sleep(0.01)
        await conn.drain()  # written to the socket; the frozen broker reads nothing
        broker.kill()
        if conn.reconnect:
            await anyio.to_thread.run_sync(broker.start)
    return outcome


async def test_open_fails_at_once_when_the_connection_drops(own_broker):
    async with connect(own_broker.uri, reconnect=False, operation_timeout=T) as conn:
        outcome = await _open_when_the_broker_dies(conn, own_broker)
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome
    assert not isinstance(outcome[0], TimeoutError)


async def test_open_goes_on_after_a_reconnect(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        events: list = []
        conn.add_listener(events.append)
        outcome = await _open_when_the_broker_dies(conn, own_broker)
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
        ch = outcome[0]
        assert ch.is_open and ch.epoch == 2
        assert any(isinstance(e, Reconnected) for e in events)
        await ch.queue_declare(name)
        await ch.basic_publish(b"on the new connection", "", name)  # confirm mode: confirmed
        assert (await ch.queue_declare(name, passive=True)).message_count == 1
