"""Read pacing (``server.read_pacing``): who is held, for how long, and that a paced publisher's
messages all arrive in order over real sockets.

The unit part drives ``ReadPacer`` with injected clocks and real core connections (the core test
client); the end-to-end part serves two real TCP connections on the plain listener
(``plain_socket.listen_plain`` + ``connection_io.serve_plain``, as ``run_broker``) and a pacer
that finds the loop saturated, our AMQP client publishing on one and consuming on the other.
"""

from __future__ import annotations

import anyio
import pytest
from pamqp import commands as cmd

from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.client import Client
from amqp_broker.core.tests.conftest import SETTINGS, FakeClock
from amqp_broker.server.connection_io import serve_plain
from amqp_broker.server.plain_socket import listen_plain
from amqp_broker.server.read_pacing import (
    BATCH_S,
    BUSY_GAP_S,
    FULL_BYTES,
    SATURATED,
    WINDOW_S,
    ReadPacer,
)


class Clocks:
    """Wall and CPU time in s that the test moves: ``busy`` of each second spent on CPU."""

    def __init__(self, busy: float) -> None:
        self.wall = 100.0
        self.busy = busy

    def clock(self) -> float:
        return self.wall

    def cpu(self) -> float:
        return self.wall * self.busy


def pacer_after_window(busy: float) -> tuple[ReadPacer, Clocks]:
    clocks = Clocks(busy)
    pacer = ReadPacer(clock=clocks.clock, cpu_clock=clocks.cpu)
    clocks.wall += WINDOW_S + 0.001
    return pacer, clocks


def publisher(broker: Broker, port: int = 50001) -> Client:
    cl = Client(broker, "127.0.0.1", port)
    cl.handshake()
    cl.open_channel(1)
    cl.publish(1, "", "nowhere", b"x")
    cl.pump()
    return cl


@pytest.fixture
def broker() -> Broker:
    return Broker(SETTINGS, clock=FakeClock())


def test_a_saturated_loop_holds_an_open_loop_publishers_small_steady_reads(broker):
    pacer, clocks = pacer_after_window(busy=0.95)
    conn = publisher(broker).conn
    last = clocks.wall - 0.0001   # read 0.1 ms ago, the one before 0.3 ms before that
    wait = pacer.delay(conn, last, last - 0.0003, 2000)
    assert pacer.saturated
    assert wait == pytest.approx(BATCH_S - 0.0001)


@pytest.mark.parametrize("busy", [0.0, SATURATED / 2, SATURATED - 0.05])
def test_a_loop_with_cpu_to_spare_never_holds_a_read(broker, busy):
    pacer, clocks = pacer_after_window(busy)
    conn = publisher(broker).conn
    assert pacer.delay(conn, clocks.wall, clocks.wall - 0.0001, 100) == 0.0
    assert not pacer.saturated


def test_a_large_read_or_a_pause_in_the_inflow_is_not_held(broker):
    pacer, clocks = pacer_after_window(busy=1.0)
    conn = publisher(broker).conn
    now = clocks.wall
    assert pacer.delay(conn, now, now - 0.0001, FULL_BYTES) == 0.0   # the kernel has plenty
    assert pacer.delay(conn, now, now - BUSY_GAP_S, 100) == 0.0      # not a steady inflow
    assert pacer.delay(conn, now - BATCH_S, now - BATCH_S - 0.0001, 100) == 0.0  # waited enough


@pytest.mark.parametrize("mode", ["confirms", "tx", "consumer", "never published", "peer link"])
def test_a_connection_that_waits_for_the_broker_is_not_held(broker, mode):
    pacer, clocks = pacer_after_window(busy=1.0)
    if mode == "never published":
        cl = Client(broker, "127.0.0.1", 50002)
        cl.handshake()
        cl.open_channel(1)
    else:
        cl = publisher(broker)
        if mode == "confirms":
            cl.call(1, cmd.Confirm.Select())
        elif mode == "tx":
            cl.call(1, cmd.Tx.Select())
        elif mode == "peer link":
            cl.conn.peer_node = "n9"   # as an authenticated cluster peer (Raft, relays)
        else:
            cl.call(1, cmd.Queue.Declare(queue="q"))
            cl.call(1, cmd.Basic.Consume(queue="q", consumer_tag="c"))
    assert pacer.delay(cl.conn, clocks.wall, clocks.wall - 0.0001, 100) == 0.0


def test_saturation_is_measured_per_window(broker):
    clocks = Clocks(busy=0.95)
    pacer = ReadPacer(clock=clocks.clock, cpu_clock=clocks.cpu)
    conn = publisher(broker).conn
    assert pacer.delay(conn, clocks.wall, clocks.wall - 0.0001, 100) == 0.0   # no window yet
    clocks.wall += WINDOW_S + 0.001
    assert pacer.delay(conn, clocks.wall, clocks.wall - 0.0001, 100) > 0.0
    clocks.busy = 0.1   # the next window: little CPU used
    clocks.wall += WINDOW_S + 0.001
    pacer._cpu0 = clocks.cpu() - 0.1 * WINDOW_S
    assert pacer.delay(conn, clocks.wall, clocks.wall - 0.0001, 100) == 0.0


class AlwaysSaturated(ReadPacer):
    """A pacer that finds the loop saturated from the start and counts the reads it held."""

    def __init__(self) -> None:
        super().__init__(saturated_at=0.0)
        self.saturated = True
        self.held = 0

    def delay(self, conn, last, prev, size) -> float:
        wait = super().delay(conn, last, prev, size)
        self.held += wait > 0
        return wait


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_paced_publishers_messages_all_arrive_in_order(anyio_backend):
    """5,000 open-loop publishes over a real socket, a few at a time, read in paced batches: the
    consumer on another connection gets every one, in publish order."""
    from clients.aio import connect

    broker = Broker(SETTINGS)
    pacer = AlwaysSaturated()
    count = 5000
    got: list[bytes] = []
    async with anyio.create_task_group() as tg:
        listener = await listen_plain("127.0.0.1", 0,
                                      lambda s: tg.start_soon(serve_plain, broker, s, pacer))
        await listener.start_serving()
        port = listener.sockets[0].getsockname()[1]
        uri = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        async with connect(uri, reconnect=False) as consuming, connect(uri, reconnect=False) as publishing:
            cch = await consuming.channel()
            await cch.queue_declare("paced")
            consumer = await cch.basic_consume("paced", no_ack=True)
            pch = await publishing.channel()
            for i in range(count):   # a steady inflow: 20 messages, a pause, 20 more...
                await pch.basic_publish(b"%06d" % i, routing_key="paced")
                if i % 20 == 19:
                    await anyio.sleep(0.0002)
            with anyio.fail_after(30):
                async for msg in consumer:
                    got.append(msg.body)
                    if len(got) == count:
                        break
        listener.close()
        tg.cancel_scope.cancel()
    assert got == [b"%06d" % i for i in range(count)]
    assert pacer.held > 0   # the publisher's reads went through the paced path
