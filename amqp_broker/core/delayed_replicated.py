"""Delayed messages held in a replicated log, on a clustered broker (issue 25).

Design (option "b" of the task: an internal quorum queue, not a Raft group of its own): each
vhost that has an ``x-delayed-message`` exchange gets a quorum queue named ``HELD_QUEUE``,
declared through the cluster metadata log with the exchange (``clustering.delayed``), so its
replica members, group id, placement, leader elections, snapshots, paging of bodies to the
Raft log, replica repair and Down of departed members are the quorum queues' (one consensus
engine, no new machine to get right). Why not a Raft group per exchange with Hold / Fire
commands: it would need its own placement and membership (which members found it, which join
it, who removes a departed one) that quorum queues already have and test, and its own paging;
what it would gain -- routing by the log's leader only -- the queue gets from its leader's
assignment of every message to one member's firing consumer (below).

- Holding: a message published with an ``x-delay`` is enqueued on ``HELD_QUEUE`` with its due
  time (wall-clock ms) in the ``DUE_HEADER`` header; its publisher confirm waits for that
  Enqueue to be applied (committed: a majority of the group's Raft logs hold it), the quorum
  queues' confirm path (``publish_wait``).
- Firing: every member attaches one ``_Firer`` consumer to its ``HELD_QUEUE`` object (ack mode,
  ``FIRER_CREDIT`` in flight). The group's leader checks each held message out to one of them;
  the firer keeps (due, entry) in a ``TimerHeap`` -- nothing runs per held message until one is
  due -- and when due routes it through the exchange's bindings as ``core.delayed`` does
  (``DelayedMessages.route``), then settles it (Basic.Ack on the internal queue) once every
  queue it was routed to holds it safely (their confirm sources: a quorum queue's commit, a
  stream's sync, the message store's fsync) -- as a publisher confirm would.
- A member that dies (kill -9) leaves the cluster view; the queue's leader then proposes Down
  for it and its firer's messages return to the queue and go to another member's firer, which
  routes them when due (at once when overdue). A leader's death costs an election (about
  1-1.5 s); a member's, the view's suspicion time (a few seconds).

Delivery is at least once: a message routed by a member that dies before its settle is
committed is routed again by another member (the window: from routing until the settle
commits; docs/delayed.md "In a cluster"). Nothing is lost while a majority of the queue's
members lives. Held messages are visible as ``HELD_QUEUE``'s unacknowledged and ready counts.

Must not know: the cluster packages (the queue is any ``QueueType`` with ``publish_wait`` and
consumers; ``clustering.delayed`` declares it). Sources: rabbitmq-delayed-message-exchange
README ("Limitations": one node's table, which this replaces), RabbitMQ "Quorum Queues".
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from queues.message import Message
from routing.exchange_types.delayed import delay_of

from .confirms import STORE, ConfirmTracker
from .delayed_log import HeldRecord
from .timers import TimerHeap

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VirtualHost

__all__ = ["ReplicatedDelayed", "held_queue", "HELD_QUEUE", "DUE_HEADER", "FIRER_CREDIT", "SCAN_SECONDS"]

log = logging.getLogger(__name__)

#: The internal quorum queue of a vhost's held delayed messages.
HELD_QUEUE = "x-delayed-message.held"
#: The header a held message carries in ``HELD_QUEUE``: when it is due (wall-clock ms).
DUE_HEADER = "x-delayed-due"
#: Held messages a member's firer takes at a time (its prefetch).
FIRER_CREDIT = 1_000_000
#: How often (s) a member looks for a vhost's ``HELD_QUEUE`` to attach its firer to.
SCAN_SECONDS = 1.0
_STRIPPED = (DUE_HEADER, "x-delivery-count")


def held_queue(vhost: VirtualHost) -> Any:
    """``vhost``'s ``HELD_QUEUE`` when it is a quorum queue (a user's queue of that name of
    another type is left alone: the broker's own log holds), else None."""
    queue = vhost.queues.get(HELD_QUEUE)
    if queue is None or getattr(queue.settings, "queue_type", None) != "quorum":
        return None
    return queue


