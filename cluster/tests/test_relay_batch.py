"""Cluster.RelayBatch between two brokers without sockets (issue 10): what broker A deals to broker
B's consumers during one turn travels as one batch (``core.relay_batch``, ``cluster.relay_wire``),
and B's consumer sees every message as published, in order, each settled on its own tag. A batch
that does not parse closes the peer connection with 502 and nothing else; a batch the link has
queued something after takes no more records. Source: DESIGN.md §4a, AMQP 0-9-1 §4.2.3."""

from __future__ import annotations

import struct

from pamqp import commands as cmd

from amqp_broker.core import relay
from amqp_broker.core.relay_batch import BatchBuilder
from amqp_broker.protocol.framing import FrameSplitter
from amqp_broker.protocol.methods import decode_method, encode_method
from cluster.links import PeerLinks, _Link
from cluster.relay_wire import DecodedRelayBatch, batch_prefix
from cluster.tests.relay_pair import relay_pair
from queues.message import Message


def _methods(data: bytes) -> list[object]:
    return [decode_method(p) for t, _ch, p in FrameSplitter().feed(data) if t == 1]


def test_one_turn_of_relays_is_one_batch_and_every_message_arrives_in_order() -> None:
    a, _b, pub, peer, con, link = relay_pair()
    con.call(1, cmd.Basic.Qos(prefetch_count=100))
    con.consume(1, "shared", "c1")
    bodies = [f"m{i}".encode() * (i + 1) for i in range(30)]
    pub.send_raw(b"".join(pub.encode_publish(1, "", "shared", body,
                                             cmd.Basic.Properties(message_id=f"id-{i}"))
                          for i, body in enumerate(bodies)))
    a.run_dispatch()
    wire = link.take()
    (method,) = _methods(wire)
    assert isinstance(method, DecodedRelayBatch) and method.count == 30
    peer.send_raw(wire)
    got = con.messages()
    assert [m.body for m in got] == bodies
    assert [m.properties.message_id for m in got] == [f"id-{i}" for i in range(30)]
    assert {(m.method.exchange, m.method.routing_key) for m in got} == {("", "shared")}
    assert a.relay_outbox.unsettled("B") == 30
    con.send(1, cmd.Basic.Ack(got[-1].method.delivery_tag, True))
    ((_ch, settle),) = peer.methods()
    assert isinstance(settle, cmd.Basic.Ack) and settle.multiple
    relay.settle_relayed(a, "B", settle.delivery_tag, settle.multiple, relay.ACK)
    assert a.relay_outbox.unsettled("B") == 0
    assert a.vhosts["/"].queues["shared"].unacked_count == 0


def test_a_body_larger_than_a_frame_travels_whole() -> None:
    a, _b, pub, peer, con, link = relay_pair()
    con.consume(1, "shared", "c1")
    big = bytes(range(256)) * 1000  # 256,000 bytes: the batch's body is cut into frames
    pub.publish(1, "", "shared", big)
    pub.publish(1, "", "shared", b"small")
    a.run_dispatch()
    peer.send_raw(link.take())
    assert [m.body for m in con.messages()] == [big, b"small"]


def _batch_frames(records: bytes, count: int, queue: str = "shared") -> bytes:
    prefix = batch_prefix("/", queue)
    payload = prefix + struct.pack(">I", count)
    header = struct.pack(">HHQH", 60, 0, len(records), 0)
    return (struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce"
            + struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
            + struct.pack(">BHI", 3, 1, len(records)) + records + b"\xce")


def _record(tag: int, body: bytes, routing: bytes = b"\x00\x06shared") -> bytes:
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return struct.pack(">QBII", tag, 0, len(header), len(body)) + routing + header + body


def test_a_batch_that_does_not_parse_closes_the_peer_connection_with_502() -> None:
    bad = {
        "truncated record": _record(1, b"hello")[:-2],
        "count announced wrong": _record(1, b"hello"),
        "routing key not UTF-8": _record(1, b"hello", b"\x00\x02\xff\xfe"),
        "tag 0": _record(0, b"hello"),
        "tag of 2**63": _record(1 << 63, b"hello"),
    }
    for what, records in bad.items():
        _a, b, _pub, peer, con, _link = relay_pair()
        con.consume(1, "shared", "c1")
        count = 2 if what == "count announced wrong" else 1
        peer.send_raw(_batch_frames(records, count))
        closes = [m for _ch, m in peer.methods() if isinstance(m, cmd.Connection.Close)]
        assert closes and closes[0].reply_code == 502, what
        assert "Cluster.RelayBatch" in closes[0].reply_text, what
        # records before the bad spot were delivered (the sender requeues them with the link)
        delivered = [m.body for m in con.messages()]
        assert delivered == ([b"hello"] if what == "count announced wrong" else []), what
        # the broker and its other connections go on
        con.declare_queue(1, "after")
        assert "after" in b.vhosts["/"].queues, what


def test_a_well_formed_batch_from_a_member_is_delivered() -> None:
    _a, _b, _pub, peer, con, _link = relay_pair()
    con.consume(1, "shared", "c1")
    peer.send_raw(_batch_frames(_record(7, b"one") + _record(8, b"two"), 2))
    assert [m.body for m in con.messages()] == [b"one", b"two"]


def test_a_batch_for_a_queue_the_receiver_lacks_goes_back_to_the_sender() -> None:
    _a, _b, _pub, peer, con, _link = relay_pair()
    con.consume(1, "shared", "c1")
    peer.send_raw(_batch_frames(_record(7, b"one") + _record(8, b"two"), 2, queue="gone"))
    settles = [m for _ch, m in peer.methods()]
    assert [(type(m), m.delivery_tag, m.requeue) for m in settles] == [(cmd.Basic.Nack, 7, True),
                                                                       (cmd.Basic.Nack, 8, True)]
    assert con.messages() == []  # not handed to a consumer of another queue


