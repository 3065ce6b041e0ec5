"""Parsing and validation of Queue.Declare x-arguments and of the per-message ``expiration``.

Owns: turning the ``arguments`` field table of Queue.Declare (already decoded by pamqp into a
``dict``) into an immutable ``QueueSettings``, refusing exactly the values RabbitMQ refuses with
406 PRECONDITION_FAILED (``rabbit_amqqueue:declare_args/0`` and its ``check_*`` functions), and
parsing the ``expiration`` property of a message (``rabbit_basic:parse_expiration/1``).

Must not know: sockets, channels, the queue's runtime state, policies (operator policies are the
core's business: it may merge them before calling ``parse_arguments``).

Type mapping (pamqp decodes field values to Python): RabbitMQ's integer types (byte, short,
signedint, long, unsigned*) arrive as ``int``; ``bool`` is *not* an integer here (RabbitMQ refuses a
boolean where it wants an integer); floats and decimals are refused; ``longstr`` arrives as ``str``.

Sources: "RabbitMQ: Queues" (optional arguments), "RabbitMQ: TTL", "RabbitMQ: Queue Length Limit",
"RabbitMQ: Dead Letter Exchanges", "RabbitMQ: Priority Queue",
"RabbitMQ: Consumers (single active consumer)"; rabbitmq-server ``rabbit_amqqueue.erl``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from queues.errors import InvalidArgument

__all__ = [
    "MAX_EXPIRY",
    "MAX_PRIORITY",
    "OVERFLOW_DROP_HEAD",
    "OVERFLOW_REJECT_PUBLISH",
    "OVERFLOW_REJECT_PUBLISH_DLX",
    "QueueSettings",
    "message_ttl_or_none",
    "parse_arguments",
    "parse_expiration",
]

#: Largest TTL / expires value RabbitMQ accepts, ms (``rabbit_misc`` ``MAX_EXPIRY_TIMER``, 2^32-1).
MAX_EXPIRY = 4294967295
#: Largest x-max-priority RabbitMQ accepts (``MAX_SUPPORTED_PRIORITY``).
MAX_PRIORITY = 255

OVERFLOW_DROP_HEAD = "drop-head"
OVERFLOW_REJECT_PUBLISH = "reject-publish"
OVERFLOW_REJECT_PUBLISH_DLX = "reject-publish-dlx"
_OVERFLOW_MODES = (OVERFLOW_DROP_HEAD, OVERFLOW_REJECT_PUBLISH, OVERFLOW_REJECT_PUBLISH_DLX)
_QUEUE_MODES = ("default", "lazy")
_QUEUE_TYPES = ("classic", "quorum", "stream")
_LEADER_LOCATORS = ("client-local", "random", "least-leaders", "balanced")
_MAX_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")
_EXPIRATION = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The parsed, validated x-arguments of one queue (immutable).

    Fields (``None`` = argument absent):
      * ``message_ttl`` -- x-message-ttl, ms, 0..2^32-1 ("RabbitMQ: TTL").
      * ``expires`` -- x-expires, ms, 1..2^32-1; the core runs the unused-queue timer.
      * ``max_length`` -- x-max-length, ready messages, >= 0 ("RabbitMQ: Queue Length Limit").
      * ``max_length_bytes`` -- x-max-length-bytes, body bytes of ready messages, >= 0.
      * ``overflow`` -- x-overflow: "drop-head" (default), "reject-publish", "reject-publish-dlx".
      * ``dead_letter_exchange`` -- x-dead-letter-exchange ("" is the default exchange).
      * ``dead_letter_routing_key`` -- x-dead-letter-routing-key (only valid with a DLX).
      * ``max_priority`` -- x-max-priority, 0..255 ("RabbitMQ: Priority Queue"). RabbitMQ accepts
        0, which makes every message priority 0 (no reordering).
      * ``single_active_consumer`` -- x-single-active-consumer.
      * ``queue_type`` -- x-queue-type, "classic" by default; the core decides what it serves.
      * ``deduplication`` -- x-message-deduplication: drop a message whose dedup key (the
        ``x-deduplication-header`` header, else the message-id property) was seen within the window.
      * ``dedup_cache_size`` -- x-cache-size, keys remembered at most (default
        ``DEFAULT_DEDUP_CACHE_SIZE``); ``dedup_cache_ttl`` -- x-cache-ttl, ms a key is remembered
        (None: until evicted by size). Names as the RabbitMQ message-deduplication plugin.
    """

    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = OVERFLOW_DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    queue_type: str = "classic"
    deduplication: bool = False
    dedup_cache_size: int | None = None
    dedup_cache_ttl: int | None = None


