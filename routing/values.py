"""AMQP field-table value semantics that routing needs: strict equality and hashable freezing.

Owns: comparing a binding argument with a message header value the way RabbitMQ does, and turning an
arguments table into a hashable, type-aware identity.
Must not know: the wire codec. Values arrive already decoded by pamqp: ``bool``, ``int``, ``float``,
``decimal.Decimal``, ``str``/``bytes`` (long strings that are not valid UTF-8 stay ``bytes``),
``datetime`` (timestamps), ``list`` (arrays), ``dict`` (tables) and ``None`` (void).

Python's ``==`` is too lax for AMQP: ``1 == True`` and ``1 == 1.0``. RabbitMQ compares header values
with Erlang's exact ``=:=`` on the untyped value (RabbitMQ: rabbit_exchange_type_headers ``match/2``,
mc_amqpl ``routing_headers``), under which a boolean never equals an integer and an integer never
equals a float, while a short string and a long string with the same bytes are equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

__all__ = ["field_equal", "freeze_table", "freeze_value"]

# same exact type among these: plain == is already exact (bool vs int differ in type)
_SIMPLE_TYPES: frozenset[type] = frozenset({str, bytes, int, bool, float, Decimal, datetime})

# categories: values in different categories are never equal
_BOOL, _INT, _FLOAT, _DECIMAL, _STRING, _ARRAY, _TABLE, _VOID, _TIMESTAMP, _OTHER = range(10)


def _category(value: Any) -> int:
    if value is None:
        return _VOID
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _FLOAT
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return _STRING
    if isinstance(value, Decimal):
        return _DECIMAL
    if isinstance(value, (list, tuple)):
        return _ARRAY
    if isinstance(value, Mapping):
        return _TABLE
    if isinstance(value, datetime):
        return _TIMESTAMP
    return _OTHER


def _as_bytes(value: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return bytes(value)


def field_equal(a: Any, b: Any) -> bool:
    """Return True if AMQP field values ``a`` and ``b`` are equal under RabbitMQ's exact match.

    Rules: a ``bool`` equals only a ``bool``; an ``int`` only an ``int``; a ``float`` only a
    ``float``; ``str`` and ``bytes`` compare by their UTF-8 bytes; arrays (``list``/``tuple``) and
    tables (mappings) compare element-wise with these same rules; ``None`` (void) equals only
    ``None``; anything else compares with ``==`` within its own type category. Never raises.

    Source: RabbitMQ: rabbit_exchange_type_headers (``maps:get(K, M) =:= V``).
    """
    ta = type(a)
    if ta is type(b) and ta in _SIMPLE_TYPES:
        return bool(a == b)
    if a is b:
        return True
    ca = _category(a)
    if ca != _category(b):
        return False
    if ca == _STRING:
        return bool(_as_bytes(a) == _as_bytes(b))
    if ca == _ARRAY:
        return len(a) == len(b) and all(field_equal(x, y) for x, y in zip(a, b, strict=True))
    if ca == _TABLE:
        return a.keys() == b.keys() and all(field_equal(v, b[k]) for k, v in a.items())
    if ca == _VOID:
        return True
    return bool(a == b)


def freeze_value(value: Any) -> Any:
    """Return a hashable, type-tagged stand-in for a field value, for binding identity.

    Two values freeze equal exactly when they have the same Python type and equal contents, so
    ``True`` and ``1``, or ``1`` and ``1.0``, give different bindings (RabbitMQ compares binding
    arguments as typed field tables). Lists become tuples, tables become sorted tuples of pairs.
    Raises ``TypeError`` only for a value that is unhashable and not a list/tuple/mapping.

    Source: RabbitMQ: Exchanges guide ("bindings ... with different arguments are different").
    """
    if isinstance(value, (list, tuple)):
        return ("array", tuple(freeze_value(v) for v in value))
    if isinstance(value, Mapping):
        return ("table", freeze_table(value))
    if isinstance(value, (bytearray, memoryview)):
        return ("bytes", bytes(value))
    hash(value)  # fail early, with the offending type named by Python
    return (type(value).__name__, value)


def freeze_table(table: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """Return a hashable, order-independent identity for an arguments table (``None`` == ``{}``).

    Shape: ``((key, frozen_value), ...)`` sorted by key. Raises ``TypeError`` as ``freeze_value``.
    Source: RabbitMQ: rabbit_misc ``sort_field_table`` (bindings are compared as sorted tables).
    """
    if not table:
        return ()
    return tuple(sorted((str(k), freeze_value(v)) for k, v in table.items()))
