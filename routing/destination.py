"""Binding destinations: a queue or an exchange, identified by name.

Owns: the ``Destination`` value used as the target of every binding and the result element of every
exchange type's ``route``.
Must not know: queue or exchange objects. Routing returns *names*; the core resolves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["EXCHANGE", "QUEUE", "Destination", "DestinationKind", "exchange", "queue"]

DestinationKind = Literal["queue", "exchange"]

QUEUE: Final = "queue"
EXCHANGE: Final = "exchange"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a binding delivers: ``kind`` is ``"queue"`` or ``"exchange"``, ``name`` its name.

    Hashable and comparable by value; used as a dict key throughout the package.

    Raises ``ValueError`` if ``kind`` is neither ``"queue"`` nor ``"exchange"``.
    Source: AMQP 0-9-1 §3.1.3 (queue bindings); RabbitMQ: Exchange-to-Exchange Bindings.
    """

    kind: DestinationKind
    name: str

    def __post_init__(self) -> None:
        if self.kind != QUEUE and self.kind != EXCHANGE:
            raise ValueError(f"destination kind must be 'queue' or 'exchange', not {self.kind!r}")

    @classmethod
    def of_queue(cls, name: str) -> Destination:
        """The destination of the queue called ``name`` (same as ``queue(name)``)."""
        return cls(QUEUE, name)

    @classmethod
    def of_exchange(cls, name: str) -> Destination:
        """The destination of the exchange called ``name`` (same as ``exchange(name)``)."""
        return cls(EXCHANGE, name)

    @property
    def is_queue(self) -> bool:
        """True if this destination is a queue."""
        return self.kind == QUEUE

    @property
    def is_exchange(self) -> bool:
        """True if this destination is an exchange (an exchange-to-exchange binding)."""
        return self.kind == EXCHANGE


def queue(name: str) -> Destination:
    """Return the ``Destination`` of the queue called ``name``. Source: AMQP 0-9-1 §1.7.2.3."""
    return Destination(QUEUE, name)


def exchange(name: str) -> Destination:
    """Return the ``Destination`` of the exchange called ``name``.

    Source: RabbitMQ: Exchange-to-Exchange Bindings.
    """
    return Destination(EXCHANGE, name)
