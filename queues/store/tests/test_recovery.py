"""Recovery from torn and corrupt segment tails: cut at the first bad record, keep the rest."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from queues.store import FormatError, MessageStore
from queues.store import format as fmt

from .support import bodies, msg, segment_files


def write_messages(directory: Path, n: int, **kw) -> tuple[Path, list[int]]:
    """A store with ``n`` synced messages on "q", left as after kill -9 (no CLEAN record)."""
    store = MessageStore(directory, sync="none", **kw)
    ids = [store.append("q", msg(f"message-{i}".encode() * 3)) for i in range(n)]
    store.sync()
    store.abandon()
    return segment_files(directory)[-1], ids


def record_offsets(path: Path) -> list[tuple[int, int, int]]:
    """(offset, length, kind) of every valid record of a segment file."""
    data = path.read_bytes()
    return [(off, total, kind) for off, total, kind, *_ in fmt.scan(data, fmt.Scan(0))]


def test_torn_last_record_at_every_byte(tmp_path, caplog):
    path, ids = write_messages(tmp_path, 5)
    original = path.read_bytes()
    off, total, kind = record_offsets(path)[-1]
    assert kind == fmt.KIND_PUBLISH
    caplog.set_level(logging.WARNING)
    for cut in range(off, off + total):
        path.write_bytes(original[:cut])
        store = MessageStore(tmp_path, sync="none")
        rec = store.recover()
        assert [r.store_id for r in rec["q"]] == ids[:-1], cut
        assert store.cuts == ([] if cut == off else [(path.name, off, cut - off, store.cuts[0][3])])
        # appends continue after the cut, with a fresh id above everything seen
        assert store.append("q", msg("after")) == ids[-1]
        store.abandon()
    assert "cutting" in caplog.text


@pytest.mark.parametrize("where", ["length", "crc", "kind", "id", "payload", "last byte"])
def test_corrupt_byte_in_last_record_cuts_there(tmp_path, where):
    path, ids = write_messages(tmp_path, 4)
    off, total, _ = record_offsets(path)[-1]
    at = {"length": off, "crc": off + 5, "kind": off + 8, "id": off + 15, "payload": off + 30,
          "last byte": off + total - 1}[where]
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(data)
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids[:-1]
    assert path.stat().st_size > off and store.cuts[0][1] == off
    store.close()


def test_corruption_in_the_middle_loses_the_rest_of_that_file_only(tmp_path, caplog):
    path, ids = write_messages(tmp_path, 150, segment_bytes=4096)
    files = segment_files(tmp_path)
    assert len(files) >= 3
    older = files[0]
    offsets = record_offsets(older)
    publishes = [o for o in offsets if o[2] == fmt.KIND_PUBLISH]
    bad_off = publishes[2][0]
    data = bytearray(older.read_bytes())
    data[bad_off + 20] ^= 1
    older.write_bytes(data)
    caplog.set_level(logging.ERROR)
    store = MessageStore(tmp_path)
    got = [r.store_id for r in store.recover()["q"]]
    lost = {ids[i] for i in range(len(publishes)) if i >= 2}
    assert got == [i for i in ids if i not in lost]
    assert "synced data was lost" in caplog.text
    store.close()


def test_zero_filled_tail_is_cut(tmp_path):
    path, ids = write_messages(tmp_path, 3)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids
    store.close()


def test_torn_file_header_of_newest_file(tmp_path):
    path, ids = write_messages(tmp_path, 3)
    newer = tmp_path / fmt.segment_name(ids[-1] + 1)
    newer.write_bytes(fmt.file_header(ids[-1] + 1)[:7])
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids
    assert store.append("q", msg("x")) == ids[-1] + 1
    store.close()
    store = MessageStore(tmp_path)
    assert len(store.recover()["q"]) == 4
    store.close()


def test_foreign_or_newer_files_are_refused(tmp_path):
    path, _ = write_messages(tmp_path, 1)
    data = bytearray(path.read_bytes())
    data[4:6] = struct.pack(">H", 99)
    path.write_bytes(data)
    with pytest.raises(FormatError, match="version 99"):
        MessageStore(tmp_path)
    data[0:4] = b"NOPE"
    path.write_bytes(data)
    with pytest.raises(FormatError, match="magic"):
        MessageStore(tmp_path)


# in the magic, the magic, the version (to 8193), the version (to 3, to 65), base
@pytest.mark.parametrize("bit", [0, 9, 37, 41, 46, 127])
def test_a_header_with_a_flipped_bit_is_rewritten_and_its_messages_kept(tmp_path, caplog, bit):
    """A bit flipped in a segment's header (issue 24, the corrupt nemesis) used to stop the
    broker at start (FormatError: bad segment magic): the records carry their own crc. Bits 41
    and 46 make the version 3 and 65, which were refused as a newer format (found by the
    corrupt nemesis' soak: a broker that never came back)."""
    path, ids = write_messages(tmp_path, 3)
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(data)
    caplog.set_level(logging.ERROR)
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids
    assert "damaged header" in caplog.text
    store.close()
    assert path.read_bytes()[:fmt.FILE_HEADER_SIZE] == fmt.file_header(ids[0])


def test_unrelated_files_are_ignored(tmp_path):
    _, ids = write_messages(tmp_path, 2)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "123.seg").write_bytes(b"junk")  # not a 20-digit name
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids
    store.close()


def test_unsynced_acks_may_be_lost_but_synced_ones_never(tmp_path):
    store = MessageStore(tmp_path)
    ids = [store.append("q", msg(str(i))) for i in range(4)]
    store.ack("q", ids[0])
    store.sync()
    store.ack("q", ids[1])  # not synced: lost in the crash
    store.abandon()
    store = MessageStore(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids[1:]
    assert all(r.redelivered for r in store.recover()["q"])
    store.close()


def test_read_detects_on_disk_corruption(tmp_path):
    store = MessageStore(tmp_path)
    sid = store.append("q", msg(b"b" * 50))
    store.sync()
    path = segment_files(tmp_path)[-1]
    fd = os.open(path, os.O_RDWR)
    size = os.fstat(fd).st_size
    os.pwrite(fd, b"X", size - 5)
    os.close(fd)
    from queues.store import StoreError
    with pytest.raises(StoreError, match="checksum"):
        store.read_body(sid)
    store.abandon()
    assert bodies(MessageStore(tmp_path, sync="none").recover(), "q") == []
