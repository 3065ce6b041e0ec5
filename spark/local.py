"""A local-mode Spark session that stays on the loopback interface, for tests and examples.

Owns the environment a local session needs here: ``SPARK_LOCAL_IP=127.0.0.1`` (without it Spark
binds to the machine's non-loopback address; the ``spark.driver.host``/``bindAddress`` keys alone
are not enough), ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` = this interpreter (workers would
otherwise run ``python3`` from PATH, without our packages), no web UI (it listens on every
interface), few shuffle partitions, and task retries (``with_retries``). Must be called before any
other SparkSession/JVM is started in the process: the environment is read when the JVM starts.

Task retries: in local mode Spark gives every task ``F`` attempts only with a master of the form
``local[N,F]``; ``local[N]`` and ``local[*]`` mean one attempt, and ``spark.task.maxFailures``
(default 4 on a cluster manager) is ignored (Spark's ``SparkContext.createTaskScheduler``, "Master
URLs" in Spark's submitting-applications guide). Without retries a task whose broker dies
(``clients.ConfirmsLost``) ends the whole query; with them, the retried task connects to the next
broker of the sink's ``uri`` list and re-sends the same message ids, which a queue declared with
``x-message-deduplication: true`` drops. ``local_session`` turns ``local[N]`` into
``local[N,MAX_FAILURES]``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Any

__all__ = ["configure_environment", "local_session", "java_missing", "with_retries",
           "MAX_FAILURES"]

LOOPBACK = "127.0.0.1"

#: Attempts per task (``F`` of ``local[N,F]``): Spark's own default ``spark.task.maxFailures``
#: on a cluster manager, so a local query retries as a deployed one does. A broker killed
#: mid-task costs one attempt (its connection's unconfirmed publishes fail it); 4 leaves room
#: for a second member dying, or a slow failover, before the query gives up.
MAX_FAILURES = 4

_LOCAL = re.compile(r"local(?:\[\s*(\d+|\*)\s*\])?")


def java_missing() -> str | None:
    """Why Spark cannot start here (no ``java``), or None."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return None
    if shutil.which("java"):
        return None
    return "no java on PATH and no JAVA_HOME: Spark needs a Java 17+ runtime"


def configure_environment() -> None:
    """Set the process environment for a loopback-only local session (overrides what is set:
    nothing here may talk to a non-loopback address)."""
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    os.environ["SPARK_LOCAL_HOSTNAME"] = "localhost"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def with_retries(master: str, max_failures: int = MAX_FAILURES) -> str:
    """``master`` with ``max_failures`` attempts per task when it is ``local``, ``local[N]`` or
    ``local[*]`` (-> ``local[N,max_failures]``; ``local`` is one thread); any other master
    (``local[N,F]`` already saying F, ``local-cluster[...]``, ``spark://...``, ``yarn``) is
    returned unchanged. Raises ``ValueError`` when ``max_failures`` < 1."""
    if max_failures < 1:
        raise ValueError(f"max_failures must be at least 1 (one attempt), got {max_failures}")
    match = _LOCAL.fullmatch(master.strip())
    if match is None:
        return master
    return f"local[{match.group(1) or 1},{max_failures}]"


def local_session(master: str = "local[2]", app_name: str = "amqp-spark",
                  log_level: str = "WARN", max_failures: int = MAX_FAILURES,
                  **conf: Any) -> Any:
    """Start (or get) a local ``SparkSession`` bound to 127.0.0.1 with ``AmqpDataSource``
    registered. ``master``: e.g. ``local[2]`` (2 threads), made ``local[2,max_failures]`` by
    ``with_retries`` so a failed task is retried (``max_failures`` attempts per task, default
    ``MAX_FAILURES`` = 4; 1 turns retries off); a master that says its F (``local[2,2]``) is
    kept. ``conf``: extra Spark settings (dots as in Spark: pass a dict with ``**{...}``).
    Raises ``ValueError`` for ``max_failures`` < 1."""
    master = with_retries(master, max_failures)
    configure_environment()
    from pyspark.sql import SparkSession

    from .datasource import AmqpDataSource

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.host", LOOPBACK)
               .config("spark.driver.bindAddress", LOOPBACK)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    session.dataSource.register(AmqpDataSource)
    return session
