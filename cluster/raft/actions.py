"""What the Raft core asks its driver to do, the timings it runs on, and the answers to proposals.

Owns the output values of ``cluster.raft.node.RaftNode`` (slotted dataclasses, frozen but for the
four below: match on them in the driver, compare them in tests). Must not know: sockets, files,
the broker. The driver runs the actions of one call in list order; the rules for each are in its
docstring.

Speed (issue 12): the values built for every message or batch (``Send``, ``AppendLog``, ``Apply``,
``CommitAdvanced``) are slotted dataclasses with an explicit ``__init__`` and not frozen: mypyc
compiles an explicit ``__init__`` to C, while a frozen dataclass's generated one runs as Python
(``object.__setattr__`` per field: about 18x the cost per object, measured). Treat them as
immutable all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from .messages import Entry, Message, Snapshot

__all__ = [
    "Timing", "Role", "Action", "Send", "PersistState", "AppendLog", "PersistSnapshot", "Apply",
    "Restore", "CommitAdvanced", "StateChanged", "MembershipChanged", "Proposed", "NotLeader",
    "ProposeResult",
]


@dataclass(frozen=True, slots=True)
class Timing:
    """Timings in milliseconds of the node's injected clock, and replication bounds.

    ``election_ms``: a follower that hears no leader for a random time in [election_ms,
    2 * election_ms) starts a (pre-)election (paper §5.2); a leader that has not heard from a
    majority within election_ms steps down (check-quorum, thesis §6.2); a node that heard from a
    leader within election_ms refuses votes (thesis §4.2.3). ``heartbeat_ms``: empty AppendEntries
    period (must be well below election_ms). ``max_batch_entries`` / ``max_batch_bytes``: bound of
    one AppendEntries (bytes of entry data). ``max_inflight``: AppendEntries sent to one follower
    and not yet answered (pipelining, etcd's ``MaxInflightMsgs``). ``snapshot_keep``: entries the
    leader keeps in its log behind a snapshot so that a slightly slow follower needs no snapshot.
    ``catchup_rounds``: a new member is added to the configuration once it has caught up, within
    this many election timeouts (thesis §4.2.1), else the change is abandoned.
    """

    election_ms: int = 500
    heartbeat_ms: int = 100
    max_batch_entries: int = 256
    max_batch_bytes: int = 1 << 20
    max_inflight: int = 8
    snapshot_keep: int = 64
    catchup_rounds: int = 10


class Role(Enum):
    """The three roles of paper §5.1 (a pre-candidate is a follower that runs a pre-vote)."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(slots=True, init=False, unsafe_hash=True)
class Send:
    """Send ``message`` to node ``to``. Best effort: loss, duplication and reordering are safe."""

    to: str
    message: Message

    def __init__(self, to: str, message: Message) -> None:
        self.to = to
        self.message = message


@dataclass(frozen=True, slots=True)
class PersistState:
    """Store ``term`` and ``voted_for`` (None: no vote in this term) durably (fsync) *before* running
    any later action of the same list (paper figure 2: "updated on stable storage before responding
    to RPCs")."""

    term: int
    voted_for: str | None


@dataclass(slots=True, init=False, unsafe_hash=True)
class AppendLog:
    """Drop every stored entry with index >= ``first_index`` (a conflicting suffix, paper §5.3),
    then append ``entries`` (consecutive, starting at ``first_index``; may be empty). May be written
    asynchronously and batched with others (group commit), but in list order; once durable, call
    ``RaftNode.persisted(last_index, last_term)`` with the newest durable entry."""

    first_index: int
    entries: tuple[Entry, ...]

    def __init__(self, first_index: int, entries: tuple[Entry, ...]) -> None:
        self.first_index = first_index
        self.entries = entries


@dataclass(frozen=True, slots=True)
class PersistSnapshot:
    """Store ``snapshot`` durably before running any later action; entries up to its index may
    then be deleted. ``discard_log``: every stored entry after the snapshot is dropped too (an
    InstallSnapshot that disagreed with the log, paper §7); drop them durably before the snapshot
    file takes effect."""

    snapshot: Snapshot
    discard_log: bool


@dataclass(slots=True, init=False, unsafe_hash=True)
class Apply:
    """Committed entries, consecutive and in index order, each exactly once per node incarnation
    (paper §5.3 "apply to state machine"). Feed the COMMAND ones to the state machine; NOOP and
    CONFIG ones only advance the applied index. A tuple, or -- entries of a log loaded without
    their objects (``RaftLog.held``, ``dryentries.DryEntries``) -- a sequence that builds each
    ``Entry`` as it is read, without its data (read it back with ``RaftLog.reader``)."""

    entries: Sequence[Entry]

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries


@dataclass(frozen=True, slots=True)
class Restore:
    """Replace the whole state machine with ``snapshot.data`` (an InstallSnapshot from the leader,
    paper §7): the next Apply starts at ``snapshot.index + 1``."""

    snapshot: Snapshot


@dataclass(slots=True, init=False, unsafe_hash=True)
class CommitAdvanced:
    """The commit index is now ``commit_index``: a majority stores every entry up to it (paper
    §5.3/§5.4.2). On the leader: release publisher confirms of proposals at or below it whose
    ``Proposed.term`` equals the entry's term."""

    commit_index: int

    def __init__(self, commit_index: int) -> None:
        self.commit_index = commit_index


@dataclass(frozen=True, slots=True)
class StateChanged:
    """This node's ``role``, ``term`` or known ``leader`` (None: unknown) changed."""

    role: Role
    term: int
    leader: str | None


@dataclass(frozen=True, slots=True)
class MembershipChanged:
    """The configuration in force here is now ``members`` (from the entry at ``index``, thesis
    §4.1: in force as soon as it is in the log, so it may still be rolled back until committed)."""

    members: tuple[str, ...]
    index: int


Action = Send | PersistState | AppendLog | PersistSnapshot | Apply | Restore | CommitAdvanced | \
    StateChanged | MembershipChanged
"""Every output of the core."""


@dataclass(frozen=True, slots=True)
class Proposed:
    """A proposal was appended at ``index`` in ``term``: it is committed when a CommitAdvanced
    reaches ``index`` and the entry there still has ``term`` (else it was lost with a leader)."""

    index: int
    term: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    """Not accepted here: this node is not the leader (or is handing leadership over).
    ``leader`` is the leader this node knows, if any: retry there."""

    leader: str | None


ProposeResult = Proposed | NotLeader
