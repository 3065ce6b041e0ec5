"""A stream queue (``x-queue-type: stream``) over AMQP 0-9-1: an append-only log that every consumer
reads from an offset of its own choice, with RabbitMQ's semantics.

Owns: stream x-arguments (``stream_settings``), the ``x-stream-offset`` consumer argument
(``parse_offset_spec``), and ``StreamQueue``: the surface the broker core uses on a classic
``queues.queue.Queue`` (publish, add_consumer/remove_consumer, dispatch, ack/requeue/reject,
counters...) over a ``StreamLog``, with one read position per consumer.

Semantics ("RabbitMQ: Streams", checked against RabbitMQ 3.10):
* Publishing appends; every message is kept (delivery mode is irrelevant) until retention removes
  its segment. Offsets start at 0 and only grow.
* A consumer starts at its ``x-stream-offset`` (default "next") and then receives every later
  message in offset order, as its credit (prefetch) allows; each delivery carries the header
  ``x-stream-offset`` (long). Consumers are independent: each has its own position.
* Acks only return credit: nothing is removed by an ack; nack/reject (requeue or not) and a
  consumer's cancel leave the log unchanged and redeliver nothing.
* ``message_count`` is the number of messages in the log (RabbitMQ 3.10 reports that in
  Declare-Ok, ``list_queues`` and the API); Delete-Ok's count is 0 (the core's rule).
* The core refuses what RabbitMQ refuses before calling the queue: non-durable / exclusive /
  auto-delete declarations and queue arguments of other queue types (406), Basic.Get and no-ack
  consumers (540), consumers without a prefetch count (406).

Must not know: sockets, channels, frames, event loops. I/O happens inside ``StreamLog``. Time:
``clock()`` ms (monotonic, the core's timer), ``wall_clock()`` s since the epoch (timestamps).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..arguments import QueueSettings
from ..entry import QueueEntry
from ..errors import InvalidArgument, QueueDeleted
from ..message import Message
from ..protocols import Consumer, PublishResult
from ..queue_type import STREAM, SafeSource
from .format import parse_max_age
from .log import Cursor, StreamLog

if TYPE_CHECKING:
    from ..queue import Queue
    from .manager import StreamManager

__all__ = ["OffsetSpec", "StreamQueue", "StreamSettings", "parse_offset_spec", "stream_settings",
           "STREAM_QUEUE_ARGUMENTS", "DISALLOWED_STREAM_ARGUMENTS"]

#: Queue arguments a stream accepts (RabbitMQ 3.10 ``rabbit_stream_queue:capabilities``).
STREAM_QUEUE_ARGUMENTS = ("x-max-length-bytes", "x-queue-type", "x-max-age",
                          "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                          "x-queue-leader-locator")
#: Arguments of other queue types that a stream declaration refuses with 406 "invalid arg 'X' for
#: queue ... of queue type rabbit_stream_queue" (RabbitMQ checks the arguments it knows).
DISALLOWED_STREAM_ARGUMENTS = ("x-expires", "x-message-ttl", "x-dead-letter-exchange",
                               "x-dead-letter-routing-key", "x-max-length",
                               "x-max-in-memory-length", "x-max-in-memory-bytes",
                               "x-max-priority", "x-overflow", "x-queue-mode",
                               "x-single-active-consumer", "x-quorum-initial-group-size",
                               "x-delivery-limit", "x-max-segment-size")
DEFAULT_SEGMENT_BYTES = 64 << 20
_BATCH = 64  # messages a reader takes from the log at a time


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Stream arguments: ``max_bytes`` (x-max-length-bytes, None = keep), ``max_age_ms``
    (x-max-age in ms, None = keep), ``segment_bytes`` (x-stream-max-segment-size-bytes)."""

    max_bytes: int | None = None
    max_age_ms: int | None = None
    segment_bytes: int = DEFAULT_SEGMENT_BYTES


