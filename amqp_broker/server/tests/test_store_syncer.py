"""The group-commit syncer fails stop: when the message store's fsync raises, the syncer raises
(ending the broker) and the confirms waiting for that sync are never released. Source: issue
"Durable broker" (a confirm means the message is on disk); PostgreSQL's fsync lesson: after a failed
fsync the written data cannot be trusted, so nothing further may be confirmed."""

from __future__ import annotations

import anyio
import pytest

from amqp_broker.core.broker import Broker
from amqp_broker.core.durability import Durability
from amqp_broker.server.listener import _store_syncer


class FailingSync:
    durable_id = 0

    def run(self) -> None:
        raise OSError(5, "Input/output error")


class Store:
    def __init__(self) -> None:
        self.synced_calls = 0

    def flush(self) -> FailingSync:
        return FailingSync()

    def synced(self, pending: object) -> int:
        self.synced_calls += 1
        return 1


class Channel:
    def __init__(self) -> None:
        self.released: list[int] = []

    def release_durable(self, durable_id: int) -> bool:
        self.released.append(durable_id)
        return True


def test_failed_fsync_stops_the_syncer_and_confirms_nothing():
    store = Store()
    broker = Broker(durability=Durability(store))  # type: ignore[arg-type]
    channel = Channel()
    broker.durability.wait_for_sync(channel)  # type: ignore[arg-type]

    async def main() -> None:
        with anyio.fail_after(5):
            await _store_syncer(broker)

    with pytest.raises(OSError):
        anyio.run(main)
    assert store.synced_calls == 0
    assert channel.released == []
