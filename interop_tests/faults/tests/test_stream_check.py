"""The stream checks of the fault harness, pure and on files: what a stream's readers saw
(``stream_check``) and every broker's segment files compared (``stream_replicas``). No processes."""

from __future__ import annotations

from pathlib import Path

from interop_tests.faults.stream_check import check_stream
from interop_tests.faults.stream_replicas import compare_segments
from queues.message import Message
from queues.stream.log import StreamLog
from queues.stream.manager import escape_name


def ok(ident: int) -> dict:
    return {"t": 0.0, "op": "publish", "type": "ok", "id": ident, "client": "pub-n1"}


def read(client: str, offset: int | None, ident: int, drain: bool = False,
         broker: str = "n1") -> dict:
    return {"t": 1.0, "op": "deliver", "id": ident, "client": client, "broker": broker,
            "offset": offset, "drain": drain}


def test_one_log_read_in_order_everywhere_is_valid() -> None:
    events = [ok(10), ok(11), ok(12),
              read("con-n1", 0, 10), read("con-n1", 1, 11), read("con-n1", 2, 12),
              read("con-n2", 0, 10), read("con-n2", 1, 11),
              read("con-n2", 2, 12)]   # resumed after a reconnect: the offset after the last
    events += [read("drain-n1", o, i, drain=True) for o, i in ((0, 10), (1, 11), (2, 12))]
    events += [read("drain-n2", o, i, True, "n2") for o, i in ((0, 10), (1, 11), (2, 12))]
    result = check_stream(events, ["n1", "n2"])
    assert result.valid, result.as_dict()
    assert result.offsets == 3
    assert result.drain_missing == {"n1": 0, "n2": 0}


def test_gaps_conflicts_double_appends_and_short_drains_are_found() -> None:
    events = [ok(1), ok(2), ok(3),
              read("con-n1", 0, 1), read("con-n1", 2, 3),              # a gap
              read("con-n2", 0, 1), read("con-n2", 1, 2), read("con-n2", 0, 1),   # back
              read("con-n3", 0, 7),                                    # offset 0 is id 1
              read("con-n4", 0, 1), read("con-n4", 1, 2), read("con-n4", 2, 3), read("con-n4", 3, 3),
              read("drain-n1", 0, 1, True, "n1"), read("drain-n1", 1, 2, True, "n1")]
    result = check_stream(events, ["n1", "n2", "n3"])
    assert result.out_of_order == 2
    assert result.conflicts == 1            # offset 0: ids 1 and 7
    assert result.multi_offset == 1         # id 3 at offsets 2 and 3
    assert result.drain_missing == {"n1": 1, "n2": 3, "n3": 3}
    assert not result.valid
    assert result.as_dict()["examples"]


def _stream(data_dir: Path, bodies: list[bytes]) -> None:
    directory = data_dir / "streams" / escape_name("/") / escape_name("s")
    log = StreamLog(directory)
    for i, body in enumerate(bodies):
        log.append(Message.build("", "s", body, None), 1000 + i)
    log.close()


def test_segment_files_that_differ_or_lag_are_reported(tmp_path: Path) -> None:
    same = [b"a", b"b", b"c"]
    _stream(tmp_path / "n1", same)
    _stream(tmp_path / "n2", same)
    dirs = {"n1": tmp_path / "n1", "n2": tmp_path / "n2"}
    agreed = compare_segments(dirs, "s", scratch=tmp_path)
    assert agreed.problems == [] and agreed.messages == {"n1": 3, "n2": 3}
    _stream(tmp_path / "n3", [b"a", b"X"])
    report = compare_segments({**dirs, "n3": tmp_path / "n3"}, "s", scratch=tmp_path)
    assert report.diverged_at == 1
    assert report.lagging == {"n3": 2}
    assert len(report.problems) == 2
