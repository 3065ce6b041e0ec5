"""The state machine of one quorum queue's Raft group: ``FifoQueue`` behind exactly-once commands.

Owns: the *envelope* every Raft entry of a quorum queue carries, and the rules that make commands
forwarded between brokers apply exactly once and in order per sender, whatever the network and
leader changes did to them (lost, duplicated, re-sent to a new leader). Must not know: Raft,
sockets, AMQP frames, clocks (times are inside commands).

Envelope (big-endian): ``origin`` (u16 length, utf-8), ``seq`` u64, ``kind`` u8, then by kind:
0 = a ``cluster.raft.fifo`` command (its bytes), 1 = Down(member: the rest, utf-8).

* ``origin`` is ``"<member>#<incarnation>"`` (incarnation: an integer that grows with each start
  of that member's broker, its start time in ms), or "" for the leader's own idempotent commands
  (Expire, Down), which are not sequenced.
* Per origin, commands apply only in ``seq`` order 1, 2, 3, ...: a ``seq`` already applied is a
  duplicate (dropped, a re-sent publish was committed the first time; ``Applied`` is said again,
  so a broker outside the group whose notice was lost still learns it), a ``seq`` beyond the next
  one is a gap (dropped, and ``Gap(origin, next)`` tells the origin to re-send from ``next``).
  This is what makes re-forwarding after a leader change idempotent (rabbit_fifo's enqueuer
  sequence numbers do the same for Ra's pipelined commands).
* A command from a newer incarnation of a member cancels the consumers of its older ones (that
  broker restarted: they are gone) and commands of older incarnations are ignored.
* ``Down(member)`` cancels every consumer of ``member`` (it left the cluster view): what they held
  returns to the queue, redelivered (delivery count + 1), as RabbitMQ returns a disconnected
  node's checked-out messages.

Effects: those of ``FifoQueue`` (no ``Confirm``: ``Applied`` says more; ``Purged`` and
``Dequeued`` tagged with the command's origin and seq, so its proposer answers its client), plus
``Applied(origin, seq)`` (every command of ``origin`` up to ``seq`` is in the state: the publisher
confirm of a publish means a majority holds it, since only committed entries are applied),
``Gap(origin, next)``, ``Cancelled(consumer)`` (by Down or a newer incarnation, not by its own
Cancel). Consumer ids are ``"<origin>/<n>"``.

Sources: RabbitMQ "Quorum Queues" guide (consumers on a node that went down; delivery-limit);
``rabbit_fifo`` (enqueuer seqs, returns on nodedown); Raft paper §8 (client requests must be
idempotent: "the state machine tracks the latest serial number processed for each client").
``Applied`` (one per command or batch) has an explicit ``__init__`` and is not frozen, for mypyc
(see ``cluster.raft.fifo``, "Speed").
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from cluster.raft import fifo as f

__all__ = ["QuorumMachine", "Applied", "Gap", "Cancelled", "Effect", "envelope",
           "down_envelope", "decode_envelope", "origin_member", "consumer_origin", "KIND_FIFO",
           "KIND_DOWN", "PAGED_SNAPSHOT", "NO_FLOOR", "snapshot_floor", "enqueue_message"]

KIND_FIFO = 0
KIND_DOWN = 1
_HEAD = struct.Struct(">QB")
_FLOOR = struct.Struct(">Q")
#: The first byte of a snapshot that carries its log floor (a JSON one starts with "{").
PAGED_SNAPSHOT = b"P"
#: The floor of a snapshot with every body inside: the log need keep nothing before it.
NO_FLOOR = 2 ** 63


def snapshot_floor(data: bytes) -> int | None:
    """The log floor of a ``QuorumMachine.snapshot()``: the log must keep every entry from this
    index on (paged bodies live there; ``NO_FLOOR``: none); None for a snapshot without one
    (written before paging: every body inside)."""
    if data.startswith(PAGED_SNAPSHOT) and len(data) > _FLOOR.size:
        return int(_FLOOR.unpack_from(data, 1)[0])
    return None
_U16 = struct.Struct(">H")


def envelope(origin: str, seq: int, command: bytes) -> bytes:
    """The entry bytes of fifo ``command`` (already encoded) sent by ``origin`` as ``seq``."""
    raw = origin.encode()
    return b"".join((_U16.pack(len(raw)), raw, _HEAD.pack(seq, KIND_FIFO), command))


def down_envelope(member: str) -> bytes:
    """The (unsequenced) entry that cancels every consumer of ``member``."""
    return _U16.pack(0) + _HEAD.pack(0, KIND_DOWN) + member.encode()


def decode_envelope(data: bytes) -> tuple[str, int, int, bytes]:
    """(origin, seq, kind, body) of an entry. Raises ``ValueError`` when malformed."""
    origin, seq, kind, start = _decode_head(data)
    return origin, seq, kind, bytes(data[start:])


def _decode_head(data: bytes) -> tuple[str, int, int, int]:
    """(origin, seq, kind, offset of the body) of an entry, without copying the body. Raises
    ``ValueError`` when malformed."""
    try:
        (n,) = _U16.unpack_from(data, 0)
        origin = bytes(data[2:2 + n]).decode()
        seq, kind = _HEAD.unpack_from(data, 2 + n)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a quorum queue entry: {exc}") from exc
    return origin, seq, kind, 2 + n + _HEAD.size


def enqueue_message(data: bytes) -> tuple[bytes, bytes]:
    """(header, body) of an entry holding a fifo ``Enqueue`` (a paged message: its msg id is
    the entry's index). Raises ``ValueError`` for any other entry."""
    _origin, _seq, kind, start = _decode_head(data)
    command = f.decode(data, start) if kind == KIND_FIFO else None
    if not isinstance(command, f.Enqueue):
        raise ValueError("not a quorum queue publish")
    return command.header, command.body


def origin_member(origin: str) -> tuple[str, int]:
    """(member, incarnation) of an origin ``"member#incarnation"``."""
    member, _, inc = origin.rpartition("#")
    return member, int(inc) if inc.isdigit() else 0


def consumer_origin(consumer: str) -> str:
    """The origin that owns consumer id ``"<origin>/<n>"``."""
    return consumer.rpartition("/")[0]


@dataclass(slots=True, init=False, unsafe_hash=True)
class Applied:
    """Every command of ``origin`` up to ``seq`` is applied (committed on a majority)."""

    origin: str
    seq: int

    def __init__(self, origin: str, seq: int) -> None:
        self.origin = origin
        self.seq = seq


@dataclass(frozen=True, slots=True)
class Gap:
    """A command of ``origin`` came before ``next``, the seq expected: re-send from ``next``."""

    origin: str
    next: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    """``consumer`` was cancelled by the group (its member left the view, or restarted)."""

    consumer: str


Effect = f.Effect | Applied | Gap | Cancelled


class QuorumMachine:
    """``apply(index, entry bytes) -> effects``; ``snapshot()`` / ``restore(data)``. Deterministic:
    every replica reaches the same state from the same entries."""

    def __init__(self, config: f.FifoConfig) -> None:
        self.fifo = f.FifoQueue(config)
        self.fifo.confirms = False
        self.next_seq: dict[str, int] = {}
        self.incarnation: dict[str, int] = {}
        self._origins: dict[str, tuple[str, int]] = {}   # origin -> (member, incarnation)

    def expected(self, origin: str) -> int:
        """The next seq of ``origin`` that will apply."""
        return self.next_seq.get(origin, 1)

    def apply(self, index: int, data: bytes) -> list[Effect]:
        """Apply the committed entry ``data`` at Raft ``index`` (see the module docstring).
        A malformed entry is skipped (no effects) rather than stopping the replica."""
        try:
            origin, seq, kind, start = _decode_head(data)
            out: list[Effect] = []
            if origin:
                parsed = self._origins.get(origin)
                if parsed is None:
                    if len(self._origins) > 4096:
                        self._origins.clear()
                    parsed = self._origins[origin] = origin_member(origin)
                member, inc = parsed
                known = self.incarnation.get(member)
                if known is not None and inc < known:
                    return []   # a command of a broker that has restarted since
                if known is None or inc > known:
                    self.incarnation[member] = inc
                    if known is not None:
                        self._cancel_where(lambda c, m=member, o=origin:
                                           origin_member(consumer_origin(c))[0] == m
                                           and consumer_origin(c) != o, out)
                        for old in [o for o in self.next_seq
                                    if o != origin and origin_member(o)[0] == member]:
                            del self.next_seq[old]
                expected = self.next_seq.get(origin, 1)
                if seq < expected:   # a re-sent duplicate: say again how far it got
                    out.append(Applied(origin, expected - 1))
                    return out
                if seq > expected:
                    out.append(Gap(origin, expected))
                    return out
                self.next_seq[origin] = seq + 1
            if kind == KIND_FIFO:   # the fifo makes no Confirm: Applied says more
                command = f.decode(data, start)
                if isinstance(command, f.Purge | f.Dequeue):   # answered to the proposer
                    for e in self.fifo.apply_command(index, command):
                        if isinstance(e, f.Purged):
                            e = f.Purged(e.count, origin, seq)
                        elif isinstance(e, f.Dequeued):
                            e = f.Dequeued(e.consumer, e.msg_id, e.header, e.body,
                                           e.delivery_count, e.remaining, origin, seq)
                        out.append(e)
                else:
                    out.extend(self.fifo.apply_command(index, command))
            elif kind == KIND_DOWN:
                member = bytes(data[start:]).decode()
                self._cancel_where(lambda c: origin_member(consumer_origin(c))[0] == member, out)
            if origin:
                out.append(Applied(origin, seq))
            return out
        except ValueError:
            return []

    def _cancel_where(self, pred: object, out: list[Effect]) -> None:
        names = [c for c in self.fifo.consumers if pred(c)]  # type: ignore[operator]
        for name in names:
            out.extend(self.fifo.apply_command(0, f.Cancel(name, 0)))
            out.append(Cancelled(name))

    def consumers_of(self, member: str) -> list[str]:
        """Consumer ids of ``member`` (any incarnation)."""
        return [c for c in self.fifo.consumers if origin_member(consumer_origin(c))[0] == member]

    # ------------------------------------------------------------------ queries, snapshots
    @property
    def message_count(self) -> int:
        """Ready messages."""
        return self.fifo.message_count()

    @property
    def message_bytes(self) -> int:
        """Body bytes of ready messages."""
        return self.fifo.ready_bytes

    @property
    def consumer_count(self) -> int:
        """Consumers of every member."""
        return len(self.fifo.consumers)

    def live_messages(self) -> int:
        """Ready, checked-out and held (at-least-once dead letters) messages (the size of a
        snapshot)."""
        fifo = self.fifo
        return (fifo.message_count() + len(fifo.dlx)
                + sum(len(c.out) for c in fifo.consumers.values()))

    def head_expiry(self) -> int | None:
        """When (ms, commands' clock) the ready head expires (the message taken next: only the
        head expires); None without TTL."""
        head = self.fifo.head()
        return head.expires_at if head is not None else None

    def snapshot(self) -> bytes:
        """The whole state: ``PAGED_SNAPSHOT``, the log floor u64 (``snapshot_floor``: the
        lowest msg id whose body the snapshot leaves in the log, else ``NO_FLOOR``), then JSON
        around the fifo's snapshot."""
        floor = self.fifo.paged_floor(NO_FLOOR)
        return PAGED_SNAPSHOT + _FLOOR.pack(floor) + json.dumps(
            {"fifo": self.fifo.snapshot().decode(), "next": self.next_seq,
             "inc": self.incarnation}, separators=(",", ":")).encode()

    def hydrate(self, data: bytes) -> bytes:
        """``data`` (a ``snapshot()``) with the paged bodies read back from the log: the
        snapshot a follower installs, which has none of those entries (its floor is then
        above every message). Raises ``LookupError`` when the log no longer holds one."""
        if not data.startswith(PAGED_SNAPSHOT):
            return data
        d = json.loads(data[1 + _FLOOR.size:])
        d["fifo"] = self.fifo.hydrate(d["fifo"].encode()).decode()
        return PAGED_SNAPSHOT + _FLOOR.pack(NO_FLOOR) + json.dumps(
            d, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the state with a ``snapshot()``'s (b"": the empty state; one written before
        paging, plain JSON, too). Paged bodies are read with ``read`` when needed."""
        read, page_bytes = self.fifo.read, self.fifo.page_bytes
        if not data:
            self.fifo = f.FifoQueue(self.fifo.config)
            self.fifo.confirms = False
            self.fifo.read, self.fifo.page_bytes = read, page_bytes
            self.next_seq = {}
            self.incarnation = {}
            return
        if data.startswith(PAGED_SNAPSHOT):
            data = data[1 + _FLOOR.size:]
        d = json.loads(data)
        self.fifo.restore(d["fifo"].encode())
        self.next_seq = {k: int(v) for k, v in d["next"].items()}
        self.incarnation = {k: int(v) for k, v in d["inc"].items()}
