"""Exchange class: Declare, Delete, Bind, Unbind (exchange-to-exchange bindings are RabbitMQ's
extension). In a cluster each (but a passive declare) is a metadata log command after the
permission checks (``propagation.propose``); on a single broker the vhost decides at once.
Source: AMQP 0-9-1 class exchange; RabbitMQ "Exchange to Exchange Bindings".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands as cmd

from routing.destination import Destination

from ..access import permit, permit_bind
from .propagation import metadata_of, propose, reply

if TYPE_CHECKING:
    from ..channel import Channel


def declare(ch: Channel, m: cmd.Exchange.Declare) -> None:
    """Exchange.Declare -> Declare-Ok (unless nowait); errors from ``VirtualHost.declare_exchange``."""
    if not m.passive:
        permit(ch, "configure", "exchange", m.exchange)
        if metadata_of(ch) is not None:
            propose(ch, m, lambda: None if m.nowait else cmd.Exchange.DeclareOk())
            return
    ch.vhost.declare_exchange(m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
                              auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments)
    reply(ch, m, None if m.nowait else cmd.Exchange.DeclareOk(), local_only=m.passive)


def delete(ch: Channel, m: cmd.Exchange.Delete) -> None:
    """Exchange.Delete -> Delete-Ok."""
    permit(ch, "configure", "exchange", m.exchange)
    if metadata_of(ch) is not None:
        propose(ch, m, lambda: None if m.nowait else cmd.Exchange.DeleteOk())
        return
    ch.vhost.delete_exchange(m.exchange, if_unused=m.if_unused)
    reply(ch, m, None if m.nowait else cmd.Exchange.DeleteOk())


def bind(ch: Channel, m: cmd.Exchange.Bind) -> None:
    """Exchange.Bind (source -> destination exchange) -> Bind-Ok."""
    permit_bind(ch, m.source, "exchange", m.destination)
    if metadata_of(ch) is not None:
        propose(ch, m, lambda: None if m.nowait else cmd.Exchange.BindOk())
        return
    ch.vhost.bind(m.source, Destination("exchange", m.destination), m.routing_key, m.arguments)
    reply(ch, m, None if m.nowait else cmd.Exchange.BindOk())


def unbind(ch: Channel, m: cmd.Exchange.Unbind) -> None:
    """Exchange.Unbind -> Unbind-Ok."""
    permit_bind(ch, m.source, "exchange", m.destination)
    if metadata_of(ch) is not None:
        propose(ch, m, lambda: None if m.nowait else cmd.Exchange.UnbindOk())
        return
    ch.vhost.bind(m.source, Destination("exchange", m.destination), m.routing_key, m.arguments,
                  unbind=True)
    reply(ch, m, None if m.nowait else cmd.Exchange.UnbindOk())


HANDLERS = {cmd.Exchange.Declare: declare, cmd.Exchange.Delete: delete,
            cmd.Exchange.Bind: bind, cmd.Exchange.Unbind: unbind}
