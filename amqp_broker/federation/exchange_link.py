"""One federated exchange link: messages published to the upstream exchange reach the downstream
exchange's bindings. As RabbitMQ's ``rabbit_federation_exchange_link`` (3.10), on the upstream:
the upstream exchange (passive declare; declared like the downstream one when missing), a
durable queue ``federation: <upstream exchange> -> <this broker>`` (with ``:<exchange>`` when the
names differ, ``:<vhost>:<exchange>`` when the vhosts do; arguments ``x-expires`` /
``x-message-ttl`` from the upstream's ``expires`` / ``message-ttl`` and ``x-internal-purpose:
federation``), an internal fanout exchange ``<queue name> A`` (or ``B``: each start makes the
other one, binds it, then deletes the old, so that no message is missed and no stale binding
stays) bound to the queue and, from the upstream exchange, with every distinct (routing key,
arguments) of the downstream exchange's bindings, kept in step every ``BINDING_SYNC`` seconds.
The link consumes that queue (``prefetch-count``, ``ack-mode`` as a shovel's) and publishes each
message to the downstream exchange with its routing key and an ``x-received-from`` hop
(``headers``); a message that has made ``max-hops`` hops or has been here already is dropped
(acked). Deviation: RabbitMQ declares the internal exchange with its ``x-federation-upstream``
type when the upstream has the plugin (filtering there); we always use fanout (its fallback) and
filter here. Both ends use our client (``clients.aio``), without reconnect: a lost end ends the
run and ``manager`` starts it again after ``reconnect-delay``. A link that goes (its policy,
upstream or exchange removed) deletes its upstream queue and exchanges (``cleanup``), unless
its upstream's ``resource-cleanup-mode`` is ``never``. Errors: ``LinkFailed`` (why); the client's ``ConnectionClosed`` / ``ChannelClosed`` /
``NoBrokerAvailable`` / ``TimeoutError`` / ``OSError`` pass through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio

from clients.aio import Connection, connect
from clients.channel import Channel
from clients.errors import ChannelClosed
from clients.message import Message, encode_properties
from clients.uri import parse_uri

from ..shovel.link import Acker, forward, no_password, uri_for
from .headers import exchange_hop, should_forward, upstream_identity
from .params import Upstream

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["run", "cleanup", "LinkSpec", "LinkFailed", "upstream_queue_name", "local_uri",
           "BINDING_SYNC", "CLEANUP_TIMEOUT"]

#: seconds between comparisons of the downstream exchange's bindings with the upstream's
BINDING_SYNC = 0.5
#: seconds a cleanup of a gone link's upstream queue and exchanges may take at most
CLEANUP_TIMEOUT = 30.0


class LinkFailed(Exception):
    """A link could not go on; ``str()`` is the reason shown as the link's ``error``."""


@dataclass(frozen=True)
class LinkSpec:
    """One link: the downstream ``kind`` ("exchange" or "queue") ``name`` of ``vhost``, its
    ``upstream`` and this broker's ``identity`` (``headers.identity``)."""

    vhost: str
    kind: str
    name: str
    upstream: Upstream
    identity: str

    @property
    def upstream_name(self) -> str:
        """The upstream exchange or queue name (the downstream's unless the upstream says)."""
        given = self.upstream.exchange if self.kind == "exchange" else self.upstream.queue
        return given if given is not None else self.name


def local_uri(local: tuple[str, int], vhost: str) -> str:
    """This broker's AMQP listener ``local`` (host, port) and ``vhost`` as a URI (guest)."""
    return uri_for("amqp://", local) + quote(vhost, safe="")


def upstream_queue_name(spec: LinkSpec, upstream_vhost: str) -> str:
    """RabbitMQ's name of the upstream queue of an exchange link."""
    ux = spec.upstream_name
    if upstream_vhost != spec.vhost:
        down = f":{spec.vhost}:{spec.name}"
    else:
        down = "" if ux == spec.name else f":{spec.name}"
    return f"federation: {ux} -> {spec.identity}{down}"


def _bindings(broker: Broker, spec: LinkSpec) -> dict[str, tuple[str, dict | None]]:
    """The downstream exchange's distinct (routing key, arguments), by a comparable key."""
    vh = broker.vhosts.get(spec.vhost)
    out: dict[str, tuple[str, dict | None]] = {}
    if vh is None:
        return out
    for b in vh.routing.bindings_from(spec.name):
        args = dict(b.arguments) if b.arguments else None
        out[json.dumps([b.binding_key, args], sort_keys=True, default=repr)] = (
            b.binding_key, args)
    return out


async def _disposable(conn: Connection, call: Callable[[Channel], Any]) -> bool:
    """Run ``call(channel)`` on a channel of its own; False when the broker closed it 404."""
    ch = await conn.channel()
    try:
        await call(ch)
    except ChannelClosed as exc:
        if exc.reply_code != 404:
            raise
        return False
    await ch.close()
    return True


