"""Tests of the stream log format and ``StreamLog``: append/read from any offset (cache and disk),
segment roll-over, retention by size and age, torn tails cut on reopen, timestamps, flush/fsync
descriptors, and the ``x-stream-offset`` header splice (checked against pamqp's decoder)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
from pamqp import commands

from queues.message import Message
from queues.stream import format as fmt
from queues.stream.log import Cursor, StreamLog
from queues.stream.manager import StreamManager, escape_name


class Clock:
    """Wall clock in seconds, moved by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def msg(i: int, size: int = 10, **props: object) -> Message:
    body = str(i).encode().ljust(size, b".")
    return Message.build("ex", f"rk{i}", body, commands.Basic.Properties(**props) if props
                         else None)


def body_index(m: Message) -> int:
    return int(m.body.rstrip(b"."))


def read_all(stream: StreamLog, offset: int, batch: int = 7) -> list[Message]:
    cursor = Cursor(offset)
    out: list[Message] = []
    for _ in range(100_000):
        got = stream.read(cursor, batch)
        if not got:
            return out
        out += got
    raise AssertionError("read did not end")


# --- format ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("props", [
    {},
    {"content_type": "text/plain"},
    {"content_type": "a", "content_encoding": "gzip", "headers": {"a": 1, "b": "x"},
     "delivery_mode": 2, "priority": 3, "message_id": "m1"},
    {"headers": {"x-stream-offset": 99, "k": "v"}},
    {"headers": {}},
])
def test_offset_header_splice_decodes_with_pamqp(props: dict) -> None:
    m = msg(1, **props)
    spliced = fmt.with_offset_header(m.header_payload, 12345678901)
    out = Message("ex", "rk", spliced, m.body)
    headers = out.properties.headers
    assert headers["x-stream-offset"] == 12345678901
    for key, value in (props.get("headers") or {}).items():
        if key != "x-stream-offset":
            assert headers[key] == value
    for key in ("content_type", "content_encoding", "delivery_mode", "priority", "message_id"):
        if key in props:
            assert getattr(out.properties, key) == props[key]
    assert spliced.count(b"\x0fx-stream-offset") == 1
    assert b"\x0fx-stream-offsetl" in spliced  # long-long, as RabbitMQ


def test_record_roundtrip_and_scan_stops_at_garbage() -> None:
    a = fmt.encode_record(5, 1000, b"\x02ex\x02rk", b"H" * 14, b"body")
    b = fmt.encode_record(6, 1001, b"\x00\x00", b"H" * 14, b"")
    data = a + b + b"\x00\x00\x00\x30junk"
    records, stop = fmt.scan_records(data, 0, 100, 5)
    assert [(r.offset, r.timestamp, r.body, r.position) for r in records] == [
        (5, 1000, b"body", 100), (6, 1001, b"", 100 + len(a))]
    assert stop == len(a) + len(b)
    assert fmt.decode_routing(records[0].routing) == ("ex", "rk")
    corrupt = bytearray(a)
    corrupt[-1] ^= 0xFF
    assert fmt.scan_records(bytes(corrupt), 0, 0, 5)[0] == []
    assert fmt.scan_records(a, 0, 0, 6)[0] == []  # out of sequence


def test_max_age_units() -> None:
    assert fmt.parse_max_age("30s") == 30_000
    assert fmt.parse_max_age("1h") == 3_600_000
    assert fmt.parse_max_age("7D") == 7 * 86_400_000
    assert fmt.parse_max_age("1M") == 30 * 86_400_000
    assert fmt.parse_max_age("2Y") == 2 * 365 * 86_400_000
    for bad in ("0s", "1x", "h", "-1h", "1.5h"):
        with pytest.raises(ValueError):
            fmt.parse_max_age(bad)


def test_file_header_checks(tmp_path: Path) -> None:
    fmt.parse_file_header(fmt.encode_file_header(7), 7)
    with pytest.raises(fmt.StreamFormatError):
        fmt.parse_file_header(fmt.encode_file_header(7), 8)
    with pytest.raises(fmt.StreamFormatError):
        fmt.parse_file_header(b"XXXX" + bytes(12), 0)
    (tmp_path / fmt.segment_name(0)).write_bytes(b"AMQL\x09" + bytes(11))
    with pytest.raises(fmt.StreamFormatError):
        StreamLog(tmp_path)