# --- type checks, each returns the value or raises InvalidArgument naming the argument -----------

def _int(name: str, value: object) -> int:
    if type(value) is not int:  # bool is an int subclass but RabbitMQ refuses it
        raise InvalidArgument(name, f"expected integer, got {_type_name(value)}")
    return value


def _non_neg_int(name: str, value: object) -> int:
    v = _int(name, value)
    if v < 0:
        raise InvalidArgument(name, f"value_negative {v}")
    return v


def _positive_int(name: str, value: object) -> int:
    v = _non_neg_int(name, value)
    if v == 0:
        raise InvalidArgument(name, "value_zero 0")
    return v


def _expiry(name: str, value: int) -> int:
    if value > MAX_EXPIRY:
        raise InvalidArgument(name, f"value_too_big {value}")
    if value < 0:
        raise InvalidArgument(name, f"value_negative {value}")
    return value


def _message_ttl(name: str, value: object) -> int:
    return _expiry(name, _int(name, value))


def _expires(name: str, value: object) -> int:
    v = _int(name, value)
    if v == 0:
        raise InvalidArgument(name, "value_zero 0")
    return _expiry(name, v)


def _max_priority(name: str, value: object) -> int:
    v = _non_neg_int(name, value)
    if v > MAX_PRIORITY:
        raise InvalidArgument(name, f"max_value_exceeded {v}")
    return v


def _str(name: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):  # pamqp hands back non-UTF-8 long strings as bytes
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(name, "expected a UTF-8 string") from None
    raise InvalidArgument(name, f"unacceptable_type {_type_name(value)}")


def _one_of(choices: tuple[str, ...], what: str) -> Callable[[str, object], str]:
    def check(name: str, value: object) -> str:
        v = _str(name, value)
        if v not in choices:
            raise InvalidArgument(name, f"{what} '{v}'")
        return v
    return check


