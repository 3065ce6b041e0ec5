"""Queue class: Declare, Bind, Unbind, Purge, Delete.

An empty queue name means "the last queue declared on this channel" (spec, queue-name domain); a
server-named queue is ``amq.gen-`` + 22 URL-safe base64 characters, as RabbitMQ. In a cluster,
Declare (not passive), Bind, Unbind and Delete are metadata log commands after the permission
checks (``propagation.propose``: the queue object is made or dropped when the log is applied;
Delete's ``if_unused`` / ``if_empty`` are asked of this member's queue first, as RabbitMQ asks
the queue process). Source: AMQP 0-9-1 class queue; RabbitMQ "Queues".
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, cast

from pamqp import commands as cmd

from routing.destination import Destination

from ...protocol import constants as c
from ...protocol.errors import ChannelException, ConnectionException
from ..access import permit, permit_bind
from ..vhost import send_cancel
from .propagation import metadata_of, propose, reply

if TYPE_CHECKING:
    from pamqp.common import FieldTable

    from queues.queue_type import QueueType, ReplicatedPurge

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
    if not m.passive:
        permit(ch, "configure", "queue", name)
        if metadata_of(ch) is not None:
            _propose_declare(ch, m, name)
            return
    q = ch.vhost.declare_queue(name, ch.connection, passive=m.passive, durable=m.durable,
                               exclusive=m.exclusive, auto_delete=m.auto_delete,
                               arguments=m.arguments)
    ch.last_queue = q.name
    m.queue = q.name  # a server-generated name travels to the other members as it is
    if q.capabilities.replicated and not m.passive:
        # with the group its factory chose (x-quorum-members); declared as a field table
        m.arguments = cast("FieldTable", q.arguments)
    if not m.nowait:   # a single broker's, or a passive one's in a cluster
        ch.connection.send_method(ch.id, cmd.Queue.DeclareOk(q.name, q.message_count,
                                                             q.consumer_count))


def _propose_declare(ch: Channel, m: cmd.Queue.Declare, name: str) -> None:
    """Queue.Declare through the metadata log; Declare-Ok's counts come from this member's
    queue object once applied (0 for another member's private queue: it is not here)."""
    ch.last_queue = m.queue = name
    vhost = ch.vhost

    def ok() -> cmd.Queue.DeclareOk | None:
        q = vhost.queues.get(name)
        if q is not None:
            vhost.touch(name)
        if m.nowait:
            return None
        return cmd.Queue.DeclareOk(name, q.message_count if q is not None else 0,
                                   q.consumer_count if q is not None else 0)

    propose(ch, m, ok)


def bind(ch: Channel, m: cmd.Queue.Bind) -> None:
    """Queue.Bind -> Bind-Ok."""
    permit_bind(ch, m.exchange, "queue", queue_name(ch, m.queue))
    if metadata_of(ch) is not None:
        m.queue = queue_name(ch, m.queue)
        propose(ch, m, lambda: None if m.nowait else cmd.Queue.BindOk())
        return
    q = ch.vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    ch.vhost.bind(m.exchange, Destination("queue", q.name), m.routing_key, m.arguments)
    m.queue = q.name
    reply(ch, m, None if m.nowait else cmd.Queue.BindOk())


def unbind(ch: Channel, m: cmd.Queue.Unbind) -> None:
    """Queue.Unbind -> Unbind-Ok. Idempotent as in RabbitMQ: a missing queue, exchange or
    binding is not an error (405 still for another connection's exclusive queue)."""
    permit_bind(ch, m.exchange, "queue", queue_name(ch, m.queue))
    name = queue_name(ch, m.queue)
    if metadata_of(ch) is not None:
        m.queue = name
        propose(ch, m, cmd.Queue.UnbindOk)
        return
    if name in ch.vhost.queues or name in ch.vhost.proxies:
        name = ch.vhost.get_queue(name, ch.connection).name
    ch.vhost.bind(m.exchange, Destination("queue", name), m.routing_key, m.arguments,
                  unbind=True)
    m.queue = name
    reply(ch, m, cmd.Queue.UnbindOk())


def purge(ch: Channel, m: cmd.Queue.Purge) -> None:
    """Queue.Purge -> Purge-Ok(message_count purged); unacked messages stay."""
    permit(ch, "read", "queue", queue_name(ch, m.queue))
    q = ch.vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    if not q.capabilities.purge:  # RabbitMQ: a stream cannot be purged
        raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - queue.purge not supported "
                                  f"by {q.capabilities.type_name} queues", 50, 30)
    m.queue = q.name
    if q.capabilities.replicated:
        _purge_replicated(ch, m, q)
        return
    count = q.purge()
    reply(ch, m, None if m.nowait else cmd.Queue.PurgeOk(count),
          local_only=q.exclusive_owner is not None)


