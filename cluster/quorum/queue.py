"""A quorum queue as the broker core sees it on one member: ``queues.queue_type.QueueType`` over a
``QuorumGroup``.

Owns: turning the core's calls into group commands and the group's applied effects into
deliveries on this member. Publishes become ``Enqueue`` commands (confirm token: the command's
seq, safe once this member's replica applied it -- committed, so a majority holds it); a
Basic.Consume becomes ``Checkout`` of consumer ``"<origin>/<n>"``; acks, requeues and rejects
become ``Settle`` / ``Return`` / ``Discard``. Every replica applies the same log; a member of the
group hosting a consumer delivers the messages the log checks out to it from its own replica (no
transfer between brokers); a broker outside the group receives its consumers' deliveries from the
leader (``remote.RemoteGroup.received``, fed to ``on_effects`` like applied effects). Commands are batched: the core's calls queue them and ``dispatch`` (run once per
batch of input) submits them in order. Must not know: sockets, files, Raft messages, the core's
classes (consumers are duck-typed: ``channel``, ``prefetch``, ``no_ack``, ``can_deliver``,
``deliver``).

Basic.Get (``get_then``) and Queue.Purge (``purge_then``) are one command each in the queue's
log, proposed by the member the client asked (after the commands its channel queued before them)
and answered when applied there, as RabbitMQ's quorum queues answer them.

RabbitMQ 4.0 (issue 25): ``x-delivery-count`` is on a delivery or a Basic.Get's message only once
it is > 0 (4.0's ``rabbit_fifo_client:add_delivery_count_header``: the number of earlier
deliveries given back; 3.10 put 0 on a first Basic.Get); at-least-once dead letters (a
``DeadLetter`` with a msg id) go to ``dlx``, the leader's worker (``amqp_broker.clustering.
quorum_dlx``), which sends them until their targets confirmed them and then proposes their
``DlxSettle``.

Deviations from RabbitMQ (3.10): a consumer without a prefetch gets ``DEFAULT_CREDIT`` in flight
(RabbitMQ's quorum queues also bound unlimited consumers by a credit); a purge from a broker
outside the group is answered with a count of 0; a broker outside the group
(``remote.RemoteGroup``) forwards publishes and
serves consumers through the leader, but reports 0 messages and only its own consumers, and
refuses Basic.Get with 406 (``NotServed``: no replica to answer from at once). Sources: RabbitMQ "Quorum Queues" (feature matrix,
delivery-limit, ``x-delivery-count``), ``rabbit_quorum_queue.erl``, ``rabbit_fifo_client.erl``
(commands batched per channel, enqueuer seqs).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from cluster.raft import fifo as f
from queues.arguments import message_ttl_or_none
from queues.dedup import dedup_key
from queues.entry import QueueEntry
from queues.errors import NotServed
from queues.message import Message
from queues.protocols import PublishResult
from queues.queue_type import QUORUM, Capabilities, GetAnswer, SafeWaiter

from .group import Action, QuorumGroup
from .machine import Cancelled, Effect, consumer_origin
from .remote import RemoteGroup

__all__ = ["QuorumQueue", "QuorumEntry", "DEFAULT_CREDIT", "NO_ACK_CREDIT",
           "HIGH_PRIORITY_ABOVE", "split_header",
           "join_header"]

log = logging.getLogger(__name__)

#: Messages in flight to a consumer that set no prefetch (ack mode).
DEFAULT_CREDIT = 2000
#: Messages in flight to a no-ack consumer (settled as soon as written to the client).
NO_ACK_CREDIT = 256
#: A message whose priority property is above this is high priority (RabbitMQ 4.0: 0-4 normal).
HIGH_PRIORITY_ABOVE = 4


def join_header(message: Message) -> bytes:
    """What an Enqueue's ``header`` holds: exchange and routing key as two AMQP short strings
    (Basic.Deliver needs them), then the content header payload as it came in."""
    raw = message.routing_raw
    if raw is None:
        ex, rk = message.exchange.encode(), message.routing_key.encode()
        raw = bytes((len(ex),)) + ex + bytes((len(rk),)) + rk
    return raw + message.header_payload


def split_header(header: bytes) -> Message:
    """The message (body still empty) of an Enqueue ``header`` (``join_header``'s inverse)."""
    n = header[0]
    m = header[1 + n]
    routing_end = 2 + n + m
    msg = Message(header[1:1 + n].decode(), header[2 + n:routing_end].decode(),
                  header[routing_end:], b"")
    msg.routing_raw = header[:routing_end]
    return msg


class QuorumEntry(QueueEntry):
    """A delivery of this queue: ``msg_id`` (the Raft index of its Enqueue) and ``cid`` (the
    consumer id it was checked out to) say what to settle."""

    __slots__ = ("msg_id", "cid")

    def __init__(self, message: Message, msg_id: int, cid: str, delivery_count: int) -> None:
        super().__init__(message, msg_id)
        self.msg_id = msg_id
        self.cid = cid
        self.delivery_count = delivery_count
        self.redelivered = delivery_count > 0


class _Local:
    """One consumer of ours: the core's consumer, deliveries waiting for its credit, deliveries
    it holds unsettled; ``cancelling``: Basic.Cancel came while it held some (the group
    suspended it; the Cancel is proposed once they are settled)."""

    __slots__ = ("consumer", "cid", "credit", "waiting", "held", "cancelling")

    def __init__(self, consumer: Any, cid: str, credit: int) -> None:
        self.consumer = consumer
        self.cid = cid
        self.credit = credit
        self.waiting: deque[f.Deliver] = deque()
        self.held: dict[int, QuorumEntry] = {}
        self.cancelling = False


class QuorumQueue:
    """Queue ``name`` (``settings``, ``arguments`` as declared) served by ``group``.

    ``execute(actions)`` runs group actions (the runtime); ``wake(queue)`` asks for a
    ``dispatch`` after the current batch of input; ``wall_ms()`` the clock stamped into commands
    (TTL); ``now_ms()`` the runtime's Raft clock (monotonic, ms), which the group's re-send timer
    (``RESEND_MS``) runs on, given when commands are sent (a wall-clock stamp there, far ahead of
    the monotonic clock, kept that timer from ever firing: issue 12); ``dead_letter(message,
    reason)`` routes a dead letter (None: drop); ``on_delete(queue)`` lets the runtime close the
    replica once the queue is deleted here."""

    durable = True
    exclusive_owner = None
    auto_delete = False
    #: No broker-local dedup window (``dedup_state``): the window is in the replicated state.
    dedup = None
    #: Not a paging queue over the message store.
    paging = False
    #: Management's single-active-consumer column: not tracked per member.
    active_consumer = None

    def __init__(self, name: str, settings: Any, arguments: dict,
                 group: QuorumGroup | RemoteGroup, *,
                 execute: Callable[[list[Action]], None], wake: Callable[[QuorumQueue], None],
                 wall_ms: Callable[[], int], now_ms: Callable[[], int],
                 dead_letter: Callable[[Message, str], None] | None = None,
                 on_delete: Callable[[QuorumQueue], None] | None = None) -> None:
        self.name = name
        self.settings = settings
        self.arguments = arguments
        self.had_consumers = False
        self.group = group
        self._execute = execute
        self._wake = wake
        self._wall_ms = wall_ms
        self._now_ms = now_ms
        self._dead_letter = dead_letter
        self._on_delete = on_delete
        self._locals: dict[str, _Local] = {}
        self._by_consumer: dict[int, str] = {}
        self._ops: list[tuple[str, str, int]] = []   # (kind, consumer id, msg id), in order
        self._next_cid = 0
        self._last_token = 0
        self._waiters: list[SafeWaiter] = []
        self._getting: dict[int, GetAnswer] = {}   # seq of a Dequeue -> its answer
        self._purging: dict[int, Callable[[int], None]] = {}   # seq of a Purge -> its answer
        self._reported = 0
        self.rejected: set[int] = set()
        self.deleted = False
        #: The at-least-once dead-letter worker (None: dead letters at most once): ``add(msg_id,
        #: message, reason)`` for each held dead letter this member applied as leader.
        self.dlx: Any = None

    # ------------------------------------------------------------------ figures
    @property
    def capabilities(self) -> Capabilities:
        """``QUORUM``."""
        return QUORUM

    @property
    def message_count(self) -> int:
        """Ready messages in this member's replica (a follower may lag the leader slightly)."""
        return self.group.machine.message_count

    @property
    def message_bytes(self) -> int:
        """Body bytes of ready messages in this member's replica."""
        return self.group.machine.message_bytes

    def in_memory(self) -> tuple[int, int]:
        """(ready messages held in RAM as objects, their body bytes at most): what the memory
        alarm counts (``Broker.queue_memory``), the rest of ``message_count`` at its per-message
        overhead. Paging (bodies in the Raft log, ``amqp_broker.clustering.quorum_paging``):
        the heads of the priorities and the returned messages, whose bodies stay in memory up
        to ``FifoQueue.page_bytes``; the paged rest is columns of integers. Without paging
        every ready body is in memory. O(1): the alarm polls it every tick."""
        fifo = self.group.machine.fifo
        if fifo.read is None:
            return self.message_count, self.message_bytes
        held = len(fifo.ready) + len(fifo.high) + len(fifo.returns)
        return held, min(fifo.ready_bytes, fifo.page_bytes)

    @property
    def unacked_count(self) -> int:
        """Deliveries of this member's consumers not settled yet."""
        return sum(len(loc.held) for loc in self._locals.values())

    @property
    def consumer_count(self) -> int:
        """Consumers of every member (the group's count)."""
        return self.group.machine.consumer_count

    def consumers(self) -> tuple[Any, ...]:
        """This member's consumers (not the cancelling ones)."""
        return tuple(loc.consumer for loc in self._locals.values() if not loc.cancelling)

    def wake(self) -> None:
        """Ask for a ``dispatch`` after the current batch of input (commands were submitted)."""
        self._wake(self)

    # ------------------------------------------------------------------ publishing, confirms
    def publish(self, message: Message) -> PublishResult:
        """Queue an Enqueue of ``message``; ROUTED (a reject-publish overflow is known only once
        applied: its token is then reported ``failed`` to the waiting channel, a Basic.Nack).
        The Enqueue carries what the state machine decides on: high priority (the priority
        property > 4, RabbitMQ 4.0's two levels) and the message's own ``expiration`` (ms;
        unparsable: none, as classic queues read it)."""
        key = dedup_key(message) if self.settings.deduplication else None
        seq = self.group.outbox.next_seq
        expiration = message.expiration
        ttl = -1
        if expiration is not None:
            own = message_ttl_or_none(expiration)
            if own is not None:
                ttl = own
        self._last_token = self.group.submit(f.Enqueue(
            self.group.origin, seq, key, join_header(message), message.body, self._wall_ms(),
            message.priority > HIGH_PRIORITY_ABOVE, ttl))
        self._wake(self)
        return PublishResult.ROUTED

    def publish_wait(self) -> tuple[QuorumQueue, int]:
        """(this queue, the token of the publish just made): safe once applied here."""
        return self, self._last_token

    def watch(self, waiter: SafeWaiter) -> None:
        """Report progress to ``waiter`` (``SafeSource``)."""
        if waiter not in self._waiters:
            self._waiters.append(waiter)
        applied = self.group.applied
        if applied and waiter.advance_safe(self, applied, self.rejected):
            self._waiters.remove(waiter)

    def _progress(self) -> None:
        applied = self.group.applied
        if applied == self._reported:
            return
        self._reported = applied
        if self._getting:   # applied, no Dequeued effect here (a snapshot installed past it)
            for seq in [s for s in self._getting if s <= applied]:
                self._getting.pop(seq)(None, self.message_count)
        if self._purging:   # applied, but no Purged effect here: forwarded from outside
            for seq in [s for s in self._purging if s <= applied]:
                self._purging.pop(seq)(0)
        failed = self.rejected
        if self._waiters:
            self._waiters = [w for w in self._waiters
                             if not w.advance_safe(self, applied, failed)]
        if failed:
            self.rejected = {t for t in failed if t > applied}

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Any) -> None:
        """Basic.Consume: Checkout with the consumer's prefetch (``DEFAULT_CREDIT`` without one,
        ``NO_ACK_CREDIT`` for no-ack). Another member's relay consumers are ignored: members
        deliver from their own replica, brokers outside the group from what the leader ships."""
        channel = getattr(consumer, "channel", None)
        if channel is None:
            return
        self.had_consumers = True
        self._next_cid += 1
        cid = f"{self.group.origin}/{self._next_cid}"
        if consumer.no_ack:
            credit = NO_ACK_CREDIT
        else:
            credit = consumer.prefetch or getattr(channel, "global_prefetch", 0) or DEFAULT_CREDIT
        self._locals[cid] = _Local(consumer, cid, credit)
        self._by_consumer[id(consumer)] = cid
        self._ops.append(("checkout", cid, credit))
        self._wake(self)

    def remove_consumer(self, consumer: Any) -> bool:
        """Basic.Cancel / channel close: Cancel at once when it holds nothing unsettled, else
        suspend it and Cancel once its deliveries are settled (they stay the client's)."""
        cid = self._by_consumer.pop(id(consumer), None)
        if cid is None:
            return False
        loc = self._locals[cid]
        loc.waiting.clear()   # never reached the client: the Cancel returns them
        if loc.held:
            loc.cancelling = True
            self._ops.append(("checkout", cid, -1))
        else:
            del self._locals[cid]
            self._ops.append(("cancel", cid, 0))
        self._wake(self)
        return True

    def _settled(self, entry: QueueEntry, kind: str) -> None:
        if not isinstance(entry, QuorumEntry):
            return
        cid = entry.cid
        self._ops.append((kind, cid, entry.msg_id))
        loc = self._locals.get(cid)
        if loc is not None:
            loc.held.pop(entry.msg_id, None)
            if loc.cancelling and not loc.held:
                del self._locals[cid]
                self._ops.append(("cancel", cid, 0))
        self._wake(self)

    def ack(self, entry: QueueEntry) -> None:
        """Basic.Ack: Settle."""
        self._settled(entry, "settle")

    def ack_many(self, entries: list[QueueEntry]) -> None:
        """Basic.Ack of several deliveries (multiple): one Settle per consumer."""
        for entry in entries:
            self._settled(entry, "settle")

    def requeue_many(self, entries: Iterable[QueueEntry]) -> None:
        """Nack/reject with requeue, or a closed channel: Return (delivery count + 1)."""
        for entry in entries:
            self._settled(entry, "return")

    def reject(self, entry: QueueEntry) -> None:
        """Reject without requeue: Discard (dead-lettered as "rejected", or dropped)."""
        self._settled(entry, "discard")

    def get(self, no_ack: bool) -> QueueEntry | None:
        """Not answerable at once: a quorum queue's Basic.Get goes through its log
        (``get_then``; the core asks ``capabilities.replicated`` first). Raises ``NotServed``."""
        raise NotServed(f"basic.get from quorum queue '{self.name}' is answered through its "
                        f"log (get_then)")

    def get_then(self, no_ack: bool, done: GetAnswer) -> None:
        """Basic.Get as RabbitMQ's quorum queues answer it: propose one ``Dequeue`` (after the
        commands queued before it, so a message requeued just before is there) and call
        ``done(entry, remaining)`` once it is applied on this member's replica: the first ready
        message, checked out to this member's get consumer (settled like a delivery) or, with
        ``no_ack``, gone; None when none was ready; ``remaining``: ready messages after it
        (Get-Ok's message_count). Each message reaches one Basic.Get or consumer only. Raises
        ``NotServed`` (406) on a broker outside the group (no replica to answer from). Should
        this replica learn of the get only through a snapshot (installed past it: no effect
        here), the answer is None, and a message it took stays checked out to the get consumer
        until this broker's next incarnation returns it. Source:
        ``rabbit_quorum_queue:dequeue/4``, ``rabbit_fifo`` checkout ``{dequeue, _}``."""
        if not self.group.holds_replica:
            raise NotServed(f"basic.get from quorum queue '{self.name}' is not served on a "
                            f"broker outside its group ({', '.join(self.group.members)}); "
                            f"consume, or connect to a member")
        if self._ops:
            self._submit_ops()
        cmd = f.Dequeue(f"{self.group.origin}/get", no_ack, self._wall_ms())
        self._getting[self.group.submit(cmd)] = done
        self._wake(self)

    def _answer_get(self, eff: f.Dequeued) -> None:
        done = self._getting.pop(eff.seq)
        if not eff.msg_id:
            done(None, eff.remaining)
            return
        msg = split_header(eff.header)
        msg.body = eff.body
        if eff.delivery_count:   # RabbitMQ 4.0: only once > 0 (3.10 said 0 on a first get)
            msg = _with_delivery_count(msg, eff.delivery_count)
        done(QuorumEntry(msg, eff.msg_id, eff.consumer, eff.delivery_count), eff.remaining)

    # ------------------------------------------------------------------ the batch
    def dispatch(self) -> int:
        """Submit the queued commands in order, send them (``flush``), and write deliveries the
        consumers have credit for. Returns how many were written."""
        if self.deleted:
            return 0
        if self._ops:
            self._submit_ops()
        actions = self.group.flush(self._now_ms())
        if actions:
            self._execute(actions)
        sent = 0
        for loc in list(self._locals.values()):
            if loc.waiting:
                sent += self._deliver_waiting(loc)
        if self._ops:   # settles of no-ack deliveries
            self._submit_ops()
            actions = self.group.flush(self._now_ms())
            if actions:
                self._execute(actions)
        return sent

    def _submit_ops(self) -> None:
        ops, self._ops = self._ops, []
        now = self._wall_ms()
        group = self.group
        i = 0
        while i < len(ops):
            kind, cid, arg = ops[i]
            if kind == "checkout":
                group.submit(f.Checkout(cid, arg, now))
                i += 1
                continue
            if kind == "cancel":
                group.submit(f.Cancel(cid, now))
                i += 1
                continue
            j = i
            while j < len(ops) and ops[j][0] == kind and ops[j][1] == cid:
                j += 1
            ids = tuple(op[2] for op in ops[i:j])
            if kind == "settle":
                group.submit(f.Settle(cid, ids))
            elif kind == "return":
                group.submit(f.Return(cid, ids, now))
            else:
                group.submit(f.Discard(cid, ids))
            i = j

    def _deliver_waiting(self, loc: _Local) -> int:
        consumer = loc.consumer
        waiting = loc.waiting
        sent = 0
        while waiting and consumer.can_deliver():
            d = waiting.popleft()
            msg = split_header(d.header)
            msg.body = d.body
            if d.delivery_count:
                msg = _with_delivery_count(msg, d.delivery_count)
            entry = QuorumEntry(msg, d.msg_id, loc.cid, d.delivery_count)
            if consumer.no_ack:
                self._ops.append(("settle", loc.cid, d.msg_id))
            else:
                loc.held[d.msg_id] = entry
            consumer.deliver(self, entry)
            sent += 1
        return sent

    # ------------------------------------------------------------------ applied effects
    def on_effects(self, effects: list[Effect]) -> None:
        """Effects of entries this member's replica applied: deliveries to our consumers,
        consumers the group cancelled (re-checked out while still ours), dead letters (only
        on the acting leader), rejected publishes; then confirm progress."""
        mine = self.group.origin
        wake = False
        for eff in effects:
            if isinstance(eff, f.Deliver):
                loc = self._locals.get(eff.consumer)
                if loc is not None and not loc.cancelling:
                    loc.waiting.append(eff)
                    wake = True
            elif isinstance(eff, Cancelled):
                loc = self._locals.get(eff.consumer)
                if loc is not None and consumer_origin(eff.consumer) == mine:
                    loc.held.clear()   # returned by the group: settles of them are void
                    loc.waiting.clear()
                    if loc.cancelling:
                        del self._locals[eff.consumer]
                    else:
                        self._ops.append(("checkout", loc.cid, loc.credit))
                    wake = True
            elif isinstance(eff, f.DeadLetter):
                msg = split_header(eff.header)
                msg.body = eff.body
                if eff.msg_id and self.dlx is not None:   # at least once: held until settled
                    self.dlx.add(eff.msg_id, msg, eff.reason)
                elif self._dead_letter is not None:
                    self._dead_letter(msg, eff.reason)
            elif isinstance(eff, f.Rejected):
                if eff.publisher == mine:
                    self.rejected.add(eff.seq)
            elif isinstance(eff, f.Purged):
                if eff.origin == mine and eff.seq in self._purging:
                    self._purging.pop(eff.seq)(eff.count)
            elif isinstance(eff, f.Dequeued):
                if eff.origin == mine and eff.seq in self._getting:
                    self._answer_get(eff)
        self._progress()
        if wake:
            self._wake(self)

    # ------------------------------------------------------------------ replica management
    def holdings(self) -> dict[str, dict[int, int]]:
        """This broker's consumers (consumer id) -> msg id -> delivery count of the deliveries
        they hold unsettled (the cancelling ones too)."""
        return {cid: {i: e.delivery_count for i, e in loc.held.items()}
                for cid, loc in self._locals.items()}

    def switch(self, group: QuorumGroup | RemoteGroup) -> None:
        """Serve from ``group`` from now on: this broker joined the queue's group (its replica
        became a member) or left it (``group`` forwards from outside). Both share the outbox,
        so commands in flight and confirms go on."""
        self.group = group
        self._wake(self)

    # ------------------------------------------------------------------ the rest of QueueType
    def purge(self) -> int:
        """Queue.Purge: propose a Purge; returns the ready count this replica knows."""
        count = self.message_count
        self.group.submit(f.Purge())
        self._wake(self)
        return count

    def purge_then(self, done: Callable[[int], None]) -> None:
        """Queue.Purge as RabbitMQ's quorum queues answer it: propose one Purge and call
        ``done(count)`` once it is applied on this member's replica (committed), with the number
        of ready messages it removed -- so a message published after Purge-Ok is never purged
        by it. From a broker outside the group (no replica here) the count is 0. Not called if
        the queue is deleted first. Source: ``rabbit_quorum_queue:purge/1``."""
        if self._ops:   # after what the client did before (a requeue is purged too)
            self._submit_ops()
        self._purging[self.group.submit(f.Purge())] = done
        self._wake(self)

    def delete(self) -> list[QueueEntry]:
        """Queue.Delete on this member: nothing more is sent or delivered (the runtime closes
        the replica and deletes its files)."""
        self.deleted = True
        self._locals.clear()
        self._by_consumer.clear()
        self._waiters.clear()
        self._purging.clear()
        getting, self._getting = self._getting, {}
        for done in getting.values():   # the queue is gone: Get-Empty
            done(None, 0)
        if self._on_delete is not None:
            self._on_delete(self)
        return []

    def restore(self, message: Message, redelivered: bool, body_loaded: bool = True) -> None:
        """A message-store copy at recovery: ignored (a quorum queue's messages are in its Raft
        log; ``capabilities.message_store`` is False so the core stores none)."""

    def expire(self) -> int:
        """TTL is the leader's job (``QuorumGroup.leader_duties``): nothing here."""
        return 0

    def next_expiry(self) -> int | None:
        """None: the core's timer does not expire quorum queues."""
        return None


def _with_delivery_count(msg: Message, count: int) -> Message:
    """``msg`` with the ``x-delivery-count`` header (RabbitMQ quorum queues, on redelivery)."""
    props = msg.properties
    headers = dict(props.headers or {})
    headers["x-delivery-count"] = count
    props.headers = headers
    out = msg.with_properties(props)
    out.routing_raw = msg.routing_raw
    return out
