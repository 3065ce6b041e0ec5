"""At-least-once dead-lettering of a quorum queue (issue 25): the leader's dead-letter worker.

Owns, for one quorum queue with ``x-dead-letter-strategy: at-least-once`` on this broker: sending
the dead letters its state machine holds (``FifoQueue.dlx``: they stay in the queue's log and
snapshots until settled) through the dead-letter exchange, waiting until every target queue made
each one safe (a quorum target: committed in its log; a durable classic target: the message
store's sync; a transient message in a classic queue: at once), and then proposing their
``DlxSettle`` through the queue's group, which removes them on every replica. Must not know: the
Raft protocol, sockets.

Only the leader's worker acts (``duties`` asks ``group.is_leader`` each timer round): a new
leader, a leader that lost and regained its term, or a broker that restarted starts again from
the machine's ``dlx`` and sends everything not settled yet, so a dead letter whose settle was not
committed when the leader died is sent again (duplicates at the targets are possible, losses
not: "at least once"). A dead letter that could not be routed (no dead-letter exchange, no
binding, a target refused it: overflow reject-publish) is sent again after ``RETRY_MS``, one
whose targets did not all confirm it after ``UNCONFIRMED_MS``, as RabbitMQ's
``rabbit_fifo_dlx_worker`` retries (after its ``dead_letter_worker_publisher_confirm_timeout``,
180 s, for both: ours retries sooner, which can only add duplicates of unrouted messages where a
target refused and another took it).
A target that is another member's classic queue (relayed) gives no confirm: that copy is at most
once (the quorum engine replicates quorum targets; a classic queue lives on one broker).

Sources: RabbitMQ "Quorum Queues" (at-least-once dead-lettering: caveats, retries, duplicates),
``rabbit_fifo_dlx_worker.erl`` (consume the discards, publish with confirms, settle once
confirmed, co-located with the leader).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

from cluster.quorum.queue import split_header
from cluster.raft import fifo as f
from queues.dead_letter import is_death_cycle
from queues.message import Message

__all__ = ["DeadLetterWorker", "RETRY_MS", "UNCONFIRMED_MS", "MAX_IN_FLIGHT", "Route",
           "route_dead_letter"]

log = logging.getLogger(__name__)

#: A dead letter that could not be routed is tried again after this long (ms).
RETRY_MS = 2000
#: A dead letter not confirmed by all its targets this long after it was sent is sent again (ms).
UNCONFIRMED_MS = 30_000
#: At most this many dead letters in flight (RabbitMQ's worker prefetch is 32; ours holds only
#: references to bodies the machine keeps anyway).
MAX_IN_FLIGHT = 256

#: ``route(message, reason)`` -> None (not routed: try again later) or (store id or None, the
#: ``(source, token)`` waits of the replicated targets), as ``Vhost.enqueue`` gives them.
Route = Callable[[Message, str], "tuple[int | None, list[tuple[Any, int]]] | None"]


def route_dead_letter(vhost: Any, message: Message, exchange: str, routing_keys: list[str]
                      ) -> tuple[int | None, list[tuple[Any, int]]] | None:
    """Route dead letter ``message`` (x-death added) through ``exchange`` of ``vhost`` with each
    of ``routing_keys``, skipping the queues that would close an automatic dead-letter cycle (as
    ``Vhost._dead_letter``): (store id, waits) as ``Vhost.enqueue`` gives them, or None when the
    exchange is missing, nothing is bound, or a target refused it (x-overflow reject-publish)."""
    if vhost.routing.get_exchange(exchange) is None:
        return None
    headers = message.headers if message.has_headers else None
    targets: set[str] = set()
    for key in routing_keys:
        targets |= vhost.routing.route(exchange, key, headers, has_headers=headers is not None)
    targets = {name for name in targets if not is_death_cycle(name, message)}
    if not targets:
        return None
    ok, sid, waits = vhost.enqueue(message, targets)
    return (sid, waits or []) if ok else None


class _Send:
    """One sending of dead letter ``msg_id``: ``remaining`` waits, ``failed`` when refused."""

    __slots__ = ("msg_id", "remaining", "failed")

    def __init__(self, msg_id: int, remaining: int) -> None:
        self.msg_id = msg_id
        self.remaining = remaining
        self.failed = False


class DeadLetterWorker:
    """The worker of ``queue`` (a ``cluster.quorum.queue.QuorumQueue``; its ``group`` may
    change). ``route``: see ``Route``; ``durability``: the broker's (``wait_for_sync``, which
    calls ``release_durable`` after a sync); ``now_ms()``: a monotonic clock in ms."""

    def __init__(self, queue: Any, route: Route, durability: Any,
                 now_ms: Callable[[], int]) -> None:
        self.queue = queue
        self.route = route
        self.durability = durability
        self.now_ms = now_ms
        self.term = -1            # the term whose leader this worker acts for (-1: none)
        self.sent: dict[int, int] = {}   # msg id -> when (ms) it is due to be sent again
        self.settled: list[int] = []     # confirmed, DlxSettle not proposed yet
        self._seq = 0
        self._sends: dict[int, _Send] = {}
        self._sources: dict[Any, deque[tuple[int, int]]] = {}   # source -> (token, seq)
        self._store: deque[tuple[int, int]] = deque()            # (store id, seq)

    # ------------------------------------------------------------------ inputs
    def add(self, msg_id: int, message: Message, reason: str) -> None:
        """The machine (on this leader) just held dead letter ``msg_id``: send it now."""
        if self._acting() and msg_id not in self.sent and len(self.sent) < MAX_IN_FLIGHT:
            self._send(msg_id, message, reason)

    def duties(self) -> None:
        """The timer round: nothing unless this member leads; on a new term, start over from
        the machine's held dead letters; send those never sent or not confirmed within
        ``RETRY_MS`` / ``UNCONFIRMED_MS``; propose the settles of the confirmed ones."""
        group = self.queue.group
        if not getattr(group, "holds_replica", False) or not group.is_leader:
            if self.term != -1:
                self._reset(-1)
            return
        term = group.node.term
        if term != self.term:
            self._reset(term)
        now = self.now_ms()
        held = group.machine.fifo.dlx
        for msg_id in [i for i, due in self.sent.items() if i not in held or now >= due]:
            del self.sent[msg_id]
        for msg_id, (reason, m) in held.items():
            if len(self.sent) >= MAX_IN_FLIGHT:
                break
            if msg_id not in self.sent:
                message = split_header(m.header)
                message.body = group.machine.fifo.body(m)
                self._send(msg_id, message, reason)
        self._propose()

    # ------------------------------------------------------------------ SafeWaiter
    def advance_safe(self, source: object, up_to: int, failed: Collection[int] = ()) -> bool:
        """``source`` (a target quorum queue) made every token <= ``up_to`` safe, those in
        ``failed`` refused: the sends that waited for it progress. True when none waits on it."""
        pending = self._sources.get(source)
        while pending and pending[0][0] <= up_to:
            token, seq = pending.popleft()
            self._progress(seq, token in failed)
        if not pending:
            self._sources.pop(source, None)
            self._propose()
            return True
        self._propose()
        return False

    def release_durable(self, durable_id: int) -> bool:
        """The message store synced every store id <= ``durable_id``; True when none waits."""
        pending = self._store
        while pending and pending[0][0] <= durable_id:
            _sid, seq = pending.popleft()
            self._progress(seq, False)
        self._propose()
        return not pending

    # ------------------------------------------------------------------ internals
    def _acting(self) -> bool:
        group = self.queue.group
        return (getattr(group, "holds_replica", False) and group.is_leader
                and group.node.term == self.term)

    def _reset(self, term: int) -> None:
        self.term = term
        self.sent.clear()
        self.settled.clear()
        self._sends.clear()
        self._sources.clear()
        self._store.clear()

    def _send(self, msg_id: int, message: Message, reason: str) -> None:
        now = self.now_ms()
        self.sent[msg_id] = now + RETRY_MS
        try:
            routed = self.route(message, reason)
        except Exception:   # a target refusing in an unexpected way: try again later
            log.exception("quorum queue %r: dead letter %d not routed", self.queue.name, msg_id)
            return
        if routed is None:
            return   # not routed: sent again after RETRY_MS
        self.sent[msg_id] = now + UNCONFIRMED_MS
        sid, waits = routed
        self._seq += 1
        seq = self._seq
        send = self._sends[seq] = _Send(msg_id, len(waits) + (sid is not None))
        if send.remaining == 0:
            self._done(seq)
            return
        if sid is not None:
            self._store.append((sid, seq))
            self.durability.wait_for_sync(self)
        for source, token in waits:
            self._sources.setdefault(source, deque()).append((token, seq))
        for source, _token in waits:
            source.watch(self)

    def _progress(self, seq: int, failed: bool) -> None:
        send = self._sends.get(seq)
        if send is None:
            return
        send.failed = send.failed or failed
        send.remaining -= 1
        if send.remaining <= 0:
            self._done(seq)

    def _done(self, seq: int) -> None:
        send = self._sends.pop(seq)
        if send.failed:   # refused by a target: sent again soon
            if send.msg_id in self.sent:
                self.sent[send.msg_id] = min(self.sent[send.msg_id], self.now_ms() + RETRY_MS)
        else:
            self.settled.append(send.msg_id)

    def _propose(self) -> None:
        """Propose the settles of the confirmed dead letters (they stay in ``sent``, so not
        sent again, until the settle is applied or ``UNCONFIRMED_MS`` passed)."""
        if not self.settled or not self._acting():
            return
        ids = tuple(dict.fromkeys(self.settled))
        self.settled.clear()
        self.queue.group.submit(f.DlxSettle(ids))
        self.queue.wake()