def _purge_replicated(ch: Channel, m: cmd.Queue.Purge, q: QueueType) -> None:
    """A replicated queue's purge is one command in its log, proposed here only (not
    propagated: every member applies the log), answered with the count once applied, as
    RabbitMQ's quorum queues do; so it never drops a message published after its Purge-Ok."""
    if m.nowait:
        cast("ReplicatedPurge", q).purge_then(lambda count: None)
        return

    def done(count: int) -> None:
        if not ch.closing and ch.connection.channels.get(ch.id) is ch:
            ch.connection.send_method(ch.id, cmd.Queue.PurgeOk(count))

    cast("ReplicatedPurge", q).purge_then(done)


def delete(ch: Channel, m: cmd.Queue.Delete) -> None:
    """Queue.Delete -> Delete-Ok(message_count). Missing queue: Delete-Ok(0) (RabbitMQ);
    406 when ``if_unused`` and it has consumers or ``if_empty`` and it has ready messages. The
    queue's consumers hear Basic.Cancel after the Delete-Ok (RabbitMQ's order, 3.10), so a
    client waiting for Delete-Ok on the consumer's own channel (py-amqp, kombu) is not
    interrupted by the cancel."""
    name = queue_name(ch, m.queue)
    permit(ch, "configure", "queue", name)
    vhost = ch.vhost
    q = vhost.queues.get(name)
    count = 0
    cancels: list[tuple[Channel, str]] = []
    if metadata_of(ch) is not None:
        _propose_delete(ch, m, name, q)
        return
    if q is not None:
        q = vhost.get_queue(name, ch.connection)
        _check_delete(ch, m, q)
        count = vhost.delete_queue(q, cancels=cancels)
    m.queue = name

    def notify_consumers() -> None:  # after Delete-Ok, as RabbitMQ
        for consumer_channel, tag in cancels:
            send_cancel(consumer_channel, tag)

    reply(ch, m, None if m.nowait else cmd.Queue.DeleteOk(count), then=notify_consumers)


def _check_delete(ch: Channel, m: cmd.Queue.Delete, q: QueueType) -> None:
    """406 when ``if_unused`` and ``q`` has consumers, or ``if_empty`` and ready messages."""
    where = f"queue '{q.name}' in vhost '{ch.vhost.name}'"
    if m.if_unused and q.consumer_count:
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {where} in use")
    if m.if_empty and q.message_count:   # RabbitMQ 3.10's text
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {where} not empty")


def _propose_delete(ch: Channel, m: cmd.Queue.Delete, name: str, q: QueueType | None) -> None:
    """Queue.Delete through the metadata log: ``if_unused`` / ``if_empty`` asked of this
    member's queue first (not of another connection's private queue: the log refuses that
    with 405); Delete-Ok's count is its ready messages now. Its consumers hear Basic.Cancel
    after the Delete-Ok (``clustering.metadata``)."""
    m.queue = name
    count = 0
    if q is not None and (q.exclusive_owner is None or q.exclusive_owner is ch.connection):
        _check_delete(ch, m, q)
        count = q.message_count
    propose(ch, m, lambda: None if m.nowait else cmd.Queue.DeleteOk(count))


HANDLERS = {cmd.Queue.Declare: declare, cmd.Queue.Bind: bind, cmd.Queue.Unbind: unbind,
            cmd.Queue.Purge: purge, cmd.Queue.Delete: delete}
