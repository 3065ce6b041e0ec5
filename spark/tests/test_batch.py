"""Batch sink: ``df.write.format("amqp")`` in a real local Spark against a real broker.

One session (``local[2]``, the conftest's, shared by the Spark tests). Each test declares its own
queue, writes a DataFrame and reads what landed with pika: exactly N messages, right bodies and
properties; a nack or an unroutable mandatory message fails the job; bad options fail on the
driver before any task runs.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from spark.local import java_missing  # noqa: E402
from spark.tests.conftest import drain  # noqa: E402

if java_missing():
    pytest.skip(java_missing(), allow_module_level=True)


def _queue(amqp, name: str, **arguments) -> str:
    amqp.queue_declare(name, arguments=arguments or None)
    return name


def test_batch_write_lands_every_row_with_body_and_properties(session, broker, amqp, unique):
    from pyspark.sql import functions as F

    q = _queue(amqp, unique)
    n = 1000
    df = (session.range(n).repartition(2)
          .select(
              F.col("id"),
              F.format_string("row-%d", "id").alias("body"),
              F.lit("text/plain").alias("content_type"),
              F.format_string("mid-%d", "id").alias("message_id"),
              F.create_map(F.lit("id"), F.col("id"), F.lit("parity"), F.col("id") % 2)
               .alias("headers"),
              (F.col("id") % 10).cast("int").alias("priority"),
              F.lit(60000).alias("expiration"),
              F.lit(1).alias("delivery_mode"),
          ))
    (df.write.format("amqp").option("uri", broker.uri).option("routing_key", q)
     .mode("append").save())
    got = drain(amqp, q, n)
    assert len(got) == n
    by_id = {props.message_id: (props, body) for props, body in got}
    assert len(by_id) == n
    for i in (0, 1, 499, 999):
        props, body = by_id[f"mid-{i}"]
        assert body == f"row-{i}".encode()
        assert props.content_type == "text/plain"
        assert props.headers == {"id": i, "parity": i % 2}
        assert props.priority == i % 10
        assert props.expiration == "60000"
        assert props.delivery_mode == 1


def test_batch_write_json_rows_with_routing_key_column(session, broker, amqp, unique):
    ex = unique + ".ex"
    amqp.exchange_declare(ex, "direct")
    qa, qb = _queue(amqp, unique + ".a"), _queue(amqp, unique + ".b")
    amqp.queue_bind(qa, ex, "a")
    amqp.queue_bind(qb, ex, "b")
    rows = [("a", 1, 1.5, {"k": "v"}), ("b", 2, 2.5, {}), ("a", 3, None, None)]
    df = session.createDataFrame(rows, "key string, n long, x double, m map<string,string>")
    (df.write.format("amqp").option("uri", broker.uri).option("exchange", ex)
     .option("routing_key_column", "key").option("format", "json").mode("append").save())
    got_a = drain(amqp, qa, 2)
    got_b = drain(amqp, qb, 1)
    assert sorted(json.loads(b)["n"] for _, b in got_a) == [1, 3]
    (props, body), = got_b
    assert json.loads(body) == {"key": "b", "n": 2, "x": 2.5, "m": {}}
    assert props.content_type == "application/json"
    assert props.delivery_mode == 2  # persistent by default
    assert {json.dumps(json.loads(b), sort_keys=True) for _, b in got_a} == {
        '{"key": "a", "m": {"k": "v"}, "n": 1, "x": 1.5}',
        '{"key": "a", "m": null, "n": 3, "x": null}'}


def test_binary_value_column_and_uri_list_failover(session, broker, amqp, unique):
    q = _queue(amqp, unique)
    df = session.createDataFrame([(bytearray(b"\x00\xffbin"),), (bytearray(b""),)], "value binary")
    dead = "amqp://guest:guest@127.0.0.1:1/%2F"  # nothing listens on port 1: the next is used
    (df.write.format("amqp").option("uri", f"{dead},{broker.uri}").option("routing_key", q)
     .mode("append").save())
    assert sorted(b for _, b in drain(amqp, q, 2)) == [b"", b"\x00\xffbin"]


def test_unroutable_mandatory_message_fails_the_job(session, broker):
    df = session.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="NO_ROUTE"):
        (df.write.format("amqp").option("uri", broker.uri)
         .option("routing_key", "no-such-queue-anywhere").mode("append").save())


def test_nacked_message_fails_the_job(session, broker, amqp, unique):
    q = _queue(amqp, unique, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    df = session.createDataFrame([("1",), ("2",), ("3",)], "body string").coalesce(1)
    with pytest.raises(Exception, match="nacked"):
        df.write.format("amqp").option("uri", broker.uri).option("routing_key", q) \
            .mode("append").save()
    assert amqp.queue_declare(q, passive=True).method.message_count == 1


def test_bad_options_fail_before_any_task(session, broker):
    df = session.createDataFrame([(1,)], "n long")
    with pytest.raises(Exception, match="no body"):
        df.write.format("amqp").option("uri", broker.uri).mode("append").save()
    with pytest.raises(Exception, match="did you mean 'routing_key'"):
        df.write.format("amqp").option("uri", broker.uri).option("format", "json") \
            .option("routingkey", "x").mode("append").save()
    with pytest.raises(Exception, match="must be binary or string"):
        df.withColumnRenamed("n", "body").write.format("amqp").option("uri", broker.uri) \
            .mode("append").save()
    with pytest.raises(Exception, match='"uri" is required'):
        df.write.format("amqp").option("format", "json").mode("append").save()
