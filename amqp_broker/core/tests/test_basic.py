"""The basic class as a client sees it: prefetch, acks/nacks/rejects, dead-lettering, TTL, consumer
rules, sender-selected distribution and publish-time property checks."""

from __future__ import annotations

import pytest
from pamqp import commands as cmd

from amqp_broker.protocol import constants as c

from .client import Client

Props = cmd.Basic.Properties


def channel_close(cl: Client, code: int, channel: int = 1) -> cmd.Channel.Close:
    close = cl.expect(cmd.Channel.Close, channel)
    assert close.reply_code == code, close.reply_text
    return close


def fill(cl: Client, queue: str, n: int, prefix: str = "m") -> None:
    cl.send_raw(b"".join(cl.encode_publish(1, "", queue, f"{prefix}{i}".encode())
                         for i in range(n)))


def ready(cl: Client, queue: str) -> int:
    return cl.call(1, cmd.Queue.Declare(queue=queue, passive=True)).message_count


def bodies(msgs) -> list[bytes]:
    return [m.body for m in msgs]


# ------------------------------------------------------------------------------ prefetch
def consume_ab(cl: Client) -> None:
    """Consumers "ta" on queue a and "tb" on queue b (channel 1), then 5 messages each."""
    for q in ("a", "b"):
        cl.declare_queue(1, q)
        cl.consume(1, q, "t" + q)
    for q in ("a", "b"):
        fill(cl, q, 5, q)


def test_per_consumer_prefetch(client) -> None:
    client.call(1, cmd.Basic.Qos(prefetch_count=2))
    consume_ab(client)
    got = client.messages()
    assert sorted(bodies(got)) == [b"a0", b"a1", b"b0", b"b1"]
    first_a = next(m for m in got if m.method.consumer_tag == "ta")
    client.send(1, cmd.Basic.Ack(first_a.method.delivery_tag))
    assert bodies(client.messages()) == [b"a2"]


def test_qos_applies_to_consumers_created_after_it(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 4)
    client.consume(1, "q", "unlimited")
    assert len(client.messages()) == 4
    client.call(1, cmd.Basic.Qos(prefetch_count=1))
    fill(client, "q", 3, "n")
    assert len(client.messages()) == 3  # the old consumer stays unlimited


def test_global_prefetch_is_shared_by_the_channel(client) -> None:
    client.call(1, cmd.Basic.Qos(prefetch_count=3, global_=True))
    consume_ab(client)
    got = client.messages()
    assert len(got) == 3
    client.send(1, cmd.Basic.Ack(got[0].method.delivery_tag))
    assert len(client.messages()) == 1
    client.send(1, cmd.Basic.Ack(0, multiple=True))
    assert len(client.messages()) == 3


def test_per_consumer_and_global_prefetch_together(client) -> None:
    client.call(1, cmd.Basic.Qos(prefetch_count=2))
    client.call(1, cmd.Basic.Qos(prefetch_count=3, global_=True))
    consume_ab(client)
    got = client.messages()
    assert len(got) == 3
    per = {t: sum(m.method.consumer_tag == t for m in got) for t in ("ta", "tb")}
    assert max(per.values()) == 2


def test_prefetch_size_is_540(client) -> None:
    client.send(1, cmd.Basic.Qos(prefetch_size=1000))
    assert client.expect(cmd.Connection.Close, 0).reply_code == c.NOT_IMPLEMENTED


# ------------------------------------------------------------------------------ settlement
def test_ack_multiple(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 5)
    client.call(1, cmd.Basic.Qos(prefetch_count=5))
    client.consume(1, "q", "t")
    assert len(client.messages()) == 5
    client.send(1, cmd.Basic.Ack(3, multiple=True))
    client.send(1, cmd.Basic.Ack(2))
    assert "unknown delivery tag 2" in channel_close(client, c.PRECONDITION_FAILED).reply_text


def test_ack_of_unknown_tag_is_406(client) -> None:
    client.send(1, cmd.Basic.Ack(7))
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 7"
    assert (close.class_id, close.method_id) == (60, 80)


def test_double_ack_is_406(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 1)
    client.send(1, cmd.Basic.Get(queue="q"))
    client.expect_message(cmd.Basic.GetOk)
    client.send(1, cmd.Basic.Ack(1), cmd.Basic.Ack(1))
    channel_close(client, c.PRECONDITION_FAILED)


def test_no_ack_deliveries_need_no_ack(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 2)
    client.consume(1, "q", "t", no_ack=True)
    assert len(client.messages()) == 2
    client.send(1, cmd.Basic.Ack(1))
    channel_close(client, c.PRECONDITION_FAILED)


