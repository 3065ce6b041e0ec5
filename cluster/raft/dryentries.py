"""Log entries without an object each: runs of (first index, term, kind) (issue 25).

Owns: ``DryRuns``, what ``DiskLog(lazy=True)`` builds while it scans its segments at open (a
``DryLog`` for ``PersistentState.dry``: a restart of a quorum queue with a backlog of millions
of entries holds a handful of runs, not an ``Entry`` each), and ``DryEntries``, the batch
``RaftLog.held`` gives an ``Apply`` of such entries: a sequence of ``Entry`` built one at a
time as it is iterated (without their data, b"": the driver reads it back in bounded parts,
``amqp_broker.clustering.quorum_paging.batches``). Must not know: files, the network, the
state machine.

Sources: rabbitmq/ra ``ra_log`` (a range and the terms of what its segments hold, not the
entries); Raft paper §5.3 (an entry is its index, term and command).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import overload

from .messages import DryLog, Entry, EntryKind, decode_members

__all__ = ["DryRuns", "DryEntries", "runs_between"]

_KINDS = tuple(EntryKind)


class DryRuns:
    """Entries ``base + 1 .. last`` as runs, appended one at a time in index order (the scan of
    a log's segments after a snapshot at ``base``); ``truncate`` drops a suffix (a TRUNCATE
    record). About 0 bytes an entry: a run per change of term or kind."""

    __slots__ = ("base", "last", "runs", "configs")

    def __init__(self, base: int) -> None:
        self.base = base
        self.last = base
        self.runs: list[tuple[int, int, EntryKind]] = []
        self.configs: list[tuple[int, tuple[str, ...]]] = []

    def add(self, index: int, term: int, flags: int, data: bytes | memoryview) -> None:
        """Entry ``index`` (= ``last + 1``) of ``term``, kind ``flags`` (an ``EntryKind``
        value); ``data`` is read only for a CONFIG entry (its members). Raises ``ValueError``
        for a CONFIG whose data is not utf-8."""
        runs = self.runs
        kind = _KINDS[flags]
        if not runs or runs[-1][1] != term or runs[-1][2] is not kind:
            runs.append((index, term, kind))
        if kind is EntryKind.CONFIG:
            self.configs.append((index, decode_members(bytes(data))))
        self.last = index

    def truncate(self, index: int) -> None:
        """Forget entries ``index`` and after."""
        index = max(index, self.base + 1)
        if index > self.last:
            return
        runs, configs = self.runs, self.configs
        while runs and runs[-1][0] >= index:
            runs.pop()
        while configs and configs[-1][0] >= index:
            configs.pop()
        self.last = index - 1

    @property
    def last_term(self) -> int | None:
        """The term of entry ``last``; None when it holds no entry."""
        return self.runs[-1][1] if self.runs else None

    def done(self) -> DryLog | None:
        """The ``DryLog`` of what was added (None: no entry)."""
        if not self.runs:
            return None
        return DryLog(self.last, tuple(self.runs), tuple(self.configs))


class DryEntries(Sequence[Entry]):
    """Entries ``lo .. hi`` of a log: those up to ``dry_to`` from ``runs`` (a copy of the runs
    that hold them, so later changes of the log do not touch this batch), without their data
    (b""), then ``tail`` (the log's entry objects ``dry_to + 1 .. hi``; lo <= dry_to). An ``Entry`` is built only
    as one is read; ``len``, indexing and iteration answer as the tuple of them would."""

    __slots__ = ("lo", "hi", "dry_to", "runs", "starts", "tail")

    def __init__(self, lo: int, hi: int, dry_to: int, runs: list[tuple[int, int, EntryKind]],
                 tail: tuple[Entry, ...]) -> None:
        self.lo = lo
        self.hi = hi
        self.dry_to = dry_to
        self.runs = runs
        self.starts = [r[0] for r in runs]
        self.tail = tail

    def __len__(self) -> int:
        return self.hi - self.lo + 1

    def _at(self, index: int) -> Entry:
        if index > self.dry_to:
            return self.tail[index - self.dry_to - 1]
        _start, term, kind = self.runs[bisect_right(self.starts, index) - 1]
        return Entry(index, term, kind, b"")

    @overload
    def __getitem__(self, i: int) -> Entry: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Entry, ...]: ...

    def __getitem__(self, i: int | slice) -> Entry | tuple[Entry, ...]:
        if isinstance(i, slice):
            return tuple(self._at(self.lo + k) for k in range(*i.indices(len(self))))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._at(self.lo + i)

    def __iter__(self) -> Iterator[Entry]:
        lo, end = self.lo, min(self.hi, self.dry_to)
        runs, starts = self.runs, self.starts
        i = bisect_right(starts, lo) - 1
        while lo <= end:   # run by run
            _start, term, kind = runs[i]
            stop = min(end, starts[i + 1] - 1 if i + 1 < len(runs) else end)
            for k in range(lo, stop + 1):
                yield Entry(k, term, kind, b"")
            lo = stop + 1
            i += 1
        yield from self.tail


def runs_between(runs: list[tuple[int, int, EntryKind]], starts: list[int], lo: int,
                 hi: int) -> list[tuple[int, int, EntryKind]]:
    """The runs of ``runs`` (first indexes ``starts``) that hold entries ``lo .. hi``."""
    return runs[max(0, bisect_right(starts, lo) - 1):bisect_left(starts, hi + 1)]
