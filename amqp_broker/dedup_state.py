"""Saving and loading the publish dedup windows of durable queues, so they survive a restart.

Owns one JSON file, ``<data_dir>/dedup.json``: ``{"version": 1, "queues": {"<vhost>": {"<queue>":
[[key, remaining_ms], ...]}}}`` (``remaining_ms`` -1: no expiry), written atomically (temporary
file, fsync, rename). The app writes it every ``SNAPSHOT_SECONDS`` while windows change and on a
clean shutdown, and loads it at start after recovery; besides, recovery re-adds the keys of the
messages still in each queue. A kill -9 may so forget at most the keys of messages that were
consumed in the last ``SNAPSHOT_SECONDS``; a retried publish of one of those would be accepted again.
Source: issue "Durable broker" (publish dedup window survives a restart).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from queues.dedup import dedup_key

from .core.broker import Broker

__all__ = ["save", "load", "collect", "write", "changes", "SNAPSHOT_SECONDS", "FILE_NAME"]

log = logging.getLogger(__name__)

SNAPSHOT_SECONDS = 1.0
FILE_NAME = "dedup.json"


def _windows(broker: Broker):
    for vhost in broker.vhosts.values():
        for q in vhost.dedup_queues:  # not every queue: polled every second (issue 14)
            if q.durable and q.dedup is not None:
                yield vhost.name, q


def changes(broker: Broker) -> int:
    """A number that changes whenever some durable window changed (cheap: for polling)."""
    return sum(q.dedup.changes for _v, q in _windows(broker))


def collect(broker: Broker) -> dict:
    """Every durable queue's window as the file's JSON value (call on the broker's thread)."""
    queues: dict[str, dict[str, list]] = {}
    for vhost, q in _windows(broker):
        queues.setdefault(vhost, {})[q.name] = q.dedup.snapshot()
    return {"version": 1, "queues": queues}


def write(data_dir: Path, payload: dict) -> None:
    """Write ``payload`` (from ``collect``) atomically; safe in a worker thread. Raises OSError."""
    path = data_dir / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(data_dir: Path, broker: Broker) -> None:
    """``collect`` then ``write``, in the caller's thread."""
    write(data_dir, collect(broker))


def load(data_dir: Path, broker: Broker) -> int:
    """Restore windows: keys of recovered messages, then the saved snapshot. Returns keys loaded.
    A missing or unreadable file is logged and ignored (the windows then hold recovered keys)."""
    total = 0
    for _vhost, q in _windows(broker):
        for entry in q.iter_ready():  # one at a time: a paging queue reads its backlog back
            key = dedup_key(entry.message)
            if key is not None:
                q.dedup.check_and_add(key)
                total += 1
    path = data_dir / FILE_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return total
    except (OSError, ValueError) as exc:
        log.error("cannot read %s: %s; dedup windows start from the recovered messages", path, exc)
        return total
    for vhost_name, queues in data.get("queues", {}).items():
        vhost = broker.vhosts.get(vhost_name)
        for name, items in queues.items():
            q = vhost.queues.get(name) if vhost is not None else None
            dedup = getattr(q, "dedup", None)  # queue types with a dedup window
            if dedup is None:
                continue
            dedup.restore((str(k), int(r)) for k, r in items)
            total += len(items)
    return total
