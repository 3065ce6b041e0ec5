"""Queue class: Declare, Bind, Unbind, Purge, Delete.

An empty queue name means "the last queue declared on this channel" (spec, queue-name domain); a
server-named queue is ``amq.gen-`` + 22 URL-safe base64 characters, as RabbitMQ. Source: AMQP 0-9-1
class queue; RabbitMQ "Queues".
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from pamqp import commands as cmd

from routing.destination import Destination

from ...protocol import constants as c
from ...protocol.errors import ChannelException
from .propagation import reply

if TYPE_CHECKING:
    from ..channel import Channel


def generated_name() -> str:
    """A fresh server-generated queue name."""
    return "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def queue_name(ch: Channel, name: str) -> str:
    """Resolve "" to the channel's last declared queue; 404 when there is none."""
    if name:
        return name
    if not ch.last_queue:
        raise ChannelException(c.NOT_FOUND, "NOT_FOUND - no previously declared queue")
    return ch.last_queue


def declare(ch: Channel, m: cmd.Queue.Declare) -> None:
    """Queue.Declare -> Declare-Ok(queue, message_count, consumer_count)."""
    name = m.queue
    if not name:
        if m.passive:
            name = queue_name(ch, name)
        else:
            name = generated_name()
    q = ch.vhost.declare_queue(name, ch.connection, passive=m.passive, durable=m.durable,
                               exclusive=m.exclusive, auto_delete=m.auto_delete,
                               arguments=m.arguments)
    ch.last_queue = q.name
    m.queue = q.name  # a server-generated name travels to the other members as it is
    reply(ch, m, None if m.nowait else cmd.Queue.DeclareOk(q.name, q.message_count,
                                                           q.consumer_count),
          local_only=m.passive or q.exclusive_owner is not None)


def bind(ch: Channel, m: cmd.Queue.Bind) -> None:
    """Queue.Bind -> Bind-Ok."""
    q = ch.vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    ch.vhost.bind(m.exchange, Destination("queue", q.name), m.routing_key, m.arguments)
    m.queue = q.name
    reply(ch, m, None if m.nowait else cmd.Queue.BindOk(), local_only=q.exclusive_owner is not None)


def unbind(ch: Channel, m: cmd.Queue.Unbind) -> None:
    """Queue.Unbind -> Unbind-Ok (unbinding a binding that does not exist is not an error)."""
    q = ch.vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    ch.vhost.bind(m.exchange, Destination("queue", q.name), m.routing_key, m.arguments,
                  unbind=True)
    m.queue = q.name
    reply(ch, m, cmd.Queue.UnbindOk(), local_only=q.exclusive_owner is not None)


def purge(ch: Channel, m: cmd.Queue.Purge) -> None:
    """Queue.Purge -> Purge-Ok(message_count purged); unacked messages stay."""
    q = ch.vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    count = q.purge()
    m.queue = q.name
    reply(ch, m, None if m.nowait else cmd.Queue.PurgeOk(count),
          local_only=q.exclusive_owner is not None)


def delete(ch: Channel, m: cmd.Queue.Delete) -> None:
    """Queue.Delete -> Delete-Ok(message_count). Missing queue: Delete-Ok(0) (RabbitMQ);
    406 when ``if_unused`` and it has consumers or ``if_empty`` and it has ready messages."""
    name = queue_name(ch, m.queue)
    vhost = ch.vhost
    q = vhost.queues.get(name)
    count = 0
    private = q is not None and q.exclusive_owner is not None
    if q is not None:
        q = vhost.get_queue(name, ch.connection)
        if m.if_unused and q.consumer_count:
            raise ChannelException(c.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - queue '{name}' in vhost '{vhost.name}' "
                                   f"in use")
        if m.if_empty and q.message_count:
            raise ChannelException(c.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - queue '{name}' in vhost '{vhost.name}' "
                                   f"is not empty")
        count = vhost.delete_queue(q)
    m.queue = name
    reply(ch, m, None if m.nowait else cmd.Queue.DeleteOk(count), local_only=private)


HANDLERS = {cmd.Queue.Declare: declare, cmd.Queue.Bind: bind, cmd.Queue.Unbind: unbind,
            cmd.Queue.Purge: purge, cmd.Queue.Delete: delete}
