"""Unit tests of a replicated stream's pure parts (issue 25): ``cluster.stream.machine`` (offsets
and timestamps in log order, per-origin seqs: duplicates apply once, gaps are reported, older
incarnations ignored; the leader's Retain; snapshot/restore) and the ``StreamLog`` methods the
replicas use (a record copied from one replica's segments to another's keeps its offset, time,
routing, header and body; retention points; a reset)."""

from __future__ import annotations

from pamqp import commands

from cluster.quorum.machine import Applied, Gap
from cluster.stream.machine import (
    Appended,
    Retained,
    StreamMachine,
    append_envelope,
    encode_append,
    encode_retain,
)
from queues.message import Message
from queues.stream.log import StreamLog


def _append(origin: str, seq: int, ts: int, body: bytes) -> bytes:
    return append_envelope(origin, seq, encode_append(ts, b"\x00\x01q", b"H" * 14, body))


def test_appends_get_offsets_in_log_order_and_timestamps_never_go_back():
    m = StreamMachine()
    out = m.apply(1, _append("n2#1", 1, 1000, b"a"))
    assert out == [Appended(0, 1000, b"\x00\x01q", b"H" * 14, b"a"), Applied("n2#1", 1)]
    out = m.apply(2, _append("n3#1", 1, 900, b"b"))   # n3's clock is behind: raised
    assert out[0] == Appended(1, 1000, b"\x00\x01q", b"H" * 14, b"b")
    assert (m.next_offset, m.length) == (2, 2)


def test_a_resent_append_applies_once_and_a_gap_asks_for_a_resend():
    m = StreamMachine()
    m.apply(1, _append("n2#1", 1, 1, b"a"))
    assert m.apply(2, _append("n2#1", 1, 1, b"a")) == [Applied("n2#1", 1)]   # duplicate
    assert m.apply(3, _append("n2#1", 3, 1, b"c")) == [Gap("n2#1", 2)]
    assert m.next_offset == 1
    assert m.apply(4, _append("n2#0", 2, 1, b"old")) == []   # an older incarnation of n2
    assert m.apply(5, _append("n2#2", 1, 1, b"new"))[0].offset == 1   # a restarted n2


def test_retain_moves_the_first_offset_forward_only():
    m = StreamMachine()
    for i in range(5):
        m.apply(i + 1, _append("n2#1", i + 1, 1, b"x"))
    assert m.apply(6, encode_retain(3)) == [Retained(3)]
    assert m.apply(7, encode_retain(2)) == []
    assert m.apply(8, encode_retain(99)) == [Retained(5)]   # never past the end
    assert (m.first_offset, m.length) == (5, 0)


def test_snapshot_restore_round_trip():
    m = StreamMachine()
    m.apply(1, _append("n2#1", 1, 7, b"a"))
    m.apply(2, encode_retain(1))
    copy = StreamMachine()
    copy.restore(m.snapshot())
    assert copy.snapshot() == m.snapshot()
    assert copy.apply(3, _append("n2#1", 1, 7, b"a")) == [Applied("n2#1", 1)]


def _msg(i: int) -> Message:
    return Message.build("ex", f"rk{i}", b"body-%d" % i,
                         commands.Basic.Properties(message_id=f"id-{i}"))


def test_records_copied_between_replicas_keep_offset_time_and_content(tmp_path):
    a = StreamLog(tmp_path / "a", max_segment_bytes=4096)
    b = StreamLog(tmp_path / "b", max_segment_bytes=4096)
    for i in range(100):
        a.append(_msg(i), 1_700_000_000_000 + i)
    while b.next_offset < a.next_offset:
        records = a.read_records(b.next_offset, 1000)
        assert records
        for rec in records:
            b.append_record(rec)
    assert a.segment_count == b.segment_count > 1   # the same segment boundaries
    assert [(r.offset, r.timestamp, r.routing, r.header, r.body)
            for r in b.read_records(37, 10)] == \
        [(r.offset, r.timestamp, r.routing, r.header, r.body) for r in a.read_records(37, 10)]
    assert b.offset_for_timestamp(1_700_000_000_050) == 50
    point = a.retention_point(a.size_bytes // 2, None, 0)
    assert 0 < point < a.next_offset
    assert a.truncate_head(point) > 0 and a.first_offset == point
    b.reset(point + 1000)
    assert (b.first_offset, b.next_offset, b.segment_count) == (point + 1000, point + 1000, 1)
    a.close()
    b.close()
