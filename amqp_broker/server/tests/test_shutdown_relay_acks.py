"""Shutdown and the acks of relayed messages still gathering (``core.relay_inbox``)."""

from __future__ import annotations

import anyio
from pamqp import commands as cmd

from amqp_broker.app import shutdown
from amqp_broker.core.broker import Broker
from amqp_broker.core.relay_inbox import receive_relayed
from amqp_broker.core.tests.client import Client
from queues.message import Message


def test_shutdown_sends_the_acks_still_gathering_before_closing() -> None:
    broker = Broker()
    link = Client(broker, "127.0.0.1", 50001)  # the sender's peer link (its channel 1)
    link.handshake()
    link.open_channel(1)
    app = Client(broker, "127.0.0.1", 50002)
    app.handshake()
    app.open_channel(1)
    app.declare_queue(1, "shared")
    broker.relay_inbox.on_acks_pending = lambda: None  # a delayed flush that never comes
    app.consume(1, "shared", "c1", no_ack=True)  # settles each relay as it is delivered
    msg = Message.build("", "shared", b"x", cmd.Basic.Properties())
    receive_relayed(broker.vhosts["/"], link.conn.channels[1], "shared", msg, 9, False)
    broker.run_dispatch()
    assert len(app.messages()) == 1
    assert link.methods() == []  # gathering
    anyio.run(shutdown, broker, 0.0)
    got = [(ch, type(m).__name__, getattr(m, "delivery_tag", None)) for ch, m in link.methods()]
    assert got[0] == (1, "Ack", 9)  # before the Connection.Close of the shutdown
    assert (got[-1][0], got[-1][1]) == (0, "Close")
