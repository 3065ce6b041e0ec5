"""Batch example: Fisher's iris data -> per-species statistics -> one AMQP message per species.

    python -m spark.examples.batch_iris --uri amqp://guest:guest@127.0.0.1:5672/%2F

Reads ``sklearn/datasets/data/iris.csv``, the real data set that ships inside the scikit-learn
package (``pip install scikit-learn``; the file is read directly with Spark, scikit-learn itself
is not imported), aggregates it with Spark (count, mean/min/max of the four measurements per
species), declares a topic exchange ``spark.examples`` and a queue ``iris.stats`` bound to it with
``iris.#``, and publishes the three result rows as JSON messages with routing keys
``iris.<species>`` through the ``amqp`` sink, with publisher confirms. Read them back with
``amqp-client get iris.stats``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

from spark.examples import add_spark_arguments, spark_master

EXCHANGE = "spark.examples"
QUEUE = "iris.stats"
MEASUREMENTS = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def iris_csv() -> str:
    """Path of the iris CSV inside the installed scikit-learn (not imported, only located)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("this example reads the iris data set shipped with scikit-learn: "
                         "pip install scikit-learn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "iris.csv")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing from this scikit-learn installation")
    return path


def step(text: str) -> None:
    print(f"[batch_iris {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark.examples.batch_iris",
                                description=__doc__.split("\n")[0])
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F",
                   help="broker URI(s), comma-separated for failover")
    add_spark_arguments(p)
    p.add_argument("--exchange", default=EXCHANGE)
    p.add_argument("--queue", default=QUEUE)
    args = p.parse_args(argv)
    master = spark_master(args)

    path = iris_csv()
    with open(path, encoding="utf-8") as f:  # first line: "150,4,setosa,versicolor,virginica"
        n_rows, _, *species = f.readline().strip().split(",")
    step(f"data set: {path} ({n_rows} rows, species {', '.join(species)})")

    from clients.blocking import BlockingConnection

    step(f"declaring exchange {args.exchange!r} (topic) and queue {args.queue!r} (iris.#)")
    with BlockingConnection(args.uri.split(",")) as conn:
        ch = conn.channel()
        ch.exchange_declare(args.exchange, "topic", durable=True)
        ch.queue_declare(args.queue, durable=True)
        ch.queue_bind(args.queue, args.exchange, "iris.#")

    step(f"starting Spark ({master}, loopback only)")
    from pyspark.sql import functions as F

    from spark.local import local_session

    session = local_session(master, app_name="batch_iris")
    try:
        schema = ", ".join(f"{m} double" for m in MEASUREMENTS) + ", target int"
        # The first line is not a header of column names but "150,4,<species...>": it does
        # not parse with this schema, and DROPMALFORMED drops it (the count below checks).
        raw = session.read.schema(schema).option("mode", "DROPMALFORMED").csv(path)
        names = F.create_map(*[x for i, s in enumerate(species) for x in (F.lit(i), F.lit(s))])
        iris = raw.withColumn("species", names[F.col("target")]).drop("target").cache()
        count = iris.count()
        if count != int(n_rows):
            raise SystemExit(f"read {count} rows from {path}, expected {n_rows}")
        step(f"read {count} rows with Spark")
        aggs = [F.count(F.lit(1)).alias("n")]
        for m in MEASUREMENTS:
            aggs += [F.round(F.avg(m), 3).alias(f"{m}_mean"), F.min(m).alias(f"{m}_min"),
                     F.max(m).alias(f"{m}_max")]
        stats = (iris.groupBy("species").agg(*aggs)
                 .withColumn("routing_key", F.concat(F.lit("iris."), F.col("species")))
                 .orderBy("species"))
        stats.select("species", "n", *[f"{m}_mean" for m in MEASUREMENTS]).show(truncate=False)
        step(f"publishing {stats.count()} result rows as JSON to exchange {args.exchange!r} "
             f"with confirms")
        started = time.perf_counter()
        (stats.write.format("amqp").option("uri", args.uri).option("exchange", args.exchange)
         .option("routing_key_column", "routing_key").option("format", "json")
         .mode("append").save())
        step(f"done in {time.perf_counter() - started:.1f} s; one message, for example:")
        print(json.dumps(stats.drop("routing_key").first().asDict(), indent=2), flush=True)
        step(f"read them back with: amqp-client --uri '{args.uri.split(',')[0]}' get "
             f"{args.queue}")
    finally:
        session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
