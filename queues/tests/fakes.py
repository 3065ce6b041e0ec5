"""Test doubles for the queue model: a settable clock, a prefetch-enforcing consumer, a DLX sink.

Owns nothing of the product; shared by the tests in this package.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands

from queues.entry import QueueEntry
from queues.message import Message


class FakeClock:
    """Millisecond clock the test moves by hand (``clock()`` returns ``now``)."""

    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class FakeConsumer:
    """Consumer that records deliveries and enforces ``prefetch`` (0 = unlimited) via can_deliver.

    ``blocked`` simulates channel flow / a full socket. ``unacked`` holds entries delivered in ack
    mode and not yet settled by the test (the test settles through ``settle``).
    """

    def __init__(self, tag: str, *, no_ack: bool = False, prefetch: int = 0,
                 priority: int = 0) -> None:
        self.tag = tag
        self.no_ack = no_ack
        self.prefetch = prefetch
        self.priority = priority
        self.blocked = False
        self.delivered: list[QueueEntry] = []
        self.unacked: list[QueueEntry] = []
        self.max_unacked_seen = 0
        self.can_deliver_calls = 0

    def can_deliver(self) -> bool:
        self.can_deliver_calls += 1
        if self.blocked:
            return False
        return self.no_ack or not self.prefetch or len(self.unacked) < self.prefetch

    def deliver(self, queue: Any, entry: QueueEntry) -> None:
        self.delivered.append(entry)
        if not self.no_ack:
            self.unacked.append(entry)
            self.max_unacked_seen = max(self.max_unacked_seen, len(self.unacked))

    def bodies(self) -> list[bytes]:
        return [e.message.body for e in self.delivered]

    def take(self, entry: QueueEntry) -> QueueEntry:
        self.unacked.remove(entry)
        return entry

    def __repr__(self) -> str:
        return f"FakeConsumer({self.tag!r})"


class DeadLetters:
    """Collects ``dead_letter(message, exchange, routing_keys)`` calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Message, str, list[str]]] = []

    def __call__(self, message: Message, exchange: str, routing_keys: list[str]) -> None:
        self.calls.append((message, exchange, routing_keys))

    @property
    def messages(self) -> list[Message]:
        return [m for m, _, _ in self.calls]

    def reasons(self) -> list[str]:
        return [m.headers["x-death"][0]["reason"] for m in self.messages]  # type: ignore[index]


def msg(body: bytes | str = b"x", *, routing_key: str = "rk", exchange: str = "ex",
        **props: Any) -> Message:
    """A message as the core would route it, built from decoded properties."""
    if isinstance(body, str):
        body = body.encode()
    return Message.build(exchange, routing_key, body, commands.Basic.Properties(**props))


def wire(message: Message) -> Message:
    """Round-trip through the header payload, as a message read off the wire would be."""
    return Message(message.exchange, message.routing_key, message.header_payload, message.body)
