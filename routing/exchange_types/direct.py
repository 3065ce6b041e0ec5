"""The direct exchange type: a message goes to bindings whose key equals its routing key.

Owns: a hash index from binding key to destinations.
Must not know: the default exchange's implicit bindings (see ``routing.exchange_types.default``),
exchange-to-exchange recursion, alternate exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from routing.binding import Binding
from routing.destination import Destination
from routing.exchange_types.base import Matcher
from routing.exchange_types.counted import CountedDestinations
from routing.targets import EMPTY_TARGETS, Targets

__all__ = ["DirectMatcher"]


class DirectMatcher(Matcher):
    """Direct exchange bindings: routing key ``k`` reaches every binding with key exactly ``k``.

    Routing is one dict lookup returning a cached ``Targets``; the comparison is exact and
    case-sensitive. Binding arguments are part of binding identity but do not affect matching.
    Source: AMQP 0-9-1 §3.1.3.1 "The Direct Exchange Type"; RabbitMQ: Exchanges guide.
    """

    __slots__ = ("_by_key",)
    type_name = "direct"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._by_key: dict[str, CountedDestinations] = {}

    def _add(self, binding: Binding) -> None:
        bucket = self._by_key.get(binding.binding_key)
        if bucket is None:
            bucket = self._by_key[binding.binding_key] = CountedDestinations()
        bucket.add(binding.destination)

    def _remove(self, binding: Binding) -> None:
        if self._by_key[binding.binding_key].remove(binding.destination):
            del self._by_key[binding.binding_key]

    def targets(self, routing_key: str) -> Targets:
        """The destinations bound with key ``routing_key`` (``EMPTY_TARGETS`` if none)."""
        bucket = self._by_key.get(routing_key)
        return EMPTY_TARGETS if bucket is None else bucket.targets

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """The destinations bound with key ``routing_key``; ``headers`` is ignored."""
        bucket = self._by_key.get(routing_key)
        return () if bucket is None else bucket.counts.keys()
