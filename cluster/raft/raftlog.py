"""The Raft log as the core sees it: a snapshot base plus the entries after it, in memory.

Owns: index arithmetic (terms of entries, the conflict search of paper §5.3, slicing batches,
truncating a conflicting suffix, compacting a prefix into a snapshot, paper §7) and the history of
configurations in the log (thesis §4.1: the newest CONFIG entry is in force, even uncommitted).
Must not know: storage, the network. Persistence is the driver's, through ``AppendLog`` actions.

Memory: the entries after the last snapshot stay here; the state machine's snapshots bound them.
With a ``reader`` (index -> the entry's data, read back from storage), ``dry(index)`` drops the
data of entries up to ``index`` (applied and written): they stay as (index, term, kind) and
``entry`` / ``slice`` read their data back when a follower needs them (issue 25: a quorum
queue's backlog lives in the log segments, not in memory, as with RabbitMQ's ``ra_log``).
"""

from __future__ import annotations

from collections.abc import Callable

from .messages import Entry, EntryKind, Snapshot, decode_members

__all__ = ["RaftLog"]


class RaftLog:
    """Entries ``snapshot.index + 1 .. last_index`` plus the snapshot that replaced those before.

    ``configs`` is a list of (index, members), oldest first: the snapshot's configuration at the
    snapshot index, then each CONFIG entry in the log.
    """

    __slots__ = ("snapshot", "entries", "configs", "reader", "dry_to")

    def __init__(self, snapshot: Snapshot, entries: list[Entry]) -> None:
        self.snapshot = snapshot
        self.entries: list[Entry] = []
        #: Reads an entry's data back by index (see the module docstring); None: never dry.
        self.reader: Callable[[int], bytes] | None = None
        #: Entries up to this index hold no data in memory (read with ``reader``).
        self.dry_to = snapshot.index
        self.configs: list[tuple[int, tuple[str, ...]]] = [(snapshot.index, snapshot.members)]
        self.append(entries)

    @property
    def first_index(self) -> int:
        """The first index held as an entry (``snapshot.index + 1``)."""
        return self.snapshot.index + 1

    @property
    def last_index(self) -> int:
        """The index of the newest entry (the snapshot's when the log is empty)."""
        return self.snapshot.index + len(self.entries)

    @property
    def last_term(self) -> int:
        """The term of the newest entry (the snapshot's when the log is empty)."""
        return self.entries[-1].term if self.entries else self.snapshot.term

    @property
    def members(self) -> tuple[str, ...]:
        """The configuration in force: the newest in the log (thesis §4.1)."""
        return self.configs[-1][1]

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index``; the snapshot's term at its index, 0 at index 0;
        None when ``index`` was compacted away or is beyond the log."""
        if index == self.snapshot.index:
            return self.snapshot.term
        if index < self.snapshot.index or index > self.last_index:
            return 0 if index == 0 else None
        return self.entries[index - self.snapshot.index - 1].term

    def entry(self, index: int) -> Entry:
        """The entry at ``index``. Raises ``IndexError`` when not held."""
        pos = index - self.snapshot.index - 1
        if pos < 0:
            raise IndexError(f"entry {index} is compacted into snapshot {self.snapshot.index}")
        e = self.entries[pos]
        if index <= self.dry_to and self.reader is not None:
            return Entry(e.index, e.term, e.kind, self.reader(index))
        return e

    def dry(self, index: int) -> None:
        """Drop the data of held entries up to ``index`` from memory (each must be readable
        with ``reader`` from now on); nothing without a ``reader``."""
        if self.reader is None or index <= self.dry_to:
            return
        base = self.snapshot.index + 1
        entries = self.entries
        for i in range(max(self.dry_to, self.snapshot.index) + 1 - base,
                       min(index, self.last_index) + 1 - base):
            e = entries[i]
            if e.data:
                entries[i] = Entry(e.index, e.term, e.kind, b"")
        self.dry_to = max(self.dry_to, min(index, self.last_index))

    def slice(self, lo: int, hi: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries ``lo .. hi`` (inclusive) that fit in ``max_bytes`` of data, at least one.
        Raises ``IndexError`` when ``lo`` is compacted."""
        if lo > hi:
            return ()
        base = self.snapshot.index + 1
        if lo < base:
            raise IndexError(f"entry {lo} is compacted into snapshot {self.snapshot.index}")
        out: list[Entry] = []
        size = 0
        dry, reader = self.dry_to, self.reader
        for e in self.entries[lo - base:hi - base + 1]:
            if e.index <= dry and reader is not None:
                e = Entry(e.index, e.term, e.kind, reader(e.index))
            size += len(e.data)
            if out and size > max_bytes:
                break
            out.append(e)
        return tuple(out)

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a log ending at (``last_index``, ``last_term``) is at least as up-to-date as this
        one (paper §5.4.1, the election restriction)."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def first_index_of_term(self, index: int) -> int:
        """The first index of the run of entries with the term of ``index`` that ends at ``index``
        (not below the first held entry): the follower's conflict hint of paper §5.3."""
        term = self.term_at(index)
        while index - 1 > self.snapshot.index and self.term_at(index - 1) == term:
            index -= 1
        return index

    def last_index_of_term(self, term: int, below: int) -> int:
        """The highest index <= ``below`` whose term is ``term``, 0 when none is held: the leader's
        use of a conflict hint (paper §5.3)."""
        index = min(below, self.last_index)
        while index > self.snapshot.index:
            t = self.term_at(index)
            if t == term:
                return index
            if t is not None and t < term:
                return 0
            index -= 1
        return index if index == self.snapshot.index and self.snapshot.term == term else 0

    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        """Append consecutive ``entries`` after ``last_index``. Raises ``ValueError`` on a gap."""
        for e in entries:
            if e.index != self.last_index + 1:
                raise ValueError(f"entry {e.index} does not follow {self.last_index}")
            self.entries.append(e)
            if e.kind is EntryKind.CONFIG:
                self.configs.append((e.index, decode_members(e.data)))

    def truncate_from(self, index: int) -> None:
        """Drop every entry with index >= ``index`` (a conflicting suffix, paper §5.3) and the
        configurations they carried. Raises ``ValueError`` for an index inside the snapshot."""
        if index <= self.snapshot.index:
            raise ValueError(f"cannot truncate at {index}: snapshot holds {self.snapshot.index}")
        del self.entries[index - self.snapshot.index - 1:]
        self.dry_to = min(self.dry_to, index - 1)
        while self.configs[-1][0] >= index:
            self.configs.pop()

    def members_at(self, index: int) -> tuple[str, ...]:
        """The configuration in force at ``index`` (the newest CONFIG at or below it)."""
        for at, members in reversed(self.configs):
            if at <= index:
                return members
        return self.configs[0][1]

    def compact(self, snapshot: Snapshot, keep: int = 0) -> None:
        """Replace the log up to ``snapshot.index`` by ``snapshot`` (paper §7). When the log holds
        the snapshot's last entry with its term, later entries stay (and ``keep`` entries before
        the snapshot are kept for slow followers); otherwise the whole log is dropped.
        """
        if self.term_at(snapshot.index) == snapshot.term and snapshot.index <= self.last_index:
            cut = max(self.snapshot.index, snapshot.index - keep)
            if cut > self.snapshot.index:
                base_term = self.term_at(cut)
                assert base_term is not None
                self.entries = self.entries[cut - self.snapshot.index:]
                self.snapshot = Snapshot(cut, base_term, self.members_at(cut), b"")
                self.configs = [(cut, self.snapshot.members)] + [c for c in self.configs
                                                                 if c[0] > cut]
                self.dry_to = max(self.dry_to, cut)
            return
        self.entries = []
        self.snapshot = snapshot
        self.dry_to = snapshot.index
        self.configs = [(snapshot.index, snapshot.members)]