class _Channel:
    """What the core asks of a consumer's channel (a queue's deletion pops the consumer)."""

    global_prefetch = 0

    def __init__(self) -> None:
        self.consumers: dict[str, Any] = {}


class _Firer:
    """This member's consumer of a vhost's ``HELD_QUEUE``: schedules each delivery at its due
    time (``ReplicatedDelayed``'s timers) and settles it once routed and safe."""

    no_ack = False
    exclusive = False
    prefetch = FIRER_CREDIT
    tag = "x-delayed-message.firer"

    def __init__(self, owner: ReplicatedDelayed, vhost: str, queue: Any) -> None:
        self.owner = owner
        self.vhost = vhost
        self.queue = queue
        self.channel = _Channel()
        self.tracker = ConfirmTracker()
        self.settling: dict[int, Any] = {}   # tracker seq -> the entry to ack once safe
        self.gone = False

    def can_deliver(self) -> bool:
        """Always: held messages cost a timer entry each (``FIRER_CREDIT`` bounds them)."""
        return not self.gone

    def deliver(self, queue: Any, entry: Any) -> None:
        """A held message checked out to this member: schedule it at its due time."""
        self.owner.schedule(self, entry)

    # ---------------------------------------------------------------- SafeWaiter / durability
    def advance_safe(self, source: object, up_to: int, failed: Collection[int] = ()) -> bool:
        """A destination queue made tokens <= ``up_to`` safe: settle what no longer waits."""
        done = self.tracker.advance(source, up_to, failed)
        self._settle()
        return done

    def release_durable(self, durable_id: int) -> bool:
        """The message store synced every id <= ``durable_id``."""
        done = self.tracker.release(durable_id)
        self._settle()
        return done

    def routed(self, entry: Any, sid: int | None, waits: list[tuple[Any, int]] | None,
               durability: Any) -> None:
        """``entry`` was routed (``sid``/``waits``: ``VirtualHost.enqueue``'s): ack it once the
        queues it went to hold it safely."""
        seq = self.tracker.next_seq()
        self.settling[seq] = entry
        pending = list(waits or ())
        if sid is not None:
            pending.append((STORE, sid))
            durability.wait_for_sync(self)
        self.tracker.wait(seq, pending, True)
        for source, _token in pending:
            if source is not STORE:
                source.watch(self)
        self._settle()

    def _settle(self) -> None:
        if not self.tracker.pending:
            return
        for tag, multiple, _ack in self.tracker.drain():
            for seq in ([s for s in self.settling if s <= tag] if multiple else [tag]):
                entry = self.settling.pop(seq, None)
                if entry is not None and not self.gone:
                    self.queue.ack(entry)
        self.queue.wake()


