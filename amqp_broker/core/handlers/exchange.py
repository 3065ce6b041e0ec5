"""Exchange class: Declare, Delete, Bind, Unbind (exchange-to-exchange bindings are RabbitMQ's
extension). Source: AMQP 0-9-1 class exchange; RabbitMQ "Exchange to Exchange Bindings".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands as cmd

from routing.destination import Destination

if TYPE_CHECKING:
    from ..channel import Channel


def declare(ch: Channel, m: cmd.Exchange.Declare) -> None:
    """Exchange.Declare -> Declare-Ok (unless nowait); errors from ``VirtualHost.declare_exchange``."""
    ch.vhost.declare_exchange(m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
                              auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments)
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Exchange.DeclareOk())


def delete(ch: Channel, m: cmd.Exchange.Delete) -> None:
    """Exchange.Delete -> Delete-Ok."""
    ch.vhost.delete_exchange(m.exchange, if_unused=m.if_unused)
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Exchange.DeleteOk())


def bind(ch: Channel, m: cmd.Exchange.Bind) -> None:
    """Exchange.Bind (source -> destination exchange) -> Bind-Ok."""
    ch.vhost.bind(m.source, Destination("exchange", m.destination), m.routing_key, m.arguments)
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Exchange.BindOk())


def unbind(ch: Channel, m: cmd.Exchange.Unbind) -> None:
    """Exchange.Unbind -> Unbind-Ok."""
    ch.vhost.bind(m.source, Destination("exchange", m.destination), m.routing_key, m.arguments,
                  unbind=True)
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Exchange.UnbindOk())


HANDLERS = {cmd.Exchange.Declare: declare, cmd.Exchange.Delete: delete,
            cmd.Exchange.Bind: bind, cmd.Exchange.Unbind: unbind}
