"""Delayed messages in a cluster (issue 25): the wiring of ``core.delayed_replicated``.

``install(broker, metadata)`` makes a clustered broker hold the messages of its
``x-delayed-message`` exchanges in each vhost's internal quorum queue
(``core.delayed_replicated.HELD_QUEUE``, arguments ``HELD_ARGUMENTS``), and declares that queue
through the cluster metadata log: before the Declare-Ok of a client's ``x-delayed-message``
Exchange.Declare (so a message published right after it is replicated), and, for exchanges that
came another way (the management API, definitions, a cluster upgraded from a version without
it), by the metadata log's leader when a scan (every second) finds a vhost with such an
exchange and no queue. Until the queue exists a delayed message is held in this broker's own
``delayed.log``, as on a broker that is not clustered.

Why a quorum queue rather than a Raft group of its own: ``core.delayed_replicated``'s
docstring. Sources: rabbitmq-delayed-message-exchange README, RabbitMQ "Quorum Queues".
"""

from __future__ import annotations

import logging
from typing import Any

from pamqp import commands as cmd

from cluster.metadata import commands as m
from cluster.metadata.outcomes import Refused
from routing.exchange_types.delayed import DELAYED_TYPE

from ..core.delayed_replicated import HELD_QUEUE

__all__ = ["install", "HELD_ARGUMENTS"]

log = logging.getLogger(__name__)

#: The internal queue's arguments: a quorum queue whose messages are never dead-lettered for
#: their deliveries (a firer that dies returns them; RabbitMQ 4's default limit of 20 would
#: drop a message after 20 failovers).
HELD_ARGUMENTS = {"x-queue-type": "quorum", "x-delivery-limit": -1}


def _declare_command(vhost: str) -> m.DeclareQueue:
    return m.DeclareQueue(vhost, HELD_QUEUE, durable=True, arguments=dict(HELD_ARGUMENTS))


def install(broker: Any, metadata: Any) -> None:
    """Hold ``broker``'s delayed messages in the replicated queues (see the module docstring);
    ``metadata``: its ``clustering.metadata.MetadataRuntime`` (``change`` is wrapped)."""
    replicated = broker.delayed.enable_replication()
    plain_change = metadata.change
    asked: set[str] = set()

    def change(vhost: str, connection: Any, method: Any, done: Any) -> None:
        if not (isinstance(method, cmd.Exchange.Declare) and not method.passive
                and method.exchange_type == DELAYED_TYPE):
            plain_change(vhost, connection, method, done)
            return

        def declared(outcome: Any) -> None:
            if outcome is not None:   # refused: the exchange's answer
                done(outcome)
                return
            host = broker.vhosts.get(vhost)
            if host is not None and HELD_QUEUE in host.queues:
                done(None)
                return

            def queue_declared(queue_outcome: Any) -> None:
                if isinstance(queue_outcome, Refused):
                    log.warning("vhost %r: %r not declared (%s): its delayed messages are "
                                "held by the broker they are published to", vhost, HELD_QUEUE,
                                queue_outcome.text)
                done(None)

            metadata.propose(_declare_command(vhost), queue_declared)

        plain_change(vhost, connection, method, declared)

    metadata.change = change

    def ensure(vhost: str) -> None:
        """A scan found no held queue in ``vhost``: the metadata leader declares it when the
        vhost has an x-delayed-message exchange."""
        group = metadata.group
        if group is None or not group.is_leader or not metadata.ready or vhost in asked:
            return
        host = broker.vhosts.get(vhost)
        if host is None or HELD_QUEUE in host.queues or not any(
                x.type == DELAYED_TYPE for x in host.routing.exchanges()):
            return
        asked.add(vhost)
        metadata.propose(_declare_command(vhost), lambda _outcome: asked.discard(vhost))

    replicated.ensure = ensure
