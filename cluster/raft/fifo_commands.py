"""The quorum queue state machine's commands and effects, and the bytes a command is in a Raft
entry (``encode`` / ``decode``): the vocabulary of ``cluster.raft.fifo``, which applies them and
re-exports every name here. Pure: no I/O.

A message is identified by the Raft index of its Enqueue (``msg_id``). Commands::

    Enqueue(publisher, seq, dedup_key, header, body, now_ms, high, ttl_ms)
        -> Confirm | Rejected, maybe Deliver (``high``: priority > 4; ``ttl_ms``: the message's
        own expiration, -1 none)
    Checkout(consumer, prefetch, now_ms) / Cancel(consumer, now_ms)
        (a Checkout of a known consumer changes its credit; prefetch < 0 suspends it: it keeps
        what it holds and gets nothing new -- a Basic.Cancel whose deliveries are still unacked)
    Settle(consumer, msg_ids) (ack), Return(consumer, msg_ids) (requeue, delivery count + 1),
    Discard(consumer, msg_ids) (reject without requeue: dead-letter), Expire(now_ms), Purge(),
    Dequeue(consumer, settle, now_ms) (Basic.Get: the first ready message, checked out to the
        consumer -- created suspended, so it never gets deliveries -- or, with ``settle``
        (no-ack), removed; as ``rabbit_fifo``'s ``{dequeue, settled | unsettled}`` checkout)
    Take(consumer, msg_id) (the Basic.Get of logs written before Dequeue: that message, if still
        ready; kept so that such logs replay the same)
    DlxSettle(msg_ids) (at-least-once dead-lettering: those dead letters were confirmed by their
        target queues)

Effects: ``Deliver(consumer, msg_id, header, body, delivery_count)`` (``delivery_count`` > 0 is
a redelivery: the ``x-delivery-count`` header), ``Confirm(publisher, seq)`` (unless
``FifoQueue.confirms`` is False), ``Rejected(publisher, seq)`` (overflow reject-publish: nack),
``DeadLetter(reason, header, body, delivery_count, msg_id)`` (``msg_id`` > 0: kept until a
``DlxSettle``, at least once) with reason "expired" | "maxlen" |
"rejected" | "delivery_limit", ``Purged(count)``, ``Dequeued(consumer, msg_id, header, body,
delivery_count, remaining)`` (``msg_id`` 0: the queue had no ready message).

Sources: ``rabbit_fifo`` (commands and effects), RabbitMQ "Quorum Queues".

Speed (issue 12): the values built for every message or batch (``Enqueue``, ``Settle``,
``Deliver``, ``Confirm``) are slotted dataclasses with an explicit ``__init__`` and not frozen:
mypyc compiles an explicit ``__init__`` to C, while a frozen dataclass's generated one runs as
Python (``object.__setattr__`` per field: about 18x the cost per object, measured). Treat them as
immutable all the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "Enqueue", "Checkout", "Cancel", "Settle", "Return", "Discard", "Expire", "Purge", "Take",
    "Dequeue", "DlxSettle", "Command", "Deliver", "Confirm", "Rejected", "DeadLetter", "Purged", "Dequeued",
    "Effect", "encode", "decode", "Reader",
]


# ---------------------------------------------------------------- commands
@dataclass(slots=True, init=False, unsafe_hash=True)
class Enqueue:
    """A publish: ``header`` and ``body`` opaque bytes, ``dedup_key`` optional; ``high``: the
    message's priority property is > 4 (RabbitMQ 4.0's two levels); ``ttl_ms``: its own
    ``expiration`` (ms, -1: none), read by the proposer so that every replica agrees."""

    publisher: str
    seq: int
    dedup_key: str | None
    header: bytes
    body: bytes
    now_ms: int
    high: bool
    ttl_ms: int

    def __init__(self, publisher: str, seq: int, dedup_key: str | None, header: bytes, body: bytes,
                 now_ms: int, high: bool = False, ttl_ms: int = -1) -> None:
        self.publisher = publisher
        self.seq = seq
        self.dedup_key = dedup_key
        self.header = header
        self.body = body
        self.now_ms = now_ms
        self.high = high
        self.ttl_ms = ttl_ms


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


@dataclass(frozen=True, slots=True)
class Dequeue:
    """Basic.Get: the first ready message to ``consumer`` (``settle``: no-ack, removed at once)."""

    consumer: str
    settle: bool
    now_ms: int


@dataclass(frozen=True, slots=True)
class DlxSettle:
    """At-least-once dead-lettering: the dead-lettered messages ``msg_ids`` were confirmed by
    every queue their dead-letter exchange routed them to; they leave the queue's log."""

    msg_ids: tuple[int, ...]


Command = (Enqueue | Checkout | Cancel | Settle | Return | Discard | Expire | Purge | Take
           | Dequeue | DlxSettle)


_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_Q = struct.Struct(">Q")
_QQ = struct.Struct(">QQ")
_IQ = struct.Struct(">iQ")
_BQ = struct.Struct(">Bq")
_CODES: dict[type, int] = {Enqueue: 1, Checkout: 2, Cancel: 3, Settle: 4, Return: 5, Discard: 6,
                           Expire: 7, Purge: 8, Take: 9, Dequeue: 10, DlxSettle: 12}
