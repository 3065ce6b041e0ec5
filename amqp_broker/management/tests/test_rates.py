"""Per-queue, per-channel and per-exchange ``message_stats`` rates in the API (issue 26):
RabbitMQ's "basic" rates mode, per second between the newest two 5 s samples
(``object_rates``); samples are taken with explicit wall times, so the figures are exact."""

from __future__ import annotations

from pamqp import commands

from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.client import Client
from amqp_broker.management.context import Management

from .helpers import client, make, run


def _setup(port: int) -> tuple[Broker, Management, Client]:
    """A broker, its management context and a client with channel 1 open."""
    broker = Broker()
    mgmt = make(broker)
    cl = Client(broker, port=port)
    cl.handshake()
    cl.open_channel(1)
    return broker, mgmt, cl


def _two_samples(mgmt: Management, cl: Client, first: list[tuple[str, str]],
                 then: list[tuple[str, str]], at: float) -> None:
    """Publish ``first`` ((exchange, routing key) per message), sample at ``at`` (s), publish
    ``then``, sample 5 s later."""
    assert mgmt.sampler is not None
    for batch, now in ((first, at), (then, at + 5.0)):
        for exchange, key in batch:
            cl.publish(1, exchange, key, b"x")
        cl.pump()
        mgmt.sampler.sample(now=now)


def test_queue_and_channel_rates_between_two_samples() -> None:
    broker, mgmt, cl = _setup(51235)
    assert mgmt.sampler is not None
    cl.call(1, commands.Queue.Declare(queue="rq"), commands.Queue.DeclareOk)
    _two_samples(mgmt, cl, [("", "rq")], [("", "rq")] * 10, 1000.0)

    async def body() -> None:
        async with client(mgmt) as c:
            q = (await c.get("/api/queues/%2F/rq")).json()
            assert q["messages"] == 11
            assert q["messages_details"] == {"rate": 2.0}
            assert q["messages_ready_details"] == {"rate": 2.0}
            assert q["message_stats"] == {"publish": 11, "publish_details": {"rate": 2.0}}
            listed = [x for x in (await c.get("/api/queues")).json() if x["name"] == "rq"]
            assert listed[0]["message_stats"]["publish_details"] == {"rate": 2.0}
            ch = (await c.get("/api/channels")).json()[0]["message_stats"]
            assert (ch["publish"], ch["publish_details"]) == (11, {"rate": 2.0})
            assert ch["ack_details"] == {"rate": 0.0}
    run(body)
    # drained: the next sample shows the queue's count falling, the one after a rate of 0
    cl.call(1, commands.Queue.Purge(queue="rq"), commands.Queue.PurgeOk)
    mgmt.sampler.sample(now=1010.0)
    rates = mgmt.sampler.objects.queue(broker.vhosts["/"].queues["rq"])
    assert rates["messages"] == -11 / 5 and rates["publish"] == 0.0
    mgmt.sampler.sample(now=1015.0)
    assert mgmt.sampler.objects.queue(broker.vhosts["/"].queues["rq"])["messages"] == 0.0


def test_exchange_publish_in_and_out_rates() -> None:
    """RabbitMQ 3.10's exchange ``message_stats``: ``publish_in`` counts the messages clients
    published to the exchange (routed or not), ``publish_out`` one per queue each reached
    (a fanout to two queues: twice), on the exchange published to (not the one an
    exchange-to-exchange binding passed it through); none before any publish, no
    ``publish_out`` while nothing was routed. Checked against RabbitMQ in
    interop_tests/test_management_rates_differential.py."""
    _broker, mgmt, cl = _setup(51236)
    for name, kind in (("xfan", "fanout"), ("xdir", "direct"), ("xe2e", "fanout"),
                       ("xidle", "fanout")):
        cl.call(1, commands.Exchange.Declare(exchange=name, exchange_type=kind),
                commands.Exchange.DeclareOk)
    for q in ("xq1", "xq2"):
        cl.call(1, commands.Queue.Declare(queue=q), commands.Queue.DeclareOk)
        cl.call(1, commands.Queue.Bind(queue=q, exchange="xfan"), commands.Queue.BindOk)
    cl.call(1, commands.Exchange.Bind(destination="xfan", source="xe2e"),
            commands.Exchange.BindOk)
    _two_samples(mgmt, cl, [("xfan", "")], [("xfan", "")] * 10 + [("xdir", "nowhere")] * 5
                 + [("xe2e", "")] * 3, 2000.0)

    async def body() -> None:
        async with client(mgmt) as c:
            fan = (await c.get("/api/exchanges/%2F/xfan")).json()
            assert fan["message_stats"] == {
                "publish_in": 11, "publish_in_details": {"rate": 2.0},
                "publish_out": 22, "publish_out_details": {"rate": 4.0}}
            listed = {x["name"]: x for x in (await c.get("/api/exchanges/%2F")).json()}
            assert listed["xfan"]["message_stats"] == fan["message_stats"]
            assert sorted(listed["xdir"]["message_stats"]) == ["publish_in",
                                                               "publish_in_details"]
            assert listed["xdir"]["message_stats"]["publish_in"] == 5
            assert listed["xe2e"]["message_stats"]["publish_out"] == 6
            assert "message_stats" not in listed["xidle"]
    run(body)
    # a deleted and re-declared exchange starts again from nothing
    cl.call(1, commands.Exchange.Delete(exchange="xdir"), commands.Exchange.DeleteOk)
    cl.call(1, commands.Exchange.Declare(exchange="xdir", exchange_type="direct"),
            commands.Exchange.DeclareOk)

    async def again() -> None:
        async with client(mgmt) as c:
            assert "message_stats" not in (await c.get("/api/exchanges/%2F/xdir")).json()
    run(again)


