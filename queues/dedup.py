"""Publish deduplication window for one queue (x-message-deduplication).

Owns the set of dedup keys a queue has accepted recently: at most ``size`` keys, each remembered for
``ttl_ms`` (None: until evicted by size, oldest first). A message whose key is in the window is a
duplicate and is dropped at enqueue; the publisher's confirm is still an ack (the message is safely
"there" already). The key is the ``x-deduplication-header`` header, else the message-id property; a
message with neither is never a duplicate.

Deliberate difference from the RabbitMQ message-deduplication plugin, whose *queue*-level mode only
rejects a key while a message with it is still in the queue: ours is a time/size window (as the
plugin's exchange-level mode), because exactly-once publishing needs a retry after the first copy was
consumed to be dropped too. The window is exported (``snapshot``) and re-loaded (``restore``) so a
durable queue's window survives a restart. Must not know: I/O; time comes from an injected clock (ms).
Source: github.com/noxdafox/rabbitmq-message-deduplication (argument names, header name).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from .message import Message

__all__ = ["DedupWindow", "dedup_key", "DEFAULT_DEDUP_CACHE_SIZE", "DEDUP_HEADER"]

DEFAULT_DEDUP_CACHE_SIZE = 100_000
DEDUP_HEADER = "x-deduplication-header"


def dedup_key(message: Message) -> str | None:
    """The dedup key of ``message``: its x-deduplication-header value (as text), else message-id."""
    if message.has_headers:
        headers = message.headers or {}
        value = headers.get(DEDUP_HEADER)
        if value is not None:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return message.message_id


class DedupWindow:
    """Keys seen recently. ``size``: keys kept at most (> 0); ``ttl_ms``: ms each is kept (None:
    no expiry); ``clock()``: ms. ``check_and_add(key)`` is True when ``key`` is a duplicate."""

    __slots__ = ("size", "ttl_ms", "_clock", "_keys", "changes")

    def __init__(self, size: int | None, ttl_ms: int | None, clock: Callable[[], int]) -> None:
        self.size = size or DEFAULT_DEDUP_CACHE_SIZE
        self.ttl_ms = ttl_ms
        self._clock = clock
        self._keys: OrderedDict[str, int] = OrderedDict()  # key -> expiry ms (0: none)
        #: Counts additions (for "has it changed since?" polling by a persister).
        self.changes = 0

    def __len__(self) -> int:
        return len(self._keys)

    def _expire(self, now: int) -> None:
        keys = self._keys
        if self.ttl_ms is None:
            return
        while keys:
            key, expires = next(iter(keys.items()))
            if expires > now:
                break
            keys.popitem(last=False)

    def check_and_add(self, key: str) -> bool:
        """True if ``key`` is in the window (a duplicate); otherwise remember it and return False."""
        now = self._clock()
        self._expire(now)
        keys = self._keys
        if key in keys:
            return True
        keys[key] = now + self.ttl_ms if self.ttl_ms is not None else 0
        self.changes += 1
        if len(keys) > self.size:
            keys.popitem(last=False)
        return False

    def snapshot(self) -> list[tuple[str, int]]:
        """(key, remaining ms or -1 for no expiry), oldest first: what ``restore`` takes back."""
        now = self._clock()
        self._expire(now)
        return [(k, (e - now) if e else -1) for k, e in self._keys.items()]

    def restore(self, items: Iterable[tuple[str, int]]) -> None:
        """Re-load a ``snapshot`` (oldest first), e.g. after a restart."""
        now = self._clock()
        for key, remaining in items:
            self._keys[key] = 0 if remaining < 0 else now + remaining
            if len(self._keys) > self.size:
                self._keys.popitem(last=False)
