"""Values of the Raft core: log entries, snapshots, cluster configurations and the peer messages.

Owns: the frozen, slotted dataclasses that travel between Raft nodes (RPCs of Ongaro and Ousterhout
2014, figure 2, plus the thesis' pre-vote and TimeoutNow) and the encoding of a configuration entry.
Must not know: sockets, files, clocks, the broker. A wire codec for peer links is ``codec``.

Node ids are strings (the broker's cluster name of the replica). Log indexes start at 1; index 0
with term 0 is the empty log's sentinel. ``data`` is opaque bytes of the state machine.

Speed (issue 12): the values built for every message or batch (``Entry``, ``AppendEntries``,
``AppendEntriesReply``) are slotted dataclasses with an explicit ``__init__`` and not frozen: mypyc
compiles an explicit ``__init__`` to C, while a frozen dataclass's generated one runs as Python
(``object.__setattr__`` per field: about 18x the cost per object, measured). Treat them as
immutable all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "EntryKind", "Entry", "Snapshot", "encode_members", "decode_members",
    "Message", "RequestVote", "RequestVoteReply", "AppendEntries", "AppendEntriesReply",
    "InstallSnapshot", "TimeoutNow", "PersistentState", "EMPTY_SNAPSHOT", "DryLog",
]


class EntryKind(IntEnum):
    """What a log entry carries: a state machine COMMAND, the NOOP a new leader appends (paper §8),
    or a CONFIG: the full member list in force from this entry on (thesis §4.1)."""

    COMMAND = 0
    NOOP = 1
    CONFIG = 2


@dataclass(slots=True, init=False, unsafe_hash=True)
class Entry:
    """One log entry (paper figure 2, "log[]"): ``index`` >= 1, ``term`` of the leader that created
    it, ``kind``, ``data`` (COMMAND: opaque bytes; CONFIG: ``encode_members``; NOOP: b"")."""

    index: int
    term: int
    kind: EntryKind
    data: bytes

    def __init__(self, index: int, term: int, kind: EntryKind, data: bytes) -> None:
        self.index = index
        self.term = term
        self.kind = kind
        self.data = data


def encode_members(members: tuple[str, ...] | list[str] | frozenset[str]) -> bytes:
    """The data of a CONFIG entry: the sorted member ids, utf-8, newline-separated. Raises
    ``ValueError`` for an empty id or one containing a newline."""
    for m in members:
        if not m or "\n" in m:
            raise ValueError(f"bad node id {m!r}")
    return "\n".join(sorted(members)).encode()


def decode_members(data: bytes) -> tuple[str, ...]:
    """The member ids of a CONFIG entry's data, sorted (inverse of ``encode_members``)."""
    return tuple(data.decode().split("\n")) if data else ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot of the state machine (paper §7): it replaces every entry up to ``index`` (whose
    term was ``term``); ``members`` is the configuration in force at ``index``; ``data`` the state
    machine's serialized state (opaque bytes)."""

    index: int
    term: int
    members: tuple[str, ...]
    data: bytes


EMPTY_SNAPSHOT = Snapshot(0, 0, (), b"")
"""The base of a log that never compacted: index 0, term 0, no members."""


@dataclass(frozen=True, slots=True)
class DryLog:
    """Entries ``snapshot.index + 1 .. to`` of a log loaded without an object each (issue 25:
    a quorum queue's restart; ``DiskLog(lazy=True)``): ``runs`` of (first index, term, kind),
    oldest first, one per stretch of entries of one term and kind; ``configs`` the (index,
    members) of the CONFIG entries among them. Their data stays in storage (``RaftLog.reader``,
    as ``RaftLog.dry`` leaves entries)."""

    to: int
    runs: tuple[tuple[int, int, EntryKind], ...]
    configs: tuple[tuple[int, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class PersistentState:
    """What a node reads back from stable storage at start (paper figure 2 "persistent state on all
    servers", plus the newest snapshot of §7): ``entries`` follow ``snapshot.index`` consecutively
    (after ``dry.to`` when ``dry``: the entries before them are held as runs of terms).
    ``floor`` > 0: the storage lost entries it had acknowledged (a damaged or truncated file, an
    older copy put back: ``disklog``/``marks``), up to this index at least; the node may not
    vote or stand for election until its log matches a leader's up to ``floor``."""

    term: int = 0
    voted_for: str | None = None
    snapshot: Snapshot = EMPTY_SNAPSHOT
    entries: tuple[Entry, ...] = ()
    floor: int = 0
    dry: DryLog | None = None


@dataclass(frozen=True, slots=True)
class RequestVote:
    """RequestVote RPC (paper §5.2, figure 2). ``pre_vote``: a pre-vote round (thesis §9.6): ``term``
    is then the term the candidate *would* use and nobody changes term on it. ``transfer``: the
    election follows a TimeoutNow (thesis §3.10), so voters ignore their leader lease (§4.2.3)."""

    term: int
    candidate: str
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class RequestVoteReply:
    """Answer to ``RequestVote``: ``term`` is the voter's term (for a granted pre-vote: the term
    asked for), ``granted`` the vote."""

    term: int
    granted: bool
    pre_vote: bool = False


@dataclass(slots=True, init=False, unsafe_hash=True)
class AppendEntries:
    """AppendEntries RPC (paper §5.3, figure 2): entries following (``prev_index``, ``prev_term``);
    an empty tuple is a heartbeat. ``commit`` is the leader's commit index."""

    term: int
    leader: str
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int

    def __init__(self, term: int, leader: str, prev_index: int, prev_term: int,
                 entries: tuple[Entry, ...], commit: int) -> None:
        self.term = term
        self.leader = leader
        self.prev_index = prev_index
        self.prev_term = prev_term
        self.entries = entries
        self.commit = commit


@dataclass(slots=True, init=False, unsafe_hash=True)
class AppendEntriesReply:
    """Answer to ``AppendEntries`` and ``InstallSnapshot``.

    ``success``: the follower's log matches the leader's up to ``match_index`` *and* holds it on
    stable storage (a follower answers only after its persist completed). On a rejection,
    ``reject_index`` is the ``prev_index`` refused and (``hint_index``, ``hint_term``) the conflict
    hint of paper §5.3: ``hint_term`` 0 means the follower's log ends before ``reject_index`` and
    ``hint_index`` is its last index + 1; otherwise ``hint_term`` is the follower's term at
    ``reject_index`` and ``hint_index`` the first index it holds of that term.
    """

    term: int
    success: bool
    match_index: int = 0
    reject_index: int = 0
    hint_index: int = 0
    hint_term: int = 0

    def __init__(self, term: int, success: bool, match_index: int = 0, reject_index: int = 0,
                 hint_index: int = 0, hint_term: int = 0) -> None:
        self.term = term
        self.success = success
        self.match_index = match_index
        self.reject_index = reject_index
        self.hint_index = hint_index
        self.hint_term = hint_term


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """InstallSnapshot RPC (paper §7, figure 13), sent whole (no chunks): the follower replaces its
    state with ``snapshot`` and keeps only the log entries after it that agree with it."""

    term: int
    leader: str
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer (thesis §3.10): the leader asks an up-to-date follower to start an
    election at once."""

    term: int
    leader: str


Message = RequestVote | RequestVoteReply | AppendEntries | AppendEntriesReply | InstallSnapshot | \
    TimeoutNow
"""Every message between Raft nodes; each has a ``term``."""
