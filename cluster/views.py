"""Views of the cluster's membership: their numbers, a node's status towards them, and the ring
order of pings. Pure values and functions (``cluster.membership`` uses them).

A view is an ordered member list, the first member its leader; view numbers only grow, and a
proposer at index ``i`` of view ``v`` announces ``((v >> 16) + 1) << 16 | i``, so two proposers
that changed the same view never announce the same number. The ring: each member pings the one
before it, the leader pings the last. Source: Qpid ClusteringHA proposal ("Cluster Management").
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

__all__ = ["FIRST_VIEW", "IN_VIEW", "Status", "next_view", "ring_target"]

#: The number of the first view a founding node installs.
FIRST_VIEW = 1 << 16


def next_view(view: int, proposer_index: int) -> int:
    """The number of the view a proposer at ``proposer_index`` of ``view`` announces (> view)."""
    return (((view >> 16) + 1) << 16) | (proposer_index & 0xFFFF)


class Status(enum.Enum):
    """IDLE: not started. JOINING: Join sent, not in a view. SYNCING: in the view, waiting for the
    members' Synch. MEMBER: serving. LEAVING: Leave sent. LEFT: out for good."""

    IDLE = "idle"
    JOINING = "joining"
    SYNCING = "syncing"
    MEMBER = "member"
    LEAVING = "leaving"
    LEFT = "left"


IN_VIEW = frozenset({Status.SYNCING, Status.MEMBER, Status.LEAVING})


def ring_target(names: Sequence[str], me: str) -> str | None:
    """The member ``me`` pings in the view ``names`` (the one before it; the leader pings the
    last), None when alone."""
    if len(names) < 2:
        return None
    i = list(names).index(me)
    return names[-1] if i == 0 else names[i - 1]
