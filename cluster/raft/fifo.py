"""The replicated queue's state machine (``rabbit_fifo``-like): commands in, effects out, pure.

Owns: what a quorum queue holds and decides once a command is committed: ready messages in order,
messages checked out by consumers, delivery counts, the dedup window, max-length/overflow, TTL,
delivery-limit, single-active-consumer. Every replica applies the same commands in the same order
and reaches the same state; only the leader's broker *acts* on the effects (deliver, confirm,
dead-letter). Time comes only inside commands (``now_ms``, stamped by the leader when proposing),
so replay is deterministic. Must not know: Raft, AMQP frames (headers and bodies are opaque bytes),
sockets, clocks.

A message is identified by the Raft index of its Enqueue (``msg_id``). Commands (``encode`` /
``decode`` to the bytes a Raft entry carries)::

    Enqueue(publisher, seq, dedup_key, header, body, now_ms)  -> Confirm | Rejected, maybe Deliver
    Checkout(consumer, prefetch, now_ms) / Cancel(consumer, now_ms)
        (a Checkout of a known consumer changes its credit; prefetch < 0 suspends it: it keeps
        what it holds and gets nothing new -- a Basic.Cancel whose deliveries are still unacked)
    Settle(consumer, msg_ids) (ack), Return(consumer, msg_ids) (requeue, delivery count + 1),
    Discard(consumer, msg_ids) (reject without requeue: dead-letter), Expire(now_ms), Purge(),
    Take(consumer, msg_id) (Basic.Get: move that ready message to the consumer, if still ready;
        the consumer is created suspended, so it never gets deliveries)

Effects: ``Deliver(consumer, msg_id, header, body, delivery_count)`` (``delivery_count`` > 0 is
a redelivery: the ``x-delivery-count`` header), ``Confirm(publisher, seq)`` (unless
``FifoQueue.confirms`` is False), ``Rejected(publisher, seq)`` (overflow reject-publish: nack),
``DeadLetter(reason, header, body, delivery_count)`` with reason "expired" | "maxlen" |
"rejected" | "delivery_limit", ``Purged(count)``.

Sources: RabbitMQ quorum queues documentation (delivery-limit, overflow, single active consumer)
and ``rabbit_fifo`` (commands and effects); RabbitMQ message deduplication plugin (window).

Speed (issue 12): the values built for every message or batch (``Enqueue``, ``Settle``,
``Deliver``, ``Confirm``, the queue's ``_Msg``) are slotted dataclasses with an explicit
``__init__`` and not frozen: mypyc compiles an explicit ``__init__`` to C, while a frozen
dataclass's generated one runs as Python (``object.__setattr__`` per field: about 18x the cost per
object, measured). Treat them as immutable all the same.
"""

from __future__ import annotations

import base64
import json
import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field

