"""Streaming sink, exactly once end to end: Spark replays + derived message ids + broker dedup.

One ``local_session()`` (the conftest's, shared by the Spark tests), as users get it: master
``local[2]``, which it runs as ``local[2,4]`` (a failed task is retried; Spark's plain ``local[2]`` never retries). Input: the
``rate-micro-batch`` source (a fixed number of rows per batch, values 0, 1, 2, ... in offset
order, so a replayed batch has the same rows in the same partitions). Output: a queue declared
with ``x-message-deduplication: true``. Every value of every committed batch must arrive exactly
once, even when every task's first attempt fails after publishing (the retry re-sends
everything), when the query is stopped and restarted from its checkpoint with its last batch
replayed, and when the broker the tasks publish to is SIGKILLed mid-task (a three-member cluster,
a quorum queue: the retried tasks go on at the next member). A ``foreachBatch`` query stopped
while its function runs a job stops cleanly (``spark.foreach_batch.stoppable``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from cluster.tests.processes import Cluster, api_get, free_port, wait_for  # noqa: E402
from spark.local import java_missing  # noqa: E402
from spark.tests.conftest import drain  # noqa: E402

if java_missing():
    pytest.skip(java_missing(), allow_module_level=True)

ROWS_PER_BATCH = 100
DEDUP = {"x-message-deduplication": True}


def _start(session, broker, queue: str, checkpoint: Path, **options):
    """The query, publishing to ``broker.uri`` (or ``uri=...``: a comma-separated list)."""
    df = (session.readStream.format("rate-micro-batch")
          .option("rowsPerBatch", ROWS_PER_BATCH).option("numPartitions", 2).load()
          .selectExpr("CAST(value AS STRING) AS body"))
    writer = (df.writeStream.format("amqp").option("uri", options.pop("uri", None) or broker.uri)
              .option("routing_key", queue).option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(processingTime="200 milliseconds").start()


def _commits(checkpoint: Path) -> list[dict]:
    path = checkpoint / "amqp-sink-commits.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_until(query, checkpoint: Path, batches: int, timeout: float = 60.0) -> None:
    """Wait until ``batches`` batches are committed by the sink (counting earlier runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        done = {c["batch_id"] for c in _commits(checkpoint) if c["outcome"] == "commit"}
        if len(done) >= batches:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {batches} batches committed within {timeout} s: "
                         f"{_commits(checkpoint)}")


