"""Celery application used by interop_tests/test_kombu_celery.py.

The worker runs as a separate process (``celery -A interop_tests.celery_app worker ...``) and
finds the broker through environment variables, so the same module serves the test process
(which sends tasks) and the worker process (which runs them):

- ``INTEROP_CELERY_BROKER``: broker URL (amqp://...), required.
- ``INTEROP_CELERY_QUEUE``: task queue name, unique per test run so workers never share one.
- ``INTEROP_CELERY_QUEUE_TYPE``: ``quorum`` declares the task queue as a quorum queue, as
  Celery documents for RabbitMQ (``task_queues`` with ``queue_arguments={"x-queue-type":
  "quorum"}``); unset: a classic queue.

Results come back over the ``rpc://`` result backend (reply queue per client), the setup
described in Celery's "First steps with Celery" guide.
"""

import os

from celery import Celery

app = Celery(
    "interop_celery",
    broker=os.environ.get("INTEROP_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.update(
    task_default_queue=os.environ.get("INTEROP_CELERY_QUEUE", "interop-celery"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=3,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
)


if os.environ.get("INTEROP_CELERY_QUEUE_TYPE") == "quorum":
    from kombu import Queue

    app.conf.task_queues = [Queue(app.conf.task_default_queue,
                                  queue_arguments={"x-queue-type": "quorum"})]


@app.task(name="interop.add")
def add(x, y):
    return x + y


@app.task(name="interop.fail")
def fail(text):
    raise ValueError(text)
