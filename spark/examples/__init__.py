"""Runnable jobs that publish with the ``amqp`` sink into a broker (ours on 127.0.0.1:5672 by
default), or read a stream queue with the ``amqp`` source. Each is one command and prints its
progress:

    python -m spark.examples.batch_iris --uri amqp://guest:guest@127.0.0.1:5672/%2F
    python -m spark.examples.streaming_rate --uri amqp://guest:guest@127.0.0.1:5672/%2F
    python -m spark.examples.stream_source --uri amqp://guest:guest@127.0.0.1:5672/%2F

``batch_iris`` needs scikit-learn installed (it reads the iris CSV file shipped inside it);
the others need nothing but the ``spark`` extra. Every example's session retries a failed task
(``--max-failures`` attempts, default 4; see ``spark.local``): a task whose broker died goes on
at the next broker of ``--uri`` (comma-separated).
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from spark.local import MAX_FAILURES, with_retries

__all__ = ["add_spark_arguments", "spark_master", "catch_ctrl_c"]


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--master`` (default ``local[2]``) and ``--max-failures`` (attempts per task,
    default ``spark.local.MAX_FAILURES``) to an example's command line."""
    parser.add_argument("--master", default="local[2]",
                        help="Spark master; local[N] runs as local[N,F], F = --max-failures")
    parser.add_argument("--max-failures", type=int, default=MAX_FAILURES,
                        help=f"attempts per Spark task (default {MAX_FAILURES}; 1: a failed "
                             f"task ends the job or query)")


def spark_master(args: argparse.Namespace) -> str:
    """The master the example's session runs with (``spark.local.with_retries``); raises
    ``SystemExit`` with a message for ``--max-failures`` < 1."""
    try:
        return with_retries(args.master, args.max_failures)
    except ValueError as exc:
        raise SystemExit(f"--max-failures: {exc}") from None


def catch_ctrl_c() -> threading.Event:
    """Make the first Ctrl-C (SIGINT) only set the returned event, and a second one raise
    ``KeyboardInterrupt``. Replaces PySpark's handler, which ``SparkContext`` installs: it calls
    ``cancelAllJobs()`` and raises ``KeyboardInterrupt`` from inside whatever Py4J call the main
    thread is in, so py4j logs "reentrant call" errors and a streaming query's running job dies
    of a cancellation that is not its stop. An example polls the event (its 0.5 s
    ``awaitTermination`` loop) and stops the query with ``query.stop()``. Call in the main
    thread, after the session started."""
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()

    signal.signal(signal.SIGINT, on_sigint)
    return interrupted
