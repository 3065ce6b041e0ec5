"""The relay's wire path between two brokers without sockets (issue 10): broker A deals a shared
queue's message to broker B's consumer through ``ClusterDriver.relay`` (the bytes its peer link
would write), B's peer connection reads them through its ``ClusterDriver.on_peer_method``
(``cluster.relay_wire``), and what B's consumer sees and what B sends back to A are checked as a
pika user and the sender would see them. A client that is not a cluster member sending
Cluster.Relay gets 503 COMMAND_INVALID. Source: DESIGN.md §4a, Qpid ClusteringHA proposal."""

from __future__ import annotations

from pamqp import commands as cmd

from amqp_broker.core import relay
from amqp_broker.protocol.methods import encode_method
from cluster.codec import Relay
from cluster.tests.relay_pair import relay_pair


def test_a_relayed_message_reaches_the_remote_consumer_as_published() -> None:
    a, _b, pub, peer, con, link = relay_pair()
    con.consume(1, "shared", "c1")
    pub.publish(1, "", "shared", b"hello", cmd.Basic.Properties(message_id="m-1", priority=3))
    a.run_dispatch()
    peer.send_raw(link.take())
    (msg,) = con.messages()
    assert msg.body == b"hello"
    assert (msg.method.exchange, msg.method.routing_key) == ("", "shared")
    assert not msg.method.redelivered
    assert (msg.properties.message_id, msg.properties.priority) == ("m-1", 3)
    assert peer.methods() == []  # not settled before the consumer acks
    assert a.relay_outbox.unsettled("B") == 1
    con.send(1, cmd.Basic.Ack(msg.method.delivery_tag, False))
    ((_ch, settle),) = peer.methods()
    assert isinstance(settle, cmd.Basic.Ack)
    relay.settle_relayed(a, "B", settle.delivery_tag, settle.multiple, relay.ACK)
    assert a.relay_outbox.unsettled("B") == 0
    assert a.vhosts["/"].queues["shared"].unacked_count == 0


def test_a_redelivered_message_keeps_its_flag_and_an_empty_body_travels() -> None:
    a, _b, pub, peer, con, link = relay_pair()
    pub.publish(1, "", "shared", b"")
    a.run_dispatch()
    first = link.take()
    assert first  # dealt to B, whose consumer is not there yet: pass-on gives it back
    peer.send_raw(first)
    ((_ch, nack),) = peer.methods()
    assert isinstance(nack, cmd.Basic.Nack) and nack.requeue
    relay.settle_relayed(a, "B", nack.delivery_tag, nack.multiple, relay.REQUEUE)
    con.consume(1, "shared", "c1")
    a.run_dispatch()  # dealt again, now marked redelivered
    peer.send_raw(link.take())
    (msg,) = con.messages()
    assert msg.body == b"" and msg.method.redelivered


def test_a_client_that_is_not_a_member_cannot_relay() -> None:
    *_, con, _link = relay_pair()
    frame = encode_method(1, Relay("/", "shared", 1, False, "", "shared"))
    con.send_raw(frame)
    closes = [m for _ch, m in con.methods() if isinstance(m, cmd.Connection.Close)]
    assert closes and closes[0].reply_code == 503
    assert "Cluster.Relay" in closes[0].reply_text
