"""A virtual host: its exchanges and bindings (a ``routing.RoutingTable``) and its queues.

Owns the entity operations every path goes through (client methods, and later cluster replay and
recovery): declare/delete of exchanges and queues with RabbitMQ's equivalence and reserved-name rules,
bindings, exclusive-queue ownership, auto-delete and x-expires, consumer registration, publishing a
message to the queues its route finds, and dead-lettering. Errors are ``ChannelException`` with the
spec's reply codes and RabbitMQ's reply texts. Must not know: frames beyond replying through
``Connection.send_method``. Source: AMQP 0-9-1 classes exchange/queue; RabbitMQ "Queues", "Exchanges",
"Dead Letter Exchanges", "Time-To-Live and Expiration".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, cast

from pamqp import commands as cmd

from queues.dead_letter import is_death_cycle
from queues.message import Message
from queues.queue import PublishResult, Queue
from queues.queue_type import QueueType
from queues.stream.manager import StreamManager
from queues.stream.queue import StreamQueue, stream_settings
from routing.destination import Destination
from routing.errors import InvalidArgument as RoutingInvalidArgument
from routing.errors import UnknownExchangeType
from routing.exchange_types import EXCHANGE_TYPES
from routing.table import RoutingTable

from ..protocol import constants as c
from ..protocol.errors import ChannelException
from . import declare_rules as rules
from .counts import ExchangeCounts, QueueCounts
from .durability import store_key
from .policies import apply_policy, declared_arguments
from .proxies import relay_to_homes
from .relay import local_consumer_count
from .stats import queue_cell
from .timers import TIMER_SLACK, TimerHeap

if TYPE_CHECKING:
    from .broker import Broker
    from .connection import Connection
    from .consumer import ChannelConsumer
    from .relay import RelayConsumer

__all__ = ["VirtualHost"]

log = logging.getLogger(__name__)

SERVED_QUEUE_TYPES = ("classic", "stream")
ROUTED: Final = PublishResult.ROUTED   # Final: a C static when compiled, not a globals lookup
_REJECTED: Final = PublishResult.REJECTED


class VirtualHost:
    """All entities of vhost ``name``; ``broker`` gives the clock and the dispatch set."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.routing = RoutingTable()
        self.queues: dict[str, QueueType] = {}
        #: Private queues of other cluster members: name -> home node (``core.proxies``).
        self.proxies: dict[str, str] = {}
        self.queue_last_used: dict[str, float] = {}  # x-expires bookkeeping, seconds
        self.stream_names: set[str] = set()  # names of the stream queues among ``queues``
        #: Next x-expires check per queue with x-expires (scheduled by ``touch``).
        self.expiry_timers: TimerHeap[QueueType] = TimerHeap(self._expiry_due,
                                                             broker._timer_earlier)
        #: Queues with a publish dedup window (``dedup_state`` saves the durable ones).
        self.dedup_queues: set[Any] = set()
        #: Exchange -> its publish counts from clients (``stats.exchange_cell``).
        self.exchange_counts: dict[Any, ExchangeCounts] = {}
        #: Queue -> its ``message_stats`` counts not kept on live consumers (``stats.queue_cell``).
        self.queue_counts: dict[Any, QueueCounts] = {}

    # ------------------------------------------------------------------------ helpers
    def not_found(self, kind: str, name: str) -> ChannelException:
        """404 with RabbitMQ's text: "NOT_FOUND - no queue 'q' in vhost '/'"."""
        return rules.not_found(self.name, kind, name)

    def get_queue(self, name: str, conn: Connection | None = None) -> QueueType:
        """The queue named ``name``; 404 when missing, 405 when exclusive to another connection."""
        q = self.queues.get(name)
        if q is None:
            if name in self.proxies:  # another member's private queue
                raise self._locked(name)
            raise self.not_found("queue", name)
        if conn is not None and q.exclusive_owner is not None and q.exclusive_owner is not conn:
            raise self._locked(name)
        return q

    def _locked(self, name: str) -> ChannelException:
        return rules.locked(self.name, name)

    def get_exchange(self, name: str) -> Any:
        """The exchange named ``name``; 404 when missing."""
        ex = self.routing.get_exchange(name)
        if ex is None:
            raise self.not_found("exchange", name)
        return ex

    # ---------------------------------------------------------------------- exchanges
    def declare_exchange(self, name: str, type_: str, *, passive: bool = False,
                         durable: bool = False, auto_delete: bool = False, internal: bool = False,
                         arguments: dict | None = None) -> None:
        """Exchange.Declare. 403 for "" (passive or not) and new "amq.*" names, 404 passive miss,
        406 inequivalent, 503 COMMAND_INVALID unknown type (connection exception, as RabbitMQ)."""
        if not name:  # passive too, as RabbitMQ's check_not_default_exchange (3.10)
            raise rules.default_exchange_refused()
        existing = self.routing.get_exchange(name)
        if passive:
            if existing is None:
                raise self.not_found("exchange", name)
            return
        if type_ not in EXCHANGE_TYPES:  # checked first, as rabbit_channel does
            raise rules.unknown_exchange_type(type_)
        if existing is not None:
            rules.check_exchange_equivalent(self.name, name, existing, type_, durable, auto_delete,
                                            internal, arguments)
            return
        rules.check_new_exchange_name(name)
        try:
            ex = self.routing.declare_exchange(name, type_, durable=durable,
                                               auto_delete=auto_delete, internal=internal,
                                               arguments=dict(arguments or {}))
            self.broker.durability.exchange_declared(self.name, ex)
        except UnknownExchangeType as exc:  # x-delayed-message: its x-delayed-type is unknown
            raise rules.unknown_exchange_type(exc.args[-1] if len(exc.args) > 1 else type_
                                              ) from None
        except RoutingInvalidArgument as exc:
            raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {exc}") from None

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        """Exchange.Delete: idempotent for a missing exchange (RabbitMQ); 403 for "" and amq.*;
        406 when ``if_unused`` and it is the source of bindings."""
        rules.check_exchange_deletable(self.name, name)  # RabbitMQ 3.10's texts
        ex = self.routing.get_exchange(name)
        if ex is None:
            return
        if if_unused and len(ex.matcher):
            raise rules.exchange_in_use(self.name, name)
        gone = self.routing.delete_exchange(name)
        self.broker.durability.exchanges_deleted(self.name, [name, *gone])

    def bind(self, source: str, destination: Destination, binding_key: str,
             arguments: dict | None, *, unbind: bool = False) -> None:
        """Queue.Bind/Unbind and Exchange.Bind/Unbind after existence checks (404, 403 for the
        default exchange, 406 for invalid binding arguments such as a bad x-match).

        Unbind is idempotent as in RabbitMQ (``rabbit_binding:remove`` ignores missing resources,
        checked against 3.10): a missing source, destination or binding is not an error; only the
        default exchange is refused (403), as for Bind."""
        if not source or (destination.kind == "exchange" and not destination.name):
            raise rules.default_exchange_refused()
        if unbind and (self.routing.get_exchange(source) is None or (
                destination.kind == "exchange"
                and self.routing.get_exchange(destination.name) is None)):
            return
        src = self.get_exchange(source)
        if destination.kind == "exchange":
            dest_durable = self.get_exchange(destination.name).durable
        else:
            q = self.queues.get(destination.name)
            dest_durable = q is not None and q.durable and q.exclusive_owner is None
        durability = self.broker.durability
        try:
            if unbind:
                result = self.routing.unbind(source, destination, binding_key, arguments or {})
                if result:
                    durability.binding_changed(self.name, src, destination, dest_durable,
                                               binding_key, arguments, added=False)
                    if result.auto_deleted:
                        durability.exchanges_deleted(self.name, list(result.auto_deleted))
            elif self.routing.bind(source, destination, binding_key, dict(arguments or {})):
                durability.binding_changed(self.name, src, destination, dest_durable, binding_key,
                                           arguments, added=True)
        except RoutingInvalidArgument as exc:
            raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {exc}") from None

    # ------------------------------------------------------------------------- queues
    def declare_queue(self, name: str, conn: Connection, *, passive: bool = False,
                      durable: bool = False, exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict | None = None) -> QueueType:
        """Queue.Declare (``name`` already generated when the client sent ""). 403 reserved
        "amq." names, 404 passive miss, 405 exclusive to another connection, 406 inequivalent or
        invalid arguments, including an x-queue-type we do not serve."""
        existing = self.queues.get(name)
        if passive:
            q = self.get_queue(name, conn)
            self.touch(name)
            return q
        churn = self.broker.churn
        if conn.peer_node is None:  # a client's (a member's replay was counted where it began)
            churn.queues_declared += 1
        if existing is not None:
            q = self.get_queue(name, conn)
            # what the clients declared (a member's copy carries what a policy added, marked)
            rules.check_queue_redeclare(
                self.name, name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                arguments=declared_arguments(arguments), have_durable=q.durable,
                have_exclusive=q.exclusive_owner is not None, have_auto_delete=q.auto_delete,
                have_arguments=declared_arguments(q.arguments))
            self.touch(name)
            return q
        rules.check_new_queue_name(name)
        # policies; ha-mode mirrors over the quorum engine's view, when clustered
        quorum = self.broker.queue_types.get("quorum") if self.broker.cluster_hooks else None
        arguments = apply_policy(self.broker.policies, self.name, name, arguments, durable=durable,
                                 exclusive=exclusive, auto_delete=auto_delete,
                                 view=getattr(quorum, "view", None))
        settings = rules.parse_queue_arguments(self.name, name, arguments)
        factory = self.broker.queue_types.get(settings.queue_type)
        if settings.queue_type not in SERVED_QUEUE_TYPES and factory is None:
            raise rules.not_served(self.name, name, settings.queue_type)
        if settings.queue_type == "stream":
            rules.check_stream_declare(self.name, name, durable, exclusive, auto_delete, arguments)
        elif factory is not None:
            rules.check_permanent_shared(self.name, name, durable, exclusive, auto_delete)
            rules.check_type_arguments(self.name, name, settings.queue_type,
                                       factory.check_arguments, arguments)
        q = self.create_queue(name, settings, durable=durable, auto_delete=auto_delete,
                              exclusive_owner=conn if exclusive else None, arguments=arguments)
        churn.queues_created += 1
        if exclusive:
            conn.exclusive_queues.add(q)
        self.broker.durability.queue_declared(self.name, q)
        self.touch(name)
        return q

    def create_queue(self, name: str, settings: Any, *, durable: bool, auto_delete: bool,
                     exclusive_owner: Connection | None, arguments: dict | None) -> QueueType:
        """Make and register a queue (no checks: declare_queue and recovery do those). A type
        of ``broker.queue_types`` (quorum queues, set by clustering) is made by its factory."""
        factory = self.broker.queue_types.get(settings.queue_type)
        if settings.queue_type == "stream" and (  # replicated when clustered (its factory)
                factory is None or not factory.replicates(arguments)):  # type: ignore[attr-defined]
            return self._create_stream(name, settings, arguments)
        if factory is not None:
            made = factory.create(self, name, settings, arguments=dict(arguments or {}))
            self.queues[name] = made
            self.broker.polled_queues.add(made)
            if getattr(made, "dedup", None) is not None:
                self.dedup_queues.add(made)
            self.routing.add_queue(name)
            return made
        page_in = journal = None
        durability = self.broker.durability
        budget = self.broker.settings.queue_memory_budget
        if durable and durability.store is not None:
            key = store_key(self.name, name)
            journal = durability.journal(key)  # the queue owns its part of the store
            if budget:  # stored bodies beyond the budget wait on disk (queues.paged_list)
                def page_in(store_id: int, key: str = key) -> Message | None:
                    return durability.page_in(key, store_id)

        q = Queue(name, settings, durable=durable, exclusive_owner=exclusive_owner,
                  auto_delete=auto_delete, arguments=dict(arguments or {}),
                  clock=self.broker.clock_ms, dead_letter=self._dead_letter, page_in=page_in,
                  memory_budget=budget, journal=journal)
        q.changes = self.broker.queue_changes  # the memory total and TTL timers follow it
        if q.dedup is not None:
            self.dedup_queues.add(q)
        self.queues[name] = q
        self.routing.add_queue(name)
        return q

    # ------------------------------------------------------------------------ streams
    def stream_manager(self) -> StreamManager:
        """The broker's stream logs (``broker.streams``, set by the composition root); a broker
        built without one (core tests) gets a manager in a temporary directory."""
        manager = self.broker.streams
        if manager is None:
            import tempfile
            manager = StreamManager(tempfile.mkdtemp(prefix="amqp-broker-streams-"))
            self.broker.streams = manager
        return manager

    def _create_stream(self, name: str, settings: Any, arguments: dict | None) -> StreamQueue:
        """Open (recover) or create the log of stream ``name`` and register the queue. Raises
        ``QueueInvalidArgument`` for bad stream arguments, ``OSError`` / ``StreamFormatError``."""
        ss = stream_settings(arguments)
        log_ = self.stream_manager().open_log(self.name, name, segment_bytes=ss.segment_bytes,
                                              max_bytes=ss.max_bytes, max_age_ms=ss.max_age_ms)
        q = StreamQueue(name, settings, log_, arguments=dict(arguments or {}),
                        clock=self.broker.clock_ms)
        q.safe_source = self.stream_manager()  # its publishes are safe after the group commit
        self.queues[name] = q
        self.stream_names.add(name)
        self.broker.polled_queues.add(q)
        self.routing.add_queue(name)
        return q

    def touch(self, name: str) -> None:
        """Mark queue ``name`` as used now (x-expires counts from the last use); a queue with
        x-expires gets its expiry check scheduled (once: a later use is found when it fires)."""
        now = self.queue_last_used[name] = self.broker.clock()
        q = self.queues.get(name)
        if q is not None:
            expires = q.settings.expires
            if expires is not None and q not in self.expiry_timers:
                self.expiry_timers.schedule(q, now + expires / 1000 - TIMER_SLACK)

    def delete_queue(self, q: QueueType, *, notify: bool = True,
                     cancels: list[tuple[Any, str]] | None = None) -> int:
        """Delete ``q``: unbind it everywhere (auto-delete exchanges may go), cancel its consumers
        (Basic.Cancel to clients that understand it), drop its ready messages. Returns the ready
        count it had (Queue.Delete-Ok's message-count). With ``cancels`` given, the
        (channel, consumer tag) pairs to notify are appended there instead of sent, for the
        caller to send after its Delete-Ok (RabbitMQ's order, checked against 3.10)."""
        if self.queues.get(q.name) is not q:
            return 0
        # a stream's Delete-Ok counts nothing (RabbitMQ 3.10), whatever its length
        count = 0 if q.capabilities.consume_offset else q.message_count
        del self.queues[q.name]
        self.broker.churn.queues_deleted += 1
        self.queue_counts.pop(q, None)
        self.queue_last_used.pop(q.name, None)
        gone = self.routing.remove_queue(q.name)
        if gone:
            self.broker.durability.exchanges_deleted(self.name, gone)
        # the core's consumers: a channel's, or another member's (relay: no channel)
        consumers = cast("list[ChannelConsumer | RelayConsumer]", list(q.consumers()))
        for consumer in consumers:
            ch = consumer.channel
            q.remove_consumer(consumer)
            if ch is None:  # a relay consumer (another member's)
                continue
            leaving = ch.consumers.pop(consumer.tag, None)
            if leaving is not None:
                leaving.fold_counts()
            if notify and ch.connection.capabilities.get("consumer_cancel_notify"):
                if cancels is not None:
                    cancels.append((ch, consumer.tag))
                else:
                    send_cancel(ch, consumer.tag)
        owner = cast("Connection | None", q.exclusive_owner)  # the core's owners are connections
        if owner is not None:
            owner.exclusive_queues.discard(q)
        q.delete()
        if q.name in self.stream_names and isinstance(q, StreamQueue):
            self.stream_names.discard(q.name)
            self.stream_manager().forget(self.name, q.name)
        if q.durable:
            self.broker.durability.queue_deleted(self.name, q.name)
        self.broker.needs_dispatch.discard(q)
        self.broker.polled_queues.discard(q)
        self.expiry_timers.cancel(q)
        self.dedup_queues.discard(q)
        if self.broker.relay_inbox.waiting:
            self.broker.relay_inbox.forget_queue(q)
        return count

    def propose_delete(self, q: QueueType) -> bool:
        """In a cluster with a metadata log (``broker.metadata``): propose the deletion of ``q``
        (auto-delete, x-expires, its connection closed) instead of deleting it here -- every
        member deletes it when the log is applied. False on a single broker (delete it)."""
        metadata = getattr(self.broker, "metadata", None)
        if metadata is None:
            return False
        metadata.change(self.name, q.exclusive_owner, cmd.Queue.Delete(queue=q.name),
                        _no_answer)
        return True

    def connection_gone(self, conn: Connection) -> None:
        """Delete the exclusive queues of a closed connection (RabbitMQ "Exclusive Queues"); in
        a cluster their proxies on the other members go too."""
        hooks = self.broker.cluster_hooks
        for q in list(conn.exclusive_queues):
            if self.propose_delete(q):
                continue
            self.delete_queue(q, notify=False)
            if hooks is not None:
                hooks.propagate(self.name, cmd.Queue.Delete(queue=q.name), lambda _error: None)
        conn.exclusive_queues.clear()

    # ---------------------------------------------------------------------- consumers
    def add_consumer(self, consumer: ChannelConsumer) -> None:
        """Register a consumer on its queue (after Consume-Ok was written) and dispatch."""
        q = consumer.queue
        q.had_consumers = True
        q.add_consumer(consumer)
        self._consumers_changed(q)
        if self.broker.relay_inbox.waiting:  # relayed messages may wait for a consumer
            self.broker.needs_dispatch.add(q)

    def remove_consumer(self, consumer: ChannelConsumer) -> None:
        """Unregister a consumer; an auto-delete queue whose last consumer went is deleted."""
        q = consumer.queue
        q.remove_consumer(consumer)
        self._consumers_changed(q)
        self.touch(q.name)
        if self.broker.relay_inbox.waiting:  # relayed messages may wait for this queue
            self.broker.needs_dispatch.add(q)
        if q.auto_delete and q.consumer_count == 0 and self.queues.get(q.name) is q:
            if not self.propose_delete(q):
                self.delete_queue(q)

    def _consumers_changed(self, q: QueueType) -> None:
        """Tell the cluster our consumer count of a shared queue changed (Cluster.Consumers)."""
        hooks = self.broker.cluster_hooks
        if hooks is not None and q.exclusive_owner is None:
            hooks.consumers_changed(self.name, q.name, local_consumer_count(q))

    # ------------------------------------------------------------------------ publish
    def route(self, msg: Message) -> set[str]:
        """Queue names the message goes to (routing.RoutingTable semantics: e2e, AE, CC/BCC)."""
        if msg.has_headers:
            return self.routing.route(msg.exchange, msg.routing_key, lambda: msg.headers,
                                      has_headers=True)
        return self.routing.route(msg.exchange, msg.routing_key, None, has_headers=False)

    def enqueue(self, msg: Message, queue_names: set[str]
                ) -> tuple[bool, int | None, list[tuple[Any, int]] | None]:
        """Put ``msg`` on each named queue. Returns (ok, store_id, waits): ok is False when any
        queue refused it (x-overflow reject-publish: a Basic.Nack for a confirm-mode publisher);
        store_id is set when the message was written to the message store (persistent, and at
        least one durable classic queue), so its confirm waits for the sync that covers it;
        waits lists the ``(source, token)`` the other queue types gave (``publish_wait``: a
        stream's group commit, a replicated queue's group), None when there are none."""
        ok = True
        sid = None
        waits: list[tuple[Any, int]] | None = None
        queues = self.queues
        if msg.persistent and (durability := self.broker.durability).store is not None:
            # one append for every durable queue over the message store (streams and
            # replicated queues keep their own logs); each queue's journal owns its part
            keys = [store_key(self.name, n) for n in queue_names
                    if (q := queues.get(n)) is not None and q.durable
                    and q.capabilities.message_store]
            if keys:
                sid = durability.store_message(msg, keys)
        proxied = False
        for name in queue_names:
            q = queues.get(name)
            if q is None:
                proxied = True
                continue
            if isinstance(q, Queue):   # classic: a native call when compiled; its own counts
                if q.publish(msg) is _REJECTED:
                    ok = False
                continue
            result = q.publish(msg)
            if result is not ROUTED:  # a refusing queue dropped its hold on the stored copy
                if result is _REJECTED:
                    ok = False
            elif not q.capabilities.message_store:  # streams, replicated queues
                queue_cell(self, q).publish += 1   # (a classic queue's: its entry sequence)
                wait = q.publish_wait()
                if wait is not None:
                    if waits is None:
                        waits = []
                    waits.append(wait)
        if proxied and self.proxies:
            relay_to_homes(self, msg, queue_names)
        return ok, sid, waits

    def _dead_letter(self, message: Message, exchange: str, routing_keys: list[str]) -> None:
        """Route a dead-lettered message (the queue already added x-death) through its DLX with
        each of ``routing_keys``; queues that would close an automatic dead-letter cycle are
        skipped (RabbitMQ drops those). A missing DLX drops the message, as RabbitMQ."""
        if self.routing.get_exchange(exchange) is None:
            log.debug("dead-letter exchange %r missing; message dropped", exchange)
            return
        headers = message.headers if message.has_headers else None
        targets: set[str] = set()
        for key in routing_keys:
            targets |= self.routing.route(exchange, key, headers, has_headers=headers is not None)
        targets = {name for name in targets if not is_death_cycle(name, message)}
        if targets:
            self.enqueue(message, targets)  # dead letters are not confirmed to anyone

    # -------------------------------------------------------------------------- timers
    def tick(self, now: float) -> None:
        """Delete the queues whose x-expires ran out by ``now`` (seconds): O(due checks), never
        a scan of every queue (message TTL: ``Broker.tick``)."""
        self.expiry_timers.run_due(now)

    def _expiry_due(self, q: QueueType, now: float) -> None:
        """The x-expires check of ``q`` is due: delete it when unused (no consumers) for its
        x-expires, else check again when that can next be true."""
        if self.queues.get(q.name) is not q:
            return
        expires = q.settings.expires
        if expires is None:
            return
        if q.consumer_count:  # never while it has consumers: look again one period later
            self.expiry_timers.schedule(q, now + expires / 1000)
            return
        last = self.queue_last_used.get(q.name, now)
        if (now - last) * 1000 >= expires:
            log.info("queue %r expired after %s ms unused", q.name, expires)
            if not self.propose_delete(q):
                self.delete_queue(q)
        else:
            self.expiry_timers.schedule(q, last + expires / 1000 - TIMER_SLACK)


def _no_answer(_result: Any) -> None:
    """A proposal nobody waits for (the broker's own deletions)."""


def send_cancel(ch: Any, tag: str) -> None:
    """Broker-initiated Basic.Cancel of consumer ``tag`` on channel ``ch`` (RabbitMQ's
    consumer_cancel_notify extension), unless the channel has gone or is closing."""
    if not ch.closing and ch.connection.channels.get(ch.id) is ch:
        ch.connection.send_method(ch.id, cmd.Basic.Cancel(tag, True))
