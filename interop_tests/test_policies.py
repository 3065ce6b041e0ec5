"""Policies against a real broker process (issue 12): ``amqp-broker ctl set_policy`` (rabbitmqctl's
arguments), a pika client declaring a plain durable queue that the ``ha-mode: all`` policy turns
into a mirrored queue served by the quorum engine (the broker founds a cluster of one), seen in
``/api/queues`` with ``policy`` and ``effective_policy_definition``; ``list_policies``, a refused
definition, and policies and the mirrored queue's messages surviving a restart. Source: RabbitMQ
"Policies", "Classic Queue Mirroring", rabbitmqctl(8)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pika
import pytest

from interop_tests.test_management import _api, _ctl, _start

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def _secret(tmp_path: Path) -> str:
    path = tmp_path / "cluster.secret"
    path.write_text(secrets.token_hex(32))
    os.chmod(path, 0o600)
    return str(path)


def test_ctl_set_policy_mirrors_a_pika_declared_queue(broker_factory, tmp_path):
    data = tmp_path / "node"
    args = ("--cluster-secret", _secret(tmp_path), "--node-name", "solo")
    broker, http, _ = _start(broker_factory, *args, data_dir=data)
    done = _ctl(http, "set_policy", "ha-all", r"^ha\.", '{"ha-mode":"all","message-ttl":60000}',
                "--priority", "1", "--apply-to", "queues")
    assert done.returncode == 0, done.stderr
    bad = _ctl(http, "set_policy", "bad", ".*", '{"ha-mode":"exactly"}')
    assert bad.returncode == 1 and "ha-mode exactly needs ha-params" in bad.stderr
    listing = _ctl(http, "list_policies")
    assert listing.returncode == 0
    assert 'ha-all\t^ha\\.\tqueues\t{"ha-mode":"all","message-ttl":60000}\t1' in listing.stdout

    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        ch = conn.channel()
        ch.queue_declare("ha.orders", durable=True)
        ch.queue_declare("ha.orders", durable=True)   # the client's own declaration: equivalent
        ch.queue_declare("plain", durable=True)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", "ha.orders", f"m{i}".encode(),
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
    q = _api(f"http://127.0.0.1:{http}/api/queues/%2F/ha.orders")
    assert q["type"] == "quorum" and q["policy"] == "ha-all" and q["members"] == ["solo"]
    assert q["effective_policy_definition"] == {"ha-mode": "all", "message-ttl": 60000}
    assert q["arguments"] == {} and q["messages"] == 20
    assert _api(f"http://127.0.0.1:{http}/api/queues/%2F/plain")["policy"] == ""
    assert _api(f"http://127.0.0.1:{http}/api/policies/%2F/ha-all")["definition"] == {
        "ha-mode": "all", "message-ttl": 60000}

    broker.stop()
    _, http2, _ = _start(broker_factory, *args, data_dir=data)
    assert [p["name"] for p in _api(f"http://127.0.0.1:{http2}/api/policies")] == ["ha-all"]
    q = _api(f"http://127.0.0.1:{http2}/api/queues/%2F/ha.orders")
    assert q["policy"] == "ha-all" and q["type"] == "quorum"
    assert _ctl(http2, "clear_policy", "ha-all").returncode == 0
    assert _api(f"http://127.0.0.1:{http2}/api/policies") == []


def test_a_policy_change_re_applies_to_existing_queues_and_client_arguments_win(
        broker_factory, tmp_path):
    data = tmp_path / "node"
    broker, http, _ = _start(broker_factory, data_dir=data)

    def ready(name: str) -> int:
        with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
            return conn.channel().queue_declare(name, passive=True).method.message_count

    def publish(name: str, count: int) -> None:
        with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(count):
                ch.basic_publish("", name, f"m{i}".encode(),
                                 pika.BasicProperties(delivery_mode=2))

    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        ch = conn.channel()
        ch.queue_declare("limits.free", durable=True)
        ch.queue_declare("limits.capped", durable=True, arguments={"x-max-length": 5})
    publish("limits.free", 10)
    publish("limits.capped", 10)
    assert (ready("limits.free"), ready("limits.capped")) == (10, 5)

    done = _ctl(http, "set_policy", "cap", r"^limits\.", '{"max-length":3}')
    assert done.returncode == 0, done.stderr
    assert ready("limits.free") == 3          # dropped from the head at once
    assert ready("limits.capped") == 5        # the client's x-max-length wins
    q = _api(f"http://127.0.0.1:{http}/api/queues/%2F/limits.free")
    assert q["policy"] == "cap" and q["arguments"] == {}
    publish("limits.free", 4)
    assert ready("limits.free") == 3

    broker.stop()   # the re-applied arguments were stored: the limit holds after a restart
    broker, http, _ = _start(broker_factory, data_dir=data)
    publish("limits.free", 2)
    assert ready("limits.free") == 3

    assert _ctl(http, "clear_policy", "cap").returncode == 0
    publish("limits.free", 4)
    assert ready("limits.free") == 7          # no limit any more
    assert _api(f"http://127.0.0.1:{http}/api/queues/%2F/limits.free")["policy"] == ""
