"""A member's durable view: the part of its membership state that must survive a restart.

Owns the value a broker writes to its data dir before it acts on a view (``actions.Persist``) and
reads back when it starts, and its JSON encoding: the view a member is in (number and ordered
member list). With it a restarted member knows whom to re-join and answers rounds on its last view
(``membership``, "Restart"); what the cluster agreed is in the metadata log, not here. Until
issue 23 it also held the last grant of the vote rounds (as Raft's votedFor, paper §5.2); a file
written then is read with its grant ignored. Must not know: files, fsync, the driver
(``amqp_broker.clustering.runtime`` does the I/O).
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
    installed, empty when the member is in none (never joined, excluded, left: no vote)."""

    view: int = 0
    members: Members = ()

    def votes_in(self, me: str) -> bool:
        """True when ``me`` is a member of ``view``: it has a vote there."""
        return any(n == me for n, _ in self.members)

    def peers(self, me: str) -> Members:
        """The other members of ``view`` when ``me`` votes there (a restarted member re-joins
        through them), else ()."""
        return tuple(m for m in self.members if m[0] != me) if self.votes_in(me) else ()


def encode(vote: DurableVote) -> bytes:
    """The JSON document for ``vote``: ``{"version": 1, "view": int, "members": [[name,
    address], ...], "grant": null}`` (UTF-8; ``grant`` kept, always null, so that a broker of the
    version before can read the file)."""
    return json.dumps({"version": FORMAT_VERSION, "view": vote.view,
                       "members": [list(m) for m in vote.members], "grant": None},
                      sort_keys=True).encode()


def decode(data: bytes) -> DurableVote:
    """Parse ``encode``'s output (a ``grant`` of the version before is read and ignored).
    Raises ``ValueError`` for anything else (a broker then starts with no vote: it joins as a
    new member, which is safe)."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise ValueError("unknown format version")
        view = doc["view"]
        members = tuple((str(n), str(ad)) for n, ad in doc["members"])
        if not isinstance(view, int) or view < 0:
            raise ValueError("bad view")
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad durable vote: {exc!r}") from exc
    return DurableVote(view, members)
