"""A replicated stream as the broker core sees it on one member: ``queues.stream.StreamQueue``
whose log is written only by its Raft group (``cluster.stream``).

Owns: turning a publish into an Append for the group (confirm token: its seq, safe once this
member's replica applied it -- committed, so a majority holds it); writing the records the group
applies into this member's segment files (``queues.stream.log``), so consumers here read this
member's replica with every ``StreamQueue`` semantic (offsets, ``x-stream-offset``, credit);
noticing when this replica's segments lack records the group has applied (a snapshot installed
past them, files lost) and fetching them from another member (``want_fetch`` / ``records_from`` /
``on_records``, carried by ``amqp_broker.clustering.stream``); on the leader, the retention point
(x-max-length-bytes, x-max-age) proposed into the log so that every member drops the same
segments; compacting the Raft log once the segments hold what a snapshot covers.
Must not know: sockets, Raft messages, peer links.

Counts: ``message_count`` is the number of messages in the stream, the same on every member once
applied (RabbitMQ 3.10 reports that in Declare-Ok, ``list_queues`` and the API; checked by
``interop_tests/test_streams.py``).
Sources: RabbitMQ "Streams"; "Stream Queues" in RabbitMQ's clustering docs (replicas, leader);
Raft paper §7.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cluster.stream.group import StreamGroup
from cluster.stream.machine import Appended, Effect, Retained, encode_append
from cluster.stream.observer import ObserverGroup, Tail, decode_tail, encode_tail
from queues.errors import QueueDeleted
from queues.message import Message
from queues.protocols import PublishResult
from queues.queue_type import Capabilities, SafeWaiter
from queues.stream import format as fmt
from queues.stream.log import StreamLog, short_string
from queues.stream.manager import StreamManager
from queues.stream.queue import STREAM, OffsetSpec, StreamQueue, StreamSettings

__all__ = ["ReplicatedStream", "REPLICATED_STREAM", "FETCH_RETRY_MS", "FETCH_BYTES", "OBSERVE_MS",
           "encode_records", "decode_records"]

log = logging.getLogger(__name__)

#: A stream's capabilities, replicated (the core sends the declaration with its group).
REPLICATED_STREAM: Capabilities = replace(STREAM, replicated=True)
#: A fetch that got no answer is asked again after this long (ms).
FETCH_RETRY_MS = 500
#: A broker outside the members asks for news at most this often (ms).
OBSERVE_MS = 100
#: Bytes of records one fetch answer carries (at least one record).
FETCH_BYTES = 512 << 10
_HEAD = struct.Struct(">QB")   # first offset, reset flag


def encode_records(first: int, reset: bool, tail: Tail, records: list[fmt.Record]) -> bytes:
    """A fetch answer: ``first`` u64 (the answering replica's first offset when ``reset``, else
    the first record's), ``reset`` u8 (the asker is behind the answerer's head: start over at
    ``first``), the answerer's ``Tail`` (``cluster.stream.observer``), then the records in their
    segment-file encoding (none when the answerer has nothing from there)."""
    return b"".join((_HEAD.pack(first, 1 if reset else 0), encode_tail(tail),
                     *(fmt.encode_record(r.offset, r.timestamp, r.routing, r.header, r.body)
                       for r in records)))


def decode_records(payload: bytes, next_offset: int
                   ) -> tuple[int, bool, Tail, list[fmt.Record]]:
    """(first, reset, tail, records) of ``encode_records`` bytes; records are decoded from
    ``next_offset`` on (``first`` when ``reset``); decoding stops at the first bad one. Raises
    ``ValueError`` for a payload shorter than its head."""
    if len(payload) < _HEAD.size:
        raise ValueError("short stream records payload")
    first, reset = _HEAD.unpack_from(payload)
    tail, pos = decode_tail(payload, _HEAD.size)
    start = first if reset else next_offset
    records, _stop = fmt.scan_records(payload, pos, 0, start)
    return first, bool(reset), tail, records


class ReplicatedStream(StreamQueue):
    """Stream ``name`` of ``vhost`` on this member: ``log`` is this member's replica's segments (opened with
    no retention of its own), ``group`` its Raft group, ``stream`` the declared retention.

    ``execute(actions)`` runs group actions (the quorum runtime); ``wake(queue)`` asks for a
    ``dispatch`` after the current batch of input; ``now_ms()`` the Raft clock, ``wall_ms()``
    the wall clock (record times, age retention); ``manager`` the broker's stream logs (their
    group commit tells when records are synced); ``fetch(offset)`` asks another member for
    records from ``offset``; ``on_delete(queue)`` lets the runtime close the replica."""

    __slots__ = ("vhost_name", "group", "stream", "manager", "_execute", "_wake", "_now_ms", "_wall_ms",
                 "_fetch", "_on_delete", "_last_token", "_waiters", "_reported", "_fetch_ms",
                 "_mark", "_watching", "_segments_seen")

    capabilities = REPLICATED_STREAM

    def __init__(self, vhost: str, name: str, settings: Any, log_: StreamLog,
                 group: StreamGroup | ObserverGroup,
                 stream: StreamSettings, *, arguments: dict, manager: StreamManager,
                 execute: Callable[[list[Any]], None], wake: Callable[[Any], None],
                 now_ms: Callable[[], int], wall_ms: Callable[[], int],
                 fetch: Callable[[int], None],
                 on_delete: Callable[[Any], None] | None = None) -> None:
        super().__init__(name, settings, log_, arguments=arguments, clock=now_ms,
                         wall_clock=lambda: wall_ms() / 1000)
        self.vhost_name = vhost
        self.group = group
        self.stream = stream
        self.manager = manager
        self._execute = execute
        self._wake = wake
        self._now_ms = now_ms
        self._wall_ms = wall_ms
        self._fetch = fetch
        self._on_delete = on_delete
        self._last_token = 0
        self._waiters: list[SafeWaiter] = []
        self._reported = 0
        self._fetch_ms = -FETCH_RETRY_MS
        self._mark: tuple[int, int, bytes] | None = None   # (generation, index, snapshot)
        self._watching = False
        self._segments_seen = log_.segment_count

    # ------------------------------------------------------------------ figures
    @property
    def message_count(self) -> int:
        """Messages in the stream as this member's replica applied them (RabbitMQ reports the
        stream's length for streams)."""
        return self.group.machine.length

    def start_offset(self, spec: OffsetSpec) -> int:
        """As ``StreamQueue.start_offset`` but against the stream as the group applied it: a
        replica still catching up (its segments behind its group) starts a consumer at the
        offset asked for, "next" and "last" at the stream's end, and the consumer waits for the
        records to arrive here. A replica with entries in its Raft log it has not applied yet (a
        member just restarted: its segments may have lost the records it had buffered, kill -9)
        does not know the stream's end, nor does a broker outside the members before one answers
        it: an offset past its segments is kept, not clamped down to them (a consumer resuming
        after the last offset it read would get records again)."""
        end = self.group.machine.next_offset
        log_ = self.log
        if spec.kind == "offset" and spec.value > max(end, log_.next_offset) and \
                self._applying():
            return spec.value
        if end <= log_.next_offset:
            return super().start_offset(spec)
        kind = spec.kind
        if kind == "next":
            return end
        if kind == "last":
            return end - 1
        if kind == "offset":
            return min(max(spec.value, log_.first_offset), end)
        return super().start_offset(spec)

    def _applying(self) -> bool:
        """Whether this member's Raft log holds entries its machine has not applied yet; on a
        broker outside the members, whether no member has told it the stream's end yet."""
        group = self.group
        if isinstance(group, ObserverGroup):
            return not group.informed
        return group.node.log.last_index > group.machine_index

    # ------------------------------------------------------------------ publishing, confirms
    def publish(self, message: Message) -> PublishResult:
        """Queue an Append of ``message`` for the group; ROUTED. Raises ``QueueDeleted``."""
        if self._deleted:
            raise QueueDeleted(self.name)
        routing = message.routing_raw
        if routing is None:
            routing = short_string(message.exchange) + short_string(message.routing_key)
        self._last_token = self.group.submit(
            encode_append(self._wall_ms(), routing, message.header_payload, message.body))
        self._wake(self)
        return PublishResult.ROUTED

    def publish_wait(self) -> tuple[ReplicatedStream, int]:  # type: ignore[override]
        """(this queue, the token of the publish just made): safe once applied here."""
        return self, self._last_token

    def watch(self, waiter: SafeWaiter) -> None:
        """Report confirm progress to ``waiter`` (``SafeSource``)."""
        if waiter not in self._waiters:
            self._waiters.append(waiter)
        applied = self.group.applied
        if applied and waiter.advance_safe(self, applied):
            self._waiters.remove(waiter)

    def _progress(self) -> None:
        applied = self.group.applied
        if applied != self._reported:
            self._reported = applied
            if self._waiters:
                self._waiters = [w for w in self._waiters if not w.advance_safe(self, applied)]

    def dispatch(self) -> int:
        """Send the queued Appends (``flush``), then deliver to consumers with credit."""
        if self._deleted:
            return 0
        actions = self.group.flush(self._now_ms())
        if actions:
            self._execute(actions)
        return super().dispatch()

    # ------------------------------------------------------------------ applied effects
    def on_effects(self, effects: list[Effect]) -> None:
        """Effects of entries this member's replica applied: records written to the segments
        (those the segments already hold are skipped: re-applied after a restart; a gap is
        fetched), retention; then confirm progress, the snapshot mark and, on the leader, the
        size retention after a new segment."""
        log_ = self.log
        wrote = False
        for eff in effects:
            if isinstance(eff, Appended):
                nxt = log_.next_offset
                if eff.offset == nxt:
                    exchange, key = fmt.decode_routing(eff.routing)
                    msg = Message(exchange, key, eff.header, eff.body)
                    msg.routing_raw = eff.routing
                    log_.append(msg, eff.timestamp)
                    wrote = True
                elif eff.offset > nxt:
                    self.want_fetch()
            elif isinstance(eff, Retained):
                self._retained(eff.first)
        self._progress()
        if wrote:
            self._note_written()

    def _retained(self, first: int) -> None:
        log_ = self.log
        if log_.next_offset < first:   # all of ours is before the new head: start over there
            log_.reset(first)
        else:
            log_.truncate_head(first)

    def _note_written(self) -> None:
        generation = self.manager.next_generation
        if self._mark is None or self._mark[0] != generation:
            group = self.group
            self._mark = (generation, group.machine_index, group.machine.snapshot())
            if not self._watching:
                self._watching = True
                self.manager.watch(self)
        if self._readers:
            self._wake(self)
        if self.log.segment_count != self._segments_seen:
            self._segments_seen = self.log.segment_count
            if self.stream.max_bytes is not None and self.group.is_leader:
                self._retain()

    def advance_safe(self, source: object, up_to: int, failed: object = ()) -> bool:
        """The stream logs' group commit synced ``up_to``: once it covers the snapshot mark, the
        Raft log may be compacted there (``StreamGroup.durable``). True: stop watching."""
        mark = self._mark
        if mark is None or self._deleted:
            self._watching = False
            return True
        if mark[0] > up_to:
            return False
        self._mark = None
        self._watching = False
        actions = self.group.durable(mark[1], mark[2])
        if actions:
            self._execute(actions)
        return True

    # ------------------------------------------------------------------ retention (leader)
    def _retain(self) -> None:
        point = self.log.retention_point(self.stream.max_bytes, self.stream.max_age_ms,
                                         self._wall_ms() / 1000)
        actions = self.group.retain(point, self._now_ms())
        if actions:
            self._execute(actions)

    def expire(self) -> int:
        """The core's poll: on the leader, propose the retention point when it moved; on any
        member, fetch what this replica lacks; on a broker outside the members, re-send stale
        publishes and ask a member what is new (every ``OBSERVE_MS``). Returns 0."""
        if self._deleted:
            return 0
        group = self.group
        if isinstance(group, ObserverGroup):
            actions = group.tick(self._now_ms())
            if actions:
                self._execute(actions)
            self.want_fetch(OBSERVE_MS)
            return 0
        if group.is_leader and (self.stream.max_age_ms is not None or
                                self.stream.max_bytes is not None):
            self._retain()
        if self.log.next_offset < group.machine.next_offset:
            self.want_fetch()
        return 0

    def next_expiry(self) -> int | None:
        """``clock()`` now when ``expire`` has work: leading with age retention, records
        missing here, or no replica here (always); else None."""
        if self._deleted:
            return None
        group = self.group
        if not group.holds_replica or (group.is_leader and self.stream.max_age_ms is not None) \
                or self.log.next_offset < group.machine.next_offset:
            return self._now_ms()
        return None

    # ------------------------------------------------------------------ catching up
    def want_fetch(self, interval: int = FETCH_RETRY_MS) -> None:
        """Ask a member for the records from this replica's next offset, at most every
        ``interval`` ms while no answer comes."""
        now = self._now_ms()
        if now - self._fetch_ms >= interval:
            self._fetch_ms = now
            self._fetch(self.log.next_offset)

    def records_from(self, offset: int, origin: str = "") -> bytes | None:
        """The answer to another broker's fetch from ``offset`` (``encode_records``): this
        replica's ``Tail`` (with how far ``origin``'s Appends were applied) and its records
        from there, or a reset to its first offset when ``offset`` is before it. None after
        ``delete()``."""
        log_ = self.log
        if self._deleted:
            return None
        group = self.group
        machine = group.machine
        tail = Tail(machine.next_offset, machine.first_offset,
                    machine.next_seq.get(origin, 1) - 1 if origin else 0, group.leader or "")
        if offset >= log_.next_offset:
            return encode_records(offset, False, tail, [])
        if offset < log_.first_offset:
            return encode_records(log_.first_offset, True, tail,
                                  log_.read_records(log_.first_offset, FETCH_BYTES))
        return encode_records(offset, False, tail, log_.read_records(offset, FETCH_BYTES))

    def on_records(self, payload: bytes) -> None:
        """A fetch answer: append what follows this replica's segments; ask for more while
        behind the group."""
        if self._deleted:
            return
        log_ = self.log
        try:
            first, reset, tail, records = decode_records(payload, log_.next_offset)
        except ValueError:
            return
        group = self.group
        if isinstance(group, ObserverGroup):   # no replica here: the members' counters
            group.told(tail)
            self._progress()
            if group.machine.first_offset > log_.first_offset:
                self._retained(group.machine.first_offset)
        if reset and log_.next_offset < first:
            log_.reset(first)
        wrote = False
        for rec in records:
            if rec.offset == log_.next_offset and rec.offset < self.group.machine.next_offset:
                log_.append_record(rec)
                wrote = True
        if wrote:
            self._note_written()
            log.info("stream %r: caught up to offset %d of %d", self.name, log_.next_offset,
                     self.group.machine.next_offset)
        self._fetch_ms = -FETCH_RETRY_MS
        if log_.next_offset < self.group.machine.next_offset and wrote:
            self.want_fetch()
        elif wrote or reset:
            self._fetch_ms = self._now_ms()   # caught up: an observer polls again later

    # ------------------------------------------------------------------ the rest
    def delete(self) -> list[Any]:
        """Queue.Delete on this member: the log's files go, the runtime closes the replica."""
        if self._deleted:
            return []
        super().delete()
        self._waiters.clear()
        self.manager.forget(self.vhost_name, self.name)
        if self._on_delete is not None:
            self._on_delete(self)
        return []