#: An Enqueue with a priority or its own TTL (code 1 stays the one of plain publishes, so that
#: logs written before priorities replay unchanged and plain publishes cost no more bytes).
_ENQUEUE_EXT = 11


def _str(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def _ids(ids: tuple[int, ...]) -> bytes:
    return _U32.pack(len(ids)) + struct.pack(f">{len(ids)}Q", *ids)


def encode(cmd: Command) -> bytes:
    """The bytes of ``cmd`` for a Raft entry. Layout (big-endian): type u8, then Enqueue:
    publisher (str), seq u64, now_ms u64, has_key u8 [key (str)], header length u32, header,
    body (the rest) -- type 11 instead of 1 when ``high`` or ``ttl_ms`` >= 0, with high u8 and
    ttl_ms i64 after now_ms; Checkout: consumer (str), prefetch i32, now_ms u64; Cancel: consumer,
    now_ms u64; Settle / Discard: consumer, count u32, msg ids u64 each; Return: consumer,
    now_ms u64, count u32, ids; Expire: now_ms u64; Purge: nothing; Take: consumer, msg_id u64;
    Dequeue: consumer, settle u8, now_ms u64; DlxSettle (12): count u32, ids.
    str: u16 length, utf-8."""
    if isinstance(cmd, Enqueue):
        key = b"\x00" if cmd.dedup_key is None else b"\x01" + _str(cmd.dedup_key)
        if cmd.high or cmd.ttl_ms >= 0:
            return b"".join((_U8.pack(_ENQUEUE_EXT), _str(cmd.publisher),
                             _QQ.pack(cmd.seq, cmd.now_ms), _BQ.pack(cmd.high, cmd.ttl_ms), key,
                             _U32.pack(len(cmd.header)), cmd.header, cmd.body))
        return b"".join((b"\x01", _str(cmd.publisher), _QQ.pack(cmd.seq, cmd.now_ms), key,
                         _U32.pack(len(cmd.header)), cmd.header, cmd.body))
    code = _U8.pack(_CODES[type(cmd)])
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
    if isinstance(cmd, Dequeue):
        return code + _str(cmd.consumer) + _U8.pack(cmd.settle) + _Q.pack(cmd.now_ms)
    if isinstance(cmd, DlxSettle):
        return code + _ids(cmd.msg_ids)
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
        code0 = raw[start]
        if code0 == 1 or code0 == _ENQUEUE_EXT:   # Enqueue, the hot path: no reader object
            (n,) = _U16.unpack_from(raw, start + 1)
            pos = start + 3 + n
            publisher = raw[start + 3:pos].decode()
            seq, now = _QQ.unpack_from(raw, pos)
            pos += 16
            high, ttl = False, -1
            if code0 == _ENQUEUE_EXT:
                hb, ttl = _BQ.unpack_from(raw, pos)
                high = hb != 0
                pos += _BQ.size
            key = None
            if raw[pos]:
                (k,) = _U16.unpack_from(raw, pos + 1)
                key = raw[pos + 3:pos + 3 + k].decode()
                pos += 2 + k
            (hlen,) = _U32.unpack_from(raw, pos + 1)
            pos += 5
            if pos + hlen > len(raw):
                raise ValueError("fifo command truncated")
            return Enqueue(publisher, seq, key, raw[pos:pos + hlen], raw[pos + hlen:], now,
                           high, ttl)
        r = Reader(raw[start:] if start else raw)
        (code,) = r.take(_U8)
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
        if code == 10:
            consumer = r.str()
            (settle,) = r.take(_U8)
            return Dequeue(consumer, bool(settle), r.take(_Q)[0])
        if code == 12:
            return DlxSettle(r.ids())
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
    """Dead-letter (or drop, without a dead-letter exchange) a message that left the queue.
    ``msg_id`` 0: at most once (gone from the queue); else at least once: the message stays in
    the queue's dead-letter set until a ``DlxSettle`` of ``msg_id``."""

    reason: str
    header: bytes
    body: bytes
    delivery_count: int
    msg_id: int = 0


@dataclass(frozen=True, slots=True)
class Purged:
    """A purge removed ``count`` messages (the Purge-Ok message count). ``origin`` and ``seq``
    name the command that purged (set by ``cluster.quorum.machine``; "" and 0 from the queue
    itself), so the member that proposed it answers its client with this count."""

    count: int
    origin: str = ""
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Dequeued:
    """A Basic.Get's answer: message ``msg_id`` (0: none was ready) now checked out to
    ``consumer`` (or gone, for a settled Dequeue), ``remaining`` ready after it (Get-Ok's
    message_count). ``origin`` / ``seq``: the command's, as for ``Purged``."""

    consumer: str
    msg_id: int
    header: bytes
    body: bytes
    delivery_count: int
    remaining: int
    origin: str = ""
    seq: int = 0


Effect = Deliver | Confirm | Rejected | DeadLetter | Purged | Dequeued