# --- log ------------------------------------------------------------------------------------------
def test_append_read_from_cache_and_disk(tmp_path: Path) -> None:
    stream = StreamLog(tmp_path, max_segment_bytes=4096, cache_bytes=600)
    for i in range(300):
        offset, stored = stream.append(msg(i, 40))
        assert offset == i
        assert stored.headers["x-stream-offset"] == i
    assert stream.segment_count > 3
    assert stream.first_offset == 0 and stream.next_offset == 300
    for start in (0, 1, 57, 150, 290, 299):
        got = read_all(stream, start)
        assert [body_index(m) for m in got] == list(range(start, 300))
        assert [m.headers["x-stream-offset"] for m in got] == list(range(start, 300))
        assert got[0].routing_key == f"rk{start}" and got[0].exchange == "ex"
    assert read_all(stream, 300) == []
    stream.close()


def test_reopen_keeps_offsets_and_cuts_torn_tail(tmp_path: Path) -> None:
    stream = StreamLog(tmp_path, max_segment_bytes=4096)
    for i in range(100):
        stream.append(msg(i, 30))
    stream.close()
    last = sorted(tmp_path.glob("*.seg"))[-1]
    size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage-partial")
    stream = StreamLog(tmp_path, max_segment_bytes=4096)
    assert stream.cuts and stream.cuts[0][1] == size
    assert last.stat().st_size == size
    assert stream.next_offset == 100
    assert [body_index(m) for m in read_all(stream, 95)] == [95, 96, 97, 98, 99]
    offset, _ = stream.append(msg(100))
    assert offset == 100
    stream.close()
    # a torn last record (crash mid-write) is cut too
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 3)
    stream = StreamLog(tmp_path, max_segment_bytes=4096)
    assert stream.next_offset == 100
    assert [body_index(m) for m in read_all(stream, 0)] == list(range(100))
    stream.close()


def test_retention_by_bytes_removes_whole_head_segments(tmp_path: Path) -> None:
    stream = StreamLog(tmp_path, max_segment_bytes=4096, max_bytes=3 * 4096)
    for i in range(1000):
        stream.append(msg(i, 50))
    assert stream.size_bytes <= 3 * 4096 + 4096
    assert stream.first_offset > 0
    files = sorted(tmp_path.glob("*.seg"))
    assert int(files[0].stem) == stream.first_offset
    got = read_all(stream, 0)  # behind the head: jumps to the first offset
    assert body_index(got[0]) == stream.first_offset and body_index(got[-1]) == 999
    stream.close()
    reopened = StreamLog(tmp_path, max_segment_bytes=4096)
    assert reopened.first_offset == int(files[0].stem) and reopened.next_offset == 1000
    reopened.close()


def test_retention_by_age(tmp_path: Path) -> None:
    clock = Clock()
    stream = StreamLog(tmp_path, max_segment_bytes=4096, max_age_ms=60_000, wall_clock=clock)
    for i in range(200):
        stream.append(msg(i, 50))
    segments = stream.segment_count
    assert segments > 2 and stream.age_deadline() == pytest.approx(clock.now + 60)
    clock.now += 30
    assert stream.apply_retention() == 0
    for i in range(200, 400):
        stream.append(msg(i, 50))
    clock.now += 31  # the first 200 are older than 60 s now, the rest are not
    removed = stream.apply_retention()
    assert removed >= segments - 1
    assert 150 <= stream.first_offset <= 200
    clock.now += 3600
    stream.apply_retention()
    assert stream.segment_count == 1  # the active segment is never deleted
    stream.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    stream = StreamLog(tmp_path, max_segment_bytes=4096, cache_bytes=100)
    stream.wall_clock = clock
    for i in range(300):
        clock.now = 1000.0 + i  # one message per second
        stream.append(msg(i, 40))
    assert stream.offset_for_timestamp(0) == 0
    assert stream.offset_for_timestamp(1000_000) == 0
    assert stream.offset_for_timestamp(1000_000 + 150_000) == 150
    assert stream.offset_for_timestamp(1000_000 + 150_001) == 151
    assert stream.offset_for_timestamp(1000_000 + 299_000) == 299
    assert stream.offset_for_timestamp(2000_000) == 300
    clock.now = 900.0  # a clock that goes back: timestamps stay monotonic
    stream.append(msg(300))
    assert stream.offset_for_timestamp(1000_000 + 299_000) == 299
    stream.close()


