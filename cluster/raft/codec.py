"""Wire encoding of Raft messages for peer links: ``encode(message) -> bytes``, ``decode(bytes)``.

Owns: the byte layout below. Must not know: how the bytes travel (the lead's peer link carries
them, tagged with the queue's Raft group), sockets, files.

Layout (big-endian)::

    version u8 = 1, type u8, term u64, then by type:
    1 RequestVote         candidate (name), last_log_index u64, last_log_term u64, flags u8
                          (bit0 pre_vote, bit1 transfer)
    2 RequestVoteReply    granted u8, pre_vote u8
    3 AppendEntries       leader (name), prev_index u64, prev_term u64, commit u64, count u32,
                          count x entry
    4 AppendEntriesReply  success u8, match_index u64, reject_index u64, hint_index u64,
                          hint_term u64
    5 InstallSnapshot     leader (name), index u64, term u64, member count u16, members (name),
                          data (the rest)
    6 TimeoutNow          leader (name)
    entry: index u64, term u64, kind u8, length u32, data
    name:  u8 length, utf-8

Sources: Raft paper figure 2 (the fields of each RPC), thesis §3.10 and §9.6 (TimeoutNow,
pre-vote).
"""

from __future__ import annotations

import struct

from .messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    InstallSnapshot,
    Message,
    RequestVote,
    RequestVoteReply,
    Snapshot,
    TimeoutNow,
)

__all__ = ["encode", "decode", "CodecError", "VERSION"]

VERSION = 1
_HEAD = struct.Struct(">BBQ")
_QQ = struct.Struct(">QQ")
_QQQ = struct.Struct(">QQQ")
_REPLY = struct.Struct(">BQQQQ")
_ENTRY = struct.Struct(">QQBI")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


class CodecError(ValueError):
    """Bytes that are not a Raft message of this version (truncated, unknown type, bad name)."""


def _name(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"node id longer than 255 bytes: {text[:40]!r}")
    return bytes((len(raw),)) + raw


def encode(msg: Message) -> bytes:
    """The bytes of ``msg``. Raises ``ValueError`` for a node id over 255 bytes."""
    if isinstance(msg, AppendEntries):
        parts = [_HEAD.pack(VERSION, 3, msg.term), _name(msg.leader),
                 _QQQ.pack(msg.prev_index, msg.prev_term, msg.commit),
                 _U32.pack(len(msg.entries))]
        for e in msg.entries:
            parts.append(_ENTRY.pack(e.index, e.term, e.kind, len(e.data)))
            parts.append(e.data)
        return b"".join(parts)
    if isinstance(msg, AppendEntriesReply):
        return _HEAD.pack(VERSION, 4, msg.term) + _REPLY.pack(
            msg.success, msg.match_index, msg.reject_index, msg.hint_index, msg.hint_term)
    if isinstance(msg, RequestVote):
        return b"".join((_HEAD.pack(VERSION, 1, msg.term), _name(msg.candidate),
                         _QQ.pack(msg.last_log_index, msg.last_log_term),
                         bytes((msg.pre_vote | (msg.transfer << 1),))))
    if isinstance(msg, RequestVoteReply):
        return _HEAD.pack(VERSION, 2, msg.term) + bytes((msg.granted, msg.pre_vote))
    if isinstance(msg, InstallSnapshot):
        s = msg.snapshot
        return b"".join((_HEAD.pack(VERSION, 5, msg.term), _name(msg.leader),
                         _QQ.pack(s.index, s.term), _U16.pack(len(s.members)),
                         *(_name(m) for m in s.members), s.data))
    return _HEAD.pack(VERSION, 6, msg.term) + _name(msg.leader)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.data):
            raise CodecError("message truncated")
        out = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return out

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CodecError("message truncated")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def name(self) -> str:
        (n,) = self.take(_B)
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as exc:
            raise CodecError("node id is not utf-8") from exc


_B = struct.Struct(">B")
#: EntryKind by value (0, 1, 2...): one lookup per decoded entry instead of the enum's call
_KINDS = tuple(sorted(EntryKind))
if [kind.value for kind in _KINDS] != list(range(len(_KINDS))):
    raise ImportError("EntryKind values must be 0..n-1 for the codec's lookup")


def decode(data: bytes | memoryview) -> Message:
    """The message encoded in ``data``. Raises ``CodecError`` when malformed."""
    r = _Reader(data)
    version, kind, term = r.take(_HEAD)
    if version != VERSION:
        raise CodecError(f"unsupported Raft message version {version}")
    if kind == 3:
        leader = r.name()
        prev_index, prev_term, commit = r.take(_QQQ)
        (count,) = r.take(_U32)
        entries = []
        for _ in range(count):
            index, eterm, ekind, length = r.take(_ENTRY)
            if ekind >= len(_KINDS):
                raise CodecError(f"unknown entry kind {ekind}")
            entries.append(Entry(index, eterm, _KINDS[ekind], r.raw(length)))
        return AppendEntries(term, leader, prev_index, prev_term, tuple(entries), commit)
    if kind == 4:
        success, match, reject, hint_index, hint_term = r.take(_REPLY)
        return AppendEntriesReply(term, bool(success), match, reject, hint_index, hint_term)
    if kind == 1:
        candidate = r.name()
        last_index, last_term = r.take(_QQ)
        (flags,) = r.take(_B)
        return RequestVote(term, candidate, last_index, last_term, bool(flags & 1),
                           bool(flags & 2))
    if kind == 2:
        granted, pre_vote = r.take(struct.Struct(">BB"))
        return RequestVoteReply(term, bool(granted), bool(pre_vote))
    if kind == 5:
        leader = r.name()
        index, sterm = r.take(_QQ)
        (count,) = r.take(_U16)
        members = tuple(r.name() for _ in range(count))
        return InstallSnapshot(term, leader, Snapshot(index, sterm, members,
                                                      r.raw(len(r.data) - r.pos)))
    if kind == 6:
        return TimeoutNow(term, r.name())
    raise CodecError(f"unknown Raft message type {kind}")
