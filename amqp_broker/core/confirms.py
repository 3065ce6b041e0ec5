"""Publisher confirms bookkeeping for one channel.

Owns the publish sequence numbers of a channel in confirm mode and turns per-message outcomes into
as few Basic.Ack/Nack frames as possible: a run of acks becomes one ack with ``multiple=True``.
Outcomes may arrive out of order (a persistent message waits for its fsync); frames are emitted in
sequence order only for the settled prefix. Source: RabbitMQ "Consumer Acknowledgements and Publisher
Confirms" (delivery tags of confirms count from 1 per channel; ``multiple`` covers all up to the tag).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection

__all__ = ["ConfirmTracker", "STORE"]

#: The message store as a source of safety: its tokens are store ids, safe once a sync covers them.
STORE = "message-store"


class ConfirmTracker:
    """``next_seq()`` numbers a publish; ``settle(seq, ok)`` records its outcome; ``drain()`` returns
    ``[(delivery_tag, multiple, ack)]`` for the contiguous settled prefix, acks merged.

    The one path for "safe later" (the queue-type seam, ``queues.queue_type``): ``wait(seq,
    waits, ok)`` holds a publish until every ``(source, token)`` in ``waits`` is safe, and
    ``advance(source, up_to)`` reports that ``source`` made every token <= ``up_to`` safe (the
    message store's synced id, a stream log's sync generation, a Raft group's confirmed count).
    Tokens of one source must grow with ``seq``. ``defer``/``release`` are the message store's
    case (source ``STORE``)."""

    __slots__ = ("_next", "_emitted", "_outcomes", "_waits", "_remaining", "_ok")

    def __init__(self) -> None:
        self._next = 1
        self._emitted = 0  # highest sequence number already confirmed to the publisher
        self._outcomes: dict[int, bool] = {}
        self._waits: dict[object, deque[tuple[int, int]]] = {}  # source -> (token, seq)
        self._remaining: dict[int, int] = {}  # seq -> sources still to wait for (when > 1)
        self._ok: dict[int, bool] = {}  # seq -> outcome once safe

    def next_seq(self) -> int:
        """The sequence number of the next publish (1, 2, ...)."""
        seq = self._next
        self._next = seq + 1
        return seq

    def settle(self, seq: int, ok: bool) -> None:
        """Record the outcome of publish ``seq`` (True: ack, False: nack)."""
        self._outcomes[seq] = ok

    def wait(self, seq: int, waits: list[tuple[object, int]], ok: bool) -> None:
        """Hold the outcome ``ok`` of publish ``seq`` until each ``(source, token)`` of
        ``waits`` is safe (``advance``); an empty ``waits`` settles it at once."""
        if not waits:
            self._outcomes[seq] = ok
            return
        self._ok[seq] = ok
        if len(waits) > 1:
            self._remaining[seq] = len(waits)
        for source, token in waits:
            pending = self._waits.get(source)
            if pending is None:
                pending = self._waits[source] = deque()
            pending.append((token, seq))

    def advance(self, source: object, up_to: int, failed: Collection[int] = ()) -> bool:
        """``source`` made every token <= ``up_to`` safe: settle what no longer waits. Tokens in
        ``failed`` were refused by the source (a quorum queue's x-overflow reject-publish): their
        publishes are nacked. True when nothing waits on ``source`` any more."""
        pending = self._waits.get(source)
        if pending is None:
            return True
        remaining = self._remaining
        while pending and pending[0][0] <= up_to:
            token, seq = pending.popleft()
            if failed and token in failed:
                self._ok[seq] = False
            left = remaining.get(seq)
            if left is not None:
                if left > 1:
                    remaining[seq] = left - 1
                    continue
                del remaining[seq]
            self._outcomes[seq] = self._ok.pop(seq)
        if pending:
            return False
        del self._waits[source]
        return True

    def defer(self, seq: int, store_id: int, ok: bool) -> None:
        """Hold the outcome of ``seq`` until a sync makes ``store_id`` durable (``release``)."""
        self._ok[seq] = ok
        pending = self._waits.get(STORE)
        if pending is None:
            pending = self._waits[STORE] = deque()
        pending.append((store_id, seq))

    def release(self, durable_id: int) -> bool:
        """Settle every deferred publish whose store id <= ``durable_id`` (store ids grow with
        ``seq``); True when nothing stays deferred on the store."""
        return self.advance(STORE, durable_id)

    @property
    def received(self) -> int:
        """How many publishes were given a sequence number (RabbitMQ's received_confirm)."""
        return self._next - 1

    @property
    def confirmed(self) -> int:
        """How many publishes were confirmed (acked or nacked) so far."""
        return self._emitted

    @property
    def pending(self) -> bool:
        """True when some settled outcome has not been drained yet."""
        return bool(self._outcomes) and (self._emitted + 1) in self._outcomes

    def drain(self) -> list[tuple[int, bool, bool]]:
        """Frames to send: (delivery_tag, multiple, ack) in order."""
        out: list[tuple[int, bool, bool]] = []
        outcomes = self._outcomes
        seq = self._emitted + 1
        run_start = seq
        while seq in outcomes:
            if not outcomes.pop(seq):
                if seq > run_start:
                    out.append((seq - 1, seq - 1 > run_start, True))
                out.append((seq, False, False))
                run_start = seq + 1
            seq += 1
        if seq > run_start:
            out.append((seq - 1, seq - 1 > run_start, True))
        self._emitted = seq - 1
        return out
