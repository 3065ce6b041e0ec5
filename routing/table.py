"""The routing table of one vhost: every exchange, every binding, and the publish-time route walk.

Owns: exchange lifecycle (declare, delete, auto-delete cascade), the set of queue names the default
exchange binds implicitly, binding bookkeeping in both directions (by source and by destination),
and ``route``: exchange-to-exchange recursion, alternate exchanges and sender-selected (CC/BCC)
routing keys, all cycle-safe.
Must not know: queue or exchange *objects* of the broker, messages, I/O, durability, permissions
(the core enforces 403 on reserved names, 404 on missing entities, 406 on inequivalent redeclares).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from routing.binding import Binding
from routing.destination import EXCHANGE, QUEUE, Destination, queue
from routing.errors import AccessRefused, NotFound, UnknownExchangeType
from routing.exchange import Exchange
from routing.exchange_types import EXCHANGE_TYPES, DefaultMatcher
from routing.sender_selected import sender_selected_keys

__all__ = ["PREDECLARED_EXCHANGES", "HeadersArg", "RoutingTable", "UnbindResult"]

Headers: TypeAlias = Mapping[str, Any]
HeadersArg: TypeAlias = Headers | None | Callable[[], Headers | None]
"""Message headers as given to ``RoutingTable.route``: a mapping, None, or a lazy 0-arg getter."""

PREDECLARED_EXCHANGES: Final[tuple[tuple[str, str], ...]] = (
    ("", "direct"),
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)
"""(name, type) of the exchanges every vhost starts with. Source: AMQP 0-9-1 §3.1.3; RabbitMQ."""


@dataclass(frozen=True, slots=True)
class UnbindResult:
    """Outcome of ``RoutingTable.unbind``: truthy iff the binding existed.

    ``auto_deleted`` names the exchanges deleted as a consequence, in deletion order: the source
    (if auto-delete and this was its last binding) and any exchange that then lost its own last
    binding. Source: RabbitMQ: Exchanges guide (auto-delete).
    """

    existed: bool
    auto_deleted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.existed


class RoutingTable:
    """All exchanges and bindings of one vhost.

    Starts with the predeclared exchanges (``PREDECLARED_EXCHANGES``, all durable). The default
    exchange ``""`` is implicitly bound to every queue added with ``add_queue``; it cannot be bound,
    unbound or deleted (``AccessRefused``). Names are plain ``str``. Not thread-safe: the core calls
    it from one task/thread at a time.

    Source: AMQP 0-9-1 §3.1.3 (exchanges, bindings); RabbitMQ: Exchanges guide,
    Exchange-to-Exchange Bindings, Alternate Exchanges, Sender-selected Distribution.
    """

    __slots__ = ("_exchanges", "_queues", "_sources_of")

    def __init__(self) -> None:
        self._exchanges: dict[str, Exchange] = {}
        self._queues: set[str] = set()
        # destination -> {source exchange name -> number of bindings source->destination}
        self._sources_of: dict[Destination, dict[str, int]] = {}
        for name, type_name in PREDECLARED_EXCHANGES:
            if name == "":
                x = Exchange(
                    name, type_name, durable=True, matcher=DefaultMatcher("", self._queues)
                )
            else:
                x = Exchange(name, type_name, durable=True)
            self._exchanges[name] = x

    # ================================================================================ exchanges

    @staticmethod
    def is_reserved(name: str) -> bool:
        """True for ``""`` and names starting ``"amq."``: clients may not declare (non-passively)
        or delete them; the core answers 403 ACCESS_REFUSED. Source: AMQP 0-9-1 §1.7.2.1
        (exchange names starting "amq." are reserved); RabbitMQ: Exchanges guide."""
        return name == "" or name.startswith("amq.")

    def declare_exchange(
        self,
        name: str,
        type: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> Exchange:
        """Create exchange ``name`` if absent and return it; if present return the existing one.

        The type is checked first, even when the exchange exists (``UnknownExchangeType``, core:
        503). Equivalence of a redeclare is the core's check (``Exchange.is_equivalent``).
        Raises ``InvalidArgument`` for a non-string ``alternate-exchange`` argument.
        Source: AMQP 0-9-1 §1.7.2.1 ``exchange.declare``.
        """
        if type not in EXCHANGE_TYPES:
            raise UnknownExchangeType(f"invalid exchange type '{type}'")
        x = self._exchanges.get(name)
        if x is None:
            x = Exchange(
                name,
                type,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments or {},
            )
            self._exchanges[name] = x
        return x

    def get_exchange(self, name: str) -> Exchange | None:
        """The exchange called ``name``, or None."""
        return self._exchanges.get(name)

    def has_exchange(self, name: str) -> bool:
        """True if exchange ``name`` exists."""
        return name in self._exchanges

    def exchanges(self) -> Iterator[Exchange]:
        """Iterate every exchange, predeclared ones included (a snapshot: safe to mutate while
        iterating)."""
        return iter(list(self._exchanges.values()))

    def is_unused(self, name: str) -> bool:
        """True if exchange ``name`` exists and has no bindings as source (``if-unused`` test of
        ``exchange.delete``). Source: AMQP 0-9-1 §1.7.2.3 ``exchange.delete``."""
        x = self._exchanges.get(name)
        return x is not None and len(x.matcher) == 0

    def delete_exchange(self, name: str) -> list[str]:
        """Delete exchange ``name`` with its bindings as source and as destination.

        Returns the names of *other* exchanges auto-deleted because they lost their last binding
        (an auto-delete exchange bound only to ``name``), cascading. Unknown names are a no-op
        returning ``[]``. Raises ``AccessRefused`` for ``""``; ``amq.*`` protection is the core's.
        Alternate-exchange references to ``name`` stay (they resolve to nothing until it is
        re-declared), as in RabbitMQ. Source: AMQP 0-9-1 §1.7.2.3; RabbitMQ: Exchanges guide.
        """
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        x = self._exchanges.get(name)
        if x is None:
            return []
        return self._delete_cascade(x)[1:]

    def _delete_cascade(self, first: Exchange) -> list[str]:
        """Delete ``first`` and every auto-delete exchange that thereby loses its last binding."""
        deleted: list[str] = []
        work = [first]
        while work:
            x = work.pop()
            if self._exchanges.get(x.name) is not x:
                continue  # already deleted along another path
            del self._exchanges[x.name]
            deleted.append(x.name)
            for dest in list(x.matcher.destinations()):
                self._forget_source(dest, x.name)
            x.matcher.clear()
            work.extend(self._unbind_everywhere(Destination(EXCHANGE, x.name)))
        return deleted

    # ================================================================================ queues

    def add_queue(self, name: str) -> None:
        """Record that queue ``name`` exists: the default exchange now routes key ``name`` to it.

        Idempotent. Source: AMQP 0-9-1 §3.1.3.1 (default exchange binds every queue).
        """
        self._queues.add(name)

    def has_queue(self, name: str) -> bool:
        """True if queue ``name`` was added and not removed."""
        return name in self._queues

    def queue_names(self) -> Iterator[str]:
        """Iterate the known queue names (a snapshot)."""
        return iter(list(self._queues))

    def remove_queue(self, name: str) -> list[str]:
        """Forget queue ``name`` and remove every binding to it.

        Returns the names of auto-delete exchanges deleted because they lost their last binding
        (cascading through exchange-to-exchange bindings). Unknown names return ``[]``.
        Source: AMQP 0-9-1 §1.7.2.9 ``queue.delete``; RabbitMQ: Exchanges guide (auto-delete).
        """
        self._queues.discard(name)
        deleted: list[str] = []
        for x in self._unbind_everywhere(queue(name)):
            deleted.extend(self._delete_cascade(x))
        return deleted

    # ================================================================================ bindings

    def bind(
        self,
        source: str,
        destination: Destination,
        binding_key: str,
        arguments: Mapping[str, Any] | None = None,
    ) -> bool:
        """Bind exchange ``source`` to ``destination``; return True if the binding is new.

        Raises ``AccessRefused`` if ``source`` or an exchange ``destination`` is ``""``;
        ``NotFound`` if the source exchange, destination exchange or destination queue does not
        exist (the core normally checks first); ``InvalidArgument`` for arguments the exchange
        type rejects (headers ``x-match``). Source: AMQP 0-9-1 §1.7.2.3 ``queue.bind``; RabbitMQ:
        Exchange-to-Exchange Bindings.
        """
        if source == "" or (destination.kind == EXCHANGE and destination.name == ""):
            raise AccessRefused("operation not permitted on the default exchange")
        x = self._exchanges.get(source)
        if x is None:
            raise NotFound(f"no exchange '{source}'")
        if destination.kind == QUEUE:
            if destination.name not in self._queues:
                raise NotFound(f"no queue '{destination.name}'")
        elif destination.name not in self._exchanges:
            raise NotFound(f"no exchange '{destination.name}'")
        if not x.matcher.bind(destination, binding_key, arguments):
            return False
        sources = self._sources_of.get(destination)
        if sources is None:
            sources = self._sources_of[destination] = {}
        sources[source] = sources.get(source, 0) + 1
        return True

    def unbind(
        self,
        source: str,
        destination: Destination,
        binding_key: str,
        arguments: Mapping[str, Any] | None = None,
    ) -> UnbindResult:
        """Remove a binding. The result is truthy iff it existed; ``.auto_deleted`` lists the
        exchanges deleted as a consequence (the source if ``auto_delete`` and this was its last
        binding, then any cascade). Unknown source or binding: falsy result, no error.
        Raises ``AccessRefused`` if ``source`` or an exchange ``destination`` is ``""``.
        Source: AMQP 0-9-1 §1.7.2.5 ``queue.unbind``; RabbitMQ: Exchanges guide (auto-delete).
        """
        if source == "" or (destination.kind == EXCHANGE and destination.name == ""):
            raise AccessRefused("operation not permitted on the default exchange")
        x = self._exchanges.get(source)
        if x is None or not x.matcher.unbind(destination, binding_key, arguments):
            return UnbindResult(False)
        sources = self._sources_of[destination]
        n = sources[source] - 1
        if n:
            sources[source] = n
        else:
            del sources[source]
            if not sources:
                del self._sources_of[destination]
        if x.auto_delete and len(x.matcher) == 0:
            return UnbindResult(True, tuple(self._delete_cascade(x)))
        return UnbindResult(True)

    def has_binding(
        self,
        source: str,
        destination: Destination,
        binding_key: str,
        arguments: Mapping[str, Any] | None = None,
    ) -> bool:
        """True if exactly this binding exists (implicit default-exchange bindings included)."""
        if source == "":
            return (
                destination.kind == QUEUE
                and destination.name == binding_key
                and destination.name in self._queues
                and not arguments
            )
        x = self._exchanges.get(source)
        return x is not None and x.matcher.has_binding(destination, binding_key, arguments)

    def bindings(self, *, include_default: bool = False) -> Iterator[Binding]:
        """Iterate every explicit binding, grouped by source exchange (a snapshot).

        With ``include_default`` also yield the implicit ``Binding("", queue(q), q, {})`` of
        every queue first (RabbitMQ lists them; persistence/replay should not store them).
        """
        out: list[Binding] = []
        if include_default:
            out.extend(Binding("", queue(q), q) for q in self._queues)
        for x in self._exchanges.values():
            out.extend(x.matcher.bindings())
        return iter(out)

    def bindings_from(self, source: str) -> Iterator[Binding]:
        """Iterate the explicit bindings whose source is exchange ``source`` (a snapshot)."""
        x = self._exchanges.get(source)
        return x.matcher.bindings() if x is not None else iter(())

    def bindings_to(
        self, destination: Destination, *, include_default: bool = False
    ) -> Iterator[Binding]:
        """Iterate the bindings whose destination is ``destination`` (a snapshot); with
        ``include_default`` a queue's implicit default-exchange binding comes first."""
        out: list[Binding] = []
        if include_default and destination.kind == QUEUE and destination.name in self._queues:
            out.append(Binding("", destination, destination.name))
        for src in self._sources_of.get(destination, ()):
            out.extend(self._exchanges[src].matcher.bindings_to(destination))
        return iter(out)

    def bindings_of_queue(self, name: str, *, include_default: bool = False) -> Iterator[Binding]:
        """Iterate the bindings to queue ``name`` (see ``bindings_to``)."""
        return self.bindings_to(queue(name), include_default=include_default)

    def _forget_source(self, destination: Destination, source: str) -> None:
        sources = self._sources_of.get(destination)
        if sources is not None:
            sources.pop(source, None)
            if not sources:
                del self._sources_of[destination]

    def _unbind_everywhere(self, destination: Destination) -> list[Exchange]:
        """Remove every binding to ``destination``; return the auto-delete exchanges that are
        left with no binding at all (to be deleted by the caller)."""
        sources = self._sources_of.pop(destination, None)
        victims: list[Exchange] = []
        if not sources:
            return victims
        for src in sources:
            x = self._exchanges.get(src)
            if x is None:
                continue
            x.matcher.unbind_destination(destination)
            if x.auto_delete and len(x.matcher) == 0:
                victims.append(x)
        return victims

    # ================================================================================ routing

    def route(
        self,
        exchange: str,
        routing_key: str,
        headers: HeadersArg = None,
        *,
        has_headers: bool = True,
    ) -> set[str]:
        """Return the names of the queues a message published to ``exchange`` reaches.

        ``headers`` is the message's header table, None, or a 0-arg callable returning it (called
        at most once, and only if ``has_headers`` is True). ``has_headers=False`` promises the
        message has no headers: CC/BCC are skipped and headers exchanges see ``{}``.

        Rules: the routing key plus every ``CC``/``BCC`` key (RabbitMQ: Sender-selected
        Distribution) is matched in each exchange reached; a binding to an exchange routes on
        through it with the same keys and headers (RabbitMQ: Exchange-to-Exchange Bindings); an
        exchange where no binding at all matched hands the message to its alternate exchange, if
        that exists (RabbitMQ: Alternate Exchanges). Each exchange is visited at most once per
        publish, so cycles terminate. An unknown ``exchange`` routes nowhere (the core should
        have answered 404). Raises ``InvalidArgument`` if ``CC``/``BCC`` is not an array (406).

        Returns a new set the caller may keep and mutate. Empty means unroutable (``mandatory``
        handling is the core's).
        """
        x = self._exchanges.get(exchange)
        if x is None:
            return set()
        hdrs: Headers | None = None
        if has_headers and headers is not None:
            hdrs = headers() if callable(headers) else headers
            if hdrs and ("CC" in hdrs or "BCC" in hdrs):
                keys = dict.fromkeys((routing_key, *sender_selected_keys(hdrs)))
                return self._route_walk(x, tuple(keys), hdrs)
        if exchange == "":   # the default exchange: direct to the queue of that name
            return {routing_key} if routing_key in self._queues else set()
        m = x.matcher
        if m.needs_headers:
            return self._route_walk(x, (routing_key,), hdrs)
        t = m.targets(routing_key)
        if t.only_queues and (t.queue_names or x.alternate_exchange is None):
            return set(t.queue_names)
        return self._route_walk(x, (routing_key,), hdrs)

    def _route_walk(self, start: Exchange, keys: tuple[str, ...], hdrs: Headers | None) -> set[str]:
        """The general route: exchange-to-exchange, alternate exchanges, several routing keys."""
        result: set[str] = set()
        exchanges = self._exchanges
        seen = {start.name}
        stack = [start]
        while stack:
            x = stack.pop()
            route = x.matcher.route
            matched = False
            for key in keys:
                for d in route(key, hdrs):
                    matched = True
                    if d.kind == QUEUE:
                        result.add(d.name)
                    elif d.name not in seen:
                        seen.add(d.name)
                        nxt = exchanges.get(d.name)
                        if nxt is not None:
                            stack.append(nxt)
            if not matched:
                ae = x.alternate_exchange
                if ae is not None and ae not in seen:
                    seen.add(ae)
                    nxt = exchanges.get(ae)
                    if nxt is not None:
                        stack.append(nxt)
        return result
