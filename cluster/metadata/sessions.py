"""Exactly-once metadata commands: the per-origin sequence numbers of the metadata log's entries.

Owns the rule that decides whether a committed entry's command is applied: every entry is an
envelope (``cluster.quorum.machine.envelope``: origin, seq, body) whose ``origin`` is
``"<member>#<incarnation>"`` (the incarnation grows with each start of the member's broker) and
whose ``seq`` counts that origin's commands 1, 2, 3, ... A command applies only as the next seq
of its origin; a seq already applied is a duplicate (a forward re-sent after a leader change that
had committed the first time: dropped, so the first outcome stands), a seq beyond the next is a gap
(dropped; the origin re-sends from the next one). An entry of an older incarnation of a member
is dropped (that broker restarted: nobody waits for its answer), and a newer incarnation forgets
the older ones' counters. Origin "" is an unsequenced entry (the leader's own idempotent
``MemberGone``): always applied. This is ``cluster.quorum.machine``'s rule for quorum queues,
and Raft paper §8's ("the state machine tracks the latest serial number processed for each
client"). Pure and deterministic: part of the replicated state (``encode`` / ``decode`` go in
the group's snapshot). Must not know: Raft, the commands' meaning.
"""

from __future__ import annotations

import json

from cluster.quorum.machine import origin_member

__all__ = ["Sessions", "APPLY", "DUPLICATE", "GAP", "STALE"]

#: ``Sessions.admit`` verdicts.
APPLY, DUPLICATE, GAP, STALE = "apply", "duplicate", "gap", "stale"


class Sessions:
    """The next expected seq of every origin, and the newest incarnation of every member."""

    __slots__ = ("next_seq", "incarnation")

    def __init__(self) -> None:
        self.next_seq: dict[str, int] = {}
        self.incarnation: dict[str, int] = {}

    def expected(self, origin: str) -> int:
        """The seq of ``origin`` that applies next (1 for an origin never seen)."""
        return self.next_seq.get(origin, 1)

    def admit(self, origin: str, seq: int) -> str:
        """The verdict on the entry (``origin``, ``seq``): ``APPLY`` (recorded: the next one is
        expected now), ``DUPLICATE``, ``GAP`` or ``STALE`` (an older incarnation)."""
        if not origin:
            return APPLY
        member, inc = origin_member(origin)
        known = self.incarnation.get(member)
        if known is not None and inc < known:
            return STALE
        if known is None or inc > known:
            self.incarnation[member] = inc
            for old in [o for o in self.next_seq if o != origin and origin_member(o)[0] == member]:
                del self.next_seq[old]
        expected = self.next_seq.get(origin, 1)
        if seq < expected:
            return DUPLICATE
        if seq > expected:
            return GAP
        self.next_seq[origin] = seq + 1
        return APPLY

    def encode(self) -> bytes:
        """The counters as canonical bytes (sorted JSON)."""
        return json.dumps({"next": self.next_seq, "inc": self.incarnation}, sort_keys=True,
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Sessions:
        """The inverse of ``encode`` (b"": none). Raises ``ValueError`` for other bytes."""
        out = cls()
        if not data:
            return out
        try:
            d = json.loads(data)
            out.next_seq = {str(k): int(v) for k, v in d["next"].items()}
            out.incarnation = {str(k): int(v) for k, v in d["inc"].items()}
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a sessions image: {exc}") from exc
        return out
