"""Streaming example: Spark's rate source -> 5-second window statistics -> AMQP, exactly once.

    python -m spark.examples.streaming_rate --uri amqp://guest:guest@127.0.0.1:5672/%2F

Generates ``--rows-per-second`` rows (``timestamp``, ``value``) with the built-in ``rate``
source, aggregates them into 5-second event-time windows (count, sum, min, max of ``value``;
watermark 2 s, append mode: each window is emitted once, when it is final) and publishes one JSON
message per window to queue ``rate.windows`` (declared with ``x-message-deduplication: true``)
through the ``amqp`` sink. The checkpoint (``--checkpoint``, default ``./data/spark-checkpoints/
streaming_rate``) makes a re-run continue where the last one stopped: the batch that was running
when it stopped is replayed with the same message ids and the queue drops the copies. Stops after
``--seconds`` (Ctrl-C stops it earlier, cleanly). Each trigger prints a progress line. Message ids
use ``message_id_mode=content`` because the aggregation's shuffle does not keep row order.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from spark.examples import add_spark_arguments, catch_ctrl_c, spark_master

QUEUE = "rate.windows"


def step(text: str) -> None:
    print(f"[streaming_rate {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark.examples.streaming_rate",
                                description=__doc__.split("\n")[0])
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F",
                   help="broker URI(s), comma-separated for failover")
    add_spark_arguments(p)
    p.add_argument("--queue", default=QUEUE)
    p.add_argument("--rows-per-second", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=30.0, help="run time (0: until Ctrl-C)")
    p.add_argument("--checkpoint", default=os.path.join("data", "spark-checkpoints",
                                                        "streaming_rate"))
    args = p.parse_args(argv)
    master = spark_master(args)

    from clients.blocking import BlockingConnection

    step(f"declaring queue {args.queue!r} with x-message-deduplication")
    with BlockingConnection(args.uri.split(",")) as conn:
        conn.channel().queue_declare(args.queue, durable=True,
                                     arguments={"x-message-deduplication": True})

    step(f"starting Spark ({master}, loopback only)")
    from pyspark.sql import functions as F

    from spark.local import local_session

    session = local_session(master, app_name="streaming_rate")
    interrupted = catch_ctrl_c()
    windows = (session.readStream.format("rate")
               .option("rowsPerSecond", args.rows_per_second).option("numPartitions", 2).load()
               .withWatermark("timestamp", "2 seconds")
               .groupBy(F.window("timestamp", "5 seconds"))
               .agg(F.count(F.lit(1)).alias("rows"), F.sum("value").alias("sum"),
                    F.min("value").alias("min"), F.max("value").alias("max"))
               .select(F.col("window.start").alias("window_start"),
                       F.col("window.end").alias("window_end"), "rows", "sum", "min", "max"))
    query = (windows.writeStream.format("amqp").outputMode("append")
             .option("uri", args.uri).option("routing_key", args.queue)
             .option("format", "json").option("message_id_mode", "content")
             .option("checkpointLocation", os.path.abspath(args.checkpoint))
             .trigger(processingTime="2 seconds").queryName("streaming_rate").start())
    step(f"query {query.id} running (checkpoint {args.checkpoint}); "
         f"{'until Ctrl-C' if not args.seconds else f'for {args.seconds:.0f} s'}")
    deadline = time.monotonic() + args.seconds if args.seconds else None
    last_batch = None
    try:
        while (query.isActive and not interrupted.is_set()
               and (deadline is None or time.monotonic() < deadline)):
            query.awaitTermination(0.5)
            progress = query.lastProgress
            if progress and progress["batchId"] != last_batch:
                last_batch = progress["batchId"]
                sink_rows = progress.get("sink", {}).get("numOutputRows", -1)
                step(f"batch {last_batch}: {progress['numInputRows']} rows in "
                     f"({progress.get('processedRowsPerSecond', 0):.0f} rows/s), "
                     f"{sink_rows} window message(s) out, watermark "
                     f"{progress.get('eventTime', {}).get('watermark', '-')}")
        if interrupted.is_set():
            step("Ctrl-C: stopping")
    except KeyboardInterrupt:
        step("Ctrl-C again: stopping now")
    finally:
        query.stop()
        session.stop()
    with BlockingConnection(args.uri.split(",")) as conn:
        depth = conn.channel().queue_declare(args.queue, passive=True)
    step(f"stopped; queue {args.queue!r} holds {getattr(depth, 'message_count', depth)} "
         f"message(s): read them with amqp-client --uri '{args.uri.split(',')[0]}' consume "
         f"{args.queue}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
