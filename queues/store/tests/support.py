"""Test helpers for the message store: message factory, directory snapshots, crash simulation."""

from __future__ import annotations

import os
from pathlib import Path

from pamqp import commands

from queues.message import Message
from queues.store import MessageStore

PERSISTENT = commands.Basic.Properties(delivery_mode=2, content_type="text/plain")


def msg(body: bytes | str, routing_key: str = "rk", exchange: str = "ex",
        properties: commands.Basic.Properties | None = None) -> Message:
    """A persistent message with ``body`` (str is utf-8 encoded)."""
    if isinstance(body, str):
        body = body.encode()
    return Message.build(exchange, routing_key, body, properties or PERSISTENT)


def segment_files(directory: Path) -> list[Path]:
    """Segment files of a store directory, oldest first."""
    return sorted(p for p in directory.iterdir() if p.suffix == ".seg")


def snapshot_sizes(directory: Path) -> dict[str, int]:
    """File name -> size now (take right after ``sync()`` to know what is durable)."""
    return {p.name: p.stat().st_size for p in segment_files(directory)}


def power_loss(store: MessageStore, synced_sizes: dict[str, int]) -> None:
    """Simulate losing everything not covered by the last sync: drop the store's buffer, cut every
    file back to its size at that sync and remove files made since (the worst a crash can do)."""
    store.abandon()
    for path in segment_files(store.directory):
        size = synced_sizes.get(path.name)
        if size is None:
            path.unlink()
        elif path.stat().st_size > size:
            os.truncate(path, size)


def bodies(recovered: dict, queue: str) -> list[bytes]:
    """Bodies of a queue's recovered messages, in order."""
    return [r.message.body for r in recovered.get(queue, [])]
