"""Channel class methods after Open: Close, Flow (Open is the connection's; Close-Ok the channel's).

Source: AMQP 0-9-1 class channel (§1.5.2); RabbitMQ 3.x refuses a client's Channel.Flow
(active=false) with 540 and answers active=true with Flow-Ok.
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
    """Close-Ok on an open channel, without our Close: 503 COMMAND_INVALID "unimplemented
    method", as RabbitMQ 3.10 answers it (a Close-Ok for our Close is taken by the channel's
    closing state, ``Channel.on_method``)."""
    raise ConnectionException(c.COMMAND_INVALID, "COMMAND_INVALID - unimplemented method", 20, 41)


def channel_flow(ch: Channel, method: cmd.Channel.Flow) -> None:
    """Channel.Flow from the client: active=true answers Flow-Ok(true); active=false closes the
    connection with 540 NOT_IMPLEMENTED "active=false", as RabbitMQ 3.x (rabbit_channel; checked
    against 3.10, and Go's amqp091 relies on it). Use Basic.Qos to pause deliveries instead."""
    if not method.active:
        raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - active=false", 20, 20)
    ch.connection.send_method(ch.id, cmd.Channel.FlowOk(True))


def channel_flow_ok(ch: Channel, method: cmd.Channel.FlowOk) -> None:
    """We never send Channel.Flow, so a Flow-Ok is simply ignored."""


HANDLERS = {
    cmd.Channel.Open: channel_open,
    cmd.Channel.Close: channel_close,
    cmd.Channel.CloseOk: channel_close_ok,
    cmd.Channel.Flow: channel_flow,
    cmd.Channel.FlowOk: channel_flow_ok,
}