def _connected_links() -> tuple[PeerLinks, _Link]:
    links = PeerLinks("A", b"s" * 32, on_failure=lambda node: None)
    link = links._links["B"] = _Link("B", "127.0.0.3:5672")
    link.connected = True
    return links, link


def test_a_batch_takes_no_records_once_something_is_queued_after_it() -> None:
    links, _link = _connected_links()
    batch = BatchBuilder("/", "shared", batch_prefix("/", "shared"))
    links.send_batch("B", batch)
    assert batch.takes("/", "shared")
    links.send_raw("B", b"\x01")  # e.g. a private queue's relay: the next relay must follow it
    assert not batch.takes("/", "shared")


def test_batches_of_two_queues_stay_open_together_until_something_else_is_queued() -> None:
    links, link = _connected_links()
    one = BatchBuilder("/", "one", batch_prefix("/", "one"))
    two = BatchBuilder("/", "two", batch_prefix("/", "two"))
    links.send_batch("B", one)
    links.send_batch("B", two)
    assert one.takes("/", "one") and two.takes("/", "two")
    links.send("B", "127.0.0.3:5672", cmd.Basic.Qos())
    assert not one.takes("/", "one") and not two.takes("/", "two")
    assert len(link.queue) == 3


def test_relays_to_two_queues_interleaved_arrive_in_order_per_queue() -> None:
    a, _b, pub, peer, con, link = relay_pair("one")
    pub.declare_queue(1, "two")
    con.declare_queue(1, "two")
    relay.set_remote_consumers(a.vhosts["/"], "two", "B", 1)
    con.consume(1, "one", "c1")
    con.consume(1, "two", "c2")
    pub.send_raw(b"".join(pub.encode_publish(1, "", ("one", "two")[i % 2], f"{i}".encode())
                          for i in range(10)))
    a.run_dispatch()
    wire = link.take()
    assert [m.count for m in _methods(wire)] == [5, 5]  # one batch per queue
    peer.send_raw(wire)
    got = con.messages()
    assert [m.body for m in got if m.method.consumer_tag == "c1"] == [b"0", b"2", b"4", b"6",
                                                                       b"8"]
    assert [m.body for m in got if m.method.consumer_tag == "c2"] == [b"1", b"3", b"5", b"7",
                                                                       b"9"]


def test_a_batch_for_a_link_that_is_down_or_fails_is_sealed() -> None:
    links, link = _connected_links()
    queued = BatchBuilder("/", "shared", batch_prefix("/", "shared"))
    links.send_batch("B", queued)
    links._fail(link)  # the link broke before writing it: its transfers come back on_down
    assert not queued.takes("/", "shared")
    link.connected = False
    late = BatchBuilder("/", "shared", batch_prefix("/", "shared"))
    links.send_batch("B", late)
    assert not late.takes("/", "shared")


def test_a_batch_is_bounded() -> None:
    batch = BatchBuilder("/", "shared", batch_prefix("/", "shared"))
    message = Message("", "shared", struct.pack(">HHQH", 60, 0, 64 * 1024, 0), b"x" * 64 * 1024)
    tag = 0
    while batch.takes("/", "shared"):
        tag += 1
        batch.add(tag, False, message)
    assert tag == 2  # 128 KiB of records
    assert not batch.takes("/", "other")


def test_a_plain_link_lets_batches_gather_but_writes_anything_else_at_once(monkeypatch) -> None:
    """``links._Flusher`` over a real socket pair: a batch right after a write waits up to
    ``COALESCE_S`` (0.3 s here, so that a slow machine cannot pass it in three loop turns); a
    batch after a quiet spell, or anything else queued, goes on the next turn (and takes the
    waiting batch with it, in order)."""
    import asyncio
    import socket

    from amqp_broker.server.plain_socket import PlainSocket
    from cluster import links as links_module
    from cluster.links import _Flusher

    monkeypatch.setattr(links_module, "COALESCE_S", 0.3)

    def one_record(queue: str) -> BatchBuilder:
        batch = BatchBuilder("/", queue, batch_prefix("/", queue))
        batch.add(1, False, Message.build("", queue, b"x", cmd.Basic.Properties()))
        return batch

    async def main() -> list[list[object]]:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        sock = PlainSocket(lambda _s: None)
        await asyncio.get_running_loop().create_connection(lambda: sock, sock=ours)
        links, link = _connected_links()
        link.flusher = _Flusher(link, sock)

        async def turns() -> list[object]:
            for _ in range(3):
                await asyncio.sleep(0)
            try:
                return _methods(theirs.recv(65536))
            except BlockingIOError:
                return []

        seen = []
        links.send_batch("B", one_record("q1"))    # nothing written lately: next turn
        seen.append(await turns())
        links.send_batch("B", one_record("q2"))    # right after a write: it waits
        seen.append(await turns())
        links.send_raw("B", encode_method(1, cmd.Basic.Qos()))  # not a relay: now, after q2
        seen.append(await turns())
        links.send_batch("B", one_record("q3"))
        seen.append(await turns())
        await asyncio.sleep(0.4)
        seen.append(await turns())                 # ... but not for longer than COALESCE_S
        sock.close()
        theirs.close()
        return seen

    seen = asyncio.run(main())
    names = [[getattr(m, "queue", type(m).__name__) for m in turn] for turn in seen]
    assert names == [["q1"], [], ["q2", "Qos"], [], ["q3"]]
