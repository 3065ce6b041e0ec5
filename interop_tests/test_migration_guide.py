"""The guide "Moving from RabbitMQ without downtime" (docs/shovels.md, issue 27), step by step,
against the private RabbitMQ 3.10 node (``interop_tests/rabbitmq_node.py``) and a broker of ours:
an application's queue on RabbitMQ holds messages and keeps getting more while it moves.

1. ``rabbitmqctl export_definitions defs.json`` (here ``- --format json`` into the file), then ``amqp-broker ctl import_definitions
   defs.json`` here: the queue exists here.
2. ``ctl set_parameter shovel NAME JSON``: a shovel from RabbitMQ's queue to ours (on-confirm, the
   default); the producers still publish to RabbitMQ.
3. The consumer moves to our broker; 4. the producers move to our broker.
5. When ``rabbitmqctl list_queues`` shows the queue empty, ``ctl clear_parameter shovel NAME``.

Every message published (before, during and after the move, on either broker) reaches the
consumer on ours; a redelivery is allowed (at least once), a loss is not. The guide's "stop
RabbitMQ" is left out: the node is shared by the interop session. It runs with
``AMQP_FAULTS_ALL=1`` only, for ``make test``'s budget: a broker start and three ``ctl`` and two
``rabbitmqctl`` runs (each an Erlang VM start) take 12-25 s on a loaded machine. Source: RabbitMQ
"Dynamic Shovels", "Definitions", "Blue-Green Deployment" (the migration RabbitMQ documents with
shovels).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pika
import pytest

from interop_tests.rabbitmq_node import RABBIT_ENV, rabbitmq_ctl
from interop_tests.test_management_ctl import ctl
from interop_tests.test_management_differential import eventually
from interop_tests.test_shovel import _http_port, _start_ours

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PER_PHASE = 30


def _publish(uri: str, queue: str, first: int) -> None:
    """``m<first>`` .. persistent, confirmed, to ``queue``."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(first, first + PER_PHASE):
            ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))


class Consumer(threading.Thread):
    """The application's consumer on ``uri`` (manual acks) until ``stop``; ``got`` every body
    delivered, redeliveries included."""

    def __init__(self, uri: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.queue = uri, queue
        self.got: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with pika.BlockingConnection(pika.URLParameters(self.uri)) as conn:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=50)
                for method, _props, body in ch.consume(self.queue, inactivity_timeout=0.2):
                    if method is not None:
                        self.got.append(body.decode())
                        ch.basic_ack(method.delivery_tag)
                    if self.stop.is_set():
                        break
                ch.cancel()
        except BaseException as exc:  # reported by the test
            self.error = exc


def _rabbit_count(queue: str) -> int | None:
    out = rabbitmq_ctl("list_queues", "-q", "--no-table-headers", "name", "messages")
    for line in out.stdout.splitlines():
        name, _, count = line.rpartition("\t")
        if name.strip() == queue:
            return int(count)
    return None


def _count(uri: str, queue: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


@pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                    reason="12-25 s of broker and CLI starts: AMQP_FAULTS_ALL=1 runs it")
def test_the_migration_guide_moves_a_live_queue_without_losing_a_message(rabbitmq, tmp_path,
                                                                         unique_name):
    if os.environ.get(RABBIT_ENV):   # rabbitmqctl drives only the private node
        pytest.skip(f"rabbitmqctl needs the private node; {RABBIT_ENV} is set")
    queue, shovel = f"{unique_name}.orders", f"{unique_name}.mover"
    with pika.BlockingConnection(pika.URLParameters(rabbitmq.uri)) as conn:
        conn.channel().queue_declare(queue, durable=True)   # the application's queue
    _publish(rabbitmq.uri, queue, 0)
    ours = _start_ours(tmp_path / "ours", _http_port())
    url = ["--url", ours.api_url]
    consumer = None
    try:
        # 1. copy the definitions
        # (rabbitmqctl runs as the node's user here: "-" and a redirect, not a path of ours)
        out = rabbitmq_ctl("export_definitions", "-", "--format", "json")
        assert out.returncode == 0, out.stderr
        defs = tmp_path / "defs.json"
        defs.write_text(out.stdout)
        assert queue in {q["name"] for q in json.loads(Path(defs).read_text())["queues"]}
        out = ctl(tmp_path, *url, "import_definitions", str(defs))
        assert out.returncode == 0, out.stderr
        with pika.BlockingConnection(pika.URLParameters(ours.uri)) as conn:
            conn.channel().queue_declare(queue, passive=True)   # it is here now
        # 2. a shovel from RabbitMQ's queue to ours; the producers still publish to RabbitMQ
        value = {"src-uri": rabbitmq.uri, "src-queue": queue, "dest-uri": "amqp://",
                 "dest-queue": queue, "ack-mode": "on-confirm"}
        out = ctl(tmp_path, *url, "set_parameter", "shovel", shovel, json.dumps(value))
        assert out.returncode == 0, out.stderr
        _publish(rabbitmq.uri, queue, PER_PHASE)
        # 3. the consumer moves to our broker
        consumer = Consumer(ours.uri, queue)
        consumer.start()
        # 4. the producers move to our broker
        _publish(ours.uri, queue, 2 * PER_PHASE)
        # 5. once RabbitMQ's queue is empty (rabbitmqctl list_queues, ~3 s a call: asked once
        # AMQP shows it empty), the shovel goes
        eventually(lambda: _count(rabbitmq.uri, queue) == 0, "RabbitMQ's queue drained",
                   timeout=60)
        assert _rabbit_count(queue) == 0
        out = ctl(tmp_path, *url, "clear_parameter", "shovel", shovel)
        assert out.returncode == 0, out.stderr
        everything = {f"m{i}" for i in range(3 * PER_PHASE)}
        eventually(lambda: everything <= set(consumer.got), "every message consumed on ours",
                   timeout=60)
        print(f"migration: {3 * PER_PHASE} messages, "
              f"{len(consumer.got) - len(set(consumer.got))} redelivered")
        assert set(consumer.got) == everything
    finally:
        if consumer is not None:
            consumer.stop.set()
            consumer.join(10)
        ours.stop()
        with pika.BlockingConnection(pika.URLParameters(rabbitmq.uri)) as conn:
            conn.channel().queue_delete(queue)
    assert consumer.error is None, consumer.error
