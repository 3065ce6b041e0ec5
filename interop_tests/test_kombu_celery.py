"""kombu (on py-amqp) and Celery against the broker.

Covers: kombu Producer/Consumer with a topic exchange and ``#`` binding (JSON payload,
content type, headers, delivery info), SimpleQueue put/get/qsize/clear, kombu Queue
attributes mapped to x-arguments (max_priority ordering, message_ttl expiry, max_length),
``message.requeue()`` (redelivered, first in line) and ``message.reject()`` dead-lettering with
reason "rejected", a missing queue surfacing as one of ``connection.channel_errors``, and a
Celery task round trip through a real worker process (``add.delay(2, 3).get() == 5``, a task
exception propagated back) over the ``rpc://`` result backend.

Sources: kombu user guide (connections, producers, consumers, simple interface, queue
arguments); Celery "First steps with Celery" and "Workers" guides; RabbitMQ docs "dlx",
"priority", "ttl", "maxlength".
"""

from __future__ import annotations

import time
import uuid

import pytest
from celery import Celery
from kombu import Connection, Consumer, Exchange, Producer, Queue

from interop_tests.celery_worker import start_worker, stop_worker

TIMEOUT = 5.0


@pytest.fixture
def kconn(broker):
    with Connection(broker.uri, connect_timeout=10) as c:
        c.ensure_connection(max_retries=3)
        yield c


def drain_until(conn, predicate, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"condition not reached within {timeout:.1f}s")
        try:
            conn.drain_events(timeout=min(remaining, 0.5))
        except TimeoutError:
            pass


def test_producer_consumer_topic_json(kconn, unique_name):
    ex = Exchange(unique_name, type="topic", auto_delete=True)
    queue = Queue(unique_name, ex, routing_key="orders.#", auto_delete=True)
    producer = Producer(kconn)
    producer.publish({"id": 1, "items": ["a", "b"]}, exchange=ex, routing_key="orders.eu.new",
                     declare=[queue], serializer="json", headers={"source": "interop"})  # fmt: skip
    producer.publish({"id": 2}, exchange=ex, routing_key="invoices.new", serializer="json")
    producer.publish({"id": 3}, exchange=ex, routing_key="orders", serializer="json")
    received = []

    def on_message(body, message):
        received.append((body, message.content_type, message.headers.get("source"),
                         message.delivery_info["routing_key"]))  # fmt: skip
        message.ack()

    with Consumer(kconn, queues=[queue], callbacks=[on_message], accept=["json"]):
        drain_until(kconn, lambda: len(received) >= 2)
    assert received == [
        ({"id": 1, "items": ["a", "b"]}, "application/json", "interop", "orders.eu.new"),
        ({"id": 3}, "application/json", None, "orders"),
    ]


def test_simple_queue(kconn, unique_name):
    q = kconn.SimpleQueue(unique_name, queue_opts={"auto_delete": True})
    try:
        for i in range(3):
            q.put({"n": i}, serializer="json")
        deadline = time.monotonic() + TIMEOUT
        while q.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert q.qsize() == 3
        msg = q.get_nowait()  # basic.get; get(block=True) would start a consumer
        assert msg.payload == {"n": 0}
        msg.ack()
        assert q.clear() == 2  # queue.purge count
        with pytest.raises(q.Empty):
            q.get(block=True, timeout=0.3)
        q.put({"n": "last"}, serializer="json")
        last = q.get(block=True, timeout=TIMEOUT)
        assert last.payload == {"n": "last"}
        last.ack()
    finally:
        q.close()  # cancels the consumer before the queue goes away
        Queue(unique_name, channel=kconn.channel()).delete()


def test_queue_attributes_priority_ttl_max_length(kconn, unique_name):
    prio = kconn.SimpleQueue(unique_name + ".prio", queue_opts={"max_priority": 5})
    ttl_q = Queue(unique_name + ".ttl", message_ttl=0.05, channel=kconn.default_channel)
    capped = Queue(unique_name + ".cap", max_length=2, channel=kconn.default_channel)
    try:
        for body, p in (("low", 0), ("high", 5), ("mid", 2), ("high2", 5)):
            prio.put(body, priority=p, serializer="json")
        time.sleep(0.1)
        order = []
        for _ in range(4):
            m = prio.get(block=True, timeout=TIMEOUT)
            order.append(m.payload)
            m.ack()
        assert order == ["high", "high2", "mid", "low"]

        ttl_q.declare()
        capped.declare()
        producer = Producer(kconn)
        producer.publish("soon gone", routing_key=ttl_q.name, serializer="json")
        for i in range(4):
            producer.publish(i, routing_key=capped.name, serializer="json")
        time.sleep(0.5)
        assert ttl_q.queue_declare(passive=True).message_count == 0
        assert capped.queue_declare(passive=True).message_count == 2
        assert [capped.get(no_ack=True).payload for _ in range(2)] == [2, 3]
    finally:
        prio.close()
        cleanup = kconn.channel()
        for q in (prio.queue, ttl_q, capped):
            q.bind(cleanup).delete()


