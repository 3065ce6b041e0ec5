"""Apache Spark integration: ``format("amqp")``, a batch and streaming sink on Spark 4's Python
Data Source API that publishes rows through our client (``clients``) with publisher confirms.

Usage (needs the ``spark`` extra: ``pip install 'amqp-broker[spark]'``)::

    from spark import AmqpDataSource
    session.dataSource.register(AmqpDataSource)
    df.write.format("amqp").option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F") \\
        .option("exchange", "results").option("routing_key", "iris").mode("append").save()

Modules: ``publish`` (options, rows -> messages, confirmed publishing; no pyspark import),
``datasource`` (``AmqpDataSource`` and its writers), ``local`` (a loopback-only local session
for tests and examples), ``examples`` (runnable jobs), ``bench`` (throughput benchmark).
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
