"""Shared bookkeeping for exchange-type matchers.

Owns: the binding set of one exchange (identity, per-destination index, counting) and the matcher
interface every exchange type implements. Subclasses only index bindings (``_add``/``_remove``) and
answer ``route``; this mirrors LavinMQ, where the base exchange keeps bindings and each type only
yields destinations.
Must not know: other exchanges, exchange-to-exchange recursion, alternate exchanges, CC/BCC, queues'
existence. Those belong to ``routing.table``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from routing.binding import Binding
from routing.destination import Destination
from routing.targets import Targets

__all__ = ["Matcher"]


class Matcher(ABC):
    """The bindings of one exchange, indexed for its type's routing rule.

    ``source`` is the owning exchange's name, stamped on every ``Binding`` it returns.
    ``needs_headers`` is True for types that route on message headers (the table then never takes
    the key-only hot path and passes decoded headers).

    A binding is identified by (destination, binding_key, arguments) -- see ``routing.binding``.
    Source: RabbitMQ: Exchanges guide; LavinMQ ``Exchange`` base class.
    """

    __slots__ = ("source", "_bindings", "_by_destination")

    type_name: ClassVar[str] = ""
    needs_headers: ClassVar[bool] = False

    def __init__(self, source: str) -> None:
        self.source = source
        self._bindings: dict[Binding, None] = {}
        self._by_destination: dict[Destination, dict[Binding, None]] = {}

    # ----------------------------------------------------------------------------- mutation

    def bind(
        self, destination: Destination, binding_key: str, arguments: Mapping[str, Any] | None
    ) -> bool:
        """Add a binding; return True if it is new, False if an identical one existed.

        ``arguments`` may be None (== ``{}``); it is copied. Raises ``InvalidArgument`` if this
        type rejects the binding (e.g. a bad headers ``x-match``) and ``TypeError`` for an
        unhashable argument value. Source: AMQP 0-9-1 §1.7.2.3 ``queue.bind``.
        """
        b = Binding(self.source, destination, binding_key, arguments or {})
        if b in self._bindings:
            return False
        self._validate(b)
        self._bindings[b] = None
        self._by_destination.setdefault(destination, {})[b] = None
        self._add(b)
        return True

    def unbind(
        self, destination: Destination, binding_key: str, arguments: Mapping[str, Any] | None
    ) -> bool:
        """Remove a binding; return True if it existed. Never raises for unknown bindings.

        Source: AMQP 0-9-1 §1.7.2.5 ``queue.unbind``; RabbitMQ: Exchange-to-Exchange Bindings.
        """
        b = Binding(self.source, destination, binding_key, arguments or {})
        if b not in self._bindings:
            return False
        self._forget(b)
        return True

    def unbind_destination(self, destination: Destination) -> int:
        """Remove every binding to ``destination``; return how many were removed.

        Used when a queue or exchange is deleted. Source: AMQP 0-9-1 §1.7.2.9 ``queue.delete``.
        """
        bs = self._by_destination.get(destination)
        if not bs:
            return 0
        victims = list(bs)
        for b in victims:
            self._forget(b)
        return len(victims)

    def clear(self) -> None:
        """Remove every binding (the exchange is being deleted)."""
        for b in list(self._bindings):
            self._forget(b)

    def _forget(self, b: Binding) -> None:
        del self._bindings[b]
        per_dest = self._by_destination[b.destination]
        del per_dest[b]
        if not per_dest:
            del self._by_destination[b.destination]
        self._remove(b)

    # ----------------------------------------------------------------------------- queries

    def bindings(self) -> Iterator[Binding]:
        """Iterate every binding of this exchange, in insertion order."""
        return iter(list(self._bindings))

    def bindings_to(self, destination: Destination) -> Iterator[Binding]:
        """Iterate the bindings of this exchange whose destination is ``destination``."""
        return iter(list(self._by_destination.get(destination, ())))

    def has_binding(
        self, destination: Destination, binding_key: str, arguments: Mapping[str, Any] | None
    ) -> bool:
        """True if exactly this binding exists (``queue.bind`` idempotence checks)."""
        return Binding(self.source, destination, binding_key, arguments or {}) in self._bindings

    def destinations(self) -> Iterable[Destination]:
        """The distinct destinations bound to this exchange (a live view; do not mutate)."""
        return self._by_destination.keys()

    def __len__(self) -> int:
        """The number of bindings (not destinations)."""
        return len(self._bindings)

    # ----------------------------------------------------------------------------- routing

    @abstractmethod
    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """The destinations a message with ``routing_key``/``headers`` reaches in this exchange.

        May contain duplicates; the routing table deduplicates. Never raises.
        """

    def targets(self, routing_key: str) -> Targets:
        """Key-only routing answer, for types with ``needs_headers`` False.

        Returns a cached/precomputed ``Targets``; do not mutate. Raises ``NotImplementedError``
        for header-based types.
        """
        raise NotImplementedError(f"{type(self).__name__} routes on headers")

    # ----------------------------------------------------------------------------- subclass hooks

    def _validate(self, binding: Binding) -> None:  # noqa: B027 - optional hook
        """Raise ``InvalidArgument`` if ``binding`` is not acceptable for this type."""

    @abstractmethod
    def _add(self, binding: Binding) -> None:
        """Index a new binding (it is already recorded in the base bookkeeping)."""

    @abstractmethod
    def _remove(self, binding: Binding) -> None:
        """Un-index a binding (it is already removed from the base bookkeeping)."""
