"""What every workload client shares: its settings, the id source, and the stop signal.

Publishers take unique integers from one :class:`IdSource` (the body and ``message_id`` of each
message is the id in decimal), as the enqueue values of Jepsen's queue workloads. Every client
loop is bounded twice: by the shared ``stop`` event (time) and by ``max_connects`` (count).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from .history import History

__all__ = ["ClientSettings", "IdSource", "parse_id", "record_delivery"]


@dataclass(frozen=True)
class ClientSettings:
    """Workload settings shared by every client.

    ``queue``: the queue's name; ``queue_args``: its declare arguments (``x-queue-type``);
    ``rate``: publishes per second per publisher; ``window``: unconfirmed publishes a publisher
    may have outstanding; ``confirm_timeout``: s without an answer before a publish is recorded
    ``info`` (unknown); ``prefetch``: consumer prefetch count; ``ack_delay``: s a consumer waits
    before acking each delivery (a slow consumer keeps relayed messages waiting at its broker);
    ``reconnect_delay``: s between connection attempts; ``max_connects``: connection attempts per
    client per run; ``heartbeat``: s offered to the broker."""

    queue: str = "jepsen.queue"
    queue_args: dict[str, str] = field(default_factory=dict)
    rate: float = 100.0
    window: int = 20
    confirm_timeout: float = 5.0
    prefetch: int = 50
    ack_delay: float = 0.0
    reconnect_delay: float = 0.5
    max_connects: int = 500
    heartbeat: int = 5


class IdSource:
    """Unique, increasing integers for every publisher of a run (thread-safe)."""

    def __init__(self, start: int = 1) -> None:
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def next(self) -> int:
        """The next unused id."""
        with self._lock:
            return next(self._counter)


def parse_id(body: bytes) -> int | None:
    """A message body back to its id (None when it is not one of ours)."""
    try:
        return int(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def record_delivery(history: History, client: str, broker: str, body: bytes, redelivered: bool,
                    drain: bool) -> None:
    """Record a ``deliver`` event; a body that is not an id is recorded as id -1 (unexpected)."""
    ident = parse_id(body)
    history.record("deliver", id=-1 if ident is None else ident, client=client, broker=broker,
                   redelivered=redelivered, drain=drain)
