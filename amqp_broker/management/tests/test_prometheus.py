"""/metrics: rabbitmq_prometheus names, parseable text format, aggregated and per-object."""

from __future__ import annotations

from pamqp import commands
from prometheus_client.parser import text_string_to_metric_families

from amqp_broker.core.tests.client import Client
from amqp_broker.management.prometheus import render

from .helpers import make


def _samples(text: bytes) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples}


def test_metrics_names_and_values() -> None:
    mgmt = make()
    cl = Client(mgmt.broker)
    cl.handshake()
    cl.open_channel(1)
    cl.declare_queue(1, "pq")
    for _ in range(4):
        cl.publish(1, "", "pq", b"x")
    cl.pump()
    agg = _samples(render(mgmt))
    assert agg[("rabbitmq_queue_messages_ready", ())] == 4
    assert agg[("rabbitmq_global_messages_received_total", (("protocol", "amqp091"),))] == 4
    assert agg[("rabbitmq_connections", ())] == 1 and agg[("rabbitmq_channels", ())] == 1
    node = mgmt.broker.settings.node_name
    assert agg[("rabbitmq_identity_info", (("rabbitmq_cluster", "amqp-broker"),
                                           ("rabbitmq_cluster_permanent_id", "amqp-broker"),
                                           ("rabbitmq_endpoint", "aggregated"),
                                           ("rabbitmq_node", node)))] == 1
    per = _samples(render(mgmt, per_object=True))
    assert per[("rabbitmq_queue_messages_ready", (("queue", "pq"), ("vhost", "/")))] == 4


def _typed(samples: dict, kind: str, queue_type: str = "rabbit_classic_queue") -> float:
    return samples[(f"rabbitmq_global_messages_{kind}_total",
                    (("protocol", "amqp091"), ("queue_type", queue_type)))]


def test_global_counters_and_churn_as_rabbitmq() -> None:
    """rabbit_global_counters' kinds and connection/channel/queue churn move as RabbitMQ 3.10's
    (rabbit_channel.erl): routed counts queues reached, unroutable split by mandatory, deliveries
    by consume/get and ack mode per queue type, redeliveries, empty gets, acks."""
    mgmt = make()
    cl = Client(mgmt.broker)
    cl.handshake()
    cl.open_channel(1)
    cl.open_channel(2)
    cl.declare_queue(1, "a")
    cl.declare_queue(1, "a")  # a redeclare: declared, not created
    cl.declare_queue(1, "b")
    cl.call(1, commands.Queue.Bind(queue="b", exchange="amq.fanout"))
    cl.call(1, commands.Queue.Bind(queue="a", exchange="amq.fanout"))
    cl.call(1, commands.Confirm.Select())
    cl.publish(1, "amq.fanout", "", b"x")            # two queues
    cl.publish(1, "", "a", b"y")                      # one queue
    cl.publish(1, "", "nowhere", b"z")                # dropped
    cl.publish(1, "", "nowhere", b"z", mandatory=True)  # returned
    cl.pump()
    cl.send(2, commands.Basic.Get(queue="b", no_ack=True))
    cl.send(2, commands.Basic.Get(queue="b", no_ack=True))  # empty now
    cl.send(2, commands.Basic.Get(queue="a"))
    cl.pump()
    cl.send(2, commands.Basic.Nack(delivery_tag=2, multiple=False, requeue=True))
    cl.methods()  # what came back so far
    cl.consume(2, "a", "c1")
    cl.pump()
    cl.send(2, commands.Basic.Ack(delivery_tag=0, multiple=True))
    cl.pump()
    agg = _samples(render(mgmt))
    assert agg[("rabbitmq_global_messages_routed_total", (("protocol", "amqp091"),))] == 3
    assert agg[("rabbitmq_global_messages_unroutable_dropped_total",
                (("protocol", "amqp091"),))] == 1
    assert agg[("rabbitmq_global_messages_unroutable_returned_total",
                (("protocol", "amqp091"),))] == 1
    assert agg[("rabbitmq_global_messages_received_confirm_total",
                (("protocol", "amqp091"),))] == 4
    assert _typed(agg, "delivered_get_auto_ack") == 1
    assert _typed(agg, "delivered_get_manual_ack") == 1
    assert _typed(agg, "get_empty") == 1
    assert _typed(agg, "delivered_consume_manual_ack") == 2  # the requeued one and "y"
    assert _typed(agg, "redelivered") == 1
    assert _typed(agg, "acknowledged") == 2
    assert _typed(agg, "delivered") == 4
    assert _typed(agg, "delivered", "rabbit_quorum_queue") == 0
    assert agg[("rabbitmq_global_publishers", (("protocol", "amqp091"),))] == 1
    assert agg[("rabbitmq_global_consumers", (("protocol", "amqp091"),))] == 1
    assert agg[("rabbitmq_channel_consumers", ())] == 1
    cl.methods()
    cl.call(1, commands.Queue.Delete(queue="b"))
    cl.send(1, commands.Channel.Close(200, "bye", 0, 0))
    cl.pump()
    agg = _samples(render(mgmt))
    churn = {name: agg[(f"rabbitmq_{name}_total", ())] for name in (
        "connections_opened", "connections_closed", "channels_opened", "channels_closed",
        "queues_declared", "queues_created", "queues_deleted")}
    assert churn == {"connections_opened": 1, "connections_closed": 0, "channels_opened": 2,
                     "channels_closed": 1, "queues_declared": 3, "queues_created": 2,
                     "queues_deleted": 1}
    cl.methods()
    cl.close()
    agg = _samples(render(mgmt))
    assert agg[("rabbitmq_connections_closed_total", ())] == 1
    assert agg[("rabbitmq_channels_closed_total", ())] == 2


def test_delivery_and_ack_counts_outlive_their_consumer() -> None:
    """A consumer's deliveries and acks are counted on the consumer (native integers) and moved
    to its channel when it leaves: after a Basic.Cancel, acks of its deliveries that come after
    the cancel, a queue deleted under another consumer, and the channel's close, the totals
    still count every delivery and ack once (Prometheus counters never go down)."""
    mgmt = make()
    cl = Client(mgmt.broker)
    cl.handshake()
    cl.open_channel(1)
    for q in ("c", "d"):
        cl.declare_queue(1, q)
        for _ in range(3):
            cl.publish(1, "", q, b"m")
    cl.pump()
    cl.consume(1, "c", "manual")
    cl.pump()
    cl.send(1, commands.Basic.Cancel(consumer_tag="manual"))
    cl.pump()
    cl.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))   # after the cancel
    cl.pump()
    cl.methods()
    cl.consume(1, "d", "auto", no_ack=True)
    cl.pump()
    cl.send(1, commands.Queue.Delete(queue="d"))                   # its consumer goes with it
    cl.pump()
    agg = _samples(render(mgmt))
    assert _typed(agg, "delivered_consume_manual_ack") == 3
    assert _typed(agg, "delivered_consume_auto_ack") == 3
    assert _typed(agg, "acknowledged") == 2
    cl.send(1, commands.Basic.Ack(delivery_tag=3))
    cl.pump()
    cl.methods()
    cl.send(1, commands.Channel.Close(200, "bye", 0, 0))
    cl.pump()
    agg = _samples(render(mgmt))
    assert _typed(agg, "delivered_consume_manual_ack") == 3
    assert _typed(agg, "delivered_consume_auto_ack") == 3
    assert _typed(agg, "acknowledged") == 3
    assert _typed(agg, "delivered") == 6
