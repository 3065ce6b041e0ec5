"""The file that keeps the messages ``x-delayed-message`` exchanges hold: ``<data>/delayed.log``.

An append-only log of two record kinds: *held* (a message, its vhost and exchange, its routing
key, content header and body, its delay and when it is due, wall-clock ms) and *done* (the id of a
held message that was routed or dropped). Every record is ``length (u32) | crc32 (u32) | payload``
(big-endian); a torn or corrupt tail (a crash in the middle of an append) ends the log there and
is cut off when the file is opened. Opening replays the log, keeps the held records without a
done record, and rewrites the file with only those (compaction); compaction runs again when done
records outnumber the live ones by ``COMPACT_SLACK``.

The holder keeps only a held message's routing facts in memory (``light``); its content header
and body are read back from the file (``read``) when it is due. Appends are written to the OS at
once (``flush``): a held message survives the broker process's
death (kill -9) as soon as ``append_held`` returns; ``sync`` (fsync) is called by the holder at
each tick, so a power loss can lose the last tick's appends (100 ms), as the message store's
group commit. Must not know: timers, routing, the broker. Source: the plugin keeps its messages
in a disc_copies Mnesia table (README "Limitations": "They will survive a node restart").
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["COMPACT_SLACK", "DelayedLog", "HeldRecord", "light"]

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">II")  # payload length, crc32 of the payload
_HELD = 1
_DONE = 2
_HELD_FIXED = struct.Struct(">BQQI")  # kind, id, due (wall ms), delay (ms)
_DONE_REC = struct.Struct(">BQ")
#: Done records tolerated beyond the live ones before the file is rewritten.
COMPACT_SLACK = 10_000


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """One held message as the log keeps it: ``id`` (unique in the file), ``due_ms`` (wall clock,
    ms since the epoch), ``delay_ms`` (its ``x-delay``), ``vhost``, ``exchange``, ``routing_key``,
    ``header`` (the content header payload as published) and ``body`` (bytes)."""

    id: int
    due_ms: int
    delay_ms: int
    vhost: str
    exchange: str
    routing_key: str
    header: bytes
    body: bytes


def light(r: HeldRecord) -> HeldRecord:
    """``r`` without its content header and body (what the holder keeps in memory)."""
    return HeldRecord(r.id, r.due_ms, r.delay_ms, r.vhost, r.exchange, r.routing_key, b"", b"")


def _strings(*parts: str) -> bytes:
    out = bytearray()
    for p in parts:
        raw = p.encode("utf-8")
        out += struct.pack(">H", len(raw)) + raw
    return bytes(out)


def _encode_held(r: HeldRecord) -> bytes:
    return b"".join((_HELD_FIXED.pack(_HELD, r.id, r.due_ms, r.delay_ms),
                     _strings(r.vhost, r.exchange, r.routing_key),
                     struct.pack(">I", len(r.header)), r.header,
                     struct.pack(">I", len(r.body)), r.body))


def _decode_held(p: bytes) -> HeldRecord:
    _, id_, due, delay = _HELD_FIXED.unpack_from(p, 0)
    at = _HELD_FIXED.size
    strings: list[str] = []
    for _i in range(3):
        (n,) = struct.unpack_from(">H", p, at)
        strings.append(p[at + 2:at + 2 + n].decode("utf-8"))
        at += 2 + n
    blobs: list[bytes] = []
    for _i in range(2):
        (n,) = struct.unpack_from(">I", p, at)
        blobs.append(p[at + 4:at + 4 + n])
        at += 4 + n
    if at != len(p):
        raise ValueError("held record length mismatch")
    return HeldRecord(id_, due, delay, strings[0], strings[1], strings[2], blobs[0], blobs[1])


def _frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(end offset, payload) of each whole, crc-checked record; stops at the first bad one."""
    at = 0
    while at + _FRAME.size <= len(data):
        n, crc = _FRAME.unpack_from(data, at)
        end = at + _FRAME.size + n
        if end > len(data):
            return
        payload = data[at + _FRAME.size:end]
        if zlib.crc32(payload) != crc:
            return
        yield end, payload
        at = end


