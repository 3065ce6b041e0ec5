"""A full disk (ENOSPC) under stream logs, on a real tmpfs that a filler file fills (found by the
fault harness's ``disk-full`` nemesis on streams: the broker exited, its stream syncer stopped by
the ``OSError``). What must hold: ``StreamManager.flush`` raises and every log keeps what it did
not write, no partial record stays in a segment, the same records are written once when space is
back, and none of them is taken for synced before it was. Before, the part of the buffer that
fitted stayed in the file and a retry wrote the whole buffer after it (records twice, the offsets
after them unreadable), and a log flushed before the failing one lost its pending fdatasync.
Needs root (mount)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from pamqp import commands

from queues.message import Message
from queues.store.tests.small_fs import UNAVAILABLE, fill, free, small_fs
from queues.stream.log import Cursor, StreamLog
from queues.stream.manager import StreamManager

pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def _msg(i: int, size: int) -> Message:
    return Message.build("", "s", str(i).encode().ljust(size, b"."), commands.Basic.Properties())


def _bodies(stream: StreamLog) -> list[bytes]:
    cursor, out = Cursor(stream.first_offset), []
    for _ in range(1000):   # bounded
        got = stream.read(cursor, 50)
        if not got:
            return out
        out += [bytes(m.body) for m in got]
    raise AssertionError("read did not end")


def test_a_flush_that_runs_out_of_space_keeps_every_record_and_writes_it_once(
        tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs") as fs:
        manager = StreamManager(fs / "streams")
        a = manager.open_log("/", "a", segment_bytes=1 << 20, max_bytes=None, max_age_ms=None)
        b = manager.open_log("/", "b", segment_bytes=1 << 20, max_bytes=None, max_age_ms=None)
        a.append(_msg(0, 100))
        b.append(_msg(0, 100))
        manager.sync_now()
        safe = manager.safe_generation
        sizes = {name: sum(p.stat().st_size for p in (fs / "streams").rglob(f"{name}/*"))
                 for name in ("a", "b")}
        fill(fs)
        a.append(_msg(1, 100))                  # fits in the last page's slack, or not
        b.append(_msg(1, 20_000))               # more than the slack: a short write, then ENOSPC
        with pytest.raises(OSError) as failed:
            manager.flush()
        assert failed.value.errno == errno.ENOSPC
        assert manager.safe_generation == safe  # nothing taken for synced
        assert sum(p.stat().st_size for p in (fs / "streams").rglob("b/*")) == sizes["b"]
        free(fs)
        manager.sync_now()
        assert manager.safe_generation > safe
        manager.close()
        again = StreamManager(fs / "streams")
        for name in ("a", "b"):
            log = again.open_log("/", name, segment_bytes=1 << 20, max_bytes=None,
                                 max_age_ms=None)
            got = _bodies(log)
            assert [g[:1] for g in got] == [b"0", b"1"], name   # each record once, in order
            assert len(got[1]) == (20_000 if name == "b" else 100)
        again.close()
