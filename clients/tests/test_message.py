"""``clients.message``: properties and the publish fast path, byte for byte against pamqp."""

import datetime

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame, header

from amqp_broker.protocol.framing import FrameSplitter
from clients.message import (
    Properties,
    decode_properties,
    encode_properties,
    encode_publish,
    encode_routing,
)

# pamqp drops empty short strings (flag unset); we send them as present-and-empty, so the
# byte-for-byte comparison uses non-empty strings and empty ones are checked by round trip.
_short = st.text(min_size=1, max_size=20)
_props = st.builds(
    Properties, content_type=st.none() | _short, content_encoding=st.none() | _short,
    headers=st.none() | st.dictionaries(st.text(min_size=1, max_size=8),
                                        st.integers(-2**31, 2**31 - 1) | _short | st.booleans(),
                                        max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]), priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | _short, reply_to=st.none() | _short,
    expiration=st.none() | st.integers(0, 10**6).map(str), message_id=st.none() | _short,
    timestamp=st.none() | st.integers(0, 2**32), type=st.none() | _short,
    user_id=st.none() | _short, app_id=st.none() | _short)


def _pamqp_props(p: Properties) -> commands.Basic.Properties:
    ts = (datetime.datetime.fromtimestamp(p.timestamp, tz=datetime.UTC)
          if p.timestamp is not None else None)
    return commands.Basic.Properties(
        content_type=p.content_type, content_encoding=p.content_encoding, headers=p.headers,
        delivery_mode=p.delivery_mode, priority=p.priority, correlation_id=p.correlation_id,
        reply_to=p.reply_to, expiration=p.expiration, message_id=p.message_id, timestamp=ts,
        message_type=p.type, user_id=p.user_id, app_id=p.app_id)


@given(_props, st.binary(max_size=20000))
def test_publish_frames_match_pamqp(props, body):
    ours = encode_publish(3, encode_routing("ex", "rk", True), body, encode_properties(props),
                          4096)
    theirs = frame.marshal(commands.Basic.Publish(exchange="ex", routing_key="rk",
                                                  mandatory=True), 3)
    theirs += frame.marshal(header.ContentHeader(0, len(body), _pamqp_props(props)), 3)
    for i in range(0, len(body), 4096 - 8):
        theirs += frame.marshal(commands_body(body[i:i + 4096 - 8]), 3)
    assert ours == theirs
    frames = FrameSplitter(4096).feed(ours)
    assert decode_properties(frames[1][2]) == props


def commands_body(chunk: bytes):
    from pamqp.body import ContentBody
    return ContentBody(chunk)


def test_empty_properties_roundtrip():
    raw = encode_properties(None)
    assert raw == b"\x00\x00"
    assert decode_properties(b"\x00\x3c\x00\x00" + b"\x00" * 8 + raw) == Properties()


def test_empty_string_property_roundtrips():
    p = Properties(app_id="", message_id="m")
    payload = b"\x00\x3c\x00\x00" + b"\x00" * 8 + encode_properties(p)
    assert decode_properties(payload) == p
