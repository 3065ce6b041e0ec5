"""The wire codec of Raft messages (``cluster.raft.codec``): round trips and malformed input."""

from __future__ import annotations

import pytest

from cluster.raft.codec import CodecError, decode, encode
from cluster.raft.messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    InstallSnapshot,
    RequestVote,
    RequestVoteReply,
    Snapshot,
    TimeoutNow,
)

MESSAGES = [
    RequestVote(7, "n1", 10, 6, pre_vote=True),
    RequestVote(7, "n1", 10, 6, transfer=True),
    RequestVoteReply(7, True, pre_vote=True),
    RequestVoteReply(8, False),
    AppendEntries(3, "lé", 5, 2, (Entry(6, 3, EntryKind.COMMAND, b"\x00" * 300),
                                  Entry(7, 3, EntryKind.CONFIG, b"a\nb"),
                                  Entry(8, 3, EntryKind.NOOP, b"")), 4),
    AppendEntries(3, "n0", 0, 0, (), 0),
    AppendEntriesReply(3, True, match_index=9),
    AppendEntriesReply(3, False, reject_index=9, hint_index=4, hint_term=2),
    InstallSnapshot(4, "n2", Snapshot(100, 3, ("n0", "n1", "n2"), b"state" * 1000)),
    InstallSnapshot(4, "n2", Snapshot(1, 1, (), b"")),
    TimeoutNow(9, "n0"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: object) -> None:
    assert decode(encode(msg)) == msg  # type: ignore[arg-type]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_truncation_is_refused(msg: object) -> None:
    data = encode(msg)  # type: ignore[arg-type]
    whole = len(data)
    if isinstance(msg, InstallSnapshot):   # its data is "the rest": a shorter tail is valid
        whole = len(encode(InstallSnapshot(msg.term, msg.leader,
                                           Snapshot(1, 1, msg.snapshot.members, b""))))
    for n in range(whole):
        with pytest.raises(CodecError):
            decode(data[:n])


def test_unknown_version_type_and_kind_are_refused() -> None:
    data = bytearray(encode(TimeoutNow(1, "a")))
    with pytest.raises(CodecError):
        decode(bytes([2]) + bytes(data[1:]))
    with pytest.raises(CodecError):
        decode(bytes(data[:1]) + bytes([99]) + bytes(data[2:]))
    bad = bytearray(encode(AppendEntries(1, "a", 0, 0, (Entry(1, 1, EntryKind.NOOP, b""),), 0)))
    bad[-5] = 7   # the entry's kind byte
    with pytest.raises(CodecError):
        decode(bytes(bad))