__all__ = [
    "FifoConfig", "FifoQueue", "Enqueue", "Checkout", "Cancel", "Settle", "Return", "Discard",
    "Expire", "Purge", "Take", "Command", "Deliver", "Confirm", "Rejected", "DeadLetter", "Purged",
    "Effect", "encode", "decode", "Reader",
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


# ---------------------------------------------------------------- commands
@dataclass(slots=True, init=False, unsafe_hash=True)
class Enqueue:
    """A publish: ``header`` and ``body`` opaque bytes, ``dedup_key`` optional."""

    publisher: str
    seq: int
    dedup_key: str | None
    header: bytes
    body: bytes
    now_ms: int

    def __init__(self, publisher: str, seq: int, dedup_key: str | None, header: bytes, body: bytes,
                 now_ms: int) -> None:
        self.publisher = publisher
        self.seq = seq
        self.dedup_key = dedup_key
        self.header = header
        self.body = body
        self.now_ms = now_ms


@dataclass(frozen=True, slots=True)
class Checkout:
    """A consumer attaches with ``prefetch`` (0: unlimited) messages in flight."""

    consumer: str
    prefetch: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """A consumer goes (cancel or its channel/broker died): its messages return, redelivered."""

    consumer: str
    now_ms: int


@dataclass(slots=True, init=False, unsafe_hash=True)
class Settle:
    """Ack: the messages are gone."""

    consumer: str
    msg_ids: tuple[int, ...]

    def __init__(self, consumer: str, msg_ids: tuple[int, ...]) -> None:
        self.consumer = consumer
        self.msg_ids = msg_ids


@dataclass(frozen=True, slots=True)
class Return:
    """Requeue (nack/reject with requeue): back to the head, delivery count + 1."""

    consumer: str
    msg_ids: tuple[int, ...]
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class Discard:
    """Reject without requeue: dead-lettered with reason "rejected"."""

    consumer: str
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Expire:
    """The leader's clock reached ``now_ms``: expire ready messages past their TTL."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class Purge:
    """Drop every ready message."""


@dataclass(frozen=True, slots=True)
class Take:
    """Basic.Get: check message ``msg_id`` out to ``consumer`` if it is still ready."""

    consumer: str
    msg_id: int


Command = Enqueue | Checkout | Cancel | Settle | Return | Discard | Expire | Purge | Take


_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_Q = struct.Struct(">Q")
_QQ = struct.Struct(">QQ")
_IQ = struct.Struct(">iQ")
_CODES: dict[type, int] = {Enqueue: 1, Checkout: 2, Cancel: 3, Settle: 4, Return: 5, Discard: 6,
                           Expire: 7, Purge: 8, Take: 9}


def _str(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def _ids(ids: tuple[int, ...]) -> bytes:
    return _U32.pack(len(ids)) + struct.pack(f">{len(ids)}Q", *ids)


def encode(cmd: Command) -> bytes:
    """The bytes of ``cmd`` for a Raft entry. Layout (big-endian): type u8, then Enqueue:
    publisher (str), seq u64, now_ms u64, has_key u8 [key (str)], header length u32, header,
    body (the rest); Checkout: consumer (str), prefetch i32, now_ms u64; Cancel: consumer,
    now_ms u64; Settle / Discard: consumer, count u32, msg ids u64 each; Return: consumer,
    now_ms u64, count u32, ids; Expire: now_ms u64; Purge: nothing; Take: consumer, msg_id u64.
    str: u16 length, utf-8."""
    code = _U8.pack(_CODES[type(cmd)])
    if isinstance(cmd, Enqueue):
        key = b"\x00" if cmd.dedup_key is None else b"\x01" + _str(cmd.dedup_key)
        return b"".join((code, _str(cmd.publisher), _QQ.pack(cmd.seq, cmd.now_ms), key,
                         _U32.pack(len(cmd.header)), cmd.header, cmd.body))
    if isinstance(cmd, Checkout):
        return code + _str(cmd.consumer) + _IQ.pack(cmd.prefetch, cmd.now_ms)
    if isinstance(cmd, Cancel):
        return code + _str(cmd.consumer) + _Q.pack(cmd.now_ms)
    if isinstance(cmd, Settle | Discard):
        return code + _str(cmd.consumer) + _ids(cmd.msg_ids)
    if isinstance(cmd, Return):
        return code + _str(cmd.consumer) + _Q.pack(cmd.now_ms) + _ids(cmd.msg_ids)
    if isinstance(cmd, Expire):
        return code + _Q.pack(cmd.now_ms)
    if isinstance(cmd, Take):
        return code + _str(cmd.consumer) + _Q.pack(cmd.msg_id)
    return code


class Reader:
    """A cursor over encoded bytes (``take`` a struct, ``raw`` n bytes, ``str``, ``ids``);
    raises ``ValueError`` / ``struct.error`` past the end. Shared with ``cluster.quorum``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple:
        out = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return out

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("fifo command truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def str(self) -> str:
        (n,) = self.take(_U16)
        return self.raw(n).decode()

    def ids(self) -> tuple[int, ...]:
        (n,) = self.take(_U32)
        if self.pos + 8 * n > len(self.data):
            raise ValueError("fifo command truncated")
        out = struct.unpack_from(f">{n}Q", self.data, self.pos)
        self.pos += 8 * n
        return out


def decode(raw: bytes, start: int = 0) -> Command:
    """The command in ``raw`` from offset ``start`` on (``encode``'s layout; an offset spares
    the caller a copy of the body: ``cluster.quorum.machine``'s envelope). Raises ``ValueError``
    when malformed."""
    try:
        raw = bytes(raw)
        if raw[start:start + 1] == b"\x01":   # Enqueue, the hot path: no reader object
            (n,) = _U16.unpack_from(raw, start + 1)
            pos = start + 3 + n
            publisher = raw[start + 3:pos].decode()
            seq, now = _QQ.unpack_from(raw, pos)
            pos += 16
            key = None
            if raw[pos]:
                (k,) = _U16.unpack_from(raw, pos + 1)
                key = raw[pos + 3:pos + 3 + k].decode()
                pos += 2 + k
            (hlen,) = _U32.unpack_from(raw, pos + 1)
            pos += 5
            if pos + hlen > len(raw):
                raise ValueError("fifo command truncated")
            return Enqueue(publisher, seq, key, raw[pos:pos + hlen], raw[pos + hlen:], now)
        r = Reader(raw[start:] if start else raw)
        (code,) = r.take(_U8)
        if code == 1:
            publisher = r.str()
            seq, now = r.take(_QQ)
            (has_key,) = r.take(_U8)
            key = r.str() if has_key else None
            (hlen,) = r.take(_U32)
            header = r.raw(hlen)
            return Enqueue(publisher, seq, key, header, r.data[r.pos:], now)
        if code == 2:
            consumer = r.str()
            prefetch, now = r.take(_IQ)
            return Checkout(consumer, prefetch, now)
        if code == 3:
            consumer = r.str()
            return Cancel(consumer, r.take(_Q)[0])
        if code in (4, 6):
            consumer = r.str()
            return (Settle if code == 4 else Discard)(consumer, r.ids())
        if code == 5:
            consumer = r.str()
            (now,) = r.take(_Q)
            return Return(consumer, r.ids(), now)
        if code == 7:
            return Expire(r.take(_Q)[0])
        if code == 8:
            return Purge()
        if code == 9:
            consumer = r.str()
            return Take(consumer, r.take(_Q)[0])
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"not a fifo command: {exc}") from exc
    raise ValueError(f"not a fifo command: type {raw[:1]!r}")


# ---------------------------------------------------------------- effects
@dataclass(slots=True, init=False, unsafe_hash=True)
class Deliver:
    """Send message ``msg_id`` to ``consumer``; ``delivery_count`` > 0 means redelivered."""

    consumer: str
    msg_id: int
    header: bytes
    body: bytes
    delivery_count: int

    def __init__(self, consumer: str, msg_id: int, header: bytes, body: bytes,
                 delivery_count: int) -> None:
        self.consumer = consumer
        self.msg_id = msg_id
        self.header = header
        self.body = body
        self.delivery_count = delivery_count


@dataclass(slots=True, init=False, unsafe_hash=True)
class Confirm:
    """Publisher confirm (ack) of ``seq``."""

    publisher: str
    seq: int

    def __init__(self, publisher: str, seq: int) -> None:
        self.publisher = publisher
        self.seq = seq


@dataclass(frozen=True, slots=True)
class Rejected:
    """Publisher nack of ``seq`` (overflow reject-publish)."""

    publisher: str
    seq: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Dead-letter (or drop, without a dead-letter exchange) a message that left the queue."""

    reason: str
    header: bytes
    body: bytes
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Purged:
    """A purge removed ``count`` messages (the Purge-Ok message count). ``origin`` and ``seq``
    name the command that purged (set by ``cluster.quorum.machine``; "" and 0 from the queue
    itself), so the member that proposed it answers its client with this count."""

    count: int
    origin: str = ""
    seq: int = 0


Effect = Deliver | Confirm | Rejected | DeadLetter | Purged


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

    def _take(self, cmd: Take) -> None:
        ready = self.ready
        for i, m in enumerate(ready):
            if m.msg_id == cmd.msg_id:
                del ready[i]
                self.ready_bytes -= len(m.body)
                c = self.consumers.get(cmd.consumer)
                if c is None:
                    c = self.consumers[cmd.consumer] = _Consumer(-1)
                    self._active = None
                c.out[m.msg_id] = m
                return

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
