"""A local-mode Spark session that stays on the loopback interface, for tests and examples.

Owns the environment a local session needs here: ``SPARK_LOCAL_IP=127.0.0.1`` (without it Spark
binds to the machine's non-loopback address; the ``spark.driver.host``/``bindAddress`` keys alone
are not enough), ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` = this interpreter (workers would
otherwise run ``python3`` from PATH, without our packages), no web UI (it listens on every
interface), few shuffle partitions. Must be called before any other SparkSession/JVM is started
in the process: the environment is read when the JVM starts.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

__all__ = ["configure_environment", "local_session", "java_missing"]

LOOPBACK = "127.0.0.1"


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


def local_session(master: str = "local[2]", app_name: str = "amqp-spark",
                  log_level: str = "WARN", **conf: Any) -> Any:
    """Start (or get) a local ``SparkSession`` bound to 127.0.0.1 with ``AmqpDataSource``
    registered. ``master``: e.g. ``local[2]``, or ``local[2,2]`` for one retry of a failed
    task. ``conf``: extra Spark settings (dots as in Spark: pass a dict with ``**{...}``)."""
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
