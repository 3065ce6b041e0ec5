"""Channel class methods after Open: Close, Flow (Open is the connection's; Close-Ok the channel's).

Source: AMQP 0-9-1 class channel (§1.5.2); RabbitMQ supports Channel.Flow from clients (stop/start
deliveries to this channel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands as cmd

from ...protocol import constants as c
from ...protocol.errors import ConnectionException

if TYPE_CHECKING:
    from ..channel import Channel


def channel_open(ch: Channel, method: cmd.Channel.Open) -> None:
    """Channel.Open on an open channel: 504 CHANNEL_ERROR (spec: "second 'channel.open'")."""
    raise ConnectionException(c.CHANNEL_ERROR, f"CHANNEL_ERROR - second 'channel.open' seen on "
                              f"channel {ch.id}", 20, 10)


def channel_close(ch: Channel, method: cmd.Channel.Close) -> None:
    """The client closes the channel: release it and answer Close-Ok."""
    ch.release()
    ch.connection.channels.pop(ch.id, None)
    ch.connection.send_method(ch.id, cmd.Channel.CloseOk())


def channel_close_ok(ch: Channel, method: cmd.Channel.CloseOk) -> None:
    """Close-Ok without our Close: ignored (RabbitMQ ignores it too)."""


def channel_flow(ch: Channel, method: cmd.Channel.Flow) -> None:
    """Pause (active=False) or resume deliveries to this channel; answers Flow-Ok."""
    ch.flow = bool(method.active)
    ch.connection.send_method(ch.id, cmd.Channel.FlowOk(ch.flow))
    if ch.flow:
        for consumer in ch.consumers.values():
            ch.connection.broker.needs_dispatch.add(consumer.queue)


def channel_flow_ok(ch: Channel, method: cmd.Channel.FlowOk) -> None:
    """We never send Channel.Flow, so a Flow-Ok is simply ignored."""


HANDLERS = {
    cmd.Channel.Open: channel_open,
    cmd.Channel.Close: channel_close,
    cmd.Channel.CloseOk: channel_close_ok,
    cmd.Channel.Flow: channel_flow,
    cmd.Channel.FlowOk: channel_flow_ok,
}