def test_requeue_and_reject_to_dead_letter_exchange(kconn, unique_name):
    dlx = Exchange(unique_name + ".dlx", type="fanout", auto_delete=True)
    dead = Queue(unique_name + ".dead", dlx, auto_delete=True)
    work = Queue(unique_name, auto_delete=True,
                 queue_arguments={"x-dead-letter-exchange": dlx.name})  # fmt: skip
    channel = kconn.default_channel
    dead(channel).declare()
    work(channel).declare()
    producer = Producer(kconn)
    for job in ("poison", "fine"):
        producer.publish({"job": job}, routing_key=work.name, serializer="json")
    events = []

    def handle(body, message):
        redelivered = message.delivery_info["redelivered"]
        events.append((body["job"], redelivered))
        if body["job"] == "poison" and not redelivered:
            message.requeue()
        elif body["job"] == "poison":
            message.reject()  # requeue=False: dead-lettered
        else:
            message.ack()

    with Consumer(kconn, queues=[work], callbacks=[handle], accept=["json"], prefetch_count=1):
        drain_until(kconn, lambda: len(events) >= 3)
    assert events == [("poison", False), ("poison", True), ("fine", False)]
    bound_dead = dead(channel)
    deadline = time.monotonic() + TIMEOUT
    while (msg := bound_dead.get(no_ack=True)) is None:
        assert time.monotonic() < deadline, "nothing dead-lettered"
        time.sleep(0.02)
    assert msg.payload == {"job": "poison"}
    [death] = msg.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", work.name, 1)


def test_missing_queue_is_a_channel_error(kconn, unique_name):
    q = Queue(unique_name, channel=kconn.channel())
    with pytest.raises(kconn.channel_errors) as info:
        q.queue_declare(passive=True)
    assert getattr(info.value, "reply_code", None) == 404
    # the connection is still usable
    ok = Queue("", exclusive=True, channel=kconn.channel()).queue_declare()
    assert ok.queue.startswith("amq.gen-")


# ------------------------------------------------------------------ celery


@pytest.fixture
def celery_worker(broker, tmp_path):
    queue = f"interop-celery-{uuid.uuid4().hex[:10]}"
    log_path = tmp_path / "celery-worker.log"
    proc = start_worker(broker.uri, queue, log_path)
    # A client app of its own per broker: Celery keeps connections and the rpc:// result
    # consumer per app, so one app reused for a second broker (the differential run) would
    # still wait for results on the first. Tasks are sent by name to the worker's app.
    app = Celery("interop_client", broker=broker.uri, backend="rpc://")
    app.conf.update(task_default_queue=queue, task_serializer="json", result_serializer="json",
                    accept_content=["json"])

    def log_tail():
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])

    try:
        yield app, proc, log_tail
    finally:
        stop_worker(proc)
        try:
            with Connection(broker.uri, connect_timeout=5) as c:
                Queue(queue, channel=c.channel()).delete()
        except Exception:
            pass
        app.close()


def test_celery_task_round_trip(celery_worker):
    app, proc, log_tail = celery_worker

    def add(x, y):
        return app.send_task("interop.add", (x, y))

    result = add(2, 3)
    try:
        assert result.get(timeout=30) == 5
    except Exception as exc:
        pytest.fail(f"celery round trip failed: {exc!r}; worker alive={proc.poll() is None}\n"
                    f"--- worker log ---\n{log_tail()}")  # fmt: skip
    assert result.successful() and result.state == "SUCCESS"
    with pytest.raises(ValueError, match="boom"):
        app.send_task("interop.fail", ("boom",)).get(timeout=30)
    results = [add(i, i) for i in range(5)]
    assert [r.get(timeout=30) for r in results] == [0, 2, 4, 6, 8]
    assert proc.poll() is None, "worker died:\n" + log_tail()
