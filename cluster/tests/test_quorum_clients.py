"""Quorum queues on a real 3-broker cluster with aio-pika and with a Celery worker (issue 12, "Done
when": pika, aio-pika and kombu/Celery). aio-pika: a quorum queue declared on one member,
messages published with confirms there and consumed with ``message.process()`` on another, a
rejected-with-requeue message coming back with ``x-delivery-count``. Celery: a worker whose
``task_queues`` declare the task queue with ``queue_arguments={"x-queue-type": "quorum"}``, as
Celery documents for RabbitMQ, connected to one member, tasks sent through another. Sources:
RabbitMQ "Quorum Queues"; Celery "Using RabbitMQ" (quorum queues); aio-pika quick start."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import pytest
from celery import Celery
from kombu import Queue

from cluster.tests.processes import wait_for
from cluster.tests.quorum_scenarios import message_count, wait_leader
from interop_tests.celery_worker import start_worker, stop_worker

pytestmark = pytest.mark.timeout(180)
QUORUM = {"x-queue-type": "quorum"}


def test_aio_pika_on_a_quorum_queue_across_members(cluster):
    n2, n3, n4 = cluster.start_three()

    async def body() -> list[str]:
        pub = await aio_pika.connect(n3.uri, timeout=10)
        con = await aio_pika.connect(n4.uri, timeout=10)
        try:
            ch = await pub.channel(publisher_confirms=True)
            await ch.declare_queue("aio.q", durable=True, arguments=QUORUM)
            for i in range(100):
                await ch.default_exchange.publish(
                    aio_pika.Message(f"m{i}".encode(),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key="aio.q")
            cch = await con.channel()
            await cch.set_qos(prefetch_count=20)
            queue = await cch.declare_queue("aio.q", durable=True, arguments=QUORUM)
            got: list[str] = []
            requeued = False
            async with queue.iterator() as it:
                async for message in it:
                    body = message.body.decode()
                    if body == "m0" and not requeued:
                        requeued = True
                        await message.reject(requeue=True)
                        continue
                    if body == "m0":
                        assert (message.headers or {}).get("x-delivery-count") == 1
                    await message.ack()
                    got.append(body)
                    if len(got) == 100:
                        break
            return got
        finally:
            await pub.close()
            await con.close()

    got = asyncio.run(asyncio.wait_for(body(), 90))
    assert sorted(got) == sorted(f"m{i}" for i in range(100))
    wait_leader(cluster, "aio.q")
    wait_for(lambda: message_count(n2, "aio.q") == 0, 10, "messages left after the acks")


def test_celery_worker_on_a_quorum_queue(cluster, tmp_path):
    n2, n3, n4 = cluster.start_three()
    queue = f"celery-quorum-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "worker.log"
    proc = start_worker(n3.uri, queue, log_path, queue_type="quorum")
    app = Celery("quorum_client", broker=n4.uri, backend="rpc://")
    app.conf.update(task_default_queue=queue, task_serializer="json", result_serializer="json",
                    accept_content=["json"],
                    task_queues=[Queue(queue, queue_arguments={"x-queue-type": "quorum"})])
    try:
        results = [app.send_task("interop.add", (i, i)) for i in range(10)]
        try:
            assert [r.get(timeout=60) for r in results] == [2 * i for i in range(10)]
        except Exception as exc:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(f"celery on a quorum queue failed: {exc!r}\n--- worker log ---\n{tail}")
        conn = n2.connect()
        try:
            conn.channel().queue_declare(queue, durable=True, arguments=QUORUM)  # equivalent
        finally:
            conn.close()
        wait_leader(cluster, queue)
        assert proc.poll() is None, "the worker died"
    finally:
        stop_worker(proc)
        app.close()
