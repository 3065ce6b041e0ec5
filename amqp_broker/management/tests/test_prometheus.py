"""/metrics: rabbitmq_prometheus names, parseable text format, aggregated and per-object."""

from __future__ import annotations

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
                                           ("rabbitmq_node", node)))] == 1
    per = _samples(render(mgmt, per_object=True))
    assert per[("rabbitmq_queue_messages_ready", (("queue", "pq"), ("vhost", "/")))] == 4
