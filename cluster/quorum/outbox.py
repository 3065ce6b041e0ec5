"""The commands one broker sent to a quorum queue and has not yet seen applied.

Owns: numbering this member's commands (``seq`` 1, 2, ... per origin, see ``machine``), keeping
each until the member's replica applied it (then it is committed: a majority holds it), and
handing them out again for a re-send (a new leader, a gap, a forward that got no answer). Must
not know: Raft, the network, clocks (``now_ms`` comes in).

Memory: one encoded envelope per command in flight (the publisher confirm window bounds it).
"""

from __future__ import annotations

from .machine import envelope

__all__ = ["Outbox"]


class Outbox:
    """Unapplied commands of ``origin``, in seq order."""

    __slots__ = ("origin", "next_seq", "pending", "unsent", "applied", "sent_ms")

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.next_seq = 1
        self.pending: dict[int, bytes] = {}   # seq -> envelope, insertion (= seq) order
        self.unsent: list[bytes] = []
        self.applied = 0
        self.sent_ms = 0

    def add(self, command: bytes) -> int:
        """Queue fifo ``command`` (encoded); returns its seq (the publish's confirm token)."""
        seq = self.next_seq
        self.next_seq = seq + 1
        env = envelope(self.origin, seq, command)
        self.pending[seq] = env
        self.unsent.append(env)
        return seq

    def take_unsent(self, now_ms: int) -> list[bytes]:
        """Commands added since the last send, to send now."""
        out, self.unsent = self.unsent, []
        if out:
            self.sent_ms = now_ms
        return out

    def all_pending(self, now_ms: int, from_seq: int = 0) -> list[bytes]:
        """Every unapplied command with seq >= ``from_seq``, in order, for a re-send."""
        self.unsent = []
        self.sent_ms = now_ms
        return [env for seq, env in self.pending.items() if seq >= from_seq]

    def applied_up_to(self, seq: int) -> bool:
        """Commands up to ``seq`` are applied: forget them. True when ``applied`` advanced."""
        if seq <= self.applied:
            return False
        pending = self.pending
        for s in range(self.applied + 1, seq + 1):
            pending.pop(s, None)
        self.applied = seq
        return True

    def stale(self, now_ms: int, after_ms: int) -> bool:
        """True when commands wait and nothing was sent for ``after_ms``."""
        return bool(self.pending) and now_ms - self.sent_ms >= after_ms
