"""A joining broker's wait for the members' replays (proposal "Cluster Management", Cluster.Synch).

Owns one rule set: after the view that admits us, every other member replays its state and ends
with Synch; the leader's replay is applied before any other member's, so other replays that finish
first are buffered (the order mattered when replays carried definitions: a member's private
queues' bindings needed the leader's exchanges; since the cluster metadata log carries every
definition, a replay is the member's consumer counts, ``amqp_broker.clustering.replay``); we accept clients when every member of the view has synched (members that leave
the view meanwhile are no longer waited for). A Synch may overtake the Membership that admits us (it
comes on another link): it is remembered until then. Must not know: sockets, views' numbering,
failure detection (``membership`` drives this).
"""

from __future__ import annotations

from . import actions as a

__all__ = ["JoinSync"]


class JoinSync:
    """The replay bookkeeping of one join; ``begin`` once admitted, then ``synch`` per Synch."""

    def __init__(self) -> None:
        self.awaiting: set[str] = set()
        self.leader: str | None = None
        self.leader_applied = False
        self._buffered: list[str] = []
        self._early: dict[str, int] = {}

    def early(self, from_node: str, view: int) -> None:
        """A Synch that came while we were not in a view yet."""
        self._early[from_node] = view

    def begin(self, me: str, view: int, names: list[str]) -> list[a.Action]:
        """We are admitted in ``view`` (members ``names``, leader first): wait for the others."""
        self.awaiting = set(names) - {me}
        self.leader, self.leader_applied, self._buffered = names[0], names[0] == me, []
        early, self._early = self._early, {}
        out: list[a.Action] = []
        for n in names:
            if early.get(n, -1) >= view:
                out += self.synch(n)
        return out

    def synch(self, from_node: str) -> list[a.Action]:
        """A Synch from ``from_node``: which replays to apply now."""
        if from_node not in self.awaiting:
            return []
        self.awaiting.discard(from_node)
        if from_node == self.leader:
            self.leader_applied = True
            out: list[a.Action] = [a.ApplyReplay(from_node)]
            out += [a.ApplyReplay(n) for n in self._buffered]
            self._buffered = []
            return out
        if self.leader_applied:
            return [a.ApplyReplay(from_node)]
        self._buffered.append(from_node)
        return []

    def lost_leader(self, names: list[str]) -> bool:
        """A new view ``names`` came: stop waiting for members gone; True when the leader went
        before its replay was complete (the join must start over)."""
        self.awaiting &= set(names)
        return not self.leader_applied and self.leader not in names

    def finish(self) -> list[a.Action] | None:
        """None while waiting; else the last replays to apply (the leader's never came only when
        it left, after which its replay is not needed), and the join is complete."""
        if self.awaiting:
            return None
        out: list[a.Action] = [a.ApplyReplay(n) for n in self._buffered]
        self._buffered, self.leader_applied = [], True
        return out
