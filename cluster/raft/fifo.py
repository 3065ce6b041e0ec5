"""The replicated queue's state machine (``rabbit_fifo``-like): commands in, effects out, pure.

Owns: what a quorum queue holds and decides once a command is committed: ready messages in order,
messages checked out by consumers, delivery counts, the dedup window, max-length/overflow, TTL,
delivery-limit, single-active-consumer. Every replica applies the same commands in the same order
and reaches the same state; only the leader's broker *acts* on the effects (deliver, confirm,
dead-letter). Time comes only inside commands (``now_ms``, stamped by the leader when proposing),
so replay is deterministic. Must not know: Raft, AMQP frames (headers and bodies are opaque bytes),
sockets, clocks.

Its commands and effects, and their encoding, are in ``cluster.raft.fifo_commands`` (re-exported
here): Enqueue, Checkout/Cancel, Settle/Return/Discard, Expire, Purge, Dequeue (Basic.Get), Take
in; Deliver, Confirm, Rejected, DeadLetter, Purged, Dequeued out.

Sources: RabbitMQ quorum queues documentation (delivery-limit, overflow, single active consumer)
and ``rabbit_fifo`` (commands and effects); RabbitMQ message deduplication plugin (window).

Speed (issue 12): the values built for every message (the queue's ``_Msg``, and the commands and
effects of ``fifo_commands``) are slotted dataclasses with an explicit
``__init__`` and not frozen: mypyc compiles an explicit ``__init__`` to C, while a frozen
dataclass's generated one runs as Python (``object.__setattr__`` per field: about 18x the cost per
object, measured). Treat them as immutable all the same.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from .fifo_commands import (
    Cancel,
    Checkout,
    Command,
    Confirm,
    DeadLetter,
    Deliver,
    Dequeue,
    Dequeued,
    Discard,
    Effect,
    Enqueue,
    Expire,
    Purge,
    Purged,
    Reader,
    Rejected,
    Return,
    Settle,
    Take,
    decode,
    encode,
)

__all__ = [
    "FifoConfig", "FifoQueue", "Enqueue", "Checkout", "Cancel", "Settle", "Return", "Discard",
    "Expire", "Purge", "Take", "Dequeue", "Command", "Deliver", "Confirm", "Rejected",
    "DeadLetter", "Purged", "Dequeued", "Effect", "encode", "decode", "Reader",
]


@dataclass(frozen=True, slots=True)
class FifoConfig:
    """Queue arguments. ``max_length`` / ``max_length_bytes`` (bytes of bodies): None = unbounded;
    ``overflow``: "drop-head" (dead-letter the oldest) or "reject-publish"; ``delivery_limit``:
    a message returned more often is dead-lettered; ``message_ttl_ms``; ``single_active_consumer``;
    ``dedup_window``: how many dedup keys are remembered (0: no deduplication)."""

    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    delivery_limit: int | None = None
    message_ttl_ms: int | None = None
    single_active_consumer: bool = False
    dedup_window: int = 0


@dataclass(slots=True, init=False)
class _Msg:
    msg_id: int
    header: bytes
    body: bytes
    expires_at: int | None
    delivery_count: int = 0

    def __init__(self, msg_id: int, header: bytes, body: bytes, expires_at: int | None,
                 delivery_count: int = 0) -> None:
        self.msg_id = msg_id
        self.header = header
        self.body = body
        self.expires_at = expires_at
        self.delivery_count = delivery_count


@dataclass(slots=True)
class _Consumer:
    prefetch: int
    out: dict[int, _Msg] = field(default_factory=dict)


class FifoQueue:
    """The state machine: ``apply(index, command bytes) -> effects``; ``snapshot()`` /
    ``restore(data)`` for Raft snapshots (paper §7). Deterministic: the same commands give the
    same state and effects on every replica."""

    def __init__(self, config: FifoConfig) -> None:
        self.config = config
        self.ready: deque[_Msg] = deque()
        self.ready_bytes = 0
        self.consumers: OrderedDict[str, _Consumer] = OrderedDict()
        self.dedup: OrderedDict[str, int] = OrderedDict()
        self._rr = 0
        #: Whether ``Confirm`` effects are made (``cluster.quorum.machine`` has its own).
        self.confirms = True
        self._active: list[str] | None = None   # consumers that may get messages; None: stale

    # ------------------------------------------------------------------ applying
    def apply(self, index: int, raw: bytes) -> list[Effect]:
        """Apply the committed command ``raw`` at Raft ``index``; returns its effects."""
        return self.apply_command(index, decode(raw))

    def apply_command(self, index: int, cmd: Command) -> list[Effect]:
        """``apply`` for a decoded command."""
        out: list[Effect] = []
        if isinstance(cmd, Enqueue):
            self._enqueue(index, cmd, out)
        elif isinstance(cmd, Checkout):
            self._active = None
            known = self.consumers.get(cmd.consumer)
            if known is None:
                self.consumers[cmd.consumer] = _Consumer(cmd.prefetch)
            else:
                known.prefetch = cmd.prefetch
            self._expire(cmd.now_ms, out)
        elif isinstance(cmd, Cancel):
            self._active = None
            c = self.consumers.pop(cmd.consumer, None)
            if c is not None:
                self._give_back(list(c.out.values()), out)
        elif isinstance(cmd, Settle | Return | Discard):
            c = self.consumers.get(cmd.consumer)
            taken = [m for i in cmd.msg_ids if c is not None
                     for m in [c.out.pop(i, None)] if m is not None]
            if isinstance(cmd, Return):
                self._give_back(taken, out)
            elif isinstance(cmd, Discard):
                out.extend(DeadLetter("rejected", m.header, m.body, m.delivery_count)
                           for m in taken)
        elif isinstance(cmd, Expire):
            self._expire(cmd.now_ms, out)
        elif isinstance(cmd, Dequeue):
            self._dequeue(cmd, out)
        elif isinstance(cmd, Take):
            self._take(cmd)
        elif isinstance(cmd, Purge):
            out.append(Purged(len(self.ready)))
            self.ready.clear()
            self.ready_bytes = 0
        self._deliver(out)
        return out

    def _enqueue(self, index: int, cmd: Enqueue, out: list[Effect]) -> None:
        cfg = self.config
        self._expire(cmd.now_ms, out)
        if cmd.dedup_key is not None and cfg.dedup_window:
            if cmd.dedup_key in self.dedup:
                if self.confirms:   # a duplicate: accepted, not kept
                    out.append(Confirm(cmd.publisher, cmd.seq))
                return
            self.dedup[cmd.dedup_key] = index
            while len(self.dedup) > cfg.dedup_window:
                self.dedup.popitem(last=False)
        full = ((cfg.max_length is not None and len(self.ready) >= cfg.max_length)
                or (cfg.max_length_bytes is not None
                    and self.ready_bytes + len(cmd.body) > cfg.max_length_bytes))
        if full and cfg.overflow != "drop-head":
            out.append(Rejected(cmd.publisher, cmd.seq))
            return
        ttl = cfg.message_ttl_ms
        self.ready.append(_Msg(index, cmd.header, cmd.body,
                               None if ttl is None else cmd.now_ms + ttl))
        self.ready_bytes += len(cmd.body)
        while self.ready and ((cfg.max_length is not None and len(self.ready) > cfg.max_length)
                              or (cfg.max_length_bytes is not None
                                  and self.ready_bytes > cfg.max_length_bytes)):
            self._drop_head("maxlen", out)
        if self.confirms:
            out.append(Confirm(cmd.publisher, cmd.seq))

    def _dequeue(self, cmd: Dequeue, out: list[Effect]) -> None:
        self._expire(cmd.now_ms, out)
        if not self.ready:
            out.append(Dequeued(cmd.consumer, 0, b"", b"", 0, 0))
            return
        m = self.ready.popleft()
        self.ready_bytes -= len(m.body)
        if not cmd.settle:
            self._getter(cmd.consumer).out[m.msg_id] = m
        out.append(Dequeued(cmd.consumer, m.msg_id, m.header, m.body, m.delivery_count,
                            len(self.ready)))

    def _take(self, cmd: Take) -> None:
        ready = self.ready
        for i, m in enumerate(ready):
            if m.msg_id == cmd.msg_id:
                del ready[i]
                self.ready_bytes -= len(m.body)
                self._getter(cmd.consumer).out[m.msg_id] = m
                return

    def _getter(self, name: str) -> _Consumer:
        """The Basic.Get consumer ``name``, created suspended (it never gets deliveries)."""
        c = self.consumers.get(name)
        if c is None:
            c = self.consumers[name] = _Consumer(-1)
            self._active = None
        return c

    def _drop_head(self, reason: str, out: list[Effect]) -> None:
        m = self.ready.popleft()
        self.ready_bytes -= len(m.body)
        out.append(DeadLetter(reason, m.header, m.body, m.delivery_count))

    def _expire(self, now_ms: int, out: list[Effect]) -> None:
        while self.ready and self.ready[0].expires_at is not None \
                and self.ready[0].expires_at <= now_ms:
            self._drop_head("expired", out)

    def _give_back(self, msgs: list[_Msg], out: list[Effect]) -> None:
        """Returned messages go back to the head in their original order, counted."""
        limit = self.config.delivery_limit
        back = []
        for m in sorted(msgs, key=lambda m: m.msg_id):
            m.delivery_count += 1
            if limit is not None and m.delivery_count > limit:
                out.append(DeadLetter("delivery_limit", m.header, m.body, m.delivery_count))
            else:
                back.append(m)
        for m in reversed(back):
            self.ready.appendleft(m)
            self.ready_bytes += len(m.body)

    def _deliver(self, out: list[Effect]) -> None:
        """Hand ready messages to consumers with credit: round-robin, or only to the first
        consumer under single-active-consumer."""
        if not self.consumers or not self.ready:
            return
        names = self._active
        if names is None:   # recomputed only when consumers came, went or changed credit
            names = list(self.consumers)
            if self.config.single_active_consumer:
                names = names[:1]
            names = self._active = [n for n in names if self.consumers[n].prefetch >= 0]
        if not names:
            return
        idle = 0
        while self.ready and idle < len(names):
            name = names[self._rr % len(names)]
            self._rr += 1
            c = self.consumers[name]
            if c.prefetch and len(c.out) >= c.prefetch:
                idle += 1
                continue
            idle = 0
            m = self.ready.popleft()
            self.ready_bytes -= len(m.body)
            c.out[m.msg_id] = m
            out.append(Deliver(name, m.msg_id, m.header, m.body, m.delivery_count))

    # ------------------------------------------------------------------ queries, snapshots
    def message_count(self) -> int:
        """Ready messages (Queue.DeclareOk's message_count)."""
        return len(self.ready)

    def snapshot(self) -> bytes:
        """The whole state as bytes (JSON, bodies base64)."""
        def msg(m: _Msg) -> list:
            return [m.msg_id, base64.b64encode(m.header).decode(),
                    base64.b64encode(m.body).decode(), m.expires_at, m.delivery_count]
        return json.dumps({
            "ready": [msg(m) for m in self.ready],
            "consumers": [[n, c.prefetch, [msg(m) for m in c.out.values()]]
                          for n, c in self.consumers.items()],
            "dedup": list(self.dedup.items()), "rr": self._rr,
        }, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the state with a ``snapshot()``'s."""
        def msg(x: list) -> _Msg:
            return _Msg(x[0], base64.b64decode(x[1]), base64.b64decode(x[2]), x[3], x[4])
        d = json.loads(data)
        self.ready = deque(msg(x) for x in d["ready"])
        self.ready_bytes = sum(len(m.body) for m in self.ready)
        self.consumers = OrderedDict(
            (n, _Consumer(p, {m.msg_id: m for m in map(msg, out)})) for n, p, out in d["consumers"])
        self.dedup = OrderedDict((k, v) for k, v in d["dedup"])
        self._rr = d["rr"]
        self._active = None