def test_nack_requeue_keeps_order_and_sets_redelivered(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 4)
    client.call(1, cmd.Basic.Qos(prefetch_count=4))
    client.consume(1, "q", "t")
    first = client.messages()
    assert bodies(first) == [b"m0", b"m1", b"m2", b"m3"]
    client.send(1, cmd.Basic.Nack(2, multiple=False, requeue=True))  # m1 back first
    again = client.messages()
    assert bodies(again) == [b"m1"] and again[0].method.redelivered
    client.send(1, cmd.Basic.Nack(0, multiple=True, requeue=True))  # everything unacked
    again = client.messages()
    assert bodies(again) == [b"m0", b"m1", b"m2", b"m3"]
    assert all(m.method.redelivered for m in again)


def test_reject_without_requeue_drops(client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 1)
    client.send(1, cmd.Basic.Get(queue="q"))
    client.expect_message(cmd.Basic.GetOk)
    client.send(1, cmd.Basic.Reject(1, requeue=False))
    assert ready(client, "q") == 0


def declare_dlx(cl: Client, queue: str, **args) -> None:
    cl.call(1, cmd.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    cl.declare_queue(1, "dead")
    cl.call(1, cmd.Queue.Bind(queue="dead", exchange="dlx"))
    cl.declare_queue(1, queue, arguments={"x-dead-letter-exchange": "dlx", **args})


def test_reject_to_dlx_adds_x_death(client) -> None:
    declare_dlx(client, "work")
    client.publish(1, "", "work", b"bad", Props(headers={"keep": "me"}))
    client.send(1, cmd.Basic.Get(queue="work"))
    client.expect_message(cmd.Basic.GetOk)
    client.send(1, cmd.Basic.Reject(1, requeue=False))
    client.send(1, cmd.Basic.Get(queue="dead", no_ack=True))
    m = client.expect_message(cmd.Basic.GetOk)
    assert m.body == b"bad" and m.headers["keep"] == "me"
    (death,) = m.headers["x-death"]
    assert death["reason"] == "rejected" and death["queue"] == "work"
    assert death["count"] == 1 and death["exchange"] == ""
    assert list(death["routing-keys"]) == ["work"]
    assert m.headers["x-first-death-reason"] == "rejected"


def test_per_message_ttl_expiry_dead_letters_on_tick(broker, clock, client) -> None:
    declare_dlx(client, "ttl")
    client.publish(1, "", "ttl", b"short", Props(expiration="1000"))
    client.publish(1, "", "ttl", b"long", Props(expiration="5000"))
    clock.advance(0.999)
    broker.tick()
    assert ready(client, "dead") == 0
    clock.advance(0.002)
    broker.tick()
    assert ready(client, "ttl") == 1
    client.send(1, cmd.Basic.Get(queue="dead", no_ack=True))
    m = client.expect_message(cmd.Basic.GetOk)
    assert m.body == b"short"
    assert m.headers["x-death"][0]["reason"] == "expired"
    assert m.properties.expiration is None  # RabbitMQ removes it when dead-lettering
    assert m.headers["x-death"][0]["original-expiration"] == "1000"


def test_queue_ttl_expiry_delivers_dead_letters_to_a_consumer(broker, clock, make_client) -> None:
    a, b = make_client(), make_client()
    declare_dlx(a, "ttlq", **{"x-message-ttl": 500})
    b.consume(1, "dead", "t", no_ack=True)
    a.publish(1, "", "ttlq", b"x")
    clock.advance(0.6)
    broker.tick()
    (m,) = b.messages()
    assert m.body == b"x" and m.headers["x-death"][0]["reason"] == "expired"


@pytest.mark.parametrize("expiration", ["abc", "1.5", " 1", "1e3"])
def test_invalid_expiration_is_406(client, expiration) -> None:
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"x", Props(expiration=expiration))
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert f"invalid expiration '{expiration}'" in close.reply_text
    assert (close.class_id, close.method_id) == (60, 40)


def test_user_id_must_match_the_login(make_client) -> None:
    cl = make_client(user="alice", password="secret")
    cl.declare_queue(1, "q")
    cl.publish(1, "", "q", b"ok", Props(user_id="alice"))
    cl.publish(1, "", "q", b"forged", Props(user_id="guest"))
    close = channel_close(cl, c.PRECONDITION_FAILED)
    assert "user_id property set to 'guest'" in close.reply_text
    cl.send(1, cmd.Channel.CloseOk())
    cl.open_channel(1)
    assert ready(cl, "q") == 1


def test_immediate_is_540(client) -> None:
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"x", immediate=True)
    close = client.expect(cmd.Connection.Close, 0)
    assert close.reply_code == c.NOT_IMPLEMENTED
    assert (close.class_id, close.method_id) == (60, 40)


def test_publish_to_internal_exchange_is_403(client) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="int", exchange_type="fanout", internal=True))
    client.publish(1, "int", "", b"x")
    channel_close(client, c.ACCESS_REFUSED)


