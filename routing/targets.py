"""Precomputed routing results for one exchange and routing key.

Owns: ``Targets``, the immutable answer an exchange type gives for a routing key, shaped so the
routing table can take its hot path (all destinations are queues) without allocating.
Must not know: exchanges, the table, alternate exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from routing.destination import QUEUE, Destination

__all__ = ["EMPTY_TARGETS", "Targets"]


@dataclass(frozen=True, slots=True)
class Targets:
    """The destinations one routing key reaches in one exchange, without duplicates.

    Shapes: ``destinations`` in first-seen order; ``queue_names`` the names of the queue
    destinations; ``only_queues`` True when there is no exchange destination (so the routing
    table can return ``set(queue_names)`` directly). Build with ``Targets.of``; never raises.

    Source: RabbitMQ: Exchanges guide (routing to queues); Exchange-to-Exchange Bindings.
    """

    destinations: tuple[Destination, ...]
    queue_names: frozenset[str]
    only_queues: bool

    @classmethod
    def of(cls, destinations: Iterable[Destination]) -> Targets:
        """Build ``Targets`` from destinations, dropping duplicates (first occurrence kept)."""
        dests = tuple(dict.fromkeys(destinations))
        names = frozenset(d.name for d in dests if d.kind == QUEUE)
        return cls(dests, names, len(names) == len(dests))


EMPTY_TARGETS = Targets((), frozenset(), True)
