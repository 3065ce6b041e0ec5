"""Publisher confirms bookkeeping for one channel.

Owns the publish sequence numbers of a channel in confirm mode and turns per-message outcomes into
as few Basic.Ack/Nack frames as possible: a run of acks becomes one ack with ``multiple=True``.
Outcomes may arrive out of order (a persistent message waits for its fsync); frames are emitted in
sequence order only for the settled prefix. Source: RabbitMQ "Consumer Acknowledgements and Publisher
Confirms" (delivery tags of confirms count from 1 per channel; ``multiple`` covers all up to the tag).
"""

from __future__ import annotations

from collections import deque

__all__ = ["ConfirmTracker"]


class ConfirmTracker:
    """``next_seq()`` numbers a publish; ``settle(seq, ok)`` records its outcome; ``drain()`` returns
    ``[(delivery_tag, multiple, ack)]`` for the contiguous settled prefix, acks merged."""

    __slots__ = ("_next", "_emitted", "_outcomes", "_deferred")

    def __init__(self) -> None:
        self._next = 1
        self._emitted = 0  # highest sequence number already confirmed to the publisher
        self._outcomes: dict[int, bool] = {}
        self._deferred: deque[tuple[int, int, bool]] = deque()  # (seq, store_id, ok)

    def next_seq(self) -> int:
        """The sequence number of the next publish (1, 2, ...)."""
        seq = self._next
        self._next = seq + 1
        return seq

    def settle(self, seq: int, ok: bool) -> None:
        """Record the outcome of publish ``seq`` (True: ack, False: nack)."""
        self._outcomes[seq] = ok

    def defer(self, seq: int, store_id: int, ok: bool) -> None:
        """Hold the outcome of ``seq`` until a sync makes ``store_id`` durable (``release``)."""
        self._deferred.append((seq, store_id, ok))

    def release(self, durable_id: int) -> bool:
        """Settle every deferred publish whose store id <= ``durable_id`` (store ids grow with
        ``seq``); True when nothing stays deferred."""
        deferred = self._deferred
        while deferred and deferred[0][1] <= durable_id:
            seq, _sid, ok = deferred.popleft()
            self._outcomes[seq] = ok
        return not deferred

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