class ReplicatedDelayed:
    """The held messages of a clustered broker (see the module docstring): ``hold`` on the
    publish path, ``run_due`` / ``next_deadline`` from ``core.delayed.DelayedMessages``.
    ``route(vhost, record) -> (routed, sid, waits) | None`` routes a due message (None: dropped);
    ``wall()`` is the wall clock (s)."""

    def __init__(self, broker: Broker, route: Callable[[str, HeldRecord], Any],
                 wall: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.route = route
        self.wall = wall
        self.firers: dict[str, _Firer] = {}
        self.timers: TimerHeap[int] = TimerHeap(self._due, broker._timer_earlier)
        self._held: dict[int, tuple[_Firer, Any]] = {}
        self._ids = itertools.count(1)
        self._scanned = -SCAN_SECONDS
        #: Called with a vhost's name when a scan finds no ``HELD_QUEUE`` there
        #: (``clustering.delayed`` declares it if the vhost has an x-delayed-message exchange).
        self.ensure: Callable[[str], None] | None = None

    def __len__(self) -> int:
        """Held messages checked out to this member."""
        return len(self._held)

    def hold(self, vhost: VirtualHost, msg: Message, delay_ms: int
             ) -> list[tuple[Any, int]] | None:
        """Enqueue ``msg`` on ``vhost``'s ``HELD_QUEUE``, due in ``delay_ms`` ms: the waits of
        its publisher confirm (the queue's commit); None when the vhost has no such queue (the
        caller holds it in the broker's own log)."""
        queue = held_queue(vhost)
        if queue is None:
            return None
        self._attach(vhost.name, queue)
        props = msg.properties
        props.headers = dict(props.headers or {})
        props.headers[DUE_HEADER] = int(self.wall() * 1000) + delay_ms
        held = msg.with_properties(props)
        _ok, _sid, waits = vhost.enqueue(held, {HELD_QUEUE})
        return list(waits or ())

    # ------------------------------------------------------------------ firers
    def scan(self, now: float) -> None:
        """Attach this member's firer to each vhost's ``HELD_QUEUE`` (every ``SCAN_SECONDS``:
        a queue declared or recovered since, one replaced by a new object)."""
        if now - self._scanned < SCAN_SECONDS:
            return
        self._scanned = now
        for name, vhost in list(self.broker.vhosts.items()):
            queue = held_queue(vhost)
            if queue is not None:
                self._attach(name, queue)
                continue
            if name in self.firers:
                self.firers.pop(name).gone = True
            if self.ensure is not None:
                self.ensure(name)

    def _attach(self, vhost: str, queue: Any) -> None:
        firer = self.firers.get(vhost)
        if firer is not None and firer.queue is queue and not getattr(queue, "deleted", False):
            return
        if firer is not None:
            firer.gone = True
        if getattr(queue, "deleted", False):
            return
        firer = self.firers[vhost] = _Firer(self, vhost, queue)
        queue.add_consumer(firer)
        queue.wake()
        log.info("delayed messages of vhost %r: this member fires those its log gives it",
                 vhost)

    def schedule(self, firer: _Firer, entry: Any) -> None:
        """Time ``entry`` (checked out to ``firer``) for its ``DUE_HEADER``."""
        try:
            due_ms = int((entry.message.headers or {}).get(DUE_HEADER, 0))
        except (ValueError, TypeError):
            due_ms = 0   # not ours: routed at once
        id_ = next(self._ids)
        self._held[id_] = (firer, entry)
        now = self.broker.clock()
        self.timers.schedule(id_, now + (due_ms - int(self.wall() * 1000)) / 1000)

    # ------------------------------------------------------------------ timers
    def run_due(self, now: float) -> int:
        """Fire what is due by ``now`` (``broker.clock`` s); returns how many fired."""
        self.scan(now)
        return self.timers.run_due(now)

    def next_deadline(self) -> float | None:
        """When (``broker.clock`` s) the next held message here is due; None: none."""
        return self.timers.next_deadline()

    def _due(self, id_: int, now: float) -> None:
        held = self._held.pop(id_, None)
        if held is None:
            return
        firer, entry = held
        if firer.gone:
            return   # the queue object was replaced: its new firer has the message
        msg = entry.message
        try:
            headers = dict(msg.headers or {})
        except (ValueError, TypeError):
            headers = {}
        due_ms = headers.get(DUE_HEADER, 0)
        early_ms = int(due_ms) - int(self.wall() * 1000) if isinstance(due_ms, int) else 0
        if early_ms > 0:   # clocks drifted apart: wait for the wall clock
            self._held[id_] = (firer, entry)
            self.timers.schedule(id_, now + early_ms / 1000)
            return
        for name in _STRIPPED:
            headers.pop(name, None)
        props = msg.properties
        props.headers = headers
        clean = msg.with_properties(props)
        record = HeldRecord(0, 0, delay_of(headers) or 0, firer.vhost,
                            clean.exchange, clean.routing_key, clean.header_payload, clean.body)
        result = self.route(firer.vhost, record)
        if result is None:   # dropped (no exchange, no queue): settled at once
            firer.queue.ack(entry)
            firer.queue.wake()
            return
        _routed, sid, waits = result
        firer.routed(entry, sid, waits, self.broker.durability)