def _bool(name: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidArgument(name, f"unacceptable_type {_type_name(value)}")
    return value


def _max_age(name: str, value: object) -> str:
    v = _str(name, value)
    m = _MAX_AGE.fullmatch(v)
    if m is None or int(m.group(1)) <= 0:
        raise InvalidArgument(name, "invalid_max_age")
    return v


def _count_like(name: str, value: object) -> int:
    """A positive integer, also given as decimal text (the dedup plugin's examples use strings)."""
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        if not text.isdigit():
            raise InvalidArgument(name, f"expected a positive integer, got {text!r}")
        value = int(text)
    v = _int(name, value)
    if v <= 0:
        raise InvalidArgument(name, f"value_zero_or_less {v}")
    return v


def _type_name(value: object) -> str:
    return "void" if value is None else type(value).__name__


# In RabbitMQ's declare_args order: the first failing argument is the one reported.
_VALIDATORS: tuple[tuple[str, Callable[[str, object], object]], ...] = (
    ("x-expires", _expires),
    ("x-message-ttl", _message_ttl),
    ("x-dead-letter-exchange", _str),
    ("x-dead-letter-routing-key", _str),
    ("x-max-length", _non_neg_int),
    ("x-max-length-bytes", _non_neg_int),
    ("x-max-in-memory-length", _non_neg_int),
    ("x-max-in-memory-bytes", _non_neg_int),
    ("x-max-priority", _max_priority),
    ("x-overflow", _one_of(_OVERFLOW_MODES, "invalid_overflow")),
    ("x-queue-mode", _one_of(_QUEUE_MODES, "unsupported queue mode")),
    ("x-single-active-consumer", _bool),
    ("x-queue-type", _one_of(_QUEUE_TYPES, "unsupported queue type")),
    ("x-quorum-initial-group-size", _positive_int),
    ("x-max-age", _max_age),
    ("x-max-segment-size", _non_neg_int),
    ("x-initial-cluster-size", _positive_int),
    ("x-queue-leader-locator", _one_of(_LEADER_LOCATORS, "invalid_queue_locator_arg")),
    ("x-message-deduplication", _bool),
    ("x-cache-size", _count_like),
    ("x-cache-ttl", _count_like),
)

_DEFAULT_SETTINGS = QueueSettings()


def parse_arguments(arguments: Mapping[str, object] | None) -> QueueSettings:
    """Validate Queue.Declare ``arguments`` and return the ``QueueSettings`` they describe.

    ``arguments`` is the decoded field table (``dict[str, value]``) or ``None``. Known arguments are
    checked in RabbitMQ's order; unknown keys (x- or not) are ignored, as RabbitMQ does. Arguments
    RabbitMQ validates but this model does not interpret (x-queue-mode, x-max-age, quorum/stream
    sizing, leader locator) are validated and otherwise ignored.

    Raises ``InvalidArgument`` (core: 406 PRECONDITION_FAILED) for: a non-integer, negative or
    > 2^32-1 x-message-ttl; a non-integer, zero, negative or > 2^32-1 x-expires; a non-integer or
    negative x-max-length / x-max-length-bytes; x-max-priority outside 0..255; an x-overflow other
    than drop-head / reject-publish / reject-publish-dlx; a non-boolean x-single-active-consumer; a
    non-string x-dead-letter-exchange; x-dead-letter-routing-key that is not a string or is given
    without x-dead-letter-exchange ("routing_key_but_no_dlx_defined"); an unknown x-queue-type.

    Source: rabbitmq-server ``rabbit_amqqueue:declare_args/0``; "RabbitMQ: Queues".
    """
    if not arguments:
        return _DEFAULT_SETTINGS
    values: dict[str, object] = {}
    for key, check in _VALIDATORS:
        if key in arguments:
            values[key] = check(key, arguments[key])
            if key == "x-dead-letter-routing-key" and "x-dead-letter-exchange" not in arguments:
                raise InvalidArgument(key, "routing_key_but_no_dlx_defined")
    return QueueSettings(
        message_ttl=values.get("x-message-ttl"),  # type: ignore[arg-type]
        expires=values.get("x-expires"),  # type: ignore[arg-type]
        max_length=values.get("x-max-length"),  # type: ignore[arg-type]
        max_length_bytes=values.get("x-max-length-bytes"),  # type: ignore[arg-type]
        overflow=values.get("x-overflow", OVERFLOW_DROP_HEAD),  # type: ignore[arg-type]
        dead_letter_exchange=values.get("x-dead-letter-exchange"),  # type: ignore[arg-type]
        dead_letter_routing_key=values.get("x-dead-letter-routing-key"),  # type: ignore[arg-type]
        max_priority=values.get("x-max-priority"),  # type: ignore[arg-type]
        single_active_consumer=values.get("x-single-active-consumer", False),  # type: ignore[arg-type]
        queue_type=values.get("x-queue-type", "classic"),  # type: ignore[arg-type]
        deduplication=values.get("x-message-deduplication", False),  # type: ignore[arg-type]
        dedup_cache_size=values.get("x-cache-size"),  # type: ignore[arg-type]
        dedup_cache_ttl=values.get("x-cache-ttl"),  # type: ignore[arg-type]
    )


def parse_expiration(expiration: str) -> int:
    """Parse a message's ``expiration`` property (decimal text) into a TTL in ms (0..2^32-1).

    Accepts an optional sign followed by ASCII digits and nothing else (Erlang
    ``string:to_integer`` with no leftover). Raises ``InvalidArgument("expiration", ...)`` for
    anything else, a negative value or one above 2^32-1; RabbitMQ then refuses the publish with
    406 PRECONDITION_FAILED -- that check belongs to the core, before routing. Queues themselves
    treat an unparsable expiration as "no per-message TTL".

    Source: rabbitmq-server ``rabbit_basic:parse_expiration/1``; "RabbitMQ: TTL" (per-message TTL).
    """
    if not isinstance(expiration, str) or _EXPIRATION.fullmatch(expiration) is None:
        raise InvalidArgument("expiration", f"no integer in {expiration!r}")
    return _expiry("expiration", int(expiration))


def message_ttl_or_none(expiration: str) -> int | None:
    """Like ``parse_expiration`` but ``None`` instead of raising (the queue's lenient reading)."""
    if _EXPIRATION.fullmatch(expiration) is None:
        return None
    value = int(expiration)
    return value if 0 <= value <= MAX_EXPIRY else None