# ------------------------------------------------------------------------------ consumers
def test_consume_get_and_generated_tag(client) -> None:
    client.declare_queue(1, "q")
    client.send(1, cmd.Basic.Get(queue="q"))
    client.expect(cmd.Basic.GetEmpty, 1)
    fill(client, "q", 2)
    client.send(1, cmd.Basic.Get(queue="q", no_ack=True))
    m = client.expect_message(cmd.Basic.GetOk)
    assert (m.body, m.method.message_count, m.method.routing_key) == (b"m0", 1, "q")
    tag = client.consume(1, "q")
    assert tag.startswith("amq.ctag-")
    (m,) = client.messages()
    assert m.method.consumer_tag == tag and m.method.exchange == "" and m.body == b"m1"


def test_large_body_crosses_frames(make_client) -> None:
    cl = make_client(frame_max=4096)
    body = bytes(range(256)) * 64  # 16 KiB: several frames each way
    cl.declare_queue(1, "q")
    cl.publish(1, "", "q", body, Props(content_type="application/octet-stream"))
    cl.consume(1, "q", "t", no_ack=True)
    (m,) = cl.messages()
    assert m.body == body and m.properties.content_type == "application/octet-stream"


def test_round_robin_between_consumers(make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    a.consume(1, "q", "a", no_ack=True)
    b.consume(1, "q", "b", no_ack=True)
    fill(a, "q", 4)
    assert bodies(a.messages()) == [b"m0", b"m2"]
    assert bodies(b.messages()) == [b"m1", b"m3"]


def test_cancel_stops_deliveries_and_unknown_tag_is_fine(client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", "t", no_ack=True)
    assert client.call(1, cmd.Basic.Cancel("t")).consumer_tag == "t"
    assert client.call(1, cmd.Basic.Cancel("never")).consumer_tag == "never"
    fill(client, "q", 1)
    client.expect_nothing()


def test_queue_deletion_notifies_consumers_that_understand_cancel(make_client) -> None:
    aware = make_client()
    unaware = make_client(capabilities={})
    aware.declare_queue(1, "q")
    aware.consume(1, "q", "a")
    unaware.consume(1, "q", "u")
    admin = make_client()
    admin.call(1, cmd.Queue.Delete(queue="q"))
    cancel = aware.expect(cmd.Basic.Cancel, 1)
    assert cancel.consumer_tag == "a"
    unaware.expect_nothing()
    aware.call(1, cmd.Basic.Cancel("a"))  # cancelling it again is harmless
    unaware.declare_queue(1, "still-open")


def test_exclusive_consumer_refuses_others(make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    a.consume(1, "q", "excl", exclusive=True)
    b.send(1, cmd.Basic.Consume(queue="q"))
    assert "in exclusive use" in channel_close(b, c.ACCESS_REFUSED).reply_text
    b.send(1, cmd.Channel.CloseOk())
    b.open_channel(1)
    a.call(1, cmd.Basic.Cancel("excl"))
    b.consume(1, "q", "other")
    a.consume(1, "q", "also")
    a.send(1, cmd.Basic.Consume(queue="q", exclusive=True))  # there are consumers already
    channel_close(a, c.ACCESS_REFUSED)


def test_reused_consumer_tag_is_530(client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", "dup")
    client.send(1, cmd.Basic.Consume(queue="q", consumer_tag="dup"))
    close = client.expect(cmd.Connection.Close, 0)
    assert close.reply_code == c.NOT_ALLOWED and "dup" in close.reply_text
    assert (close.class_id, close.method_id) == (60, 20)


def test_consume_on_missing_queue_is_404(client) -> None:
    client.send(1, cmd.Basic.Consume(queue="nope"))
    channel_close(client, c.NOT_FOUND)


# ------------------------------------------------------------------------------ CC / BCC
def test_bcc_is_stripped_but_routed_and_cc_is_kept(client) -> None:
    for q in ("main", "cc", "bcc"):
        client.declare_queue(1, q)
    client.publish(1, "", "main", b"x", Props(headers={"CC": ["cc"], "BCC": ["bcc"], "k": 1},
                                              message_id="id-1"))
    got = {}
    for q in ("main", "cc", "bcc"):
        client.send(1, cmd.Basic.Get(queue=q, no_ack=True))
        got[q] = client.expect_message(cmd.Basic.GetOk)
    for q, m in got.items():
        assert m.body == b"x", q
        assert "BCC" not in m.headers, q
        assert list(m.headers["CC"]) == ["cc"] and m.headers["k"] == 1, q
        assert m.properties.message_id == "id-1", q
        assert m.method.routing_key == "main", q


def test_cc_routes_through_the_exchange(client) -> None:
    client.declare_queue(1, "red")
    client.declare_queue(1, "blue")
    client.call(1, cmd.Queue.Bind(queue="red", exchange="amq.direct", routing_key="r"))
    client.call(1, cmd.Queue.Bind(queue="blue", exchange="amq.direct", routing_key="b"))
    client.publish(1, "amq.direct", "r", b"x", Props(headers={"CC": ["b", "none"]}))
    assert ready(client, "red") == 1 and ready(client, "blue") == 1


def test_cc_that_is_not_an_array_is_406(client) -> None:
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"x", Props(headers={"CC": "q"}))
    channel_close(client, c.PRECONDITION_FAILED)
