"""Per-queue and per-channel ``message_stats`` rates in the API (issue 26): RabbitMQ's "basic"
rates mode, per second between the newest two 5 s samples (``object_rates``); samples are
taken with explicit wall times, so the figures are exact."""

from __future__ import annotations

from pamqp import commands

from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.client import Client

from .helpers import client, make, run


def test_queue_and_channel_rates_between_two_samples() -> None:
    broker = Broker()
    mgmt = make(broker)
    assert mgmt.sampler is not None
    cl = Client(broker, port=51235)
    cl.handshake()
    cl.open_channel(1)
    cl.call(1, commands.Queue.Declare(queue="rq"), commands.Queue.DeclareOk)
    cl.publish(1, "", "rq", b"first")
    cl.pump()
    mgmt.sampler.sample(now=1000.0)
    for _ in range(10):
        cl.publish(1, "", "rq", b"x")
    cl.pump()
    mgmt.sampler.sample(now=1005.0)

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
