"""Replay of a store directory into a ``StoreIndex``: the first half of recovery.

Owns: reading every segment file oldest first, validating it record by record (``format.scan``),
cutting a torn or corrupt tail (``os.truncate`` at the first bad record, logged), and applying each
valid record to the index exactly as the writer did. Must not know: the write buffer, sync policy.

After a crash the log may end in a partial record (the process died inside ``write()``, or the OS
lost pages that were never fsynced). Every byte covered by an fsync precedes the first bad record,
so cutting there keeps everything that was confirmed (Kafka does the same in
``LogSegment.recover``). A bad record is logged at WARNING in the newest file (expected after a
crash) and at ERROR in an older one (the disk lost data that had been synced).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import format as fmt
from .index import Segment, StoreIndex

__all__ = ["Replay", "replay", "list_segments"]

log = logging.getLogger(__name__)


@dataclass
class Replay:
    """What replay found. ``files`` exist, oldest first; ``clean``: the log ended with CLEAN;
    ``delivered``: ids listed by that CLEAN record; ``cuts``: (file, offset, bytes cut, reason)."""

    files: list[Segment] = field(default_factory=list)
    clean: bool = False
    delivered: list[int] = field(default_factory=list)
    cuts: list[tuple[str, int, int, str]] = field(default_factory=list)
    records: int = 0
    names: dict[bytes, str] = field(default_factory=dict)  # decoded queue names by their bytes


def list_segments(directory: Path) -> list[int]:
    """Base ids of the segment files in ``directory``, ascending."""
    bases = (fmt.parse_segment_name(name) for name in os.listdir(directory))
    return sorted(b for b in bases if b is not None)


def _apply(index: StoreIndex, seg: Segment, offset: int, total: int, kind: int, flags: int,
           store_id: int, payload: memoryview, state: Replay) -> None:
    """Apply one valid record; raises ``FormatError`` / ``ValueError`` when it makes no sense."""
    if kind == fmt.KIND_PUBLISH:
        queues, relocated_from = fmt.decode_holders(payload, flags, state.names)
        qnums = [index.queue_number(q) for q in queues]
        if relocated_from is not None:
            if store_id >= seg.base:
                raise fmt.FormatError(f"relocated id {store_id} not below base {seg.base}")
            index.relocate(store_id, relocated_from, seg, offset, total, qnums)
        else:
            if store_id < seg.base + seg.count:
                raise fmt.FormatError(f"publish id {store_id} out of order in segment {seg.base}")
            index.add_native(seg, store_id, offset, total, qnums)
    elif kind == fmt.KIND_ACK:
        queue, ids = fmt.decode_ack(payload)
        qnum = index.queue_number(queue)
        for sid in ids:
            index.drop(qnum, sid, seg)
    elif kind == fmt.KIND_DROP_QUEUE:
        index.drop_queue(index.queue_number(fmt.decode_name(payload)), seg)
    elif kind == fmt.KIND_CLEAN:
        state.delivered = fmt.decode_ids(payload)
    state.clean = kind == fmt.KIND_CLEAN


def replay(directory: Path, index: StoreIndex) -> Replay:
    """Load every segment of ``directory`` into ``index`` (which must be empty); cut bad tails.

    Raises ``FormatError`` for a file with a complete header of another format or a newer version
    (refusing to guess), ``OSError`` on I/O errors. Never raises on torn or corrupt records; a
    header that is ours with a few flipped bits (``format.header_damage``) is rewritten, logged
    as an error, and the records read as usual (each checks its own crc).
    """
    state = Replay()
    bases = list_segments(directory)
    for i, base in enumerate(bases):
        path = directory / fmt.segment_name(base)
        data = path.read_bytes()
        seg = Segment(base)
        index.add_segment(seg)
        state.files.append(seg)
        if len(data) < fmt.FILE_HEADER_SIZE:
            # Created but its header never reached the disk: make it a valid empty segment.
            log.warning("message store: %s has a torn header (%d bytes); rewriting it",
                        path.name, len(data))
            with open(path, "wb") as f:
                f.write(fmt.file_header(base))
            state.cuts.append((path.name, 0, len(data), "torn file header"))
            seg.size = seg.written = fmt.FILE_HEADER_SIZE
            continue
        damaged = fmt.header_damage(data, base)
        if damaged is not None:
            # a few flipped bits in the header: the records carry their own crc
            log.error("message store: %s has a damaged header: %s; rewritten, its records "
                      "checked one by one", path.name, damaged)
            with open(path, "r+b") as f:
                f.write(fmt.file_header(base))
            state.cuts.append((path.name, 0, 0, f"damaged header: {damaged}"))
        result = fmt.Scan(fmt.FILE_HEADER_SIZE)
        for offset, total, kind, flags, store_id, payload in fmt.scan(data, result):
            try:
                _apply(index, seg, offset, total, kind, flags, store_id, payload, state)
            except (fmt.FormatError, ValueError) as exc:
                result.problem = f"invalid record at offset {offset}: {exc}"
                result.valid_end = offset
                break
            state.records += 1
        if result.problem is not None:
            cut = len(data) - result.valid_end
            newest = i == len(bases) - 1
            log.log(logging.WARNING if newest else logging.ERROR,
                    "message store: cutting %d bytes of %s at offset %d (%s)%s", cut, path.name,
                    result.valid_end, result.problem, "" if newest else "; synced data was lost")
            os.truncate(path, result.valid_end)
            state.cuts.append((path.name, result.valid_end, cut, result.problem))
        seg.size = seg.written = result.valid_end
        del data
    return state
