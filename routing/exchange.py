"""The ``Exchange`` value: an exchange's declared attributes plus its type's matcher.

Owns: exchange attributes, reading the ``alternate-exchange`` argument, and RabbitMQ's declare
equivalence rule.
Must not know: other exchanges, queues, routing across exchanges (``routing.table`` does that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.errors import InvalidArgument
from routing.exchange_types import matcher_for
from routing.exchange_types.base import Matcher
from routing.values import field_equal

__all__ = ["ALTERNATE_EXCHANGE_ARG", "Exchange", "alternate_exchange_of"]

ALTERNATE_EXCHANGE_ARG = "alternate-exchange"


def alternate_exchange_of(arguments: Mapping[str, Any] | None) -> str | None:
    """Return the exchange name in ``arguments["alternate-exchange"]``, or None if absent.

    Accepts ``str`` or UTF-8 ``bytes``; raises ``InvalidArgument`` for any other type.
    Source: RabbitMQ: Alternate Exchanges.
    """
    if not arguments:
        return None
    value = arguments.get(ALTERNATE_EXCHANGE_ARG)
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"invalid {ALTERNATE_EXCHANGE_ARG} {value!r}") from None
    if not isinstance(value, str):
        raise InvalidArgument(
            f"invalid {ALTERNATE_EXCHANGE_ARG} of type {type(value).__name__}; expected longstr"
        )
    return value


@dataclass(frozen=True, slots=True, eq=False)
class Exchange:
    """One exchange of a vhost.

    Fields: ``name``; ``type`` ("direct" | "fanout" | "topic" | "headers"); ``durable``,
    ``auto_delete``, ``internal`` flags; ``arguments`` (copied, do not mutate); ``matcher`` (the
    type's binding index -- built from ``type`` when not given); ``alternate_exchange`` (derived
    from ``arguments``). Compared by identity. The attributes are immutable; only the matcher's
    bindings change.

    Raises ``UnknownExchangeType`` for an unknown ``type`` and ``InvalidArgument`` for a
    non-string ``alternate-exchange`` argument (and, for ``x-delayed-message``, a bad
    ``x-delayed-type``: ``routing.exchange_types.delayed``).
    Source: AMQP 0-9-1 §1.7.2.1 ``exchange.declare``; RabbitMQ: Exchanges guide, Alternate
    Exchanges.
    """

    name: str
    type: str
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    matcher: Matcher = None  # type: ignore[assignment]  # built in __post_init__ when omitted
    alternate_exchange: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        args = dict(self.arguments) if self.arguments else {}
        object.__setattr__(self, "arguments", args)
        object.__setattr__(self, "alternate_exchange", alternate_exchange_of(args))
        if self.matcher is None:
            object.__setattr__(self, "matcher", matcher_for(self.type, self.name, args))

    @property
    def is_default(self) -> bool:
        """True for the default exchange (name ``""``)."""
        return self.name == ""

    def is_equivalent(
        self,
        type: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> bool:
        """True if a redeclare with these attributes is equivalent to this exchange.

        RabbitMQ compares type, durable, auto_delete, internal and, among the arguments, only
        ``alternate-exchange`` (other arguments may differ). On False the core should close the
        channel with 406 PRECONDITION_FAILED ("inequivalent arg"). Never raises.
        Source: RabbitMQ rabbit_exchange ``assert_equivalence``/``assert_args_equivalence``.
        """
        if (type, durable, auto_delete, internal) != (
            self.type,
            self.durable,
            self.auto_delete,
            self.internal,
        ):
            return False
        mine = self.arguments.get(ALTERNATE_EXCHANGE_ARG)
        theirs = (arguments or {}).get(ALTERNATE_EXCHANGE_ARG)
        return field_equal(mine, theirs)
