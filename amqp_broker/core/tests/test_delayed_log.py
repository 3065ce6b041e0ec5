"""Tests for core.delayed_log: held messages come back after a reopen, done ones do not, and a
torn append (a crash mid-write) is cut off without losing the records before it."""

from __future__ import annotations

from pathlib import Path

from amqp_broker.core.delayed_log import DelayedLog, HeldRecord, light


def _record(i: int) -> HeldRecord:
    return HeldRecord(i, 1_000 + i, 50, "/", "dx", "k", b"\x00<header>", b"body %d" % i)


def test_reopen_returns_the_held_records_not_the_done_ones(tmp_path: Path) -> None:
    log = DelayedLog(tmp_path / "delayed.log")
    assert log.open() == []
    for i in (1, 2, 3):
        log.append_held(_record(i))
    log.append_done(2)
    log.close()
    again = DelayedLog(tmp_path / "delayed.log")
    # the holder keeps routing facts only; the content is read back when due
    assert again.open() == [light(_record(1)), light(_record(3))]
    assert [again.read(1), again.read(3)] == [_record(1), _record(3)]
    again.close()


def test_compaction_keeps_the_live_messages_readable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("amqp_broker.core.delayed_log.COMPACT_SLACK", 1)
    path = tmp_path / "delayed.log"
    log = DelayedLog(path)
    log.open()
    for i in range(1, 7):
        assert log.append_held(_record(i)) == light(_record(i))
    before = path.stat().st_size
    for i in (1, 2, 3, 4):  # the 4th done record passes 2 live + 1: the file is rewritten
        log.append_done(i)
    assert path.stat().st_size < before
    assert [log.read(5), log.read(6)] == [_record(5), _record(6)]
    log.append_held(_record(7))
    assert log.read(7) == _record(7)
    log.close()
    assert DelayedLog(path).open() == [light(_record(i)) for i in (5, 6, 7)]


def test_a_torn_tail_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "delayed.log"
    log = DelayedLog(path)
    log.open()
    log.append_held(_record(1))
    log.append_held(_record(2))
    log.close()
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # the second append cut short
    again = DelayedLog(path)
    assert again.open() == [light(_record(1))]
    again.append_held(_record(3))  # appends go on after the cut
    assert again.read(3) == _record(3)
    again.close()
    assert DelayedLog(path).open() == [light(_record(1)), light(_record(3))]
