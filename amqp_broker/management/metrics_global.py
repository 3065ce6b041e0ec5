"""The counters and client gauges of ``/metrics`` that RabbitMQ's Grafana dashboard
"RabbitMQ-Overview" (id 10991) plots, in rabbitmq_prometheus 3.10's names, labels and types:

- churn (counters, no labels): rabbitmq_connections_{opened,closed}_total,
  rabbitmq_channels_{opened,closed}_total, rabbitmq_queues_{declared,created,deleted}_total
  (``core.stats.Churn``: client connections and their channels only; a queue's creation and
  deletion count on every member holding it, its declaration where the client declared it);
- ``rabbit_global_counters`` (counters): rabbitmq_global_messages_{received, received_confirm,
  routed, unroutable_dropped, unroutable_returned, confirmed}_total{protocol="amqp091"} and, per
  queue type (``queue_type`` rabbit_classic_queue / rabbit_quorum_queue / rabbit_stream_queue,
  every type always present as RabbitMQ's), rabbitmq_global_messages_{delivered,
  delivered_consume_auto_ack, delivered_consume_manual_ack, delivered_get_auto_ack,
  delivered_get_manual_ack, redelivered, get_empty, acknowledged}_total{protocol, queue_type};
  gauges rabbitmq_global_publishers{protocol} (open channels that have published: RabbitMQ's
  intent; 3.10's own counter goes wrong when a channel that never published closes) and
  rabbitmq_global_consumers{protocol};
- rabbitmq_channel_consumers: consumers on channels (the 3.10 dashboard's "Publishers" panel is
  channels minus this), summed on ``/metrics``, per channel (label ``channel``, RabbitMQ's
  management name "peer -> listener (number)") on ``/metrics/per-object``.

Source: rabbitmq-server v3.10.8 ``deps/rabbit/src/rabbit_global_counters.erl``,
``rabbit_channel.erl`` (where each counter moves) and ``deps/rabbitmq_prometheus/src/collectors/
prometheus_rabbitmq_core_metrics_collector.erl`` (``connection_churn_metrics``,
``channel_metrics``); checked against a 3.10.8 node's scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..core.broker import Broker
from ..core.stats import QUEUE_TYPES, TYPED_KINDS, message_totals
from .shapes import visible_connections

__all__ = ["churn_families", "global_families"]

PROTOCOL = "amqp091"


def churn_families(broker: Broker) -> Iterator[Metric]:
    """The seven churn counters (module docstring)."""
    churn = broker.churn
    for name, doc, value in (
            ("connections_opened", "Total number of connections opened",
             churn.connections_opened),
            ("connections_closed", "Total number of connections closed or terminated",
             churn.connections_closed),
            ("channels_opened", "Total number of channels opened", churn.channels_opened),
            ("channels_closed", "Total number of channels closed", churn.channels_closed),
            ("queues_declared", "Total number of queues declared", churn.queues_declared),
            ("queues_created", "Total number of queues created", churn.queues_created),
            ("queues_deleted", "Total number of queues deleted", churn.queues_deleted)):
        yield CounterMetricFamily(f"rabbitmq_{name}", doc, value=value)


def _counter(name: str, doc: str, value: int) -> CounterMetricFamily:
    fam = CounterMetricFamily(f"rabbitmq_global_messages_{name}", doc, labels=["protocol"])
    fam.add_metric([PROTOCOL], value)
    return fam


_TYPED_DOCS = {
    "delivered_consume_auto_ack": "Total number of messages delivered to consumers using "
                                  "basic.consume with automatic acknowledgment",
    "delivered_consume_manual_ack": "Total number of messages delivered to consumers using "
                                    "basic.consume with manual acknowledgment",
    "delivered_get_auto_ack": "Total number of messages delivered to consumers using basic.get "
                              "with automatic acknowledgment",
    "delivered_get_manual_ack": "Total number of messages delivered to consumers using "
                                "basic.get with manual acknowledgment",
    "redelivered": "Total number of messages redelivered to consumers",
    "get_empty": "Total number of times basic.get operations fetched no message",
    "acknowledged": "Total number of message acknowledgements received from consumers"}


def global_families(broker: Broker, per_object: bool) -> Iterator[Metric]:
    """``rabbit_global_counters`` and the client gauges (module docstring)."""
    t = message_totals(broker)
    yield _counter("received", "Total number of messages received from publishers", t.publish)
    yield _counter("received_confirm", "Total number of messages received from publishers "
                   "expecting confirmations", t.received_confirm)
    yield _counter("routed", "Total number of messages routed to queues or streams", t.routed)
    yield _counter("unroutable_dropped", "Total number of messages published as non-mandatory "
                   "into an exchange and dropped as unroutable", t.unroutable_dropped)
    yield _counter("unroutable_returned", "Total number of messages published as mandatory into "
                   "an exchange and returned to the publisher as unroutable",
                   t.unroutable_returned)
    yield _counter("confirmed", "Total number of messages confirmed to publishers", t.confirm)
    n_types = len(QUEUE_TYPES)
    labels = ["protocol", "queue_type"]
    delivered = CounterMetricFamily("rabbitmq_global_messages_delivered", "Total number of "
                                    "messages delivered to consumers", labels=labels)
    for i, qtype in enumerate(QUEUE_TYPES):
        # consume and get, auto and manual ack: the first four kinds
        delivered.add_metric([PROTOCOL, qtype], sum(t.typed[k * n_types + i] for k in range(4)))
    yield delivered
    for k, kind in enumerate(TYPED_KINDS):
        fam = CounterMetricFamily(f"rabbitmq_global_messages_{kind}", _TYPED_DOCS[kind],
                                  labels=labels)
        for i, qtype in enumerate(QUEUE_TYPES):
            fam.add_metric([PROTOCOL, qtype], t.typed[k * n_types + i])
        yield fam
    conns = visible_connections(broker)
    channels = [(c, ch) for c in conns for ch in c.channels.values()]
    publishers = GaugeMetricFamily("rabbitmq_global_publishers", "Publishers currently "
                                   "connected", labels=["protocol"])
    publishers.add_metric([PROTOCOL], sum(1 for _, ch in channels if ch.n_publish))
    yield publishers
    consumers = GaugeMetricFamily("rabbitmq_global_consumers", "Consumers currently "
                                  "connected", labels=["protocol"])
    consumers.add_metric([PROTOCOL], sum(len(ch.consumers) for _, ch in channels))
    yield consumers
    per_channel = GaugeMetricFamily("rabbitmq_channel_consumers", "Consumers on a channel",
                                    labels=["channel"] if per_object else [])
    if per_object:
        for conn, ch in channels:
            per_channel.add_metric([f"{conn.name} ({ch.id})"], len(ch.consumers))
    else:
        per_channel.add_metric([], sum(len(ch.consumers) for _, ch in channels))
    yield per_channel
