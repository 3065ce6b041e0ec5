"""``clients.blocking``: the thread-side facade against a real broker."""

from __future__ import annotations

import threading

import pytest

from clients.blocking import BlockingConnection
from clients.errors import ChannelClosed, NoBrokerAvailable

from .conftest import free_port


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_blocking_roundtrip(amqp_uri, name, backend):
    pytest.importorskip(backend)
    with BlockingConnection(amqp_uri, backend=backend, operation_timeout=10) as conn:
        ch = conn.channel(confirm=True)
        assert ch.queue_declare(name, exclusive=True).queue == name
        assert ch.publish_many((f"m{i}" for i in range(2500)), routing_key=name, batch=1000) == 2500
        msg = ch.basic_get(name)
        assert msg.body == b"m0" and ch.ack(msg)
        with ch.consume(name, no_ack=False) as consumer:
            for i, msg in enumerate(consumer, start=1):
                assert ch.ack(msg)
                if i == 2499:
                    break
        assert ch.basic_get(name) is None
        with pytest.raises(ChannelClosed) as info:
            ch.queue_declare(name + "-missing", passive=True)
        assert info.value.reply_code == 404


def test_blocking_from_many_threads(amqp_uri, name):
    with BlockingConnection(amqp_uri, operation_timeout=10) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare(name, exclusive=True)
        errors: list = []

        def work(k: int) -> None:
            try:
                for i in range(50):
                    ch.basic_publish(f"{k}-{i}", routing_key=name)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not errors
        assert ch.queue_declare(name, passive=True).message_count == 200


def test_blocking_no_broker():
    with pytest.raises(NoBrokerAvailable):
        BlockingConnection(f"amqp://127.0.0.1:{free_port()}/")
