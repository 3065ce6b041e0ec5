"""encode_deliver / encode_get_ok / encode_return byte for byte against pamqp's frame marshalling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.delivery import (
    DeliverEncoder,
    deliver_prefix,
    encode_deliver,
    encode_get_ok,
    encode_return,
    encode_routing,
    encode_shortstr,
)
from amqp_broker.protocol.framing import FrameSplitter
from amqp_broker.protocol.methods import Publish, decode_method


# pamqp validates exchange names against a narrow regex on construction and marshal; the broker
# must still encode whatever UTF-8 name a client published with, so compare against pamqp's
# encoder with validation switched off.
class _Deliver(commands.Basic.Deliver):
    def validate(self) -> None:
        pass


class _GetOk(commands.Basic.GetOk):
    def validate(self) -> None:
        pass


class _Return(commands.Basic.Return):
    def validate(self) -> None:
        pass


shortstrs = st.text(st.characters(codec="utf-8"), max_size=255).filter(
    lambda s: len(s.encode()) <= 255)
channels = st.integers(0, 0xFFFF)
tags = st.integers(0, 2**63 - 1)  # pamqp encodes delivery tags as signed long-long
frame_maxes = st.one_of(st.integers(9, 300), st.sampled_from([c.FRAME_MIN_SIZE, 131072]))


@st.composite
def contents(draw) -> tuple[bytes, bytes, int]:
    """(header payload as pamqp encodes it, body, frame_max)."""
    frame_max = draw(frame_maxes)
    step = frame_max - c.FRAME_OVERHEAD
    size = draw(st.one_of(st.just(0), st.integers(0, 3 * step + 1), st.sampled_from(
        [step - 1, step, step + 1, 2 * step])))
    data = draw(st.binary(min_size=size, max_size=size)) if size <= 4000 else bytes(size)
    props = commands.Basic.Properties(
        content_type=draw(st.sampled_from([None, "text/plain", "application/json"])),
        delivery_mode=draw(st.sampled_from([None, 1, 2])),
        headers=draw(st.sampled_from([None, {"a": 1, "b": "x"}])),
        message_id=draw(st.none() | st.text("abc123", max_size=10)) or None)
    return header.ContentHeader(0, len(data), props).marshal(), data, frame_max


def _pamqp_content(channel: int, header_payload: bytes, data: bytes, frame_max: int) -> bytes:
    hdr = header.ContentHeader()
    hdr.unmarshal(header_payload)
    out = frame.marshal(hdr, channel)
    assert out[7:-1] == header_payload
    step = frame_max - c.FRAME_OVERHEAD
    for i in range(0, len(data), step):  # no body frame at all for an empty body
        out += frame.marshal(body.ContentBody(data[i:i + step]), channel)
    return out


def _check_frames(encoded: bytes, channel: int, frame_max: int, data: bytes) -> None:
    frames = FrameSplitter(1 << 20).feed(encoded)  # methods may exceed the tiny test frame_max
    assert [t for t, _, _ in frames[:2]] == [c.FRAME_METHOD, c.FRAME_HEADER]
    assert {ch for _, ch, _ in frames} == {channel}
    bodies = frames[2:]
    assert all(t == c.FRAME_BODY and 0 < len(p) <= frame_max - 8 for t, _, p in bodies)
    assert b"".join(p for _, _, p in bodies) == data


@given(channels, shortstrs, tags, st.booleans(), shortstrs, shortstrs, contents())
@settings(max_examples=300, deadline=None)
def test_encode_deliver_matches_pamqp(channel, consumer_tag, delivery_tag, redelivered, exchange,
                                      routing_key, content) -> None:
    header_payload, data, frame_max = content
    got = encode_deliver(channel, deliver_prefix(consumer_tag), delivery_tag, redelivered,
                         encode_routing(exchange, routing_key), header_payload, data, frame_max)
    method = _Deliver(consumer_tag, delivery_tag, redelivered, exchange, routing_key)
    want = frame.marshal(method, channel) + _pamqp_content(channel, header_payload, data,
                                                           frame_max)
    assert got == want
    _check_frames(got, channel, frame_max, data)
    decoded = frame.unmarshal(got)[2]
    assert (decoded.consumer_tag, decoded.delivery_tag, decoded.redelivered, decoded.exchange,
            decoded.routing_key) == (consumer_tag, delivery_tag, redelivered, exchange, routing_key)


@given(channels, shortstrs, st.lists(st.tuples(tags, st.booleans(), shortstrs, shortstrs,
                                               st.sampled_from([0, 1, 2])), min_size=1, max_size=12),
       st.data())
@settings(max_examples=200, deadline=None)
def test_deliver_encoder_matches_pamqp_over_a_sequence(channel, consumer_tag, deliveries,
                                                       data) -> None:
    """One consumer's encoder over a run of deliveries whose routing, header and body lengths
    repeat or change (the one-pack formats are built, reused and rebuilt): every delivery the
    bytes pamqp marshals, which is also what ``encode_deliver`` gives."""
    frame_max = data.draw(frame_maxes)
    enc = DeliverEncoder(channel, consumer_tag, frame_max)
    payloads = [b"", b"a", b"hello", bytes(range(40)), b"z" * (frame_max - 8), b"y" * frame_max]
    for delivery_tag, redelivered, exchange, routing_key, pick in deliveries:
        payload = data.draw(st.sampled_from(payloads))
        header_payload = header.ContentHeader(0, len(payload), commands.Basic.Properties(
            content_type=[None, "text/plain", "application/json"][pick])).marshal()
        routing_raw = encode_routing(exchange, routing_key)
        for _ in range(data.draw(st.integers(1, 3))):   # a length that repeats
            got = enc.encode(delivery_tag, redelivered, routing_raw, header_payload, payload)
            want = frame.marshal(_Deliver(consumer_tag, delivery_tag, redelivered, exchange,
                                          routing_key), channel) + _pamqp_content(
                channel, header_payload, payload, frame_max)
            assert got == want
            assert got == encode_deliver(channel, deliver_prefix(consumer_tag), delivery_tag,
                                         redelivered, routing_raw, header_payload, payload, frame_max)


def test_deliver_encoder_same_lengths_new_contents() -> None:
    """Once its format is built, the encoder packs each message's own bytes, not the first
    message's (the lengths match, the contents differ)."""
    enc = DeliverEncoder(5, "ctag", 131072)
    routing = [encode_routing("ex", "k1"), encode_routing("ey", "k2"), encode_routing("ez", "k3")]
    for i, payload in enumerate([b"aaaa", b"bbbb", b"cccc"]):
        header_payload = header.ContentHeader(0, 4).marshal()
        got = enc.encode(i + 1, bool(i % 2), routing[i], header_payload, payload)
        decoded = FrameSplitter().feed(got)
        method = frame.unmarshal(got)[2]
        assert (method.delivery_tag, method.redelivered, method.exchange, method.routing_key) == (
            i + 1, bool(i % 2), ["ex", "ey", "ez"][i], ["k1", "k2", "k3"][i])
        assert decoded[-1][2] == payload


