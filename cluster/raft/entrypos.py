"""Where each entry of a Raft log lies on disk: log index -> (segment, offset), 8 bytes an entry.

Owns: the position map ``DiskLog`` keeps so that an entry can be read back by its index after its
data left memory (quorum queues page their bodies out and read them from the log on delivery,
as RabbitMQ's quorum queues read from ``ra_log`` segments since 3.10: issue 25). Indexes are
consecutive (a log has no gaps) and their segments never go down, so one ``array('Q')`` from a
base index holds them, each ``segment << OFFSET_BITS | offset``. Must not know: files, records.

Sources: rabbitmq/ra ``ra_log`` (segment index of entries); Kafka's offset index (position of
each offset in its segment).
"""

from __future__ import annotations

from array import array

__all__ = ["EntryPositions", "OFFSET_BITS"]

#: Bits of the offset inside a segment (segments stay far below 64 GiB).
OFFSET_BITS = 36
_MASK = (1 << OFFSET_BITS) - 1


class EntryPositions:
    """Positions of entries ``base .. base + len - 1``."""

    __slots__ = ("base", "_pos")

    def __init__(self) -> None:
        self.base = 0
        self._pos = array("Q")

    def __len__(self) -> int:
        return len(self._pos)

    def add(self, index: int, segment: int, offset: int) -> None:
        """Entry ``index`` was written at ``offset`` of segment ``segment``. An index at or
        before the end replaces that entry and drops the ones after it (a truncated suffix
        rewritten); one past the end, or below the base, starts the map over from it."""
        end = self.base + len(self._pos)
        if index != end:
            if self._pos and self.base <= index < end:
                del self._pos[index - self.base:]
            else:
                self._pos = array("Q")
                self.base = index
        self._pos.append(segment << OFFSET_BITS | offset)

    def truncate(self, index: int) -> None:
        """Forget entries ``index`` and after (a TRUNCATE record)."""
        if index <= self.base:
            self._pos = array("Q")
            self.base = index
        elif index < self.base + len(self._pos):
            del self._pos[index - self.base:]

    def reset(self, base: int) -> None:
        """Forget every entry; the next one expected is ``base``."""
        self._pos = array("Q")
        self.base = base

    def drop_segments_before(self, segment: int) -> None:
        """Forget the entries of segments below ``segment`` (deleted)."""
        pos = self._pos
        n = 0
        limit = len(pos)
        while n < limit and pos[n] >> OFFSET_BITS < segment:
            n += 1
        if n:
            del pos[:n]
            self.base += n

    def get(self, index: int) -> tuple[int, int] | None:
        """(segment, offset) of entry ``index``; None when not known."""
        i = index - self.base
        if i < 0 or i >= len(self._pos):
            return None
        p = self._pos[i]
        return p >> OFFSET_BITS, p & _MASK
