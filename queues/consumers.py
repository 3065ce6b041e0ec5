"""The consumers registered on one queue and the choice of who gets the next message.

Owns: registration order, consumer priorities (x-priority), round-robin between consumers of the
same priority, and single active consumer (SAC).

* Round robin: consumers of one priority sit in a deque; the first one (from the front) that
  ``can_deliver()`` gets the message and moves to the back. A consumer that cannot deliver is
  skipped but keeps its place, so it is first in line once it has credit again.
* Priorities: the highest priority with a consumer that can deliver wins; lower priorities are
  served only while every higher one is blocked ("RabbitMQ: Consumer Priorities").
* SAC: only the active consumer is ever chosen. The first consumer registered becomes active; when
  it is removed the remaining consumer with the highest priority, earliest registered, becomes
  active ("RabbitMQ: Consumers (single active consumer)"; rabbitmq-server
  ``rabbit_queue_consumers:get_consumer/1``).

Consumers are tracked by identity (``id``), so they need not be hashable. Any object with the
``queues.protocols.Consumer`` attributes will do; one that subclasses ``DirectConsumer`` is called
natively by compiled code (no method lookup, no argument parsing: issue 28's small-message path).

Must not know: messages, entries, channels, credit accounting (``can_deliver`` is the consumer's).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterator
from typing import Any

__all__ = ["ConsumerSet", "DirectConsumer", "can_deliver", "consumer_no_ack", "deliver_to"]


class DirectConsumer:
    """A base class for ``queues.protocols.Consumer`` implementations that compiled code calls
    directly: a subclass overrides ``can_deliver`` and ``deliver`` and sets ``no_ack``; the
    queue's hot path (``can_deliver``, ``consumer_no_ack``, ``deliver_to`` below) then reads and
    calls them through the class's native vtable instead of a Python attribute lookup and call.
    Behaviour is exactly the protocol's; the base adds nothing else."""

    __slots__ = ("no_ack",)

    def __init__(self, no_ack: bool) -> None:
        #: Basic.Consume no-ack: the queue forgets an entry once delivered to this consumer.
        self.no_ack = no_ack

    def can_deliver(self) -> bool:
        """True when the consumer has credit now (the protocol's); subclasses override it."""
        raise NotImplementedError

    def deliver(self, queue: Any, entry: Any) -> None:
        """Send Basic.Deliver for ``entry`` of ``queue`` (the protocol's); subclasses override."""
        raise NotImplementedError


def can_deliver(consumer: Any) -> bool:
    """``consumer.can_deliver()``, a native call for a ``DirectConsumer``."""
    if isinstance(consumer, DirectConsumer):
        return consumer.can_deliver()
    return bool(consumer.can_deliver())


def consumer_no_ack(consumer: Any) -> bool:
    """``consumer.no_ack``, a native read for a ``DirectConsumer``."""
    if isinstance(consumer, DirectConsumer):
        return consumer.no_ack
    return bool(consumer.no_ack)


def deliver_to(consumer: Any, queue: Any, entry: Any) -> None:
    """``consumer.deliver(queue, entry)``, a native call for a ``DirectConsumer``."""
    if isinstance(consumer, DirectConsumer):
        consumer.deliver(queue, entry)
    else:
        consumer.deliver(queue, entry)


class ConsumerSet:
    """Consumers of one queue (see module docstring). ``pick()`` is the hot-path call.

    ``add`` raises ``ValueError`` when the same consumer object is added twice; ``remove`` returns
    False for an unknown consumer. Iteration yields consumers in registration order.
    """

    __slots__ = ("_all", "_levels", "_prios", "_top", "_sac", "active", "version")

    def __init__(self, single_active: bool = False) -> None:
        self._all: dict[int, tuple[Any, int]] = {}  # id -> (consumer, priority); insertion order
        self._levels: dict[int, deque[Any]] = {}
        self._prios: list[int] = []  # priorities present, ascending; served from the end
        #: the highest priority's level (empty when nobody is registered): ``pick`` reads it
        #: without a dict lookup, and with one priority (the usual case) that is all it reads
        self._top: deque[Any] = deque()
        self._sac = single_active
        #: The single active consumer (SAC queues only), ``None`` when there is none.
        self.active: Any = None
        #: Grows by one on every ``add`` and successful ``remove`` (callers cache views of the set).
        self.version = 0

    def __len__(self) -> int:
        return len(self._all)

    def __bool__(self) -> bool:
        return bool(self._all)

    def __iter__(self) -> Iterator[Any]:
        return (c for c, _ in self._all.values())

    def __contains__(self, consumer: object) -> bool:
        return id(consumer) in self._all

    def add(self, consumer: Any) -> None:
        """Register ``consumer`` (reads ``consumer.priority`` once; ``ValueError`` if present)."""
        key = id(consumer)
        if key in self._all:
            raise ValueError(f"consumer {getattr(consumer, 'tag', consumer)!r} already registered")
        priority = int(getattr(consumer, "priority", 0) or 0)
        self._all[key] = (consumer, priority)
        self.version += 1
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = deque()
            insort(self._prios, priority)
            self._top = self._levels[self._prios[-1]]
        level.append(consumer)
        if self._sac and self.active is None:
            self.active = consumer

    def remove(self, consumer: Any) -> bool:
        """Unregister ``consumer``; returns False when it was not registered.

        For SAC, when the active consumer is removed the next one is activated (see module doc).
        """
        item = self._all.pop(id(consumer), None)
        if item is None:
            return False
        self.version += 1
        priority = item[1]
        level = self._levels[priority]
        for i, c in enumerate(level):
            if c is consumer:
                del level[i]
                break
        if not level:
            del self._levels[priority]
            self._prios.remove(priority)
            self._top = self._levels[self._prios[-1]] if self._prios else deque()
        if self._sac and self.active is consumer:
            self.active = self._next_active()
        return True

    def _next_active(self) -> Any:
        best: Any = None
        best_priority = 0
        for c, priority in self._all.values():  # registration order: the first wins ties
            if best is None or priority > best_priority:
                best, best_priority = c, priority
        return best

    def pick(self) -> Any:
        """The consumer that gets the next message, or ``None`` when none can deliver.

        Calls ``can_deliver()`` on candidates in order; the chosen one moves to the back of its
        priority's rotation. Does not deliver anything.
        """
        if self._sac:
            active = self.active
            return active if active is not None and can_deliver(active) else None
        prios = self._prios
        levels = self._levels
        top = len(prios) - 1
        for i in range(top, -1, -1):
            level = self._top if i == top else levels[prios[i]]
            first = level[0]
            if can_deliver(first):
                if len(level) > 1:
                    level.rotate(-1)
                return first
            for j in range(1, len(level)):
                c = level[j]
                if can_deliver(c):
                    del level[j]
                    level.append(c)
                    return c
        return None

    def clear(self) -> list[Any]:
        """Unregister everyone; returns them in registration order."""
        out = list(self)
        self._all.clear()
        self._levels.clear()
        self._prios.clear()
        self._top = deque()
        self.active = None
        return out
