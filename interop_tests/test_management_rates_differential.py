"""Per-queue, per-channel and per-exchange ``message_stats`` with ``*_details.rate``, and
closing a connection through the API (issue 26), against both brokers (``management_broker``: ours and the RabbitMQ
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

        def listed_with_rates():
            # RabbitMQ lists messages_details once its stats collector sampled the queue's
            # counts (every 5 s): right after the publishes the listing may not have it yet
            listed = [x for x in api(base, "/queues")[1] if x["name"] == q]
            return listed[0] if listed and "messages_details" in listed[0] else None

        entry = eventually(listed_with_rates, "the queue listing's messages_details")
        assert isinstance(entry["messages_details"]["rate"], float)


def test_exchange_message_stats_have_rates(management_broker, unique_name):
    """An exchange's ``message_stats`` (RabbitMQ 3.10, rates mode basic): ``publish_in`` counts
    the messages published to it, ``publish_out`` one per queue each reached (a fanout to two
    queues: twice), counted on the exchange published to, not on one an exchange-to-exchange
    binding passed them through; none until a message is published to it, and no
    ``publish_out`` while none was routed."""
    base = management_broker.api_url
    fan, direct, e2e, idle = (f"{unique_name}.{k}" for k in ("fan", "dir", "e2e", "idle"))
    with pika.BlockingConnection(pika.URLParameters(management_broker.uri)) as conn:
        ch = conn.channel()
        for name, kind in ((fan, "fanout"), (direct, "direct"), (e2e, "fanout"),
                           (idle, "fanout")):
            ch.exchange_declare(name, kind, auto_delete=True)
        for q in ("q1", "q2"):
            ch.queue_declare(f"{unique_name}.{q}", auto_delete=True)
            ch.queue_bind(f"{unique_name}.{q}", fan)
        ch.exchange_bind(fan, e2e)
        for _ in range(10):
            ch.basic_publish(fan, "", b"x")
        for _ in range(4):
            ch.basic_publish(direct, "nowhere", b"x")
        for _ in range(3):
            ch.basic_publish(e2e, "", b"x")

        def stats():
            listed = {x["name"]: x for x in api(base, "/exchanges/%2F")[1]
                      if x["name"].startswith(unique_name)}
            found = {k: x.get("message_stats") for k, x in listed.items()}
            ins = [(found.get(x) or {}).get("publish_in") for x in (fan, direct, e2e)]
            return found if ins == [10, 4, 3] else None

        found = eventually(stats, "the exchanges' message_stats")
        assert {k: v for k, v in found[fan].items() if not k.endswith("_details")} == {
            "publish_in": 10, "publish_out": 20}
        assert {k: v for k, v in found[e2e].items() if not k.endswith("_details")} == {
            "publish_in": 3, "publish_out": 6}
        assert found[direct] == {"publish_in": 4, "publish_in_details": found[direct][
            "publish_in_details"]}
        assert found[idle] is None
        for key in ("publish_in_details", "publish_out_details"):
            assert isinstance(found[fan][key]["rate"], float)
        status, one = api(base, f"/exchanges/%2F/{fan}")
        assert status == 200 and one["message_stats"]["publish_out"] == 20


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
