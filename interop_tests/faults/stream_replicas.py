"""After a stream run: every broker's segment files of the workload stream, read and compared.

A replicated stream's records live in each broker's segment files
(``<data dir>/streams/<vhost>/<queue>/*.seg``, ``queues.stream.manager``), written from what its
Raft group applied (or fetched from a member, on a broker outside the members). Read offline,
once the brokers are stopped, from a copy (opening a log cuts torn tails) with the broker's own
``queues.stream.log.StreamLog``. What must hold after the heal, the drain and a quiet second:

- **no divergence**: at every offset two brokers hold, the same record (timestamp, routing,
  content header, body) -- one log, the same offsets everywhere (RabbitMQ "Streams");
- **caught up**: every broker's log ends at the same offset (one behind is ``lagging``).

The result is a ``replicas.GroupReport`` named ``segments of stream <queue>``: ``last`` is
(next offset, 0) per broker, ``diverged_at`` the first offset held differently, ``messages`` the
records each holds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from queues.stream.format import Record
from queues.stream.log import StreamLog
from queues.stream.manager import escape_name

from .replicas import GroupReport

__all__ = ["compare_segments", "read_segments"]

_BATCH_BYTES = 1 << 20


def read_segments(directory: Path, scratch: Path) -> list[Record]:
    """Every record of the stream log in ``directory``, opened from a copy in ``scratch`` (made
    here). Raises ``OSError`` / ``StreamFormatError``."""
    scratch.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.is_file() and path.suffix == ".seg":
            shutil.copyfile(path, scratch / path.name)
    log = StreamLog(scratch)
    try:
        out: list[Record] = []
        offset = log.first_offset
        for _ in range(log.next_offset - log.first_offset + 1):   # bounded: a record a batch
            if offset >= log.next_offset:
                break
            batch = log.read_records(offset, _BATCH_BYTES)
            if not batch:
                break
            out += batch
            offset = batch[-1].offset + 1
        return out
    finally:
        log.close(fsync=False)


def compare_segments(data_dirs: dict[str, Path], queue: str, vhost: str = "/",
                     scratch: Path | None = None) -> GroupReport:
    """Read and compare stream ``queue`` of ``vhost`` in every broker's data dir (by name). A
    broker without the stream's directory holds nothing (an empty log: ``lagging`` when the
    others hold records); one that cannot be read is in ``errors``."""
    report = GroupReport(f"segments of stream {queue}")
    logs: dict[str, dict[int, tuple[int, bytes, bytes, bytes]]] = {}
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        for name, data_dir in sorted(data_dirs.items()):
            directory = data_dir / "streams" / escape_name(vhost) / escape_name(queue)
            if not directory.is_dir():
                logs[name] = {}
                continue
            try:
                records = read_segments(directory, Path(tmp) / name)
            except Exception as exc:   # noqa: BLE001 -- any failure is the finding
                report.errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            logs[name] = {r.offset: (r.timestamp, r.routing, r.header, r.body) for r in records}
    for name, held in logs.items():
        report.last[name] = (max(held) + 1 if held else 0, 0)
        report.messages[name] = len(held)
    offsets = sorted({o for held in logs.values() for o in held})
    for offset in offsets:
        versions = {name: held[offset] for name, held in logs.items() if offset in held}
        if len(set(versions.values())) > 1:
            report.diverged_at = offset
            report.diverged = {n: [v[0], len(v[3])] for n, v in versions.items()}
            break
    if report.last:
        newest = max(report.last.values())
        report.lagging = {n: last[0] for n, last in report.last.items() if last != newest}
        report.state_index = newest[0]
    return report
