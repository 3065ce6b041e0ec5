"""The operation history of one run: every publish, delivery, fault and view change, in order.

Modelled on Jepsen's history (an ordered list of operations, each ``invoke`` followed by ``ok``,
``fail`` or ``info``; Kingsbury's RabbitMQ analysis, 2014, and RabbitMQ's own Jepsen suite record
enqueues and dequeues this way). Events are plain dicts, JSON-ready, written one per line to
``history.jsonl`` when the run keeps its files. Shapes (``t`` is seconds since the run's start,
monotonic clock; ``client`` names the client, e.g. ``pub-n1-pika``):

- ``{"t", "op": "publish", "type": "invoke", "id": int, "client", "broker"}``
- ``{"t", "op": "publish", "type": "ok"|"fail"|"info", "id", "client", "broker", "error"?}``
  (``fail``: nack, return, closed channel/connection; ``info``: no answer within the confirm
  timeout, the outcome unknown; an ``ok`` after an ``info`` is a late confirm and counts as ok)
- ``{"t", "op": "deliver", "id": int, "client", "broker", "redelivered": bool, "drain": bool}``
- ``{"t", "op": "nemesis", "action": str, ...details}`` (a fault started or healed)
- ``{"t", "op": "view", "broker", "view": int|None, "members": [str], "reachable": bool}``
- ``{"t", "op": "phase", "phase": str}`` (workload start/stop, heal, drain start/end)
- ``{"t", "op": "client", "client", "event": str, "error"?}`` (connects, disconnects)

Thread-safe: clients in threads and an asyncio loop append concurrently.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["History", "load"]


class History:
    """An append-only, thread-safe list of events with a shared clock.

    ``record(op, **fields)`` stamps ``t`` (s since construction, 1 ms resolution) and returns the
    event; ``events()`` returns a copy; ``write(path)`` writes JSON lines."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []

    def now(self) -> float:
        """Seconds since this history began."""
        return self._clock() - self._start

    def record(self, op: str, **fields: Any) -> dict[str, Any]:
        """Append one event ``{"t", "op", **fields}`` and return it."""
        event = {"t": round(self.now(), 3), "op": op, **fields}
        with self._lock:
            self._events.append(event)
        return event

    def events(self) -> list[dict[str, Any]]:
        """A copy of every event so far, in recording order."""
        with self._lock:
            return list(self._events)

    def write(self, path: Path) -> None:
        """Write the events as JSON lines to ``path`` (overwrites)."""
        with open(path, "w") as f:
            for event in self.events():
                f.write(json.dumps(event, separators=(",", ":")) + "\n")


def load(path: Path) -> list[dict[str, Any]]:
    """Read a ``history.jsonl`` back (for re-checking a kept run). Raises ``OSError``,
    ``json.JSONDecodeError``."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
