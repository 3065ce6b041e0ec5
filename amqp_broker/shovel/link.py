"""One running dynamic shovel: consume from the source, publish to the destination, settle the
source by ``ack-mode``. Both ends use our own client (``clients.aio``), no reconnect inside:
a lost end ends the run and ``manager`` starts it again after ``reconnect-delay``.

Declarations, as RabbitMQ's amqp091 shovel: a ``src-queue`` / ``dest-queue`` is checked with a
passive declare and, when missing (404), declared durable without arguments; a ``src-exchange``
gets an exclusive server-named queue bound with ``src-exchange-key``. Moving and acks
(``pipeline``): deliveries are published as they arrive, a batch per socket write, up to
``prefetch-count`` unconfirmed; ``on-confirm`` acks the source (``multiple``) once the
destination confirmed (a destination nack: the source message is nacked, requeued; at least
once: a run that dies re-delivers what was not acked, so a message may arrive twice, never be
lost), ``on-publish`` once it was written to the destination socket, ``no-ack`` consumes
without acks. Headers:
``x-shovelled`` (a list with one table: shovelled-by, shovel-type "dynamic", shovel-name,
shovel-vhost, src-uri, src-queue/src-exchange(+key), dest-uri, dest-queue/dest-exchange(+key))
and ``x-shovelled-timestamp`` (seconds) when asked. ``src-delete-after``: after that many
messages (``queue-length``: the source queue's count at start) were settled, ``run`` returns
``"completed"`` and the manager deletes the parameter, as RabbitMQ does.
Errors: ``ShovelFailed`` (why, for the status's ``reason``); the client's ``ConnectionClosed`` /
``ChannelClosed`` / ``NoBrokerAvailable`` / ``TimeoutError`` / ``OSError`` pass through.
Source: RabbitMQ "Dynamic Shovels", rabbit_amqp091_shovel.erl (3.10).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from clients.aio import Connection, connect
from clients.errors import ChannelClosed
from clients.message import Message, Properties, decode_properties, encode_properties

from .params import ShovelDef
from .pipeline import Acker, forward

__all__ = ["run", "ShovelFailed", "uri_for", "forward_header", "no_password", "Acker",
           "forward", "ensure_queue"]

class ShovelFailed(Exception):
    """A shovel run could not go on; ``str()`` is the reason shown as ``terminated``."""


#: the URI query parameters our client takes (``clients.uri``); RabbitMQ's others (e.g.
#: ``auth_mechanism``) are accepted in a parameter and left out when connecting
URI_PARAMS = ("heartbeat", "frame_max", "channel_max", "connection_timeout", "cacertfile",
              "certfile", "keyfile", "verify", "server_name_indication")


def uri_for(uri: str, local: tuple[str, int]) -> str:
    """``uri`` with RabbitMQ's local-broker shorthand ``amqp://`` (no host) replaced by this
    broker's AMQP listener ``local`` (host, port), without query parameters our client does not
    take (``URI_PARAMS``)."""
    if uri in ("amqp://", "amqp:///"):
        return f"amqp://{local[0]}:{local[1]}/"
    base, _, query = uri.partition("?")
    kept = [p for p in query.split("&") if p.split("=", 1)[0] in URI_PARAMS]
    return base + ("?" + "&".join(kept) if kept else "")


def forward_header(d: ShovelDef, node: str) -> dict[str, Any]:
    """The table one shovel adds to ``x-shovelled`` (RabbitMQ's keys and values)."""
    table: dict[str, Any] = {"shovelled-by": node, "shovel-type": "dynamic",
                             "shovel-name": d.name, "shovel-vhost": d.vhost,
                             "src-uri": no_password(d.src_uris[0])}
    if d.src_queue is not None:
        table["src-queue"] = d.src_queue
    else:
        table["src-exchange"] = d.src_exchange
        table["src-exchange-key"] = d.src_exchange_key
    table["dest-uri"] = no_password(d.dest_uris[0])
    if d.dest_queue is not None:
        table["dest-queue"] = d.dest_queue
    elif d.dest_exchange is not None:
        table["dest-exchange"] = d.dest_exchange
        if d.dest_exchange_key is not None:
            table["dest-exchange-key"] = d.dest_exchange_key
    return table


def no_password(uri: str) -> str:
    """``uri`` without its password (RabbitMQ's amqp_uri:remove_credentials keeps the user)."""
    head, sep, rest = uri.partition("://")
    if "@" not in rest:
        return uri
    userinfo, _, host = rest.rpartition("@")
    return f"{head}{sep}{userinfo.split(':', 1)[0]}@{host}"


async def ensure_queue(conn: Connection, queue: str) -> int:
    """Passive declare of ``queue``; declared durable (no arguments) when missing (404), as
    RabbitMQ's shovel and federation links do. Returns its ready count. Raises the client's
    ``ChannelClosed`` (other codes) / ``ConnectionClosed``."""
    ch = await conn.channel()
    try:
        ok = await ch.queue_declare(queue, passive=True)
        return int(ok.message_count or 0)
    except ChannelClosed as exc:
        if exc.reply_code != 404:
            raise
    ch = await conn.channel()
    try:
        ok = await ch.queue_declare(queue, durable=True)
        return int(ok.message_count or 0)
    finally:
        await ch.close()


def _properties_of(d: ShovelDef, msg: Message, node: str) -> bytes:
    if not (d.add_forward_headers or d.add_timestamp_header or d.publish_properties):
        return msg.header[12:]
    props = decode_properties(msg.header) if msg.header else Properties()
    for key, value in d.publish_properties.items():
        setattr(props, key, value)
    if d.add_forward_headers or d.add_timestamp_header:
        headers = dict(props.headers or {})
        if d.add_forward_headers:
            headers["x-shovelled"] = [forward_header(d, node),
                                      *list(headers.get("x-shovelled") or [])]
        if d.add_timestamp_header:
            headers["x-shovelled-timestamp"] = int(time.time())
        props.headers = headers
    return encode_properties(props)


async def run(d: ShovelDef, local: tuple[str, int], node: str,
              on_running: Callable[[], None]) -> str:
    """Run shovel ``d`` until an end fails (raises) or ``src-delete-after`` is reached (returns
    ``"completed"``). ``local``: this broker's AMQP (host, port) for ``amqp://``; ``node``: this
    broker's name (``shovelled-by``); ``on_running``: called once both ends are set up."""
    src_uris = [uri_for(u, local) for u in d.src_uris]
    dest_uris = [uri_for(u, local) for u in d.dest_uris]
    props = {"connection_name": f"Shovel {d.name}"}
    async with connect(src_uris, reconnect=False, client_properties=props) as src, \
            connect(dest_uris, reconnect=False, client_properties=props) as dest:
        if d.src_queue is not None:
            queue = d.src_queue
            ready = await ensure_queue(src, queue)
        else:
            ch = await src.channel()
            ok = await ch.queue_declare("", exclusive=True)
            queue, ready = str(ok.queue), 0
            await ch.queue_bind(queue, d.src_exchange or "", d.src_exchange_key)
        if d.dest_queue is not None:
            await ensure_queue(dest, d.dest_queue)
        limit: float = math.inf
        if d.delete_after == "queue-length":
            limit = ready
        elif isinstance(d.delete_after, int):
            limit = d.delete_after
        if limit == 0:
            return "completed"
        no_ack = d.ack_mode == "no-ack"
        src_ch = await src.channel(prefetch=None if no_ack else d.prefetch)
        dest_ch = await dest.channel(confirm=d.ack_mode == "on-confirm")
        acker = Acker(src_ch, limit)
        consumer = await src_ch.basic_consume(queue, no_ack=no_ack)
        on_running()
        async with anyio.create_task_group() as tg:
            tg.start_soon(acker.run)

            async def pump() -> None:
                def route(msg: Message) -> tuple[str, str, bytes]:
                    exchange = (d.dest_exchange if d.dest_exchange is not None
                                else "" if d.dest_queue is not None else msg.exchange)
                    key = (d.dest_queue if d.dest_queue is not None
                           else d.dest_exchange_key if d.dest_exchange_key is not None
                           else msg.routing_key)
                    return exchange, key, _properties_of(d, msg, node)

                if not await forward(consumer, dest, dest_ch, acker, d.ack_mode, route, limit):
                    raise ShovelFailed("the source consumer was cancelled "
                                       "(its queue was deleted?)")
                await acker.done.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(pump)
        return "completed"
