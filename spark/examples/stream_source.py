"""Source example: a stream queue read as a streaming DataFrame, counts per routing key per batch.

    python -m spark.examples.stream_source --uri amqp://guest:guest@127.0.0.1:5672/%2F

Declares the stream queue ``--queue`` (``x-queue-type: stream``, default ``events.stream``) bound
to the topic exchange ``--exchange`` (default ``events``) with ``#``, and, unless ``--rate 0``,
publishes ``--rate`` messages a second to it from a background thread (routing keys
``orders.created``, ``orders.paid``, ``orders.shipped``, ``users.signup`` as 4:3:2:1; our client,
with confirms). The query reads the stream with ``format("amqp")`` (``startingOffset`` ``--start``,
at most ``--max-per-batch`` messages per micro-batch) and prints, for every micro-batch, its
offsets and how many messages each routing key had (``foreachBatch``). The checkpoint
(``--checkpoint``, default ``./data/spark-checkpoints/stream_source``) makes a re-run go on after
the last offset the previous run finished: nothing is counted twice. Stops after ``--seconds``
(Ctrl-C stops it earlier, cleanly: the batch being counted finishes, later ones are left to the
next run (``spark.foreach_batch.BatchGate``); a second Ctrl-C stops at once, cancelling the batch
being counted, which the next run counts again; ``spark.foreach_batch.stoppable`` keeps Spark's
stop from dying of a ``StackOverflowError``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time

from spark.examples import add_spark_arguments, catch_ctrl_c, spark_master

#: Longest the stop waits for the batch being counted (s); then it is cancelled.
STOP_TIMEOUT_S = 30.0

#: Routing keys of the published messages, in the proportions 4:3:2:1.
KEYS = ("orders.created",) * 4 + ("orders.paid",) * 3 + ("orders.shipped",) * 2 + ("users.signup",)


def step(text: str) -> None:
    print(f"[stream_source {time.strftime('%H:%M:%S')}] {text}", flush=True)


def declare(uris: list[str], queue: str, exchange: str) -> None:
    from clients.blocking import BlockingConnection

    with BlockingConnection(uris) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        ch.exchange_declare(exchange, "topic", durable=True)
        ch.queue_bind(queue, exchange, "#")


def publish(uris: list[str], exchange: str, rate: int, stop: threading.Event) -> None:
    """``rate`` messages a second in 10 rounds a second, with confirms, until ``stop``."""
    from clients.blocking import BlockingConnection
    from clients.message import Properties

    per_round = max(1, rate // 10)
    numbers = itertools.count()
    with BlockingConnection(uris) as conn:
        ch = conn.channel(confirm=True)
        while not stop.is_set():
            started = time.monotonic()
            batch = []
            for _ in range(per_round):
                n = next(numbers)
                batch.append((b'{"n": %d}' % n, KEYS[n % len(KEYS)],
                              Properties(content_type="application/json",
                                         message_id=f"event-{n}", timestamp=int(time.time()))))
            ch.wait_confirmations(ch.publish_batch(batch, exchange), 30)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark.examples.stream_source",
                                description=__doc__.split("\n")[0])
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F",
                   help="broker URI(s), comma-separated for failover")
    add_spark_arguments(p)
    p.add_argument("--queue", default="events.stream")
    p.add_argument("--exchange", default="events")
    p.add_argument("--rate", type=int, default=500, help="messages/s to publish (0: none)")
    p.add_argument("--start", default="first",
                   help='startingOffset of a new query: first, last, next, an offset or an '
                        'ISO timestamp')
    p.add_argument("--max-per-batch", type=int, default=2000,
                   help="max_messages_per_batch")
    p.add_argument("--seconds", type=float, default=20.0, help="run time (0: until Ctrl-C)")
    p.add_argument("--checkpoint", default=os.path.join("data", "spark-checkpoints",
                                                        "stream_source"))
    args = p.parse_args(argv)
    master = spark_master(args)
    uris = [u.strip() for u in args.uri.split(",") if u.strip()]

    step(f"declaring stream queue {args.queue!r} bound to topic exchange {args.exchange!r}")
    declare(uris, args.queue, args.exchange)
    stop = threading.Event()
    publisher = None
    if args.rate > 0:
        step(f"publishing {args.rate} messages/s to {args.exchange!r} in the background")
        publisher = threading.Thread(target=publish, args=(uris, args.exchange, args.rate, stop),
                                     name="publisher", daemon=True)
        publisher.start()

    step(f"starting Spark ({master}, loopback only)")
    from pyspark.sql import functions as F

    from spark.foreach_batch import BatchGate, stoppable
    from spark.local import local_session

    session = local_session(master, app_name="stream_source")
    interrupted = catch_ctrl_c()
    events = (session.readStream.format("amqp").option("uri", args.uri)
              .option("queue", args.queue).option("startingOffset", args.start)
              .option("max_messages_per_batch", args.max_per_batch).load())

    def show(batch, batch_id: int) -> None:
        counts = (batch.groupBy("routing_key")
                  .agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo"),
                       F.max("offset").alias("hi"))
                  .collect())
        if not counts:
            return
        total = sum(r.n for r in counts)
        lo, hi = min(r.lo for r in counts), max(r.hi for r in counts)
        per_key = "  ".join(f"{r.routing_key}={r.n}" for r in sorted(counts,
                                                                      key=lambda r: r.routing_key))
        step(f"batch {batch_id}: {total} messages, offsets {lo}..{hi}: {per_key}")

    # stoppable: stopping while show() runs would otherwise kill Spark's stream thread with a
    # java.lang.StackOverflowError (see spark.foreach_batch) instead of stopping it cleanly
    gate = BatchGate()
    query = (events.writeStream.foreachBatch(gate.wrap(stoppable(show)))
             .option("checkpointLocation", os.path.abspath(args.checkpoint))
             .trigger(processingTime="1 second").queryName("stream_source").start())
    gate.attach(query)
    step(f"query {query.id} running (checkpoint {args.checkpoint}); "
         f"{'until Ctrl-C' if not args.seconds else f'for {args.seconds:.0f} s'}")
    deadline = time.monotonic() + args.seconds if args.seconds else None
    stopped = False
    try:
        while (query.isActive and not interrupted.is_set()
               and (deadline is None or time.monotonic() < deadline)):
            query.awaitTermination(0.5)
        if interrupted.is_set():
            step("Ctrl-C: stopping after the batch being counted (Ctrl-C again: at once)")
        stop.set()
        gate.stop(query, STOP_TIMEOUT_S)
        stopped = True
    except KeyboardInterrupt:
        step("Ctrl-C again: stopping now")
    finally:
        stop.set()
        if not stopped:
            query.stop()
        if publisher is not None:
            publisher.join(10)
        error = query.exception()
        session.stop()
    if error is not None:
        step(f"query failed: {error}")
        return 1
    step("stopped; run again with the same --checkpoint to go on where this run stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
