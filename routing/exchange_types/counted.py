"""A multiset of destinations with a lazily rebuilt ``Targets`` snapshot.

Owns: reference counting of destinations that several bindings share (same destination bound with
different keys/arguments), and caching the resulting ``Targets`` until the next change.
Must not know: binding keys or exchange types; the direct, fanout and topic matchers use it.
"""

from __future__ import annotations

from routing.destination import Destination
from routing.targets import EMPTY_TARGETS, Targets

__all__ = ["CountedDestinations"]


class CountedDestinations:
    """Destinations with a count of the bindings that lead to each.

    ``targets`` returns a ``Targets`` snapshot rebuilt at most once per change, so routing pays
    nothing while the bindings are stable. Never raises except ``KeyError`` from ``remove`` of a
    destination that was never added (a bookkeeping bug).
    Source: RabbitMQ: Exchanges guide (a queue bound twice still gets one copy).
    """

    __slots__ = ("counts", "_targets")

    def __init__(self) -> None:
        self.counts: dict[Destination, int] = {}
        self._targets: Targets | None = EMPTY_TARGETS

    def add(self, destination: Destination) -> None:
        """Count one more binding to ``destination``."""
        n = self.counts.get(destination, 0)
        self.counts[destination] = n + 1
        if n == 0:
            self._targets = None

    def remove(self, destination: Destination) -> bool:
        """Count one binding fewer to ``destination``; return True if now empty overall."""
        n = self.counts[destination] - 1
        if n:
            self.counts[destination] = n
        else:
            del self.counts[destination]
            self._targets = None
        return not self.counts

    @property
    def targets(self) -> Targets:
        """The current destinations as ``Targets`` (cached until the next change)."""
        t = self._targets
        if t is None:
            t = self._targets = Targets.of(self.counts) if self.counts else EMPTY_TARGETS
        return t

    def __bool__(self) -> bool:
        return bool(self.counts)
