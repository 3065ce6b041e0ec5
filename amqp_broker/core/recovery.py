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
from typing import TYPE_CHECKING

from queues.arguments import parse_arguments
from queues.errors import QueueError
from routing.destination import Destination
from routing.errors import RoutingError

from .vhost import VirtualHost

if TYPE_CHECKING:
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
        for key, recovered in store.recover().items():
            vhost_name, name = split_store_key(key)
            vhost = broker.vhosts.get(vhost_name)
            q = vhost.queues.get(name) if vhost is not None else None
            if q is None or not q.durable:
                log.warning("message store holds %d messages of unknown queue %r: released",
                            len(recovered), key)
                store.delete_queue(key)
                continue
            for rec in recovered:
                q.restore(rec.message, rec.redelivered)
            messages += len(recovered)
    report = RecoveryReport(exchanges, queues, bindings, messages)
    log.info("recovered %d exchanges, %d queues, %d bindings, %d messages", *(
        report.exchanges, report.queues, report.bindings, report.messages))
    return report
