"""Per-queue and per-channel ``message_stats`` with ``*_details.rate``, and closing a connection
through the API (issue 26), against both brokers (``management_broker``: ours and the RabbitMQ
3.10 node with rabbitmq_management): the same requests, the same answers' shapes and codes.
RabbitMQ's statistics show after its next collection (5 s): reads are polled, bounded."""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request

import pika
import pytest

from interop_tests.test_management_differential import api, eventually

pytestmark = pytest.mark.interop


def test_queue_and_channel_message_stats_have_rates(management_broker, unique_name):
    base = management_broker.api_url
    q = f"{unique_name}.q"
    with pika.BlockingConnection(pika.URLParameters(management_broker.uri)) as conn:
        ch = conn.channel()
        ch.queue_declare(q, auto_delete=True)
        for i in range(20):
            ch.basic_publish("", q, b"m%d" % i)

        def queue_stats():
            status, body = api(base, f"/queues/%2F/{q}")
            stats = body.get("message_stats", {}) if status == 200 else {}
            return stats if stats.get("publish") == 20 else None

        stats = eventually(queue_stats, "the queue's message_stats.publish")
        assert isinstance(stats["publish_details"]["rate"], float)

        def channel_stats():
            mine = [c for c in api(base, "/channels")[1]
                    if c["connection_details"]["peer_port"] == conn._impl._transport._sock
                    .getsockname()[1]]
            stats = mine[0].get("message_stats", {}) if mine else {}
            return stats if stats.get("publish") == 20 else None

        stats = eventually(channel_stats, "the channel's message_stats.publish")
        assert isinstance(stats["publish_details"]["rate"], float)
        listed = [x for x in api(base, "/queues")[1] if x["name"] == q]
        assert isinstance(listed[0]["messages_details"]["rate"], float)


def test_close_connection_through_the_api(management_broker, unique_name):
    base = management_broker.api_url
    conn = pika.BlockingConnection(pika.URLParameters(management_broker.uri))
    try:
        port = conn._impl._transport._sock.getsockname()[1]
        found = eventually(lambda: [c for c in api(base, "/connections")[1]
                                    if c.get("peer_port") == port], "the connection's row")
        name = urllib.parse.quote(found[0]["name"], safe="")
        assert api(base, "/connections/no-such-connection", "DELETE")[0] == 404
        req_status, _ = api_with_reason(base, f"/connections/{name}", f"bye {unique_name}")
        assert req_status == 204
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            for _ in range(50):
                conn.process_data_events(time_limit=0.2)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text == f"CONNECTION_FORCED - bye {unique_name}"
    finally:
        if conn.is_open:
            conn.close()


def api_with_reason(base: str, path: str, reason: str):
    """DELETE ``path`` with RabbitMQ's ``X-Reason`` header: (status, body)."""
    req = urllib.request.Request(base + "/api" + path, method="DELETE", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
        "X-Reason": reason})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
