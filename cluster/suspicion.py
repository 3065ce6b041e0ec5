"""Sans-IO: one member's suspicions of its peers and of the leader, and who should take over.

Owns the bookkeeping of the Qpid ClusteringHA proposal's "Failure Analysis" as ``membership.Node``
applies it: when this member last acted on suspecting each peer (a suspicion is acted on again
only after ``retry`` seconds, unless forwarded), the takeover candidates it told of a suspected
leader and when, the candidates that did nothing within ``retry`` (passed over), and whether this
member itself wants to take over. Reset at every view change. Must not know: Cluster methods,
sockets, clocks (``now`` in seconds comes from the caller).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Suspicions"]


class Suspicions:
    """Per-view suspicion state (see the module docstring). ``since``: node -> when (s) this
    member last acted on suspecting it; ``delegated``: candidate told to take over -> when;
    ``bypassed``: candidates passed over; ``want_takeover``: this member is the candidate."""

    __slots__ = ("since", "delegated", "bypassed", "want_takeover")

    def __init__(self) -> None:
        self.since: dict[str, float] = {}
        self.delegated: dict[str, float] = {}
        self.bypassed: set[str] = set()
        self.want_takeover = False

    def act_on(self, node: str, now: float, retry: float, forwarded: bool) -> bool:
        """Record a suspicion of ``node``; False when it was acted on less than ``retry`` s ago
        (and this one is not forwarded by another member): nothing to do again yet."""
        last = self.since.get(node)
        if last is not None and now - last < retry and not forwarded:
            return False
        self.since[node] = now
        return True

    def candidate(self, names: Sequence[str], me: str) -> str | None:
        """The member that should take over from the leader ``names[0]``: the first after it that
        is us, or that we neither suspect nor passed over; None when there is none."""
        return next((n for n in names[1:] if n == me
                     or (n not in self.since and n not in self.bypassed)), None)

    def leader_alive(self, leader: str | None) -> None:
        """The leader answered (a round found it alive): forget suspecting it and every
        delegation."""
        if leader is not None:
            self.since.pop(leader, None)
        self.want_takeover = False
        self.delegated.clear()
        self.bypassed.clear()

    def pass_over_idle(self, now: float, retry: float) -> bool:
        """Candidates told ``retry`` s ago or more that did nothing are passed over; True when
        any was (the caller looks for the next candidate)."""
        idle = [c for c, since in self.delegated.items() if now - since >= retry]
        for c in idle:
            del self.delegated[c]
            self.bypassed.add(c)
        return bool(idle)
