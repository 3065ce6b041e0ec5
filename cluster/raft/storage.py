"""The storage interface of a Raft replica, and an in-memory implementation of it.

Owns: ``RaftStorage``, the contract the driver uses to run ``PersistState``, ``AppendLog`` and
``PersistSnapshot`` actions (paper figure 2, "persistent state"; §7 snapshots), and
``MemoryStorage``, which keeps what is "durable" apart from what was only written so that a
simulated crash loses exactly the unsynced part. The disk implementation is ``disklog.DiskLog``.
Must not know: the core's roles, the network.
"""

from __future__ import annotations

from typing import Protocol

from .messages import EMPTY_SNAPSHOT, Entry, PersistentState, Snapshot

__all__ = ["RaftStorage", "MemoryStorage"]


class RaftStorage(Protocol):
    """Stable storage of one replica. Calls come in the order of the actions that cause them."""

    def load(self) -> PersistentState:
        """Everything durable: term, vote, newest snapshot, the entries after it."""
        ...

    def save_state(self, term: int, voted_for: str | None) -> None:
        """Run ``PersistState``: durable (fsynced) when this returns. Raises ``OSError``."""
        ...

    def append(self, first_index: int, entries: tuple[Entry, ...]) -> None:
        """Run ``AppendLog``: drop entries >= ``first_index``, append ``entries``; buffered until
        ``sync``. Raises ``OSError``."""
        ...

    def save_snapshot(self, snapshot: Snapshot, discard_log: bool) -> None:
        """Run ``PersistSnapshot``: everything appended before it and the snapshot are durable when
        this returns; with ``discard_log`` every entry after the snapshot is dropped first."""
        ...

    def sync(self) -> tuple[int, int] | None:
        """Make every buffered append durable (one fsync: group commit). Returns the newest durable
        entry's (index, term) for ``RaftNode.persisted``, None when nothing became durable since
        the last report (``save_snapshot`` syncs appends too: the next ``sync`` reports them)."""
        ...


class MemoryStorage:
    """``RaftStorage`` in memory, for the simulator and unit tests. ``crash()`` forgets what was
    appended but not synced, as a kill -9 before the fsync would."""

    def __init__(self) -> None:
        self.term = 0
        self.voted_for: str | None = None
        self.snapshot = EMPTY_SNAPSHOT
        self.entries: list[Entry] = []      # durable, after the snapshot
        self.pending: list[tuple[int, tuple[Entry, ...]]] = []
        self.unreported = False             # made durable by save_snapshot, not yet reported

    def load(self) -> PersistentState:
        """See ``RaftStorage.load``."""
        return PersistentState(self.term, self.voted_for, self.snapshot, tuple(self.entries))

    def save_state(self, term: int, voted_for: str | None) -> None:
        """See ``RaftStorage.save_state``."""
        self.term, self.voted_for = term, voted_for

    def append(self, first_index: int, entries: tuple[Entry, ...]) -> None:
        """See ``RaftStorage.append``."""
        self.pending.append((first_index, entries))

    def _write(self, first_index: int, entries: tuple[Entry, ...]) -> None:
        base = self.snapshot.index
        del self.entries[max(0, first_index - base - 1):]
        for e in entries:
            if e.index > base:
                assert e.index == base + len(self.entries) + 1, (e.index, base, len(self.entries))
                self.entries.append(e)

    def sync(self) -> tuple[int, int] | None:
        """See ``RaftStorage.sync``."""
        if not self.pending and not self.unreported:
            return None
        for first, entries in self.pending:
            self._write(first, entries)
        self.pending = []
        self.unreported = False
        if self.entries:
            return self.entries[-1].index, self.entries[-1].term
        return self.snapshot.index, self.snapshot.term

    def save_snapshot(self, snapshot: Snapshot, discard_log: bool) -> None:
        """See ``RaftStorage.save_snapshot``."""
        if self.pending:
            self.sync()
            self.unreported = True
        if discard_log:
            self.entries = []
        else:
            self.entries = [e for e in self.entries if e.index > snapshot.index]
        self.snapshot = snapshot

    def crash(self) -> None:
        """Lose every append not synced yet."""
        self.pending = []
