"""The fanout exchange type: a message goes to every binding, whatever its routing key.

Owns: the set of bound destinations.
Must not know: exchange-to-exchange recursion, alternate exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from routing.binding import Binding
from routing.destination import Destination
from routing.exchange_types.base import Matcher
from routing.exchange_types.counted import CountedDestinations
from routing.targets import Targets

__all__ = ["FanoutMatcher"]


class FanoutMatcher(Matcher):
    """Fanout exchange bindings: every message reaches every bound destination.

    Binding keys and arguments are kept (they identify bindings) but never consulted for routing.
    Source: AMQP 0-9-1 §3.1.3.2 "The Fanout Exchange Type"; RabbitMQ: Exchanges guide.
    """

    __slots__ = ("_all",)
    type_name = "fanout"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._all = CountedDestinations()

    def _add(self, binding: Binding) -> None:
        self._all.add(binding.destination)

    def _remove(self, binding: Binding) -> None:
        self._all.remove(binding.destination)

    def targets(self, routing_key: str) -> Targets:
        """Every bound destination; ``routing_key`` is ignored."""
        return self._all.targets

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """Every bound destination; ``routing_key`` and ``headers`` are ignored."""
        return self._all.counts.keys()