def test_big_record_gets_its_own_segment_and_reads_back(tmp_path: Path) -> None:
    stream = StreamLog(tmp_path, max_segment_bytes=4096, cache_bytes=10)
    stream.append(msg(0))
    big = Message.build("", "q", b"x" * 600_000)
    stream.append(big)
    stream.append(msg(2))
    got = read_all(stream, 0, batch=1)
    assert [len(m.body) for m in got] == [10, 600_000, 10]
    stream.close()
    stream = StreamLog(tmp_path, max_segment_bytes=4096)
    assert stream.next_offset == 3
    assert len(read_all(stream, 1)[0].body) == 600_000
    stream.close()


def test_flush_returns_descriptors_and_on_dirty(tmp_path: Path) -> None:
    calls = []
    stream = StreamLog(tmp_path, max_segment_bytes=4096, on_dirty=lambda: calls.append(1))
    assert stream.flush() != ([], -1)  # the new segment's directory entry
    stream.append(msg(0))
    stream.append(msg(1))
    assert calls == [1]
    fds, dir_fd = stream.flush()
    assert len(fds) == 1 and dir_fd == -1
    for fd in fds:
        os.fsync(fd)
        os.close(fd)
    assert stream.flush() == ([], -1)
    stream.append(msg(2))
    assert calls == [1, 1]
    stream.delete()
    assert not tmp_path.exists()


def test_manager_group_commit_and_names(tmp_path: Path) -> None:
    woken = []
    manager = StreamManager(tmp_path / "streams")
    manager.on_dirty = lambda: woken.append(1)
    a = manager.open_log("/", "a.b", segment_bytes=4096, max_bytes=None, max_age_ms=None)
    b = manager.open_log("v/h", "..", segment_bytes=4096, max_bytes=None, max_age_ms=None)
    assert a.directory.name == "a%2Eb" and b.directory.name == "%2E%2E"
    assert b.directory.parent.name == "v%2Fh"
    class Waiter:  # a publisher waiting for its stream confirms (the core's channel)
        def __init__(self, token: int) -> None:
            self.token = token
            self.seen: list[int] = []

        def advance_safe(self, source: object, up_to: int) -> bool:
            self.seen.append(up_to)
            return up_to >= self.token

    a.append(msg(1))
    w1 = Waiter(manager.next_generation)
    manager.watch(w1)
    b.append(msg(2))
    sync = manager.flush()
    w2 = Waiter(manager.next_generation)  # after the flush: the next commit covers it
    manager.watch(w2)
    assert len(sync.fds) == 2
    sync.run()
    assert manager.synced(sync) == 1
    assert w1.seen == [1] and w2.seen == [1]  # w2 still waits
    assert manager.sync_now() == 2
    assert w2.seen == [1, 2] and w1.seen == [1]  # w1 was done: no longer told
    assert woken
    manager.close()
    assert len(escape_name("q" * 255)) < 255


def test_timestamp_offset_spec_is_seconds() -> None:
    from queues.stream.queue import OffsetSpec, parse_offset_spec
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    assert parse_offset_spec(ts) == OffsetSpec("timestamp", int(ts.timestamp()) * 1000)
    assert parse_offset_spec(None) == OffsetSpec("next")
    assert parse_offset_spec(-5) == OffsetSpec("first")
    assert parse_offset_spec(7) == OffsetSpec("offset", 7)
    assert parse_offset_spec("1h") == OffsetSpec("interval", 3_600_000)
    assert parse_offset_spec(b"last") == OffsetSpec("last")
    for bad in ("1", "foo", True, 1.5, {}):
        with pytest.raises(ValueError):
            parse_offset_spec(bad)
