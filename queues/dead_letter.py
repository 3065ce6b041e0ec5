"""Building dead-lettered messages: the ``x-death`` history and the dead-letter routing keys.

Owns: turning a message that leaves a queue abnormally (rejected with requeue=false, expired,
dropped for length) into the *new* message that the core republishes to the queue's dead letter
exchange, exactly as RabbitMQ does for AMQP 0-9-1 messages:

* ``x-death`` header: an array of tables, most recent first, one per (queue, reason) pair, each
  with ``count`` (a long-long, ``LongLong``, as RabbitMQ), ``reason``, ``queue``, ``time`` (AMQP timestamp, whole seconds, wall
  clock), ``exchange`` (the exchange the message was published to -- the previous DLX for a
  message dead-lettered before), ``routing-keys`` (the routing key plus CC keys, never BCC) and
  ``original-expiration`` when the message had a per-message TTL. When the pair already exists its
  count is incremented, its other fields are kept, and it moves to the front.
* ``x-first-death-reason/queue/exchange`` set once, when the message had no ``x-death`` yet;
  ``x-last-death-reason/queue/exchange`` set on every death (RabbitMQ 3.13+).
* the ``expiration`` property is removed (so the copy does not expire again); a BCC header is
  removed; with an x-dead-letter-routing-key the CC header is removed too.
* routing keys for the DLX: ``[x-dead-letter-routing-key]`` when set, otherwise the original
  routing key + CC + BCC keys.

Also ``is_death_cycle`` for the core's cycle check when it routes a dead-lettered message.

Must not know: exchanges, bindings, routing (the core routes), queues' internal state, I/O.

Sources: "RabbitMQ: Dead Letter Exchanges"; rabbitmq-server ``rabbit_dead_letter.erl``,
``mc.erl`` (record_death, is_death_cycle), ``mc_amqpl.erl`` (x-death table layout).
"""

from __future__ import annotations

import datetime
from typing import Any

from pamqp import commands

from queues.message import Message

__all__ = [
    "REASON_EXPIRED",
    "REASON_MAXLEN",
    "REASON_REJECTED",
    "death_routing_keys",
    "dead_letter_routing_keys",
    "is_death_cycle",
    "make_dead_letter",
]

REASON_REJECTED = "rejected"
REASON_EXPIRED = "expired"
REASON_MAXLEN = "maxlen"

_UTC = datetime.UTC


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return None


def _header_keys(headers: dict[str, Any] | None, name: str) -> list[str]:
    """The string items of the ``CC``/``BCC`` array header ``name`` ([] when absent/invalid)."""
    if not headers:
        return []
    value = headers.get(name)
    if not isinstance(value, list):
        return []
    return [t for t in map(_text, value) if t is not None]


def death_routing_keys(message: Message) -> list[str]:
    """The routing keys recorded in ``x-death``: the message's routing key then its CC keys.

    Source: "RabbitMQ: Dead Letter Exchanges" (routing-keys: "including CC keys but excluding BCC").
    """
    return [message.routing_key, *_header_keys(message.headers, "CC")]


def dead_letter_routing_keys(message: Message, dead_letter_routing_key: str | None) -> list[str]:
    """The routing keys to route the dead-lettered copy with (non-empty list of str).

    ``[dead_letter_routing_key]`` when the queue has x-dead-letter-routing-key, otherwise the
    message's routing key + CC + BCC keys (RabbitMQ routes with all the keys the message was
    published with). Source: "RabbitMQ: Dead Letter Exchanges" (Routing Dead-Lettered Messages).
    """
    if dead_letter_routing_key is not None:
        return [dead_letter_routing_key]
    headers = message.headers
    return [message.routing_key, *_header_keys(headers, "CC"), *_header_keys(headers, "BCC")]


class LongLong(int):
    """An int that a field table carries as an AMQP long-long (``l``, signed 64 bits) whatever its
    size: RabbitMQ sends x-death ``count`` so, and clients read it so (the Java client casts it
    to Long); pamqp otherwise picks the smallest integer type. Source: "RabbitMQ: Dead Letter
    Exchanges" (x-death count, a long); pamqp ``encode.table_integer``."""


def _teach_pamqp_long_long() -> None:
    """Make pamqp's field-table encoder write a ``LongLong`` as ``l`` (once, at import: pamqp's
    encoder is module-global, as its method index is; other ints are unchanged)."""
    from pamqp import encode

    plain = encode.encode_table_value
    if getattr(plain, "long_long_aware", False):
        return

    def encode_table_value(value: Any) -> bytes:
        if type(value) is LongLong:
            return b"l" + encode.long_long_int(value)
        return plain(value)

    encode_table_value.long_long_aware = True  # type: ignore[attr-defined]
    encode.encode_table_value = encode_table_value


