"""The leader's view of one follower: match index, next index, flow control (pipelining bounds).

Owns the per-follower bookkeeping of paper figure 2 ("volatile state on leaders": nextIndex[],
matchIndex[]) and etcd/raft's flow states: PROBE (one AppendEntries at a time until a follower
answers, after a rejection or at the start of a term), REPLICATE (up to ``max_inflight`` batches in
flight, ``next_index`` advanced optimistically) and a pending snapshot. Must not know: messages.
"""

from __future__ import annotations

from collections import deque

__all__ = ["Progress"]


class Progress:
    """Replication state of one peer on the leader.

    ``match_index``: highest index known stored on the peer; ``next_index``: next index to send;
    ``probing``: PROBE state (``probe_sent``: its one message is out); ``inflight``: last index of
    each batch sent and not yet acknowledged (REPLICATE); ``snapshot_index``: index of an
    InstallSnapshot in flight (0: none) sent at ``snapshot_sent_ms``; ``active``: heard from in the
    current check-quorum period (thesis §6.2), ``was_active`` in the one before.
    """

    __slots__ = ("match_index", "next_index", "probing", "probe_sent", "inflight",
                 "snapshot_index", "snapshot_sent_ms", "active", "was_active")

    def __init__(self, next_index: int) -> None:
        self.match_index = 0
        self.next_index = next_index
        self.probing = True
        self.probe_sent = False
        self.inflight: deque[int] = deque()
        self.snapshot_index = 0
        self.snapshot_sent_ms = 0
        self.active = False
        self.was_active = False     # ``active`` of the previous check-quorum period

    def can_send(self, max_inflight: int) -> bool:
        """Whether flow control lets one more AppendEntries out now."""
        if self.snapshot_index:
            return False
        if self.probing:
            return not self.probe_sent
        return len(self.inflight) < max_inflight

    def sent(self, last_index: int, count: int) -> None:
        """Record an AppendEntries carrying ``count`` entries up to ``last_index``."""
        if self.probing:
            self.probe_sent = True
        elif count:
            self.next_index = last_index + 1
            self.inflight.append(last_index)

    def acked(self, match_index: int) -> bool:
        """A success reply up to ``match_index``: leave PROBE, free inflight slots. Returns whether
        ``match_index`` advanced (replies can arrive out of order: it never goes back)."""
        advanced = match_index > self.match_index
        if advanced:
            self.match_index = match_index
        self.next_index = max(self.next_index, self.match_index + 1)
        while self.inflight and self.inflight[0] <= self.match_index:
            self.inflight.popleft()
        if self.probing:
            self.probing = False
            self.probe_sent = False
            self.inflight.clear()
        if self.snapshot_index and self.match_index >= self.snapshot_index:
            self.snapshot_index = 0
        return advanced

    def rejected(self, next_index: int) -> None:
        """A rejection: go back to PROBE from ``next_index`` (never below ``match_index + 1``)."""
        self.next_index = max(self.match_index + 1, next_index)
        self.probing = True
        self.probe_sent = False
        self.inflight.clear()
        self.snapshot_index = 0

    def forget(self, match_index: int) -> None:
        """The peer answered that its log no longer holds what it acknowledged (its storage lost
        it): lower ``match_index`` to ``match_index`` (never above what it was). Safe: the
        commit index never goes back, and the peer counts again once it acknowledges anew."""
        self.match_index = max(0, min(self.match_index, match_index))

    def snapshot_sent(self, index: int, now_ms: int) -> None:
        """An InstallSnapshot up to ``index`` went out at ``now_ms``; nothing else until answered."""
        self.snapshot_index = index
        self.snapshot_sent_ms = now_ms
        self.probing = True
        self.probe_sent = False
        self.inflight.clear()
