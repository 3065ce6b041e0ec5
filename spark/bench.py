"""Throughput of the ``amqp`` batch sink: rows/s published with confirms from a local session.

    python -m spark.bench --uri amqp://guest:guest@127.0.0.1:5672/%2F [--rows 1000000]
        [--master local[2]] [--row-bytes 200] [--message-id-mode position]

Publishes ``--rows`` rows of ``--row-bytes`` bytes (a ``body`` string column made by
``spark.range``, two partitions) to a queue that keeps only the newest 10,000 messages
(``x-max-length``, so the broker's memory stays flat), once to warm up and then ``--repeat``
timed runs, and prints rows/s for each. The timing covers the whole Spark job (planning, tasks,
commit), so it is what a user sees. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import time
import uuid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark.bench", description=__doc__.split("\n")[0])
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--row-bytes", type=int, default=200)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--message-id-mode", default="position",
                   choices=("position", "content", "none"))
    p.add_argument("--batch-size", type=int, default=2000)
    args = p.parse_args(argv)

    from clients.blocking import BlockingConnection

    from .local import local_session

    queue = f"spark.bench.{uuid.uuid4().hex[:8]}"
    with BlockingConnection(args.uri) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, arguments={"x-max-length": 10_000})
    session = local_session(args.master, app_name="amqp-sink-bench")
    pad = max(args.row_bytes - 12, 0)
    df = session.range(0, args.rows, numPartitions=args.partitions).selectExpr(
        f"concat(lpad(CAST(id AS STRING), 12, '0'), repeat('x', {pad})) AS body")
    print(f"{args.rows:,} rows of {args.row_bytes} B, {args.master}, {args.partitions} "
          f"partitions, message ids: {args.message_id_mode}, queue {queue}", flush=True)
    try:
        for run in range(args.repeat + 1):
            started = time.perf_counter()
            (df.write.format("amqp").option("uri", args.uri).option("routing_key", queue)
             .option("message_id_mode", args.message_id_mode)
             .option("batch_size", str(args.batch_size)).mode("append").save())
            seconds = time.perf_counter() - started
            label = "warm-up" if run == 0 else f"run {run}"
            print(f"{label}: {seconds:.2f} s, {args.rows / seconds:,.0f} rows/s", flush=True)
    finally:
        with BlockingConnection(args.uri) as conn:
            conn.channel().queue_delete(queue)
        session.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
