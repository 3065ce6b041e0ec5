"""The broker: settings, vhosts, live connections, and the deferred-dispatch set.

Owns what is shared by all connections of one node and the periodic ``tick`` (heartbeats, TTL,
x-expires), which works from heaps of next deadlines (``core.timers``), and the message-memory
total the memory alarm reads, kept up to date from the queues that changed (``queue_changes``):
neither scans every queue or connection, so idle ones cost nothing (DESIGN.md §5).
``needs_dispatch`` collects queues whose consumers may have gained credit (acks, drained
output, flow on); ``run_dispatch`` delivers from them once per batch of input, so an ack burst costs
one dispatch per queue instead of one per ack. Must not know: sockets; ``clock`` is injected (seconds,
monotonic). Source: DESIGN.md §2, §5.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pamqp import commands as cmd

from .access import AccessControl
from .delayed import DelayedMessages
from .durability import Durability
from .policies import Policies
from .relay import RelayOutbox
from .relay_inbox import RelayInbox
from .settings import BrokerSettings
from .stats import Churn, MessageTotals
from .timers import TIMER_SLACK, TimerHeap
from .vhost import VirtualHost

if TYPE_CHECKING:
    from pamqp.base import Frame

    from queues.message import Message
    from queues.queue import Queue
    from queues.queue_type import QueueType
    from queues.stream.manager import StreamManager

    from ..protocol.methods import FastCommand, Publish
    from .channel import Channel
    from .connection import Connection

__all__ = ["Broker", "IDLE_TICK_SECONDS", "TICK_SECONDS"]

log = logging.getLogger(__name__)


# --- the cluster seams' shapes (structural: the cluster package's objects fit them, core never
# imports it: these Protocols are the one description of the seams)
class PeerAuthServer(Protocol):
    """One peer connection's challenge/verify state (``PeerAuth.new_server()``)."""

    def challenge(self, initial: str | bytes) -> str:
        """The challenge for the peer's initial response; raises when it is malformed."""
        ...

    def verify(self, response: str | bytes) -> str:
        """The authenticated peer's node name; raises on a wrong response."""
        ...


class PeerAuth(Protocol):
    """``Broker.peer_auth``: authenticates ``cluster-peer`` connections (see ``cluster.secret``)."""

    @property
    def mechanism(self) -> str:
        """The SASL mechanism name offered in Connection.Start."""
        ...

    def new_server(self) -> PeerAuthServer:
        """Fresh per-connection state."""
        ...


#: ``Broker.peer_handler(channel, method, payload) -> bool``: True when the cluster consumed it.
PeerHandler = Callable[["Channel", "Publish | Frame | FastCommand", bytes], bool]
#: ``Broker.peer_content(channel, method, body)``: the content (body bytes) that followed a
#: cluster method whose peer handler started the channel's content assembler on it.
PeerContent = Callable[["Channel", "Frame | FastCommand", bytes], None]


class ClusterHooks(Protocol):
    """``Broker.cluster_hooks``: what the core tells the cluster (``cluster.driver``)."""

    def propagate(self, vhost: str, method: Frame,
                  done: Callable[[tuple[int, str] | None], None]) -> None:
        """Send a client's change to every member; ``done(None | (code, text))`` once the reply
        policy is met."""
        ...

    def consumers_changed(self, vhost: str, queue: str, count: int) -> None:
        """Our consumer count of a shared queue changed (Cluster.Consumers)."""
        ...


class RelaySink(Protocol):
    """``Broker.relay_sink``: where messages dealt to another member's consumers go."""

    def can_relay(self, node: str) -> bool:
        """True while the link to ``node`` takes more."""
        ...

    def relay(self, node: str, vhost: str, queue: str, message: Message, delivery_tag: int = 0,
              redelivered: bool = False) -> None:
        """Send ``message`` to ``node`` for ``queue`` ("" for a private queue's home) as transfer
        ``delivery_tag`` (0: not settled), with the entry's ``redelivered`` flag."""
        ...


class QueueTypeFactory(Protocol):
    """``Broker.queue_types[name]``: makes the queues of an ``x-queue-type`` the core does not
    build itself (quorum queues: ``cluster.quorum``, registered by ``amqp_broker.clustering``)."""

    def check_arguments(self, arguments: dict) -> None:
        """Refuse arguments this type does not take: raises ``queues.errors.InvalidArgument``
        (the core answers 406, RabbitMQ's "invalid arg" text)."""
        ...

    def create(self, vhost: VirtualHost, name: str, settings: Any, *, arguments: dict) -> Any:
        """A new (or recovered) queue of this type, implementing ``queues.queue_type.QueueType``
        (declared durable, shared, not auto-delete)."""
        ...