def _frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class DelayedLog:
    """The delayed messages' log at ``path``. ``open()`` returns the live messages (in the order
    they were held) *without* their content (``light``): the content header and body stay in the
    file and ``read(id)`` reads them back when the message is due, so a held message costs
    memory for its routing facts only. Raises ``OSError`` when the file cannot be read or
    written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        self._rfd = -1  # a read-only descriptor of the same file, for ``read``
        self._size = 0  # bytes in the file (appends go to the end)
        self._at: dict[int, tuple[int, int]] = {}  # live id -> (offset, length) of its frame
        self._done = 0  # done records in the file
        self._dirty = False

    def open(self) -> list[HeldRecord]:
        """Replay the file: the held messages with no done record, in file order, ``light``;
        the file is rewritten with only those (a torn tail is dropped with one warning)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        held: dict[int, tuple[HeldRecord, int, int]] = {}
        good = 0
        for end, payload in _frames(data):
            try:
                if payload[0] == _HELD:
                    r = _decode_held(payload)
                    held[r.id] = (light(r), good, end - good)
                elif payload[0] == _DONE:
                    held.pop(_DONE_REC.unpack(payload)[1], None)
                else:
                    break
            except (ValueError, struct.error, UnicodeDecodeError, IndexError):
                break
            good = end
        if good < len(data):
            log.warning("%s: %d bytes after offset %d unreadable (a torn append); dropped",
                        self.path, len(data) - good, good)
        self._rewrite([(rid, data[at:at + n]) for rid, (_r, at, n) in held.items()])
        return [r for r, _at, _n in held.values()]

    def _rewrite(self, frames: list[tuple[int, bytes]]) -> None:
        """Replace the file with ``frames`` ((id, held frame) in order) and append after them."""
        tmp = self.path.with_suffix(".tmp")
        at: dict[int, tuple[int, int]] = {}
        size = 0
        with open(tmp, "wb") as f:
            for rid, frame in frames:
                f.write(frame)
                at[rid] = (size, len(frame))
                size += len(frame)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self._file is not None:
            self._file.close()
        if self._rfd >= 0:
            os.close(self._rfd)
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for appends
        self._rfd = os.open(self.path, os.O_RDONLY)
        self._at = at
        self._size = size
        self._done = 0

    def _frame_of(self, id_: int) -> bytes:
        offset, length = self._at[id_]
        if self._rfd < 0:
            raise OSError(f"{self.path} is not open")
        data = os.pread(self._rfd, length, offset)
        if len(data) != length:
            raise OSError(f"{self.path}: record {id_} cut short")
        return data

    def read(self, id_: int) -> HeldRecord:
        """The whole held message ``id_`` (content header and body read back from the file).
        Raises ``KeyError`` for an id that is not live, ``OSError`` / ``ValueError`` when the
        file cannot be read or the record is damaged (crc)."""
        frame = self._frame_of(id_)
        payload = frame[_FRAME.size:]
        if zlib.crc32(payload) != _FRAME.unpack_from(frame)[1]:
            raise ValueError(f"{self.path}: record {id_} damaged (crc)")
        return _decode_held(payload)

    def append_held(self, record: HeldRecord) -> HeldRecord:
        """Append a held message (written to the OS before returning); returns it ``light``."""
        frame = _frame(_encode_held(record))
        self._append(frame)
        self._at[record.id] = (self._size - len(frame), len(frame))
        return light(record)

    def append_done(self, id_: int) -> None:
        """Record that held message ``id_`` was routed or dropped; compacts the file when done
        records outnumber the live messages by ``COMPACT_SLACK``."""
        self._append(_frame(_DONE_REC.pack(_DONE, id_)))
        self._at.pop(id_, None)
        self._done += 1
        if self._done > len(self._at) + COMPACT_SLACK:
            self._rewrite([(rid, self._frame_of(rid)) for rid in list(self._at)])

    def _append(self, data: bytes) -> None:
        f = self._file
        if f is None:
            raise OSError(f"{self.path} is not open")
        f.write(data)
        f.flush()
        self._size += len(data)
        self._dirty = True

    def sync(self) -> None:
        """fsync what was appended since the last sync (nothing when nothing was)."""
        if self._dirty and self._file is not None:
            os.fsync(self._file.fileno())
            self._dirty = False

    def close(self) -> None:
        """Sync and close the file."""
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None
        if self._rfd >= 0:
            os.close(self._rfd)
            self._rfd = -1
