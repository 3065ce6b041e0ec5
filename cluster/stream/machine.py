"""The state machine of one replicated stream's Raft group, and its commands. Pure.

Owns: what an entry of a stream's Raft log says (``encode_append`` / ``encode_retain``), and the
deterministic rules every replica applies them by, so that every replica's stream log gets the
same records at the same offsets with the same timestamps, and loses the same head segments.
Must not know: Raft, files, sockets, clocks (times come inside commands).

Entries are ``cluster.quorum.machine`` envelopes (origin, seq, kind, body), so that a publish
re-sent to a new leader applies once (per-origin seqs, as quorum queues' commands):

* kind 0, Append (sequenced, from the member the client published to): ``timestamp`` i64 (ms
  since the epoch, the publishing member's wall clock), routing (u16 length + exchange and
  routing key as two AMQP short strings), content header payload (u32 length + bytes), body (the
  rest). It gets the next offset; its timestamp is raised to the last one if older (timestamps
  never go back within a stream, as ``queues.stream.log``).
* kind 2, Retain (unsequenced, origin ""; proposed by the leader only): ``first`` u64. Every
  replica drops the head segments whose records are all before ``first`` (whole segments, as
  RabbitMQ's retention). The leader decides it from its own log against x-max-length-bytes and
  x-max-age, so the decision is in the log and the same everywhere.

Effects: ``Appended(offset, timestamp, routing, header, body)``, ``Retained(first)``, and
``cluster.quorum.machine``'s ``Applied(origin, seq)`` (the publisher confirm: the entry is
committed, so a majority holds it) and ``Gap(origin, next)``.
Snapshot: the counters only (next offset, first offset, last timestamp, per-origin seqs), as
JSON; the records themselves are in each replica's segment files (``queues.stream.log``), and a
replica whose segments lack records a snapshot covers fetches them from another replica
(``amqp_broker.clustering.stream_fetch``).
Sources: RabbitMQ "Streams" (retention by segments, offsets, timestamps), Raft paper §7-§8.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from cluster.quorum.machine import Applied, Gap, decode_envelope, envelope, origin_member

__all__ = ["StreamMachine", "Appended", "Retained", "Effect", "encode_append", "encode_retain",
           "KIND_APPEND", "KIND_RETAIN"]

KIND_APPEND = 0
KIND_RETAIN = 2
_TS = struct.Struct(">qH")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")


def encode_append(timestamp_ms: int, routing: bytes, header: bytes, body: bytes) -> bytes:
    """The body of an Append (see the module docstring); the outbox wraps it in an envelope."""
    return b"".join((_TS.pack(timestamp_ms, len(routing)), routing, _U32.pack(len(header)),
                     header, body))


def encode_retain(first: int) -> bytes:
    """The leader's (unsequenced) entry: drop head segments before offset ``first``."""
    return _U16.pack(0) + _U64.pack(0) + bytes((KIND_RETAIN,)) + _U64.pack(first)


@dataclass(frozen=True, slots=True)
class Appended:
    """Record ``offset`` of the stream: time (ms since the epoch), routing, header, body."""

    offset: int
    timestamp: int
    routing: bytes
    header: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class Retained:
    """Retention: head segments whose records are all before ``first`` go."""

    first: int


Effect = Appended | Retained | Applied | Gap


class StreamMachine:
    """``apply(index, entry) -> effects``; ``snapshot()`` / ``restore(data)``. Deterministic."""

    __slots__ = ("next_offset", "first_offset", "last_ts", "next_seq", "incarnation")

    def __init__(self) -> None:
        #: The offset the next Append gets.
        self.next_offset = 0
        #: The first offset retention keeps (``Retain`` raised it).
        self.first_offset = 0
        self.last_ts = 0
        self.next_seq: dict[str, int] = {}
        self.incarnation: dict[str, int] = {}

    @property
    def length(self) -> int:
        """Messages in the stream (from the first kept offset; whole segments go, so a replica's
        log may hold a few more until its head segment is entirely before ``first_offset``)."""
        return self.next_offset - self.first_offset

    def apply(self, index: int, data: bytes) -> list[Effect]:
        """Apply the committed entry ``data`` (Raft ``index``). A malformed entry is skipped."""
        try:
            origin, seq, kind, body = decode_envelope(data)
        except ValueError:
            return []
        if origin:
            member, inc = origin_member(origin)
            known = self.incarnation.get(member)
            if known is not None and inc < known:
                return []   # a command of a broker that has restarted since
            if known is None or inc > known:
                self.incarnation[member] = inc
                for old in [o for o in self.next_seq if origin_member(o)[0] == member]:
                    del self.next_seq[old]
            expected = self.next_seq.get(origin, 1)
            if seq < expected:
                return [Applied(origin, expected - 1)]
            if seq > expected:
                return [Gap(origin, expected)]
            self.next_seq[origin] = seq + 1
        out: list[Effect] = []
        try:
            if kind == KIND_APPEND:
                ts, rlen = _TS.unpack_from(body)
                pos = _TS.size
                routing = body[pos:pos + rlen]
                pos += rlen
                (hlen,) = _U32.unpack_from(body, pos)
                pos += 4
                ts = max(ts, self.last_ts)
                self.last_ts = ts
                out.append(Appended(self.next_offset, ts, routing, body[pos:pos + hlen],
                                    body[pos + hlen:]))
                self.next_offset += 1
            elif kind == KIND_RETAIN and not origin:
                (first,) = _U64.unpack_from(body)
                if first > self.first_offset:
                    self.first_offset = min(first, self.next_offset)
                    out.append(Retained(self.first_offset))
        except struct.error:
            pass
        if origin:
            out.append(Applied(origin, seq))
        return out

    def snapshot(self) -> bytes:
        """The counters (see the module docstring)."""
        return json.dumps({"next": self.next_offset, "first": self.first_offset,
                           "ts": self.last_ts, "seqs": self.next_seq,
                           "inc": self.incarnation}, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        """Become the state of ``snapshot()`` bytes. Raises ``ValueError`` when malformed."""
        state = json.loads(data)
        self.next_offset = int(state["next"])
        self.first_offset = int(state["first"])
        self.last_ts = int(state["ts"])
        self.next_seq = {str(k): int(v) for k, v in state["seqs"].items()}
        self.incarnation = {str(k): int(v) for k, v in state["inc"].items()}


def append_envelope(origin: str, seq: int, body: bytes) -> bytes:
    """An Append as ``origin``'s ``seq`` (tests; the outbox makes them in the broker)."""
    return envelope(origin, seq, body)
