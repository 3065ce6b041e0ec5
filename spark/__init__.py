"""Apache Spark integration: ``format("amqp")`` on Spark 4's Python Data Source API: a batch and
streaming sink that publishes rows through our client (``clients``) with publisher confirms, and
a batch and streaming source that reads a stream queue (``x-queue-type: stream``) by offsets.

Usage (needs the ``spark`` extra: ``pip install 'amqp-broker[spark]'``)::

    from spark import AmqpDataSource
    session.dataSource.register(AmqpDataSource)
    df.write.format("amqp").option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F") \\
        .option("exchange", "results").option("routing_key", "iris").mode("append").save()

    events = session.read.format("amqp").option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F") \\
        .option("queue", "events.stream").option("startingOffset", "first").load()

Modules: ``publish`` (options, rows -> messages, confirmed publishing; no pyspark import),
``datasource`` (``AmqpDataSource`` and its writers), ``consume`` (source options, offsets
probed over AMQP, reading an offset range; no pyspark import), ``source`` (the batch and stream
readers), ``common`` (what ``publish`` and ``consume`` share), ``local`` (a loopback-only
local session for tests and examples, with task retries), ``foreach_batch`` (``stoppable``: a
``foreachBatch`` function that a stop during its job does not turn into a Java
``StackOverflowError``), ``examples`` (runnable jobs), ``bench`` (throughput benchmark).
Only this package imports pyspark, and only when ``AmqpDataSource`` or ``spark.datasource``
is used: ``import spark`` itself works without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AmqpDataSource"]


def __getattr__(name: str) -> Any:
    if name == "AmqpDataSource":
        from .datasource import AmqpDataSource

        return AmqpDataSource
    raise AttributeError(f"module 'spark' has no attribute {name!r}")
