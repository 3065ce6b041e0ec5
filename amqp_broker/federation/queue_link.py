"""One federated queue link: the downstream queue takes messages from the upstream queue of the
same name (or the upstream's ``queue``) when its own consumers could take more.

The rule (ours, simpler than RabbitMQ's credit-based one, same intent): the link consumes from
the upstream only while the downstream queue has at least one consumer and no ready message,
checked every ``POLL`` seconds; otherwise its upstream consumer is cancelled and its channel
closed (what was delivered and not yet forwarded goes back to the upstream queue). Each message
is published to the downstream queue (default exchange) with an ``x-received-from`` hop
(``headers.queue_hop``) and settled upstream by ``ack-mode`` (the shovel's forwarding loop). As
RabbitMQ's, the upstream consumer has priority -1 (``x-priority``), so the upstream's own
consumers go first, and its tag is the upstream's ``consumer-tag`` (default
``federation-link-<upstream>``); the upstream queue is declared durable when missing.
``max-hops`` does not apply to queues (RabbitMQ "Federation Reference"). Errors: as
``exchange_link``. Source: RabbitMQ "Federated Queues", rabbit_federation_queue_link (3.10).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from clients.aio import connect
from clients.message import Message, encode_properties

from ..shovel.link import Acker, ensure_queue, forward, no_password, uri_for
from .exchange_link import LinkFailed, LinkSpec, local_uri
from .headers import queue_hop

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["run", "wants_messages", "POLL"]

#: seconds between looks at the downstream queue's consumers and ready messages
POLL = 0.1


def wants_messages(broker: Broker, spec: LinkSpec) -> bool:
    """True when the downstream queue exists, has a consumer and no ready message."""
    vh = broker.vhosts.get(spec.vhost)
    q = vh.queues.get(spec.name) if vh is not None else None
    return q is not None and q.consumer_count > 0 and q.message_count == 0


async def run(spec: LinkSpec, broker: Broker, local: tuple[str, int],
              on_running: Callable[[str], None]) -> None:
    """Run queue link ``spec`` until an end fails (raises). ``local``: this broker's AMQP
    (host, port); ``on_running(connection name)``: called once both ends are up."""
    u = spec.upstream
    name = f"Federation link (upstream) {spec.vhost}/{spec.name} <- {u.name}"
    uq = spec.upstream_name
    async with connect([uri_for(x, local) for x in u.uris], reconnect=False,
                       client_properties={"connection_name": name}) as up, \
            connect(local_uri(local, spec.vhost), reconnect=False,
                    client_properties={"connection_name": name.replace("upstream",
                                                                       "downstream")}) as down:
        await ensure_queue(up, uq)
        no_ack = u.ack_mode == "no-ack"
        dest = await down.channel(confirm=u.ack_mode == "on-confirm")
        safe_uri = no_password(u.uris[0])

        def route(msg: Message) -> tuple[str, str, bytes]:
            props = msg.properties
            props.headers = queue_hop(props.headers, safe_uri, uq, msg.redelivered,
                                      msg.exchange, msg.routing_key)
            if not u.trust_user_id:
                props.user_id = None
            return "", spec.name, encode_properties(props)

        on_running(name.replace("upstream", "downstream"))
        while True:
            while not wants_messages(broker, spec):
                await anyio.sleep(POLL)
            src = await up.channel(prefetch=None if no_ack else u.prefetch)
            acker = Acker(src, float("inf"))
            consumer = await src.basic_consume(
                uq, no_ack=no_ack, consumer_tag=u.consumer_tag or f"federation-link-{u.name}",
                arguments={"x-priority": -1})
            paused = anyio.Event()

            async def watch() -> None:
                while wants_messages(broker, spec):   # noqa: B023 (this session's)
                    await anyio.sleep(POLL)
                paused.set()   # noqa: B023
                await consumer.cancel()   # noqa: B023

            async with anyio.create_task_group() as tg:
                tg.start_soon(acker.run)
                tg.start_soon(watch)
                await forward(consumer, down, dest, acker, u.ack_mode, route)
                if not paused.is_set():
                    raise LinkFailed(f"the upstream queue '{uq}' was deleted")
            await src.close()   # what was delivered and not forwarded goes back upstream