def _last_batch(folder: Path) -> int:
    return max(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _remove(folder: Path, batch: int) -> None:
    for name in (str(batch), f".{batch}.crc"):
        if (folder / name).exists():
            os.remove(folder / name)


def _check_exactly_once(got: list[tuple], checkpoint: Path) -> int:
    """Every value of every committed batch exactly once; nothing duplicated anywhere."""
    committed = {c["batch_id"] for c in _commits(checkpoint) if c["outcome"] == "commit"}
    assert committed == set(range(len(committed))), committed
    end = len(committed) * ROWS_PER_BATCH
    values = Counter(int(body) for _, body in got)
    dups = {v: n for v, n in values.items() if n > 1}
    assert not dups, f"duplicates: {sorted(dups.items())[:10]}"
    missing = sorted(set(range(end)) - set(values))
    assert not missing, f"lost values: {missing[:10]}"
    ids = Counter(props.message_id for props, _ in got)
    assert max(ids.values()) == 1
    return end


def test_failed_first_attempts_are_deduplicated(session, broker, amqp, unique, tmp_path):
    amqp.queue_declare(unique, arguments=DEDUP)
    checkpoint = tmp_path / "checkpoint"
    query = _start(session, broker, unique, checkpoint, fail_first_attempt_for_test="true")
    try:
        _run_until(query, checkpoint, 3)
    finally:
        query.stop()
    # every task of every batch published its rows twice (attempt 0 failed after its confirms)
    got = drain(amqp, unique, 3 * ROWS_PER_BATCH)
    end = _check_exactly_once(got, checkpoint)
    commits = [c for c in _commits(checkpoint) if c["outcome"] == "commit"]
    assert all(c["retried_tasks"] == c["tasks"] == 2 for c in commits), commits
    assert end >= 3 * ROWS_PER_BATCH
    props, body = got[0]
    assert props.message_id.startswith(f"{query.id}:")
    assert props.delivery_mode == 2


def test_restart_from_checkpoint_with_replayed_batch(session, broker, amqp, unique, tmp_path):
    amqp.queue_declare(unique, arguments=DEDUP)
    checkpoint = tmp_path / "checkpoint"
    first = _start(session, broker, unique, checkpoint)
    try:
        _run_until(first, checkpoint, 2)
    finally:
        first.stop()
    # Make Spark believe the last batch the sink committed was never committed (as after a
    # crash between the sink's commit and the checkpoint's commit log): the restart replays it.
    sink_done = {c["batch_id"] for c in _commits(checkpoint) if c["outcome"] == "commit"}
    last = _last_batch(checkpoint / "offsets")
    if last not in sink_done:  # stopped before the sink committed it: forget that batch
        _remove(checkpoint / "offsets", last)
        _remove(checkpoint / "commits", last)
        last = _last_batch(checkpoint / "offsets")
    assert last in sink_done
    _remove(checkpoint / "commits", last)
    second = _start(session, broker, unique, checkpoint)
    try:
        assert second.id == first.id  # same query (id from the checkpoint), new run
        _run_until(second, checkpoint, last + 3)
    finally:
        second.stop()
    replays = [c for c in _commits(checkpoint) if c["outcome"] == "repeat"]
    assert [c["batch_id"] for c in replays] == [last], _commits(checkpoint)
    got = drain(amqp, unique, (last + 3) * ROWS_PER_BATCH)
    _check_exactly_once(got, checkpoint)


def test_broker_killed_mid_task_the_query_goes_on_at_the_next_member(session, unique, tmp_path):
    """n2, the first of the sink's URIs, holds the publishes of the first batch's tasks
    unconfirmed (its disk alarm blocks publishers, as RabbitMQ's does: it reads a task's first
    confirm round of ``batch_size`` messages, then nothing), so its SIGKILL lands while a task
    has a connection and unconfirmed messages on it, every run: the task fails
    (``ConfirmsLost``), Spark retries it, the retry publishes through n3 and the quorum queue
    (replicated on n2-n4, deduplicating) holds every row once."""
    cluster = Cluster.create(tmp_path)
    try:
        api_port = free_port("127.0.0.2")
        n2 = cluster.start(2, None, "--management-port", str(api_port),
                           "--disk-free-limit", str(10**18))
        n3 = cluster.start(3, n2)
        n4 = cluster.start(4, n2)
        members = [n2, n3, n4]
        wait_for(lambda: all(m.members() == [x.address for x in members] and m.serving()
                             for m in members), 20, "the three brokers did not agree on one view")
        with n3.connect() as conn:
            conn.channel().queue_declare(unique, durable=True,
                                         arguments={**DEDUP, "x-queue-type": "quorum"})
        checkpoint = tmp_path / "checkpoint"
        # confirm rounds of 10 messages: n2 reads the first and stops reading (blocked)
        query = _start(session, None, unique, checkpoint, batch_size="10",
                       uri=",".join(m.uri for m in members))
        try:
            api = f"http://127.0.0.2:{api_port}"
            wait_for(lambda: any("spark amqp sink" in str(c["client_properties"].get(
                "connection_name")) for c in api_get(api, "/connections") or []), 60,
                "no sink task connected to n2")
            cluster.kill(n2)
            _run_until(query, checkpoint, 3)
            assert query.isActive and query.exception() is None
        finally:
            query.stop()
        commits = [c for c in _commits(checkpoint) if c["outcome"] == "commit"]
        assert commits[0]["batch_id"] == 0 and commits[0]["retried_tasks"] >= 1, commits
        with n3.connect() as conn:
            got = drain(conn.channel(), unique, 3 * ROWS_PER_BATCH)
        _check_exactly_once(got, checkpoint)
    finally:
        cluster.stop_all()


def test_foreach_batch_stopped_mid_job_stops_cleanly(session):
    """``query.stop()`` while the function runs a job: the cancelled job's Py4JJavaError carries
    an 8 kB Java stack trace, on which Spark's PROXY_ERROR regex overflows the stream thread's
    stack (``java.lang.StackOverflowError`` on stderr, and the query never reaches "Stopped");
    ``stoppable`` hands Spark one short line instead."""
    from spark.foreach_batch import stoppable

    running = threading.Event()

    def slow(batch, batch_id: int) -> None:
        if batch.count():  # a batch with rows: the next job runs 2 s per row
            running.set()
            batch.selectExpr("java_method('java.lang.Thread', 'sleep', 2000L)").collect()

    query = (session.readStream.format("rate-micro-batch").option("rowsPerBatch", 2)
             .option("numPartitions", 1).load().writeStream.foreachBatch(stoppable(slow))
             .trigger(processingTime="200 milliseconds").start())
    try:
        assert running.wait(60), "no batch with rows"
        tracker = session.sparkContext.statusTracker()
        wait_for(lambda: bool(tracker.getActiveJobsIds()), 10, "the slow job did not start")
    finally:
        query.stop()
    assert query.exception() is None
    assert query.status["message"] == "Stopped", query.status
