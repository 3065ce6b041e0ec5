"""What every workload client shares: its settings, the id source, and the stop signal.

Publishers take unique integers from one :class:`IdSource` (the body and ``message_id`` of each
message is the id in decimal), as the enqueue values of Jepsen's queue workloads. Every client
loop is bounded twice: by the shared ``stop`` event (time) and by ``max_connects`` (count).

Stream consumers (``ClientSettings.stream``) keep a :class:`StreamPosition`: they subscribe with
``x-stream-offset: first`` (RabbitMQ "Streams": Consuming), and after a reconnect at the offset
after the last one they read, as an application that stores its offset does; every delivery is
recorded with the ``x-stream-offset`` header the broker puts on it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from .history import History

__all__ = ["ClientSettings", "IdSource", "StreamPosition", "parse_id", "publish_headers",
           "record_delivery"]


@dataclass(frozen=True)
class ClientSettings:
    """Workload settings shared by every client.

    ``queue``: the queue's name; ``queue_args``: its declare arguments (``x-queue-type``);
    ``rate``: publishes per second per publisher; ``window``: unconfirmed publishes a publisher
    may have outstanding; ``confirm_timeout``: s without an answer before a publish is recorded
    ``info`` (unknown); ``prefetch``: consumer prefetch count; ``ack_delay``: s a consumer waits
    before acking each delivery (a slow consumer keeps relayed messages waiting at its broker);
    ``reconnect_delay``: s between connection attempts; ``max_connects``: connection attempts per
    client per run; ``heartbeat``: s offered to the broker; ``stream``: the queue is a stream
    (consumers subscribe with ``x-stream-offset``, :class:`StreamPosition`); ``exchange``: where
    publishers publish ("": the default exchange; else an ``x-delayed-message`` exchange bound to
    the queue by its name, issue 25's delayed messages) with ``x-delay: delay_ms`` when > 0."""

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
    stream: bool = False
    exchange: str = ""
    delay_ms: int = 0


def publish_headers(settings: ClientSettings) -> dict[str, Any] | None:
    """The headers of a workload publish: ``x-delay`` when ``settings.delay_ms`` > 0."""
    return {"x-delay": settings.delay_ms} if settings.delay_ms > 0 else None


class IdSource:
    """Unique, increasing integers for every publisher of a run (thread-safe)."""

    def __init__(self, start: int = 1) -> None:
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def next(self) -> int:
        """The next unused id."""
        with self._lock:
            return next(self._counter)


class StreamPosition:
    """Where a stream consumer (re)subscribes: ``first``, then the offset after the last one it
    read. ``offsets``: every offset it read (the drain counts them)."""

    def __init__(self) -> None:
        self.next: int | None = None
        self.offsets: set[int] = set()

    def arguments(self) -> dict[str, object]:
        """Basic.Consume arguments: ``{"x-stream-offset": "first" | next offset}``."""
        return {"x-stream-offset": "first" if self.next is None else self.next}

    def read(self, headers: dict | None) -> int | None:
        """A delivery's ``x-stream-offset`` header (None when absent or not an integer), noted."""
        offset = (headers or {}).get("x-stream-offset")
        if not isinstance(offset, int) or isinstance(offset, bool):
            return None
        self.next = offset + 1
        self.offsets.add(offset)
        return offset


def parse_id(body: bytes) -> int | None:
    """A message body back to its id (None when it is not one of ours)."""
    try:
        return int(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def record_delivery(history: History, client: str, broker: str, body: bytes, redelivered: bool,
                    drain: bool, offset: int | None = None) -> None:
    """Record a ``deliver`` event (with the stream ``offset`` when one is given); a body that is
    not an id is recorded as id -1 (unexpected)."""
    ident = parse_id(body)
    extra = {} if offset is None else {"offset": offset}
    history.record("deliver", id=-1 if ident is None else ident, client=client, broker=broker,
                   redelivered=redelivered, drain=drain, **extra)