_teach_pamqp_long_long()


def _count(table: dict[str, Any]) -> int:
    count = table.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def make_dead_letter(message: Message, *, reason: str, queue: str, dead_letter_exchange: str,
                     dead_letter_routing_key: str | None, now: float) -> tuple[Message, list[str]]:
    """Build the dead-lettered copy of ``message`` and the routing keys to route it with.

    ``reason`` is "rejected", "expired" or "maxlen"; ``queue`` the name of the queue it died in;
    ``dead_letter_exchange`` / ``dead_letter_routing_key`` the queue's x-dead-letter-exchange /
    x-dead-letter-routing-key; ``now`` wall-clock seconds since the epoch (``time`` field, whole
    seconds). Returns ``(new_message, routing_keys)``; ``new_message.exchange`` is the DLX and its
    ``routing_key`` the first routing key; the original message is not modified. Headers are
    updated as described in the module docstring. Raises pamqp's ``ValueError``/``TypeError`` only
    if the original properties cannot be re-encoded (a routed message always can).

    Source: rabbitmq-server ``rabbit_dead_letter:publish/5``, ``mc:record_death/4``,
    ``mc_amqpl`` death tables; "RabbitMQ: Dead Letter Exchanges".
    """
    props = message.properties
    headers: dict[str, Any] = dict(props.headers) if props.headers else {}
    routing_keys = death_routing_keys(message)
    dl_keys = dead_letter_routing_keys(message, dead_letter_routing_key)

    death: dict[str, Any] = {
        "count": LongLong(1),
        "reason": reason,
        "queue": queue,
        "time": datetime.datetime.fromtimestamp(int(now), tz=_UTC),
        "exchange": message.exchange,
        "routing-keys": routing_keys,
    }
    if props.expiration is not None:
        death["original-expiration"] = props.expiration

    existing = headers.get("x-death")
    if isinstance(existing, list):
        deaths: list[Any] = [death]
        matched: dict[str, Any] | None = None
        extra = 0
        for table in existing:
            if (isinstance(table, dict) and _text(table.get("queue")) == queue
                    and _text(table.get("reason")) == reason):
                if matched is None:
                    matched = table
                else:  # legacy duplicates of the same pair are merged, as RabbitMQ does
                    extra += _count(table)
                continue
            deaths.append(table)
        if matched is not None:
            updated = dict(matched)
            updated["count"] = LongLong(_count(matched) + extra + 1)
            deaths[0] = updated
        headers["x-death"] = deaths
    else:
        if existing is None:
            headers["x-first-death-reason"] = reason
            headers["x-first-death-queue"] = queue
            headers["x-first-death-exchange"] = message.exchange
        headers["x-death"] = [death]  # absent, or not an array: (re)start the history
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = queue
    headers["x-last-death-exchange"] = message.exchange
    headers.pop("BCC", None)
    if dead_letter_routing_key is not None:
        headers.pop("CC", None)

    fields: dict[str, Any] = dict(props)
    fields["headers"] = headers
    fields["expiration"] = None
    new_props = commands.Basic.Properties(**fields)
    return (message.with_properties(new_props, exchange=dead_letter_exchange,
                                    routing_key=dl_keys[0]), dl_keys)


def is_death_cycle(target_queue: str, message: Message) -> bool:
    """True when routing dead-lettered ``message`` to ``target_queue`` would close an automatic cycle.

    Walks ``x-death`` from the most recent death: a cycle is a death in ``target_queue`` with no
    "rejected" death at or after it (a client rejection breaks the cycle). The core should call
    this for every queue the dead-lettered message is routed to and drop that destination when it
    returns True (RabbitMQ logs and drops it). Without this check a queue whose DLX routes back to
    itself would dead-letter (expired/maxlen) forever.

    Source: rabbitmq-server ``mc:is_death_cycle/2`` (deaths v2), ``rabbit_dead_letter:detect_cycles/3``.
    """
    headers = message.headers
    deaths = headers.get("x-death") if headers else None
    if not isinstance(deaths, list):
        return False
    for table in deaths:
        if not isinstance(table, dict):
            continue
        if _text(table.get("reason")) == REASON_REJECTED:
            return False
        if _text(table.get("queue")) == target_queue:
            return True
    return False
