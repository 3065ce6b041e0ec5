"""A member's durable vote: the part of its membership state that must survive a restart.

Owns the value a broker writes to its data dir before it answers (``actions.Persist``) and reads
back when it starts, and its JSON encoding. Like Raft's currentTerm and votedFor (Raft paper §5.2,
Figure 2 "Persistent state on all servers ... updated on stable storage before responding to
RPCs"): the view a member is in (number and ordered member list) and the grant it last made (view,
proposer). With them a restarted member still has its vote in its last view, and a majority that
lost its processes at once can re-admit itself (``membership``, "Restart"). Must not know: files,
fsync, the driver (``amqp_broker.clustering.runtime`` does the I/O).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

Members = tuple[tuple[str, str], ...]


def view_key(view: int, members: Members) -> tuple[int, str]:
    """The order of views: by number, then (only after a split, see ``membership``) by the
    member list, so that two lines of views that share a number still converge on one."""
    return view, json.dumps(members)
__all__ = ["DurableVote", "decode", "encode", "view_key", "FORMAT_VERSION"]

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class DurableVote:
    """``view`` and ``members`` (``((name, "host:port"), ...)``, leader first) of the last view
    installed, empty when the member is in none (never joined, excluded, left: no vote);
    ``grant``: the last (view, proposer) it granted, or None."""

    view: int = 0
    members: Members = ()
    grant: tuple[int, str] | None = None

    def votes_in(self, me: str) -> bool:
        """True when ``me`` is a member of ``view``: it has a vote there."""
        return any(n == me for n, _ in self.members)

    def peers(self, me: str) -> Members:
        """The other members of ``view`` when ``me`` votes there (a restarted member re-joins
        through them), else ()."""
        return tuple(m for m in self.members if m[0] != me) if self.votes_in(me) else ()


def encode(vote: DurableVote) -> bytes:
    """The JSON document for ``vote``: ``{"version": 1, "view": int, "members": [[name,
    address], ...], "grant": [view, proposer] | null}`` (UTF-8)."""
    return json.dumps({"version": FORMAT_VERSION, "view": vote.view,
                       "members": [list(m) for m in vote.members],
                       "grant": list(vote.grant) if vote.grant is not None else None},
                      sort_keys=True).encode()


def decode(data: bytes) -> DurableVote:
    """Parse ``encode``'s output. Raises ``ValueError`` for anything else (a broker then starts
    with no vote, which is safe: it cannot grant what it does not remember)."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise ValueError("unknown format version")
        view, grant = doc["view"], doc["grant"]
        members = tuple((str(n), str(ad)) for n, ad in doc["members"])
        if not isinstance(view, int) or view < 0:
            raise ValueError("bad view")
        if grant is not None:
            gv, gc = grant
            if not isinstance(gv, int) or not isinstance(gc, str):
                raise ValueError("bad grant")
            grant = (gv, gc)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad durable vote: {exc!r}") from exc
    return DurableVote(view, members, grant)
