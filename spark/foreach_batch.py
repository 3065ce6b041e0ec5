"""``stoppable(func)``: a ``foreachBatch`` function whose JVM errors reach Spark as one short line.

Why: ``StreamingQuery.stop()`` cancels the job a ``foreachBatch`` function is running (and
interrupts its thread); the function's Spark call then raises ``py4j.protocol.Py4JJavaError``,
whose text carries the whole Java stack trace (8 kB and more). Py4J hands that text to the JVM,
where Spark decides whether the query died of the stop or of an error by matching it with the
regular expression ``StreamExecution.PROXY_ERROR``, ``...calling((.|\\r\\n|\\r|\\n)*)...``, which
recurses once per character: on a few kB the stream thread dies of ``java.lang.StackOverflowError``
(1,024 ``java.util.regex.Pattern`` frames on stderr) and the query never reaches "Stopped" (seen
with Spark 4.3: ``spark.examples.stream_source`` stopping after its time or on Ctrl-C).

``stoppable`` re-raises such an error as ``BatchFailed`` whose text is py4j's first line and the
Java exception's ``toString()`` without the stack trace, and suppresses the chained traceback, so
the text Spark matches is short and still says what Spark looks for: a cancelled job group
(``org.apache.spark.SparkException`` ... ``cancelled`` ... the group id) or a
``java.lang.InterruptedException`` means "stopped", anything else fails the query as before
(with that one line as its message). Python errors raised by the function pass unchanged.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from py4j.protocol import Py4JJavaError

__all__ = ["stoppable", "BatchFailed", "BatchGate", "java_summary"]

#: Longest Java exception text kept (the head of a long message says what happened).
MAX_JAVA_TEXT = 400


class BatchFailed(Exception):
    """A ``Py4JJavaError`` raised inside a ``foreachBatch`` function, as one short line:
    ``py4j.protocol.Py4JJavaError: An error occurred while calling <call>.\\n: <Java exception>``
    (``java_summary``)."""


def java_summary(error: Py4JJavaError) -> str:
    """``error`` as py4j's first line and ``toString()`` of its Java exception (at most
    ``MAX_JAVA_TEXT`` characters), without the Java stack trace that ``str(error)`` appends."""
    try:
        java = str(error.java_exception.toString())
    except Exception:  # noqa: BLE001 - the gateway may be gone while stopping
        java = "(Java exception unavailable)"
    if len(java) > MAX_JAVA_TEXT:
        java = java[:MAX_JAVA_TEXT] + "..."
    call = str(getattr(error, "errmsg", "") or "An error occurred").strip()
    return f"py4j.protocol.Py4JJavaError: {call}\n: {java}"


def stoppable(func: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """Wrap a ``foreachBatch`` function ``func(batch_df, batch_id)``: a ``Py4JJavaError`` it
    raises is re-raised as ``BatchFailed`` (short text, no chained traceback; see the module
    docstring), so ``query.stop()`` during a batch stops the query cleanly. Use as
    ``df.writeStream.foreachBatch(stoppable(show))``. Source: Spark's
    ``StreamExecution.isInterruptionException`` (4.3)."""

    @functools.wraps(func)
    def run(batch: Any, batch_id: int) -> Any:
        try:
            return func(batch, batch_id)
        except Py4JJavaError as exc:
            raise BatchFailed(java_summary(exc)) from None

    return run


class BatchGate:
    """Stop a ``foreachBatch`` query between batches: the batch in flight finishes, later ones
    are not run (and not committed, so the next run with the same checkpoint runs them).

    Why: ``query.stop()`` during a batch cancels its Spark job; PySpark's worker daemon then
    prints a ``BrokenPipeError`` traceback for each Python task it was running. Use as
    ``gate = BatchGate(); q = df.writeStream.foreachBatch(gate.wrap(stoppable(f))).start();
    gate.attach(q)`` and stop with ``gate.stop(q, timeout_s)``. A batch that starts after
    ``stop`` began waits until the query is no longer active (``StreamingQuery.isActive``, polled
    every 0.1 s, at most ``STOP_WAIT_S``), then raises ``BatchFailed`` in the form ``stoppable``
    gives a Java error (py4j's first line, then ``java.lang.InterruptedException``), which Spark
    reads as "stopped" once the query is terminated (``StreamExecution.isInterruptedByStop`` and
    ``PROXY_ERROR``, Spark 4.3)."""

    #: Longest a skipped batch waits for ``query.stop()`` to mark the query terminated (s).
    STOP_WAIT_S = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._query: Any = None
        self._skipping = threading.Event()   # a batch after the close is in the function

    def attach(self, query: Any) -> None:
        """The started ``StreamingQuery`` the gate's skipped batches wait on."""
        self._query = query

    def wrap(self, func: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        """``func(batch_df, batch_id)`` run only while the gate is open."""

        @functools.wraps(func)
        def run(batch: Any, batch_id: int) -> Any:
            with self._lock:
                if not self._closed:
                    return func(batch, batch_id)
            self._skipping.set()
            deadline = time.monotonic() + self.STOP_WAIT_S
            while (self._query is not None and self._query.isActive
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            # the form Spark's PROXY_ERROR matches: py4j's first line, then the interruption
            raise BatchFailed("py4j.protocol.Py4JJavaError: An error occurred while calling "
                              f"foreachBatch.\n: java.lang.InterruptedException: batch {batch_id} "
                              "not run: the query is stopping")

        return run

    def stop(self, query: Any, timeout_s: float, idle_s: float = 3.0) -> bool:
        """Close the gate, wait up to ``timeout_s`` (s) for the batch in flight, then until the
        next batch is inside the (skipping) function or ``idle_s`` (s) passed, and
        ``query.stop()``. Stopping while the stream thread waits in the function is the quiet
        moment: stopping while Spark commits a batch's end to the checkpoint makes Hadoop log the
        ``InterruptedException`` with its stack. ``idle_s`` should exceed the trigger interval.
        Returns whether the batch in flight finished before the stop."""
        self._closed = True
        finished = self._lock.acquire(timeout=timeout_s)
        if finished:
            self._lock.release()
            self._skipping.wait(idle_s)
        query.stop()
        return finished
