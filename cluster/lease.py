"""The leader's quorum check: does a majority of the view still answer the leader?

Every ``confirm_period`` s the leader pings every other member and counts the answers (any
method of the current view from a member counts, see ``membership.Node.receive``); once all have
answered, or after ``verify_timeout`` s, a majority (the leader included) renews its quorum lease
and the leader re-sends its Membership as the members' confirmation (proposal "Failure
Analysis", with our majority rule). Sans-IO: times are seconds from the caller's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

__all__ = ["LeaderCheck", "CheckStep"]


class CheckStep(Enum):
    """What ``LeaderCheck.tick`` asks of the leader."""

    NOTHING = "nothing"
    PING = "ping"            # start of a check: ping every other member
    CONFIRMED = "confirmed"  # a majority answered: renew the lease, re-send the Membership
    FAILED = "failed"        # the check ended without a majority


@dataclass
class LeaderCheck:
    """One leader's quorum checks. ``confirm_period`` and ``verify_timeout`` in s."""

    confirm_period: float
    verify_timeout: float
    next_at: float = 0.0
    started: float | None = None
    replies: set[str] = field(default_factory=set)

    def reset(self, now: float) -> None:
        """A new view: no check running, the next one due at once."""
        self.started = None
        self.replies = set()
        self.next_at = now

    def heard(self, member: str) -> None:
        """``member`` sent something of the current view."""
        if self.started is not None:
            self.replies.add(member)

    def tick(self, now: float, view_size: int) -> CheckStep:
        """Advance the check of a view of ``view_size`` members (the leader included)."""
        if self.started is None:
            if now < self.next_at:
                return CheckStep.NOTHING
            self.next_at = now + self.confirm_period
            if view_size == 1:
                return CheckStep.CONFIRMED
            self.started = now
            self.replies = set()
            return CheckStep.PING
        if now - self.started < self.verify_timeout and len(self.replies) < view_size - 1:
            return CheckStep.NOTHING
        self.started = None
        return (CheckStep.CONFIRMED if len(self.replies) + 1 >= view_size // 2 + 1
                else CheckStep.FAILED)