async def _ensure_upstream_exchange(up: Connection, broker: Broker, spec: LinkSpec) -> None:
    ux = spec.upstream_name
    if await _disposable(up, lambda ch: ch.exchange_declare(ux, passive=True)):
        return
    vh = broker.vhosts.get(spec.vhost)
    x = vh.routing.get_exchange(spec.name) if vh is not None else None
    if x is None:
        raise LinkFailed(f"the downstream exchange '{spec.name}' is gone")
    ch = await up.channel()
    await ch.exchange_declare(ux, x.type, durable=x.durable, auto_delete=x.auto_delete,
                              internal=x.internal, arguments=dict(x.arguments) or None)
    await ch.close()


def _deleter(exchange: str) -> Callable[[Channel], Any]:
    return lambda ch: ch.exchange_delete(exchange)


async def cleanup(spec: LinkSpec, local: tuple[str, int]) -> None:
    """Delete the upstream queue and internal exchanges of exchange link ``spec``, gone (its
    policy, upstream or exchange removed), as RabbitMQ's ``resource-cleanup-mode`` ``default``
    does. Raises the client's errors, ``TimeoutError`` after ``CLEANUP_TIMEOUT`` seconds."""
    uris = [uri_for(x, local) for x in spec.upstream.uris]
    name = f"Federation link cleanup {spec.vhost}/{spec.name} <- {spec.upstream.name}"
    with anyio.fail_after(CLEANUP_TIMEOUT):
        async with connect(uris, reconnect=False,
                           client_properties={"connection_name": name}) as up:
            queue = upstream_queue_name(spec, parse_uri(uris[0]).vhost)
            ch = await up.channel()
            await ch.queue_delete(queue)
            for x in (f"{queue} A", f"{queue} B"):
                await _disposable(up, _deleter(x))


async def run(spec: LinkSpec, broker: Broker, local: tuple[str, int],
              on_running: Callable[[str], None]) -> None:
    """Run exchange link ``spec`` until an end fails (raises). ``local``: this broker's AMQP
    (host, port); ``on_running(connection name)``: called once consuming."""
    u = spec.upstream
    name = f"Federation link (upstream) {spec.vhost}/{spec.name} <- {u.name}"
    uris = [uri_for(x, local) for x in u.uris]
    async with connect(uris, reconnect=False,
                       client_properties={"connection_name": name}) as up, \
            connect(local_uri(local, spec.vhost), reconnect=False,
                    client_properties={"connection_name": name.replace("upstream",
                                                                       "downstream")}) as down:
        up_vhost = parse_uri(uris[0]).vhost
        up_name = upstream_identity(up.server_properties)
        await _ensure_upstream_exchange(up, broker, spec)
        queue = upstream_queue_name(spec, up_vhost)
        args: dict[str, Any] = {"x-internal-purpose": "federation"}
        if u.expires is not None:
            args["x-expires"] = u.expires
        if u.message_ttl is not None:
            args["x-message-ttl"] = u.message_ttl
        ch = await up.channel()
        await ch.queue_declare(queue, durable=True, arguments=args)
        old_exists = await _disposable(up, lambda c: c.exchange_declare(f"{queue} A",
                                                                         passive=True))
        new, old = (f"{queue} B", f"{queue} A") if old_exists else (f"{queue} A", f"{queue} B")
        # a stale one from a run that died in between
        await _disposable(up, lambda c: c.exchange_delete(new))
        await ch.exchange_declare(new, "fanout", durable=True, internal=True, auto_delete=True,
                                  arguments={"x-internal-purpose": "federation"})
        await ch.queue_bind(queue, new)
        bound: dict[str, tuple[str, dict | None]] = {}

        async def sync() -> None:
            wanted = _bindings(broker, spec)
            for key in [k for k in bound if k not in wanted]:
                rk, a = bound.pop(key)
                await ch.exchange_unbind(new, spec.upstream_name, rk, arguments=a)
            for key, (rk, a) in wanted.items():
                if key not in bound:
                    await ch.exchange_bind(new, spec.upstream_name, rk, arguments=a)
                    bound[key] = (rk, a)

        await sync()
        await _disposable(up, lambda c: c.exchange_delete(old))
        no_ack = u.ack_mode == "no-ack"
        src = await up.channel(prefetch=None if no_ack else u.prefetch)
        dest = await down.channel(confirm=u.ack_mode == "on-confirm")
        acker = Acker(src, float("inf"))
        consumer = await src.basic_consume(queue, no_ack=no_ack,
                                           consumer_tag=u.consumer_tag or "")
        safe_uri = no_password(u.uris[0])

        def route(msg: Message) -> tuple[str, str, bytes] | None:
            props = msg.properties
            if not should_forward(props.headers, u.max_hops, spec.identity, spec.vhost):
                return None
            props.headers = exchange_hop(props.headers, safe_uri, spec.name,
                                         msg.redelivered, up_name, up_vhost)
            if not u.trust_user_id:
                props.user_id = None
            return spec.name, msg.routing_key, encode_properties(props)

        on_running(name.replace("upstream", "downstream"))
        async with anyio.create_task_group() as tg:
            async def pump() -> None:
                await forward(consumer, down, dest, acker, u.ack_mode, route)
                raise LinkFailed(f"the upstream queue '{queue}' was deleted")

            async def keep_bindings() -> None:
                while True:
                    await anyio.sleep(BINDING_SYNC)
                    await sync()

            tg.start_soon(acker.run)
            tg.start_soon(pump)
            tg.start_soon(keep_bindings)

