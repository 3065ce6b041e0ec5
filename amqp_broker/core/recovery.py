"""Broker start: rebuild durable definitions and the messages of durable queues.

Order (as RabbitMQ's boot steps): vhosts, exchanges, queues, bindings from the definitions store,
then each durable queue's messages from the message store, in publish order, with their redelivered
flag (a message that may have been delivered before the crash comes back redelivered). Messages of a
queue that no longer exists are released from the store. A definition that no longer validates is
skipped and logged, never fatal. Must not know: sockets. Source: RabbitMQ "Reliability Guide",
issue "Durable broker" (recovery after kill -9).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from queues.arguments import parse_arguments
from queues.errors import QueueError
from routing.destination import Destination
from routing.errors import RoutingError

from .vhost import VirtualHost

if TYPE_CHECKING:
    from queues.queue import Queue
    from queues.store.store import MessageStore

    from .broker import Broker

__all__ = ["recover", "RecoveryReport", "split_store_key"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What came back: counts of exchanges, queues, bindings and messages."""

    exchanges: int = 0
    queues: int = 0
    bindings: int = 0
    messages: int = 0


def split_store_key(key: str) -> tuple[str, str]:
    """Inverse of ``durability.store_key``: (vhost, queue)."""
    vhost, sep, name = key.partition("\x1f")
    return (vhost, name) if sep else ("/", key)


def _vhost(broker: Broker, name: str) -> VirtualHost:
    vhost = broker.vhosts.get(name)
    if vhost is None:
        vhost = broker.vhosts[name] = VirtualHost(broker, name)
    return vhost


def _restore_messages(broker: Broker, store: MessageStore) -> int:
    """Stream every stored message into its durable queue (``iter_recovered``: one message at a
    time, so a backlog larger than RAM never exists as objects). With a queue memory budget, bodies
    beyond it per queue stay on disk (``body_loaded=False``) and the queue pages them; a queue that
    does not page (priority queues) reads such a body back at once. Messages of queues that no
    longer exist are released afterwards (the store must not change while iterating). Returns
    how many messages were restored."""
    budget = broker.settings.queue_memory_budget or None
    targets: dict[str, Queue | None] = {}
    unknown: dict[str, int] = {}
    restored = 0
    for key, rec in store.iter_recovered(body_budget=budget):
        if key in targets:
            q = targets[key]
        else:
            vhost_name, name = split_store_key(key)
            vhost = broker.vhosts.get(vhost_name)
            # only classic queues keep their messages in the message store
            q = cast("Queue | None", vhost.queues.get(name)) if vhost is not None else None
            if q is not None and not q.durable:
                q = None
            targets[key] = q
        if q is None:
            unknown[key] = unknown.get(key, 0) + 1
            continue
        message = rec.message
        if not rec.body_loaded and not q.paging:
            message.body = store.read_body(rec.store_id)
            q.restore(message, rec.redelivered)
        else:
            q.restore(message, rec.redelivered, rec.body_loaded)
        restored += 1
    for key, count in unknown.items():
        log.warning("message store holds %d messages of unknown queue %r: released", count, key)
        store.delete_queue(key)
    return restored


def recover(broker: Broker) -> RecoveryReport:
    """Restore what ``broker.durability`` holds into ``broker``; returns the counts."""
    durability = broker.durability
    exchanges = queues = bindings = messages = 0
    if durability.definitions is not None:
        data = durability.definitions.load()
        for ex in data.exchanges:
            routing = _vhost(broker, ex.vhost).routing
            if routing.get_exchange(ex.name) is not None:
                continue
            try:
                routing.declare_exchange(ex.name, ex.type, durable=True, auto_delete=ex.auto_delete,
                                         internal=ex.internal, arguments=dict(ex.arguments))
                exchanges += 1
            except RoutingError as exc:
                log.error("cannot restore exchange %r in vhost %r: %s", ex.name, ex.vhost, exc)
        for qd in data.queues:
            vhost = _vhost(broker, qd.vhost)
            try:
                settings = parse_arguments(qd.arguments)
            except QueueError as exc:
                log.error("cannot restore queue %r in vhost %r: %s", qd.name, qd.vhost, exc)
                continue
            vhost.create_queue(qd.name, settings, durable=True, auto_delete=qd.auto_delete,
                               exclusive_owner=None, arguments=dict(qd.arguments))
            vhost.touch(qd.name)
            queues += 1
        for b in data.bindings:
            routing = _vhost(broker, b.vhost).routing
            try:
                routing.bind(b.source, Destination(b.destination_kind, b.destination),
                             b.binding_key, dict(b.arguments))
                bindings += 1
            except RoutingError as exc:
                log.error("cannot restore binding %s -> %s %r: %s", b.source, b.destination,
                          b.binding_key, exc)
    store = durability.store
    if store is not None:
        messages = _restore_messages(broker, store)
    report = RecoveryReport(exchanges, queues, bindings, messages)
    log.info("recovered %d exchanges, %d queues, %d bindings, %d messages", *(
        report.exchanges, report.queues, report.bindings, report.messages))
    return report
