"""core.stats: publish/deliver_get/ack/confirm totals from live channels and folded closed ones."""

from __future__ import annotations

from pamqp import commands

from amqp_broker.core.broker import Broker
from amqp_broker.core.stats import message_totals

from .client import Client


def test_totals_count_live_and_closed_channels() -> None:
    broker = Broker()
    cl = Client(broker)
    cl.handshake()
    cl.open_channel(1)
    cl.declare_queue(1, "q")
    cl.call(1, commands.Confirm.Select())
    for _ in range(3):
        cl.publish(1, "", "q", b"x")
    cl.pump()
    t = message_totals(broker)
    assert (t.publish, t.confirm, t.deliver_get, t.ack) == (3, 3, 0, 0)
    cl.send(1, commands.Basic.Get(queue="q"))
    cl.send(1, commands.Basic.Get(queue="q"))
    cl.pump()
    cl.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    cl.pump()
    t = message_totals(broker)
    assert (t.publish, t.deliver_get, t.ack) == (3, 2, 2)
    cl.pump()
    cl.send(1, commands.Channel.Close(200, "bye", 0, 0))
    assert any(isinstance(m, commands.Channel.CloseOk) for _, m in cl.methods())
    cl.close()
    t = message_totals(broker)
    assert (t.publish, t.confirm, t.deliver_get, t.ack) == (3, 3, 2, 2)
    assert message_totals(broker) == broker.message_totals  # folded exactly once
