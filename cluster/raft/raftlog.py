"""The Raft log as the core sees it: a snapshot base plus the entries after it, in memory.

Owns: index arithmetic (terms of entries, the conflict search of paper §5.3, slicing batches,
truncating a conflicting suffix, compacting a prefix into a snapshot, paper §7) and the history of
configurations in the log (thesis §4.1: the newest CONFIG entry is in force, even uncommitted).
Must not know: storage, the network. Persistence is the driver's, through ``AppendLog`` actions.

Memory: the entries after the last snapshot stay here; the state machine's snapshots bound them.
With a ``reader`` (index -> the entry's data, read back from storage), ``dry(index)`` takes the
entries up to ``index`` (applied and written) out of memory: only their terms and kinds stay, as
runs of (first index, term, kind) -- a handful per term, whatever the number of entries -- and
``entry`` / ``slice`` / ``held`` rebuild them (``entry`` and ``slice`` with their data read back)
when a follower or a replay needs them (issue 25: a quorum queue's backlog lives in the log
segments, not in memory, as with RabbitMQ's ``ra_log``, which keeps only a range and the terms
of what its segments hold).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

from .dryentries import DryEntries, runs_between
from .messages import DryLog, Entry, EntryKind, Snapshot, decode_members

__all__ = ["RaftLog"]


class RaftLog:
    """Entries ``snapshot.index + 1 .. last_index`` plus the snapshot that replaced those before.

    ``entries`` holds the entries ``dry_to + 1 .. last_index`` as objects (``dry_to`` is
    ``snapshot.index`` unless ``dry`` ran); those ``snapshot.index + 1 .. dry_to`` are runs of
    (first index, term, kind) in ``_runs`` (their first indexes in ``_starts``).

    ``configs`` is a list of (index, members), oldest first: the snapshot's configuration at the
    snapshot index, then each CONFIG entry in the log.
    ``dry``: entries ``snapshot.index + 1 .. dry.to`` loaded as runs (``DiskLog(lazy=True)``),
    held dry from the start; ``entries`` then follow ``dry.to``.
    """

    __slots__ = ("snapshot", "entries", "configs", "reader", "dry_to", "_runs", "_starts")

    def __init__(self, snapshot: Snapshot, entries: list[Entry],
                 dry: DryLog | None = None) -> None:
        self.snapshot = snapshot
        self.entries: list[Entry] = []
        #: Reads an entry's data back by index (see the module docstring); None: never dry.
        self.reader: Callable[[int], bytes] | None = None
        #: Entries up to this index are not held as objects (runs of terms; data: ``reader``).
        self.dry_to = snapshot.index
        self._runs: list[tuple[int, int, EntryKind]] = []
        self._starts: list[int] = []
        self.configs: list[tuple[int, tuple[str, ...]]] = [(snapshot.index, snapshot.members)]
        if dry is not None and dry.runs:
            self._runs = list(dry.runs)
            self._starts = [r[0] for r in dry.runs]
            self.dry_to = dry.to
            self.configs.extend(dry.configs)
        self.append(entries)

    @property
    def first_index(self) -> int:
        """The first index held as an entry (``snapshot.index + 1``)."""
        return self.snapshot.index + 1

    @property
    def last_index(self) -> int:
        """The index of the newest entry (the snapshot's when the log is empty)."""
        return self.dry_to + len(self.entries)

    @property
    def last_term(self) -> int:
        """The term of the newest entry (the snapshot's when the log is empty)."""
        if self.entries:
            return self.entries[-1].term
        return self._runs[-1][1] if self._runs else self.snapshot.term

    @property
    def members(self) -> tuple[str, ...]:
        """The configuration in force: the newest in the log (thesis §4.1)."""
        return self.configs[-1][1]

    def _run(self, index: int) -> tuple[int, int, EntryKind]:
        """The run holding dry entry ``index`` (snapshot.index < index <= dry_to)."""
        return self._runs[bisect_right(self._starts, index) - 1]

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index``; the snapshot's term at its index, 0 at index 0;
        None when ``index`` was compacted away or is beyond the log."""
        if index == self.snapshot.index:
            return self.snapshot.term
        if index < self.snapshot.index or index > self.last_index:
            return 0 if index == 0 else None
        if index <= self.dry_to:
            return self._run(index)[1]
        return self.entries[index - self.dry_to - 1].term

    def entry(self, index: int) -> Entry:
        """The entry at ``index`` (a dry one with its data read back). Raises ``IndexError``
        when not held."""
        if index <= self.snapshot.index:
            raise IndexError(f"entry {index} is compacted into snapshot {self.snapshot.index}")
        if index <= self.dry_to:
            return self._rebuild(index, True)
        return self.entries[index - self.dry_to - 1]

    def _rebuild(self, index: int, data: bool) -> Entry:
        _start, term, kind = self._run(index)
        reader = self.reader
        return Entry(index, term, kind, reader(index) if data and reader is not None else b"")

    def dry(self, index: int) -> None:
        """Take the held entries up to ``index`` out of memory (each must be readable with
        ``reader`` from now on): only their terms and kinds stay, in runs; nothing without a
        ``reader``."""
        if self.reader is None or index <= self.dry_to:
            return
        n = min(index, self.last_index) - self.dry_to
        runs, starts = self._runs, self._starts
        last = runs[-1] if runs else None
        for e in self.entries[:n]:
            if last is None or last[1] != e.term or last[2] is not e.kind:
                last = (e.index, e.term, e.kind)
                runs.append(last)
                starts.append(e.index)
        del self.entries[:n]
        self.dry_to += n

    def held(self, lo: int, hi: int) -> Sequence[Entry]:
        """Entries ``lo .. hi`` (inclusive, held: not compacted), the dry ones without their
        data (b""; read them with ``reader``): a batch to apply. A tuple when none is dry, else
        a ``DryEntries`` (an ``Entry`` built as each is read: a restart's replay of a backlog
        holds no object per entry)."""
        d = self.dry_to
        if lo > d:
            return tuple(self.entries[lo - d - 1:hi - d])
        return DryEntries(lo, hi, d, runs_between(self._runs, self._starts, lo, min(hi, d)),
                          tuple(self.entries[:max(0, hi - d)]))

    def slice(self, lo: int, hi: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries ``lo .. hi`` (inclusive) that fit in ``max_bytes`` of data, at least one.
        Raises ``IndexError`` when ``lo`` is compacted."""
        if lo > hi:
            return ()
        if lo <= self.snapshot.index:
            raise IndexError(f"entry {lo} is compacted into snapshot {self.snapshot.index}")
        out: list[Entry] = []
        size = 0
        d = self.dry_to
        for i in range(lo, min(hi, d) + 1):
            e = self._rebuild(i, True)
            size += len(e.data)
            if out and size > max_bytes:
                return tuple(out)
            out.append(e)
        for e in self.entries[max(0, lo - d - 1):max(0, hi - d)]:
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
        while index - 1 > self.dry_to and self.term_at(index - 1) == term:
            index -= 1
        if index - 1 <= self.dry_to and index - 1 > self.snapshot.index:
            i = bisect_right(self._starts, index - 1) - 1
            while i >= 0 and self._runs[i][1] == term:   # whole runs of that term, at once
                index = self._runs[i][0]
                i -= 1
        return index

    def last_index_of_term(self, term: int, below: int) -> int:
        """The highest index <= ``below`` whose term is ``term``, 0 when none is held: the leader's
        use of a conflict hint (paper §5.3)."""
        index = min(below, self.last_index)
        while index > self.dry_to:
            t = self.term_at(index)
            if t == term:
                return index
            if t is not None and t < term:
                return 0
            index -= 1
        if index > self.snapshot.index:
            i = bisect_right(self._starts, index) - 1
            while i >= 0:   # runs, newest first (terms only go down)
                start, t, _kind = self._runs[i]
                if t == term:
                    return index
                if t < term:
                    return 0
                index = start - 1
                i -= 1
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
        if index > self.dry_to:
            del self.entries[index - self.dry_to - 1:]
        else:
            self.entries = []
            self._cut_runs(index)
            self.dry_to = index - 1
        while self.configs[-1][0] >= index:
            self.configs.pop()

    def _cut_runs(self, index: int) -> None:
        """Forget the runs from ``index`` on."""
        n = bisect_right(self._starts, index - 1)
        del self._runs[n:]
        del self._starts[n:]

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
                if cut >= self.dry_to:
                    self.entries = self.entries[cut - self.dry_to:]
                    self._runs, self._starts = [], []
                    self.dry_to = cut
                else:   # the runs from cut + 1 on stay, the one holding it cut short
                    i = bisect_right(self._starts, cut + 1) - 1
                    _start, term, kind = self._runs[i]
                    self._runs = [(cut + 1, term, kind)] + self._runs[i + 1:]
                    self._starts = [cut + 1] + self._starts[i + 1:]
                self.snapshot = Snapshot(cut, base_term, self.members_at(cut), b"")
                self.configs = [(cut, self.snapshot.members)] + [c for c in self.configs
                                                                 if c[0] > cut]
            return
        self.entries = []
        self._runs, self._starts = [], []
        self.snapshot = snapshot
        self.dry_to = snapshot.index
        self.configs = [(snapshot.index, snapshot.members)]
