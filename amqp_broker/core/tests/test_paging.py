"""Larger than RAM (issue 4) through the core with a real message store: persistent messages on a
durable queue beyond ``queue_memory_budget`` wait on disk and reach consumers, Basic.Get and dead
letter queues intact; recovery pages with the same budget; ``message_memory`` counts only what is
in RAM; the disk alarm blocks publishers like the memory alarm ("low on disk")."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pamqp import commands as cmd

from amqp_broker.core.broker import Broker
from amqp_broker.core.durability import Durability
from amqp_broker.core.recovery import recover
from queues.arguments import parse_arguments
from queues.store.store import MessageStore

from .client import Client
from .conftest import SETTINGS

BUDGET = 4096
SIZE = 200
PERSISTENT = cmd.Basic.Properties(delivery_mode=2)


def body(i: int) -> bytes:
    return (b"%06d" % i) * (SIZE // 6) + b"." * (SIZE % 6)


def open_broker(path, clock, budget: int = BUDGET) -> Broker:
    durability = Durability(MessageStore(path / "msgs", sync="none"))
    broker = Broker(replace(SETTINGS, queue_memory_budget=budget), clock=clock,
                    durability=durability)
    recover(broker)
    return broker


def connect(broker: Broker, port: int = 50000) -> Client:
    cl = Client(broker, port=port)
    cl.handshake()
    cl.open_channel(1)
    return cl


def publish(cl: Client, queue: str, start: int, n: int, props=PERSISTENT) -> None:
    cl.send_raw(b"".join(cl.encode_publish(1, "", queue, body(i), props)
                         for i in range(start, start + n)))


@pytest.fixture
def paging_broker(tmp_path, clock):
    broker = open_broker(tmp_path, clock)
    yield broker
    broker.durability.store.close()


def test_bodies_beyond_the_budget_wait_on_disk_and_are_delivered_intact(paging_broker) -> None:
    cl = connect(paging_broker)
    cl.declare_queue(1, "d", durable=True)
    publish(cl, "d", 0, 200)
    q = paging_broker.vhosts["/"].queues["d"]
    assert q.paging and q.message_count == 200 and q.message_bytes == 200 * SIZE
    count, nbytes = q.in_memory()
    assert nbytes <= BUDGET and count == BUDGET // SIZE
    mem = paging_broker.message_memory()
    assert mem < BUDGET + count * Broker.MESSAGE_OVERHEAD + 200 * Broker.PAGED_OVERHEAD
    cl.call(1, cmd.Basic.Qos(prefetch_count=50))
    cl.consume(1, "d", "c")
    got = []
    while len(got) < 200:
        msgs = cl.messages()
        assert msgs, f"stalled after {len(got)}"
        got += msgs
        cl.send(1, cmd.Basic.Ack(delivery_tag=msgs[-1].method.delivery_tag, multiple=True))
        paging_broker.run_dispatch()
    assert [m.body for m in got] == [body(i) for i in range(200)]
    assert q.message_count == 0 and q.unacked_count == 0
    assert paging_broker.durability.store.queue_length("d") == 0


def test_basic_get_and_requeue_of_paged_messages(paging_broker) -> None:
    cl = connect(paging_broker)
    cl.declare_queue(1, "d", durable=True)
    publish(cl, "d", 0, 60)
    cl.send(1, cmd.Basic.Get(queue="d"))
    first = cl.expect_message(cmd.Basic.GetOk)
    assert first.body == body(0)
    for _ in range(40):
        cl.send(1, cmd.Basic.Get(queue="d", no_ack=True))
        cl.expect_message(cmd.Basic.GetOk)
    cl.send(1, cmd.Basic.Get(queue="d"))
    paged = cl.expect_message(cmd.Basic.GetOk)
    assert paged.body == body(41)
    cl.send(1, cmd.Basic.Nack(delivery_tag=paged.method.delivery_tag, requeue=True),
            cmd.Basic.Nack(delivery_tag=first.method.delivery_tag, requeue=True))
    cl.send(1, cmd.Basic.Get(queue="d", no_ack=True))
    again = cl.expect_message(cmd.Basic.GetOk)
    assert again.body == body(0) and again.method.redelivered
    cl.send(1, cmd.Basic.Get(queue="d", no_ack=True))
    again = cl.expect_message(cmd.Basic.GetOk)
    assert again.body == body(41) and again.method.redelivered
    rest = []
    for _ in range(18):
        cl.send(1, cmd.Basic.Get(queue="d", no_ack=True))
        rest.append(cl.expect_message(cmd.Basic.GetOk).body)
    assert rest == [body(i) for i in range(42, 60)]
    cl.send(1, cmd.Basic.Get(queue="d"))
    cl.expect(cmd.Basic.GetEmpty)


def test_dead_lettering_of_paged_messages_keeps_their_bodies(paging_broker, clock) -> None:
    cl = connect(paging_broker)
    cl.declare_queue(1, "dlq", durable=True)
    cl.call(1, cmd.Queue.Declare(queue="d", durable=True, arguments={
        "x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    publish(cl, "d", 0, 100)
    assert paging_broker.vhosts["/"].queues["d"].in_memory()[1] <= BUDGET
    clock.advance(2)
    paging_broker.tick()
    dlq = paging_broker.vhosts["/"].queues["dlq"]
    assert dlq.message_count == 100 and dlq.in_memory()[1] <= BUDGET
    got = []
    for _ in range(100):
        cl.send(1, cmd.Basic.Get(queue="dlq", no_ack=True))
        msg = cl.expect_message(cmd.Basic.GetOk)
        assert msg.properties.headers["x-death"][0]["reason"] == "expired"
        got.append(msg.body)
    assert got == [body(i) for i in range(100)]


def test_recovery_pages_with_the_same_budget(tmp_path, clock) -> None:
    broker = open_broker(tmp_path, clock)
    cl = connect(broker)
    cl.declare_queue(1, "d", durable=True)
    cl.declare_queue(1, "t", durable=True)  # a transient message in it is not kept
    publish(cl, "d", 0, 150)
    publish(cl, "t", 0, 3, props=None)
    cl.send(1, cmd.Basic.Get(queue="d"))  # delivered, not acked: comes back redelivered
    cl.expect_message(cmd.Basic.GetOk)
    broker.durability.store.close()
    # The definitions are not kept by this test broker: declare the queues again first.
    durability = Durability(MessageStore(tmp_path / "msgs", sync="none"))
    again = Broker(replace(SETTINGS, queue_memory_budget=BUDGET), clock=clock,
                   durability=durability)
    vhost = again.vhosts["/"]
    vhost.create_queue("d", parse_arguments(None), durable=True, auto_delete=False,
                       exclusive_owner=None, arguments=None)
    report = recover(again)
    assert report.messages == 150
    q = vhost.queues["d"]
    assert q.message_count == 150 and q.message_bytes == 150 * SIZE
    assert q.in_memory()[1] <= BUDGET
    cl2 = connect(again, 50001)
    got = []
    for _ in range(150):
        cl2.send(1, cmd.Basic.Get(queue="d", no_ack=True))
        msg = cl2.expect_message(cmd.Basic.GetOk)
        got.append((msg.body, msg.method.redelivered))
    assert got == [(body(i), i == 0) for i in range(150)]
    durability.store.close()


def test_a_budget_of_zero_turns_paging_off(tmp_path, clock) -> None:
    broker = open_broker(tmp_path, clock, budget=0)
    cl = connect(broker)
    cl.declare_queue(1, "d", durable=True)
    publish(cl, "d", 0, 50)
    q = broker.vhosts["/"].queues["d"]
    assert not q.paging and q.in_memory() == (50, 50 * SIZE)
    broker.durability.store.close()


# ------------------------------------------------------------------------------ disk alarm
def test_disk_alarm_blocks_publishers_with_its_own_reason(broker, make_client) -> None:
    cl = make_client()
    cl.publish(1, "", "nowhere", b"x")
    broker.set_alarm("disk", True)
    assert cl.expect(cmd.Connection.Blocked, 0).reason == "low on disk"
    broker.set_memory_alarm(True)  # already blocked: no second Blocked
    cl.expect_nothing()
    broker.set_alarm("disk", False)  # memory alarm still up
    cl.expect_nothing()
    assert cl.conn.blocked
    late = make_client()
    late.publish(1, "", "nowhere", b"x")
    assert late.expect(cmd.Connection.Blocked, 0).reason == "low on memory"
    broker.set_memory_alarm(False)
    cl.expect(cmd.Connection.Unblocked, 0)
    late.expect(cmd.Connection.Unblocked, 0)
    assert not broker.alarms and not cl.conn.blocked
