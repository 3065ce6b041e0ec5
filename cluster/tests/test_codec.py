"""The Cluster class codec: round trips through pamqp and the broker's decoder, and malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.methods import decode_method, encode_method
from cluster import codec, quorum_decode, relay_wire
from cluster.codec import CLUSTER_CLASS_ID, Join, Leave, Membership, Ping, Suspect, Synch, Vote

SAMPLES = [
    Join("node-b", "127.0.0.2:5672", "prod", "0.1.0"),
    Membership(7, [("node-a", "127.0.0.1:5672"), ("node-b", "127.0.0.2:5672")]),
    Membership(0, []),
    Leave("node-c"),
    Suspect("node-b", 7),
    Synch(7, "node-a"),
    Ping(True, 7, {"connections": 3, "queues": 12, "messages": 1 << 40, "cpu": 250}),
    Ping(False, 0),
    Vote(9, "node-b", 4, True, False),
    Vote(9, "node-b", 4, False, True),
    Vote(9, "node-b", 4, True, False, True),
    Vote(9, "node-b", 4, False, True, True),
    # Cluster.Relay has a hand-written decoder (relay_wire.decode_relay): it must agree with pamqp
    codec.Relay("/", "orders", 5, True, "amq.topic", "a.b.c"),
    codec.Relay("vh", "x" * 255, (1 << 63) - 1, False, "e" * 255, "k" * 255),
    codec.Relay("\u00e9t\u00e9", "", 0, False, "", "\u00e9"),
    codec.Definition("user", "", "alice", '{"password_hash":"abc=","hashing_algorithm":"x",'
                                          '"tags":["management"]}'),
    codec.Definition("permission", "shop", "alice", ""),
    codec.Definition("vhost", "shop", "", '{"description":"","tags":[]}'),
    # a wrapped Queue.Declare whose arguments are not UTF-8 (pamqp then decodes bytes)
    codec.InVhost("shop", encode_method(1, commands.Queue.Declare(
        queue="q", arguments={"x-n": -1}))[7:-1]),
    codec.InVhost("shop", encode_method(1, commands.Queue.Bind(queue="q", exchange="e"))[7:-1]),
]


def test_relay_fast_decoder_refuses_what_the_generic_decoder_refuses() -> None:
    good = encode_method(0, codec.Relay("/", "q", 7, True, "", "q"))[7:-1]
    decoded = relay_wire.decode_relay(good)
    assert decoded is not None
    assert decoded.routing_raw == b"\x00\x01q"  # as Basic.Publish carries them
    bad_tag = good[:-12] + struct.pack(">QB", 1 << 63, 0) + good[-3:]  # beyond a signed longlong
    assert relay_wire.decode_relay(bad_tag) is None  # left to pamqp (which reads it as negative)
    bad_name = good[:5] + b"\xff" + good[6:]  # vhost "/" replaced by a byte that is not UTF-8
    assert relay_wire.decode_relay(bad_name) is None
    with pytest.raises(ConnectionException) as err:
        decode_method(bad_name)
    assert err.value.reply_code == c.SYNTAX_ERROR


_NAME = st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255)


@given(vhost=_NAME, queue=_NAME, group=_NAME, kind=st.integers(0, 255))
def test_quorum_fast_decoder_gives_what_pamqp_gives(vhost: str, queue: str, group: str,
                                                    kind: int) -> None:
    method = codec.Quorum(vhost, queue, group, kind)
    payload = encode_method(1, method)[7:-1]
    fast = quorum_decode.decode_quorum(payload)
    generic = codec.Quorum()
    generic.unmarshal(payload[4:])
    assert fast == generic == method and decode_method(payload) == method


def test_quorum_fast_decoder_leaves_malformed_payloads_to_the_generic_502() -> None:
    good = encode_method(1, codec.Quorum("/", "q", "g", 1))[7:-1]
    for bad in (good[:-1], good + b"\x00", good[:5], good[:5] + b"\xff" + good[6:],
                good[:4] + b"\x09" + good[5:]):
        assert quorum_decode.decode_quorum(bad) is None
        with pytest.raises(ConnectionException) as err:
            decode_method(bad)
        assert err.value.reply_code == c.SYNTAX_ERROR


def test_class_id_is_ours_and_fits_pamqp_signed_index() -> None:
    assert CLUSTER_CLASS_ID == 3200
    spec_classes = {cls.index >> 16 for cls in commands.INDEX_MAPPING.values()
                    if not issubclass(cls, codec.ClusterMethod)}
    assert CLUSTER_CLASS_ID not in spec_classes
    for cls in codec.METHODS:
        assert cls.index >> 16 == CLUSTER_CLASS_ID and cls.index < 1 << 31
        assert commands.INDEX_MAPPING[cls.index] is cls
    assert len({cls.index for cls in codec.METHODS}) == len(codec.METHODS)


def test_register_is_idempotent_and_refuses_a_clash() -> None:
    codec.register()
    clash = {Join.index: commands.Basic.Ack}
    with pytest.raises(RuntimeError):
        codec.register(clash)


@pytest.mark.parametrize("method", SAMPLES, ids=repr)
def test_round_trip_through_pamqp_frame(method: codec.ClusterMethod) -> None:
    data = frame.marshal(method, 0)
    consumed, channel, back = frame.unmarshal(data)
    assert (consumed, channel) == (len(data), 0)
    assert type(back) is type(method) and back == method


@pytest.mark.parametrize("method", SAMPLES, ids=repr)
def test_round_trip_through_broker_decoder(method: codec.ClusterMethod) -> None:
    data = encode_method(0, method)
    assert data == frame.marshal(method, 0)
    back = decode_method(data[7:-1])
    if isinstance(method, codec.Relay):  # decoded by hand (relay_wire), into its own class
        assert isinstance(back, relay_wire.DecodedRelay)
        back = back.to_relay()
    assert back == method


@pytest.mark.parametrize("method", SAMPLES, ids=repr)
def test_truncated_payload_is_502(method: codec.ClusterMethod) -> None:
    payload = encode_method(0, method)[7:-1]
    for cut in range(4, len(payload)):
        with pytest.raises(ConnectionException) as err:
            decode_method(payload[:cut])
        assert err.value.reply_code == c.SYNTAX_ERROR
        assert (err.value.class_id, err.value.method_id) == (CLUSTER_CLASS_ID, method.frame_id)
    with pytest.raises(ConnectionException) as err:
        decode_method(payload + b"\x00")
    assert err.value.reply_code == c.SYNTAX_ERROR


def test_unknown_cluster_method_is_540() -> None:
    with pytest.raises(ConnectionException) as err:
        decode_method(struct.pack(">HH", CLUSTER_CLASS_ID, 99))
    assert err.value.reply_code == c.NOT_IMPLEMENTED


def test_membership_members_are_ordered_and_checked() -> None:
    m = Membership(3, [("b", "h2:1"), ("a", "h1:1")])
    assert m.member_list == (("b", "h2:1"), ("a", "h1:1"))
    assert m.leader == "b"
    assert Membership(1, []).leader is None
    for bad in ('{"a": 1}', "[[1, 2]]", '[["a", "x"], ["a", "y"]]', "not json", '[["a"]]'):
        with pytest.raises(ValueError):
            Membership(1, bad)
    with pytest.raises(ValueError):
        Membership(-1, [])


def test_field_validation() -> None:
    with pytest.raises(ValueError):
        Join("x" * 256)
    with pytest.raises(ValueError):
        Suspect("a", 1 << 63)
    with pytest.raises(ValueError):
        Ping(True, 1, {"cpu": 0.5})  # type: ignore[dict-item]
    assert Ping().load == {"connections": 0, "queues": 0, "messages": 0, "cpu": 0}
    with pytest.raises(ValueError):
        codec.Definition("queue", "/", "x", "")
    with pytest.raises(ValueError):
        codec.InVhost("/", b"\x00")


def test_in_vhost_wraps_a_method_for_its_vhost_only() -> None:
    from cluster.driver import in_vhost
    declare = commands.Queue.Declare(queue="orders", durable=True)
    assert in_vhost("/", declare) is declare
    wrapped = in_vhost("shop", declare)
    assert isinstance(wrapped, codec.InVhost) and wrapped.vhost == "shop"
    back = decode_method(decode_method(encode_method(1, wrapped)[7:-1]).payload)
    assert isinstance(back, commands.Queue.Declare)
    assert (back.queue, back.durable) == ("orders", True)


def test_malformed_membership_json_surfaces_as_value_error_after_decode() -> None:
    payload = struct.pack(">HHq", CLUSTER_CLASS_ID, 20, 5) + struct.pack(">I", 3) + b"[[x"
    back = decode_method(payload)
    assert isinstance(back, Membership)
    with pytest.raises(ValueError):
        _ = back.member_list


_names = st.text(min_size=1, max_size=20)


@given(view=st.integers(0, (1 << 63) - 1),
       members=st.lists(st.tuples(_names, _names), max_size=6, unique_by=lambda m: m[0]))
def test_membership_round_trip_property(view: int, members: list[tuple[str, str]]) -> None:
    m = Membership(view, members)
    back = decode_method(encode_method(0, m)[7:-1])
    assert isinstance(back, Membership)
    assert back.view == view and back.member_list == tuple(members)