@given(channels, tags, st.booleans(), shortstrs, shortstrs, st.integers(0, 2**32 - 1), contents())
@settings(max_examples=300, deadline=None)
def test_encode_get_ok_matches_pamqp(channel, delivery_tag, redelivered, exchange, routing_key,
                                     message_count, content) -> None:
    header_payload, data, frame_max = content
    got = encode_get_ok(channel, delivery_tag, redelivered, encode_routing(exchange, routing_key),
                        message_count, header_payload, data, frame_max)
    method = _GetOk(delivery_tag, redelivered, exchange, routing_key, message_count)
    want = frame.marshal(method, channel) + _pamqp_content(channel, header_payload, data,
                                                           frame_max)
    assert got == want
    _check_frames(got, channel, frame_max, data)


@given(channels, st.sampled_from([312, 313, 200, 0, 65535]), shortstrs, shortstrs, shortstrs,
       contents())
@settings(max_examples=300, deadline=None)
def test_encode_return_matches_pamqp(channel, reply_code, reply_text, exchange, routing_key,
                                     content) -> None:
    header_payload, data, frame_max = content
    got = encode_return(channel, reply_code, reply_text, encode_routing(exchange, routing_key),
                        header_payload, data, frame_max)
    method = _Return(reply_code, reply_text, exchange, routing_key)
    want = frame.marshal(method, channel) + _pamqp_content(channel, header_payload, data,
                                                           frame_max)
    assert got == want
    _check_frames(got, channel, frame_max, data)


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 8176, 8177, 12265])
def test_deliver_body_split_at_frame_max_minus_8(size: int) -> None:
    data = (bytes(range(256)) * 50)[:size]
    header_payload = header.ContentHeader(0, size).marshal()
    got = encode_deliver(1, deliver_prefix("ctag"), 1, False, encode_routing("", "q"),
                         header_payload, data, c.FRAME_MIN_SIZE)
    want = frame.marshal(commands.Basic.Deliver("ctag", 1, False, "", "q"), 1) + _pamqp_content(
        1, header_payload, data, c.FRAME_MIN_SIZE)
    assert got == want
    frames = FrameSplitter().feed(got)
    assert len(frames) == 2 + -(-size // 4088)
    assert [len(p) for _, _, p in frames[2:-1]] == [4088] * (len(frames) - 3)


def test_empty_body_sends_no_body_frame() -> None:
    header_payload = header.ContentHeader(0, 0).marshal()
    routing = encode_routing("e", "r")
    for encoded in (
            encode_deliver(3, deliver_prefix("t"), 5, True, routing, header_payload, b"", 4096),
            encode_get_ok(3, 5, True, routing, 0, header_payload, b"", 4096),
            encode_return(3, 312, "NO_ROUTE", routing, header_payload, b"", 4096)):
        assert [t for t, _, _ in FrameSplitter().feed(encoded)] == [c.FRAME_METHOD, c.FRAME_HEADER]


def test_header_payload_is_passed_through_verbatim() -> None:
    # the header as it came in (here with an unusual weight field) must not be re-encoded
    header_payload = b"\x00\x3c\x12\x34" + (3).to_bytes(8, "big") + b"\x00\x00"
    got = encode_deliver(1, deliver_prefix("t"), 1, False, encode_routing("", "q"),
                         header_payload, b"abc", 4096)
    assert FrameSplitter().feed(got)[1] == (c.FRAME_HEADER, 1, header_payload)


@given(shortstrs, shortstrs, st.booleans(), tags, st.binary(min_size=1, max_size=100))
@settings(deadline=None)
def test_publish_routing_raw_feeds_deliver(exchange, routing_key, redelivered, delivery_tag,
                                           data) -> None:
    """The routing bytes kept from an incoming Basic.Publish encode the same Basic.Deliver."""
    payload = (b"\x00\x3c\x00\x28\x00\x00" + encode_shortstr(exchange)
               + encode_shortstr(routing_key) + b"\x00")
    publish = decode_method(payload)
    assert isinstance(publish, Publish)
    header_payload = header.ContentHeader(0, len(data)).marshal()
    got = encode_deliver(2, deliver_prefix("c"), delivery_tag, redelivered, publish.routing_raw,
                         header_payload, data, 4096)
    assert got == encode_deliver(2, deliver_prefix("c"), delivery_tag, redelivered,
                                 encode_routing(exchange, routing_key), header_payload, data, 4096)
    assert got == frame.marshal(_Deliver("c", delivery_tag, redelivered, exchange, routing_key),
                                2) + _pamqp_content(2, header_payload, data, 4096)


@given(shortstrs)
def test_encode_shortstr(value: str) -> None:
    raw = value.encode()
    assert encode_shortstr(value) == bytes((len(raw),)) + raw


@pytest.mark.parametrize("value", ["x" * 256, "é" * 128, "\U0001f600" * 64])
def test_encode_shortstr_over_255_bytes_raises(value: str) -> None:
    with pytest.raises(ValueError):
        encode_shortstr(value)


def test_encode_shortstr_exactly_255_bytes() -> None:
    assert encode_shortstr("é" * 127 + "x") == b"\xff" + ("é" * 127 + "x").encode()


def test_deliver_prefix_and_routing() -> None:
    assert deliver_prefix("ctag") == b"\x00\x3c\x00\x3c\x04ctag"
    assert encode_routing("ex", "") == b"\x02ex\x00"


def test_delivery_tag_is_unsigned_64_bit() -> None:
    # the spec's delivery-tag is a longlong (u64); pamqp cannot encode tags >= 2**63, so by hand
    got = encode_deliver(1, deliver_prefix("t"), 2**64 - 1, True, encode_routing("", "q"),
                         header.ContentHeader(0, 0).marshal(), b"", 4096)
    method_payload = FrameSplitter().feed(got)[0][2]
    assert method_payload == b"\x00\x3c\x00\x3c\x01t" + b"\xff" * 8 + b"\x01" + b"\x00\x01q"
    got = encode_get_ok(1, 2**63, False, b"\x00\x00", 0, header.ContentHeader(0, 0).marshal(),
                        b"", 4096)
    assert FrameSplitter().feed(got)[0][2] == (b"\x00\x3c\x00\x47\x80" + b"\x00" * 7
                                               + b"\x00\x00\x00" + b"\x00" * 4)


@given(tag=st.integers(1, 2**63 - 1), redelivered=st.booleans(),
       body=st.binary(min_size=1, max_size=20000), channel=st.integers(1, 65535),
       frame_max=st.sampled_from([4096, 5000, 8192, 131072]))
def test_deliver_parts_join_to_the_same_bytes_as_encode_deliver(tag, redelivered, body, channel,
                                                                frame_max):
    from amqp_broker.protocol.delivery import encode_deliver_parts
    prefix = deliver_prefix("ctag")
    routing = encode_routing("ex", "rk")
    header = b"\x00\x3c\x00\x00" + len(body).to_bytes(8, "big") + b"\x00\x00"
    parts = encode_deliver_parts(channel, prefix, tag, redelivered, routing, header, body,
                                 frame_max)
    if len(body) <= frame_max - 8:
        assert parts[1] is body  # the body is not copied
    assert b"".join(parts) == encode_deliver(channel, prefix, tag, redelivered, routing, header,
                                             body, frame_max)