def stream_settings(arguments: Mapping[str, object] | None) -> StreamSettings:
    """Validate a stream declaration's arguments (after ``parse_arguments`` accepted them).

    Raises ``InvalidArgument(name, "not allowed")`` for an argument of another queue type (the
    core words RabbitMQ's "... of queue type rabbit_stream_queue" reply), ``InvalidArgument`` for a
    non-integer or negative x-stream-max-segment-size-bytes or a malformed x-max-age.
    """
    args = arguments or {}
    for name in DISALLOWED_STREAM_ARGUMENTS:
        if name in args:
            raise InvalidArgument(name, "not allowed")
    max_bytes = args.get("x-max-length-bytes")
    age = args.get("x-max-age")
    seg = args.get("x-stream-max-segment-size-bytes", DEFAULT_SEGMENT_BYTES)
    if isinstance(seg, bool) or not isinstance(seg, int) or seg < 0:
        raise InvalidArgument("x-stream-max-segment-size-bytes",
                              f"expected integer, got {type(seg).__name__}")
    age_ms = None
    if age is not None:
        text = age.decode() if isinstance(age, bytes) else age
        try:
            age_ms = parse_max_age(str(text))
        except ValueError:
            raise InvalidArgument("x-max-age", "invalid_max_age") from None
    return StreamSettings(int(max_bytes) if max_bytes is not None else None,  # type: ignore[call-overload]
                          age_ms, seg or DEFAULT_SEGMENT_BYTES)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a consumer starts: ``kind`` is "first", "last", "next", "offset" (``value`` = the
    offset), "timestamp" (``value`` = ms since the epoch) or "interval" (``value`` = ms before the
    moment of attaching)."""

    kind: str
    value: int = 0


def parse_offset_spec(value: object) -> OffsetSpec:
    """The ``x-stream-offset`` consumer argument: "first" | "last" | "next" | an integer offset (a
    negative one means "first", as RabbitMQ) | an AMQP timestamp (``datetime``, seconds
    precision) | an interval string such as "1h", "30s", "7D" (messages newer than that). None
    means "next". Raises ``ValueError`` otherwise (the core replies 406 PRECONDITION_FAILED).
    Source: "RabbitMQ: Streams" (consuming, x-stream-offset)."""
    if value is None:
        return OffsetSpec("next")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return OffsetSpec(value)
        try:
            return OffsetSpec("interval", parse_max_age(value))
        except ValueError:
            raise ValueError(f"invalid_stream_offset_arg {value!r}") from None
    if isinstance(value, bool):
        raise ValueError("invalid_stream_offset_arg (bool)")
    if isinstance(value, int):
        return OffsetSpec("first") if value < 0 else OffsetSpec("offset", value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return OffsetSpec("timestamp", int(value.timestamp()) * 1000)
    raise ValueError(f"invalid_stream_offset_arg ({type(value).__name__})")


class _Reader:
    __slots__ = ("consumer", "cursor", "batch", "batch_offset", "batch_i", "removed")

    def __init__(self, consumer: Consumer, offset: int) -> None:
        self.consumer = consumer
        self.cursor = Cursor(offset)
        self.batch: list[Message] = []
        self.batch_offset = 0
        self.batch_i = 0
        self.removed = False


class StreamQueue:
    """A stream queue (see module doc) with the classic ``Queue``'s interface as the core uses it.

    Construction: ``StreamQueue(name, settings, log, *, arguments, clock, wall_clock)``;
    ``settings`` is the ``QueueSettings`` of ``parse_arguments`` (kept for the core), ``log`` an
    open ``StreamLog`` whose retention is already configured. The queue owns the log: ``delete()``
    removes its files. Always durable, never exclusive or auto-delete.
    """

    is_stream = True

    __slots__ = ("name", "durable", "exclusive_owner", "auto_delete", "arguments", "settings",
                 "dedup", "had_consumers", "log", "_clock", "_wall_clock", "_readers",
                 "_dispatching", "_again", "_deleted", "_unacked", "safe_source")

    def __init__(self, name: str, settings: QueueSettings, log: StreamLog, *,
                 arguments: Mapping[str, object] | None = None, clock: Callable[[], int],
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.durable = True
        self.exclusive_owner: object | None = None
        self.auto_delete = False
        self.arguments = dict(arguments) if arguments else {}
        self.settings = settings
        self.dedup = None
        #: True once any consumer was added.
        self.had_consumers = False
        #: The stream's log (offsets, segments, retention).
        self.log = log
        #: Whose group commits make publishes safe (the broker's ``StreamManager``); None: safe
        #: at once.
        self.safe_source: StreamManager | None = None
        self._clock = clock
        self._wall_clock = wall_clock
        self._readers: dict[int, _Reader] = {}
        self._dispatching = False
        self._again = False
        self._deleted = False
        self._unacked = 0

    #: What a stream supports (the queue-type seam, ``queues.queue_type``).
    capabilities = STREAM

    # --- counters -----------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Messages in the log (first_offset .. next_offset): what RabbitMQ 3.10 reports for a
        stream in Declare-Ok, ``list_queues`` and the API (checked by interop_tests)."""
        return self.log.length

    @property
    def message_bytes(self) -> int:
        """0: the log is on disk (the memory alarm counts in-memory queues only)."""
        return 0

    def in_memory(self) -> tuple[int, int]:
        """(0, 0): no message is held in RAM as an object (the log is on disk, read through a
        cache of a few MiB), so the memory alarm counts each at the paged overhead
        (``Broker.queue_memory``), not as a message in memory: a stream of any length does not
        raise it."""
        return 0, 0

    @property
    def length(self) -> int:
        """Messages in the log now (first_offset .. next_offset)."""
        return self.log.length

    @property
    def unacked_count(self) -> int:
        """Deliveries not yet acked/nacked (they only hold their consumer's credit)."""
        return self._unacked

    @property
    def consumer_count(self) -> int:
        """Registered consumers."""
        return len(self._readers)

    @property
    def active_consumer(self) -> None:
        """Always None (no single active consumer on streams here)."""
        return None

    @property
    def deleted(self) -> bool:
        """True once ``delete()`` has been called."""
        return self._deleted

    def consumers(self) -> tuple[Consumer, ...]:
        """The registered consumers in registration order."""
        return tuple(r.consumer for r in self._readers.values())

    def ready_entries(self) -> list[QueueEntry]:
        """Always empty (nothing is "ready" in a stream)."""
        return []

    def unacked_entries(self) -> list[QueueEntry]:
        """Always empty (the core's channels hold the delivered entries)."""
        return []

    def consumer_offset(self, consumer: Consumer) -> int | None:
        """The next offset ``consumer`` will receive, None when it is not registered."""
        reader = self._readers.get(id(consumer))
        if reader is None:
            return None
        if reader.batch_i < len(reader.batch):
            return reader.batch_offset + reader.batch_i
        return reader.cursor.offset

    # --- publish / dispatch -------------------------------------------------------------------
    def publish(self, message: Message) -> PublishResult:
        """Append ``message`` to the log and deliver it to consumers at the tail with credit.

        Always ``ROUTED``. Raises ``QueueDeleted`` after ``delete()``, ``OSError`` from the log."""
        if self._deleted:
            raise QueueDeleted(self.name)
        self.log.append(message)
        if self._readers:
            self.dispatch()
        return PublishResult.ROUTED

    def publish_wait(self) -> tuple[SafeSource, int] | None:
        """The group commit the last publish waits for: ``(manager, generation)`` while a syncer
        runs (``safe_source``, set by the core), None otherwise (safe at once)."""
        source = self.safe_source
        if source is None or not source.syncing:
            return None
        return source, source.next_generation

    def dispatch(self) -> int:
        """Deliver to every consumer that can take more, each from its own position, in offset
        order; returns how many deliveries were made. A call made from inside a delivery callback
        is folded into the running one."""
        if self._deleted or not self._readers:
            return 0
        if self._dispatching:
            self._again = True
            return 0
        self._dispatching = True
        delivered = 0
        log = self.log
        # consumers take a ``Queue``; a stream has the classic queue's interface as the core uses it
        as_queue = cast("Queue", self)
        try:
            again = True
            while again:
                self._again = False
                for reader in list(self._readers.values()):
                    if reader.removed:
                        continue
                    consumer = reader.consumer
                    while consumer.can_deliver():
                        if reader.batch_i >= len(reader.batch):
                            batch = log.read(reader.cursor, _BATCH)
                            if not batch:
                                reader.batch = []
                                reader.batch_i = 0
                                break
                            reader.batch = batch
                            reader.batch_offset = reader.cursor.offset - len(batch)
                            reader.batch_i = 0
                        i = reader.batch_i
                        reader.batch_i = i + 1
                        entry = QueueEntry(reader.batch[i], reader.batch_offset + i)
                        entry.delivery_count = 1
                        self._unacked += 1
                        consumer.deliver(as_queue, entry)
                        delivered += 1
                        if reader.removed or self._deleted:
                            break
                    if self._deleted:
                        return delivered
                again = self._again
        finally:
            self._dispatching = False
        return delivered

    def get(self, no_ack: bool) -> QueueEntry | None:
        """Basic.Get is not served by streams (the core answers 540 NOT_IMPLEMENTED before calling
        this); returns None."""
        return None

    # --- settlement: credit only --------------------------------------------------------------
    def _settled(self, n: int) -> None:
        self._unacked = max(0, self._unacked - n)

    def ack(self, entry: QueueEntry) -> None:
        """Basic.Ack: the delivery is settled (the message stays in the log)."""
        self._settled(1)

    def ack_many(self, entries: list[QueueEntry]) -> None:
        """Basic.Ack with ``multiple``: every delivery settled (nothing leaves the log)."""
        self._settled(len(entries))

    def requeue(self, entry: QueueEntry) -> None:
        """Nack/reject with requeue, cancel, channel close: settled, nothing is redelivered."""
        self._settled(1)

    def requeue_many(self, entries: Iterable[QueueEntry]) -> None:
        """As ``requeue`` for each entry (RabbitMQ streams do not requeue)."""
        self._settled(sum(1 for _ in entries))

    def reject(self, entry: QueueEntry) -> None:
        """Nack/reject without requeue: settled; streams have no dead-lettering."""
        self._settled(1)

    def restore(self, message: Message, redelivered: bool) -> None:
        """Not used: a stream's messages come back from its own log, never from the message store.
        A stray stored message for a stream's name is ignored."""
        return None

    # --- housekeeping -------------------------------------------------------------------------
    def purge(self) -> int:
        """Queue.Purge: RabbitMQ refuses it on streams (540 NOT_IMPLEMENTED); here a no-op
        returning 0 unless the core refuses it first."""
        return 0

    def expire(self) -> int:
        """Apply retention (x-max-age, x-max-length-bytes) now; returns removed segments."""
        if self._deleted:
            return 0
        return self.log.apply_retention(self._wall_clock())

    def next_expiry(self) -> int | None:
        """``clock()`` now when age retention is due (the core's timer then calls ``expire()``),
        else None. Cheap: one comparison per call."""
        deadline = self.log.age_deadline()
        if deadline is not None and self._wall_clock() >= deadline:
            return self._clock()
        return None

    def delete(self) -> list[QueueEntry]:
        """Queue.Delete: unregister consumers, remove the log's files; returns [] (Delete-Ok's
        message-count is 0 for streams, as RabbitMQ). Idempotent."""
        if self._deleted:
            return []
        self._deleted = True
        for reader in self._readers.values():
            reader.removed = True
        self._readers.clear()
        self.log.delete()
        return []

    def close(self) -> None:
        """Broker shutdown: flush, fsync and close the log (files kept)."""
        if not self._deleted:
            self.log.close()

    # --- consumers ----------------------------------------------------------------------------
    def start_offset(self, spec: OffsetSpec) -> int:
        """The first offset a consumer attaching now with ``spec`` receives. "last" is the last
        message (RabbitMQ: the last chunk), a numeric offset is clamped to the log, a timestamp
        picks the first message appended at or after it."""
        log = self.log
        kind = spec.kind
        if kind == "first":
            return log.first_offset
        if kind == "next":
            return log.next_offset
        if kind == "last":
            return max(log.first_offset, log.next_offset - 1)
        if kind == "offset":
            return min(max(spec.value, log.first_offset), log.next_offset)
        if kind == "interval":
            return log.offset_for_timestamp(int(self._wall_clock() * 1000) - spec.value)
        return log.offset_for_timestamp(spec.value)

    def add_consumer(self, consumer: Consumer, offset: OffsetSpec | None = None) -> None:
        """Register ``consumer`` at ``offset`` (default: its ``arguments["x-stream-offset"]``, else
        "next"), then dispatch. Raises ``QueueDeleted``, ``ValueError`` when already registered or
        for an invalid x-stream-offset (the core validates it first)."""
        if self._deleted:
            raise QueueDeleted(self.name)
        key = id(consumer)
        if key in self._readers:
            raise ValueError(f"consumer {consumer.tag!r} already registered")
        if offset is None:
            args = getattr(consumer, "arguments", None) or {}
            offset = parse_offset_spec(args.get("x-stream-offset"))
        self._readers[key] = _Reader(consumer, self.start_offset(offset))
        self.had_consumers = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> bool:
        """Unregister ``consumer``; False when unknown. Its unacked deliveries stay with the core
        (settling them later only adjusts ``unacked_count``)."""
        reader = self._readers.pop(id(consumer), None)
        if reader is None:
            return False
        reader.removed = True
        return True

    def __repr__(self) -> str:
        return (f"StreamQueue({self.name!r}, offsets={self.log.first_offset}.."
                f"{self.log.next_offset}, consumers={len(self._readers)})")