def _deliveries(cl: Client) -> list[int]:
    """The delivery tags of the Basic.Delivers received since the last call."""
    return [m.method.delivery_tag for m in cl.messages()]


def test_queue_delivery_get_ack_and_redeliver_counts_with_rates() -> None:
    """A queue's RabbitMQ 3.10 ``message_stats`` (checked against RabbitMQ in
    interop_tests/test_queue_message_stats.py): a live consumer's deliveries and acks count at
    once (read from the consumer), and stay counted once it was cancelled or its channel
    closed; acks after the cancel, Basic.Get with and without ack, Get-Empty and redeliveries
    count too; rates per second between two samples."""
    _broker, mgmt, cl = _setup(51237)
    assert mgmt.sampler is not None
    cl.call(1, commands.Queue.Declare(queue="sq"), commands.Queue.DeclareOk)
    for _ in range(6):
        cl.publish(1, "", "sq", b"x")
    cl.consume(1, "sq", "c1")
    tags = _deliveries(cl)
    assert len(tags) == 6
    mgmt.sampler.sample(now=3000.0)
    for tag in tags[:4]:
        cl.send(1, commands.Basic.Ack(delivery_tag=tag))
    cl.send(1, commands.Basic.Nack(delivery_tag=tags[4], requeue=True))
    assert len(_deliveries(cl)) == 1   # the nacked one again, redelivered

    async def stats() -> dict:
        async with client(mgmt) as c:
            one = (await c.get("/api/queues/%2F/sq")).json()["message_stats"]
            listed = [x for x in (await c.get("/api/queues")).json() if x["name"] == "sq"]
            assert listed[0]["message_stats"] == one
            return one

    live = {k: v for k, v in run(stats).items() if not k.endswith("_details")}
    assert live == {"publish": 6, "deliver": 7, "deliver_no_ack": 0, "get": 0, "get_no_ack": 0,
                    "get_empty": 0, "deliver_get": 7, "ack": 4, "redeliver": 1}
    cl.call(1, commands.Basic.Cancel(consumer_tag="c1"), commands.Basic.CancelOk)
    cl.send(1, commands.Basic.Ack(delivery_tag=0, multiple=True))   # 2 acks after the cancel
    for _ in range(3):
        cl.publish(1, "", "sq", b"x")
    cl.send(1, commands.Basic.Get(queue="sq"))
    got = cl.expect_message(commands.Basic.GetOk, 1)
    cl.send(1, commands.Basic.Ack(delivery_tag=got.method.delivery_tag))
    cl.send(1, commands.Basic.Get(queue="sq", no_ack=True))
    cl.expect_message(commands.Basic.GetOk, 1)
    cl.consume(1, "sq", "c2", no_ack=True)
    assert len(_deliveries(cl)) == 1
    cl.call(1, commands.Basic.Get(queue="sq"), commands.Basic.GetEmpty)
    cl.pump()
    mgmt.sampler.sample(now=3005.0)
    expected = {"publish": 9, "deliver": 7, "deliver_no_ack": 1, "get": 1, "get_no_ack": 1,
                "get_empty": 1, "deliver_get": 10, "ack": 7, "redeliver": 1}
    found = run(stats)
    assert {k: v for k, v in found.items() if not k.endswith("_details")} == expected
    # between the samples: 3 published, 1 + 1 delivered, 2 got, 1 empty, 7 acked, 1 redelivered
    assert {k[:-len("_details")]: v["rate"] for k, v in found.items() if k.endswith("_details")
            } == {"publish": 0.6, "deliver": 0.2, "deliver_no_ack": 0.2, "get": 0.2,
                  "get_no_ack": 0.2, "get_empty": 0.2, "deliver_get": 0.8, "ack": 1.4,
                  "redeliver": 0.2}
    cl.call(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0),
            commands.Channel.CloseOk)
    assert {k: v for k, v in run(stats).items() if not k.endswith("_details")} == expected
    cl.open_channel(2)
    cl.call(2, commands.Queue.Declare(queue="idle"), commands.Queue.DeclareOk)

    async def idle_queue() -> dict:
        async with client(mgmt) as c:
            return (await c.get("/api/queues/%2F/idle")).json()
    assert "message_stats" not in run(idle_queue)   # as RabbitMQ: none before any publish