#: Seconds between ticks while the broker is busy, and at most while it is idle (``tick_delay``).
TICK_SECONDS = 0.1
IDLE_TICK_SECONDS = 1.0


class Broker:
    """One broker node. ``clock()`` returns seconds (float, monotonic); ``clock_ms()`` ms (int)."""

    def __init__(self, settings: BrokerSettings | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 durability: Durability | None = None) -> None:
        self.settings = settings or BrokerSettings()
        self.clock = clock
        self.durability = durability or Durability()
        #: Classic queues whose ready messages changed since the broker last looked (each adds
        #: itself: ``Queue.changes``); ``settle_queue_changes`` folds them into the memory total
        #: and the TTL timers.
        self.queue_changes: set[Queue] = set()
        #: Queues that report no changes (streams, factory-made types): looked at on every
        #: tick and memory check (``VirtualHost.create_queue`` adds them).
        self.polled_queues: set[Any] = set()
        self._memory_total = 0  # message_memory() of the classic queues, as last settled
        self._memory_of: dict[Queue, int] = {}  # each classic queue's share, when not 0
        self._busy: set[Queue] = set()  # classic queues changed since last found idle
        #: Next message-TTL check per classic queue with a TTL head (``Queue.next_expiry``).
        self.ttl_timers: TimerHeap[Queue] = TimerHeap(self._ttl_due, self._timer_earlier)
        #: Next ``Connection.tick`` per connection id: heartbeats, handshake and close timeouts.
        self.connection_timers: TimerHeap[int] = TimerHeap(self._connection_due,
                                                           self._timer_earlier)
        #: Set by a connection's input other than heartbeats (``note_activity``); ``tick_delay``
        #: clears it. While it is False the broker is idle and its ticker may sleep longer.
        self.active = False
        #: When (``clock`` s) the ticker next runs ``tick``, as ``tick_delay`` last said.
        self.wake_at = 0.0
        #: ``on_wake(when)``: set by the I/O layer's ticker; called when ``tick`` is wanted by
        #: ``when`` (``clock`` s), before the ticker planned to run it.
        self.on_wake: Callable[[float], None] | None = None
        self.vhosts: dict[str, VirtualHost] = {n: VirtualHost(self, n) for n in self.settings.vhosts}
        #: Users and permissions (``core.access``); the management API and definitions change it.
        self.access = AccessControl.from_settings(self.settings.users, self.settings.vhosts)
        #: vhost name -> (description, tags) (``core.access_store``; definitions.db keeps them).
        self.vhost_meta: dict[str, tuple[str, tuple[str, ...]]] = {}
        #: Message counts of released channels (``core.stats``; live channels keep their own).
        self.message_totals = MessageTotals()
        #: Client connection, channel and queue churn (``core.stats.Churn``).
        self.churn = Churn()
        self.connections: dict[int, Connection] = {}
        self.needs_dispatch: set[QueueType] = set()
        #: Resource alarms raised now ("memory", "disk"): while any is, publishers are blocked.
        self.alarms: set[str] = set()
        self._input_since_check = 0
        self._ids = itertools.count(1)
        # --- cluster seams (set by the composition root when clustering; None: a lone broker) ---
        #: Authenticates ``cluster-peer`` connections: ``.mechanism`` (SASL name) and
        #: ``.new_server()`` -> object with ``challenge(initial) -> str`` and ``verify(response)
        #: -> node name`` (raising on failure). See ``cluster.secret``.
        self.peer_auth: PeerAuth | None = None
        #: Called as ``peer_handler(channel, method, payload) -> bool`` for every method on a peer
        #: connection's channel; True when the cluster consumed it (Cluster class methods, buffered
        #: replay), False to run the ordinary handler.
        self.peer_handler: PeerHandler | None = None
        #: Called as ``peer_content(channel, method, body)`` when the content that followed a
        #: cluster method on a peer connection is complete (the peer handler called
        #: ``channel.assembler.start(method)`` for it: Cluster.Quorum carries Raft messages so).
        self.peer_content: PeerContent | None = None
        #: ``propagate(vhost, method, done)``: send a client's change to every member; ``done(None
        #: | reason)`` once the reply policy is met. See ``ClusterHooks``.
        self.cluster_hooks: ClusterHooks | None = None
        #: The cluster metadata log definition changes go through in a cluster
        #: (``handlers.propagation.MetadataHooks``, ``clustering.metadata``); None alone.
        self.metadata: Any = None
        #: Policies of every vhost (``core.policies``), applied when a queue is declared.
        self.policies = Policies()
        #: Extra Connection.Start server properties (cluster_view, cluster_members, ...).
        self.cluster_properties: dict = {}
        #: False while a joining node waits for every member's Synch: clients are refused.
        self.accepting_clients = True
        #: True in maintenance mode (``management.maintenance``: drain / revive): clients are
        #: refused with 320 CONNECTION_FORCED.
        self.draining = False
        #: Where messages dealt to another member's consumers go (``core.relay``): an object with
        #: ``can_relay(node) -> bool`` and ``relay(node, vhost, queue, message, tag, redelivered)``.
        self.relay_sink: RelaySink | None = None
        #: Queue types made by a factory of their own (``QueueTypeFactory``), by x-queue-type.
        self.queue_types: dict[str, QueueTypeFactory] = {}
        #: Stream queues' logs (set by the composition root; ``VirtualHost.stream_manager``
        #: makes one in a temporary directory for a broker built without).
        self.streams: StreamManager | None = None
        #: The quorum queues' runtime (``amqp_broker.clustering.quorum.QuorumRuntime``), set by
        #: its ``install``; None without quorum queues.
        self.quorum: Any = None
        #: Transfers we relayed and the receivers have not settled (``core.relay``).
        self.relay_outbox = RelayOutbox()
        #: Messages other members relayed here, waiting for a local consumer
        #: (``core.relay_inbox``); its ``policy`` is the relay policy.
        self.relay_inbox = RelayInbox(self.settings.relay_policy)
        #: Messages held by x-delayed-message exchanges, with their timers (``core.delayed``);
        #: the composition root opens its log (``<data>/delayed.log``).
        self.delayed = DelayedMessages(self)

    def clock_ms(self) -> int:
        """The clock in whole milliseconds (what queues use for TTL)."""
        return int(self.clock() * 1000)

    def open_connection(self, peer: tuple[str, int]) -> Connection:
        """A new connection from ``peer`` (host, port)."""
        from .connection import Connection
        conn = Connection(self, peer, next(self._ids))
        self.connections[conn.id] = conn
        return conn

    def connection_gone(self, conn: Connection) -> None:
        """Forget a connection whose socket closed."""
        self.connections.pop(conn.id, None)
        self.connection_timers.cancel(conn.id)

    def run_dispatch(self) -> None:
        """Dispatch every queue marked in ``needs_dispatch`` (possibly marking more); relayed
        messages waiting for a queue's local consumers go first, and the acks of relayed
        messages go back to their senders last (``core.relay_inbox``)."""
        pending = self.needs_dispatch
        inbox = self.relay_inbox
        while pending:
            q = pending.pop()
            if inbox.waiting and q in inbox.waiting:
                inbox.drain(self, q)
            q.dispatch()
        if inbox.pending_acks:
            inbox.after_dispatch()

    def tick(self) -> None:
        """Periodic work (call again after ``tick_delay`` s: 100 ms while busy): heartbeats,
        handshake and close timeouts, TTL, x-expires. O(what is due): deadlines come from heaps,
        not from scanning."""
        now = self.clock()
        self.connection_timers.run_due(now)
        self.settle_queue_changes()
        self.ttl_timers.run_due(now)
        for q in list(self.polled_queues):
            if q.next_expiry() is not None:
                q.expire()
        for vhost in self.vhosts.values():
            vhost.tick(now)
        self.delayed.run_due(now)
        if self.relay_inbox.waiting:
            self.relay_inbox.tick(self)
        self.run_dispatch()

    def tick_delay(self, now: float) -> float:
        """Seconds until ``tick`` is next needed, asked by the ticker after each tick (``now``:
        ``clock`` s). ``TICK_SECONDS`` while the broker is busy: input other than heartbeats
        since the last call, a raised alarm, queues to poll, fold or dispatch, relayed messages
        waiting. Idle: until the earliest deadline of the timer heaps (connections, TTL,
        x-expires), from ``TICK_SECONDS`` up to ``IDLE_TICK_SECONDS``; a new earlier deadline or
        new input calls ``on_wake`` meanwhile. An idle broker then wakes about once a second,
        not ten times (issue 14), and ``Connection`` puts idle connections' heartbeats on whole
        seconds so they share those wake-ups."""
        if (self.active or self.alarms or self.polled_queues or self.queue_changes
                or self.needs_dispatch or self.relay_inbox.waiting):
            self.active = False
            delay = TICK_SECONDS
        else:
            delay = IDLE_TICK_SECONDS
            nxt = self.connection_timers.next_deadline()
            if nxt is not None:
                delay = min(delay, nxt - now)
            nxt = self.ttl_timers.next_deadline()
            if nxt is not None:
                delay = min(delay, nxt - now)
            for vhost in self.vhosts.values():
                nxt = vhost.expiry_timers.next_deadline()
                if nxt is not None:
                    delay = min(delay, nxt - now)
            nxt = self.delayed.next_deadline()
            if nxt is not None:
                delay = min(delay, nxt - now)
            delay = max(delay, TICK_SECONDS)
        self.wake_at = now + delay
        return delay

    def note_activity(self) -> None:
        """A connection received something other than a heartbeat: tick at the busy rate from
        now on (``tick_delay``), waking a ticker that sleeps longer."""
        self.active = True
        self._timer_earlier(self.clock() + TICK_SECONDS)

    def _timer_earlier(self, when: float) -> None:
        """A timer heap has a new deadline ``when`` (``TimerHeap.on_earlier``): wake the
        ticker by then when it planned to sleep longer."""
        if when < self.wake_at:
            self.wake_at = when
            if self.on_wake is not None:
                self.on_wake(when)

    def _connection_due(self, conn_id: int, now: float) -> None:
        """A connection's timer fired: its ``tick``, then its next deadline."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return
        conn.tick(now)
        conn.schedule_timer()

    def _ttl_due(self, q: Queue, now: float) -> None:
        """A queue's TTL head is due: expire what expired, then wait for the next head."""
        if q.deleted:
            return
        q.expire()
        nxt = q.next_expiry()
        if nxt is not None:
            self.ttl_timers.schedule(q, nxt / 1000 - TIMER_SLACK)

    def settle_queue_changes(self) -> None:
        """Fold the queues that changed (``queue_changes``) into the memory total and the TTL
        timers; O(changed queues). Called by ``tick`` and ``message_memory``."""
        changes = self.queue_changes
        if not changes:
            return
        memory_of = self._memory_of
        total = self._memory_total
        ttl = self.ttl_timers
        busy = self._busy
        for q in changes:
            new = self.queue_memory(q)
            old = memory_of.pop(q, 0)
            if new:
                memory_of[q] = new
            total += new - old
            if q.deleted:
                ttl.cancel(q)
                busy.discard(q)
                continue
            busy.add(q)
            nxt = q.next_expiry()
            if nxt is not None:
                ttl.schedule(q, nxt / 1000 - TIMER_SLACK)
        changes.clear()
        self._memory_total = total

    def busy_queues(self) -> list[Any]:
        """The queues that hold ready or unacked messages or have consumers, plus the polled
        ones (streams, factory-made types); O(those), not O(queues): any other queue has none of
        them (a classic queue reports its first message, Basic.Get and consumer through
        ``Queue.changes``). Queues found idle are forgotten until they change again."""
        self.settle_queue_changes()
        busy = self._busy
        out: list[Any] = []
        for q in list(busy):
            if not q.deleted and (q.message_count or q.unacked_count or q.consumer_count):
                out.append(q)
            else:
                busy.discard(q)
        out.extend(self.polled_queues)
        return out

    # -------------------------------------------------------------------- resource alarms
    #: Bytes counted per ready message held in RAM on top of its body: header, entry, objects.
    MESSAGE_OVERHEAD: ClassVar[int] = 512
    #: Bytes counted per paged-out ready message (its place in the paged tail's arrays).
    PAGED_OVERHEAD: ClassVar[int] = 32
    #: Connection.Blocked reason per alarm, as RabbitMQ words them.
    ALARM_REASONS = {"memory": "low on memory", "disk": "low on disk"}

    def message_memory(self) -> int:
        """Bytes held in RAM by ready messages in all queues: body + ``MESSAGE_OVERHEAD`` for each
        message held as an object, ``PAGED_OVERHEAD`` for each one paged out to the store.

        This, not the process RSS, drives the memory alarm: CPython does not hand freed memory
        back to the OS promptly, so an RSS-driven alarm could stay raised after queues drained.
        (RabbitMQ measures total process memory; documented deviation.) A running total: costs
        O(queues changed since the last call + polled queues), not O(queues); equal to
        ``message_memory_recount()``."""
        self.settle_queue_changes()
        total = self._memory_total
        for q in self.polled_queues:
            total += self.queue_memory(q)
        return total

    def message_memory_recount(self) -> int:
        """``message_memory`` counted from scratch over every queue, O(queues): for checks."""
        return sum(self.queue_memory(q) for vhost in self.vhosts.values()
                   for q in vhost.queues.values())

    @classmethod
    def queue_memory(cls, q: Any) -> int:
        """One queue's share of ``message_memory``, bytes (0 for an empty or deleted queue)."""
        in_memory = getattr(q, "in_memory", None)
        if in_memory is None:  # a queue type that says nothing: every message in memory
            return int(q.message_bytes + q.message_count * cls.MESSAGE_OVERHEAD)
        count, nbytes = in_memory()
        return int(nbytes + count * cls.MESSAGE_OVERHEAD
                   + (q.message_count - count) * cls.PAGED_OVERHEAD)

    @property
    def memory_alarm(self) -> bool:
        """True while the memory alarm is raised."""
        return "memory" in self.alarms

    def set_memory_alarm(self, on: bool) -> None:
        """Raise or clear the memory alarm (``set_alarm("memory", on)``)."""
        self.set_alarm("memory", on)

    def set_alarm(self, name: str, on: bool) -> None:
        """Raise or clear resource alarm ``name`` ("memory" or "disk"). While any alarm is
        raised, every connection is blocked; the I/O layer stops reading from blocked connections
        that have published. As RabbitMQ ("Blocked Connection Notifications", "Memory and Disk
        Alarms"), a connection hears Connection.Blocked (reason "low on memory" / "low on disk")
        once it is blocked and has published -- at once, or at its first publish -- and
        Connection.Unblocked after it heard Blocked, once every alarm is clear."""
        alarms = self.alarms
        if on == (name in alarms):
            return
        was_blocking = bool(alarms)
        if on:
            alarms.add(name)
        else:
            alarms.discard(name)
        log.warning("%s alarm %s", name, "set" if on else "cleared")
        if on and not was_blocking:
            for conn in self.connections.values():
                self.block(conn)
        elif not alarms:
            for conn in self.connections.values():
                if conn.blocked:
                    conn.blocked = False
                    if conn.block_announced:
                        conn.block_announced = False
                        conn.send_method(0, cmd.Connection.Unblocked())

    #: Input bytes between two in-line memory checks (bounds the overshoot of the alarm).
    MEMORY_CHECK_BYTES = 4 * 1024 * 1024

    def note_input(self, nbytes: int) -> None:
        """Count received bytes; with a memory limit, re-check the alarm every
        ``MEMORY_CHECK_BYTES`` so a fast publisher cannot overshoot between timer checks."""
        limit = self.settings.memory_high_watermark_bytes
        if not limit:
            return
        self._input_since_check += nbytes
        if self._input_since_check >= self.MEMORY_CHECK_BYTES:
            self._input_since_check = 0
            self.set_memory_alarm(self.message_memory() > limit)

    def block(self, conn: Connection) -> None:
        """Mark ``conn`` blocked; tell it now if it has published (``announce_blocked``)."""
        if conn.blocked or not conn.is_open:
            return  # a connection still in its handshake is blocked once Open-Ok is sent
        conn.blocked = True
        if conn.has_published:
            self.announce_blocked(conn)

    def announce_blocked(self, conn: Connection) -> None:
        """Send Connection.Blocked to blocked ``conn`` once, when it understands
        connection.blocked; called when it is blocked after publishing and at its first publish
        while blocked (RabbitMQ notifies publishing connections only)."""
        if conn.blocked and not conn.block_announced and conn.capabilities.get(
                "connection.blocked"):
            conn.block_announced = True
            reason = next((text for name, text in self.ALARM_REASONS.items()
                           if name in self.alarms), "low on memory")
            conn.send_method(0, cmd.Connection.Blocked(reason))
