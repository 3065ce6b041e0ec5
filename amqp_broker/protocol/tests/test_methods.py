"""decode_method / encode_method against pamqp, plus the Basic.Publish fast path."""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pamqp import base, commands, frame

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.methods import (
    PUBLISH_INDEX,
    Publish,
    decode_method,
    encode_method,
    method_ids,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")

TABLE = {"k": 1, "neg": -70000, "big": 2**40, "s": "v", "b": True, "f": 1.5,
         "n": {"x": ["two", 3, False]}}



def _recover_async() -> commands.Basic.RecoverAsync:
    with warnings.catch_warnings():  # pamqp warns that the command is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return commands.Basic.RecoverAsync(requeue=True)


# Hand-picked commands with non-default values for every argument that pamqp lets us set.
REPRESENTATIVE: list[base.Frame] = [
    commands.Connection.StartOk(client_properties={"product": "t", "capabilities": {"a": True}},
                                mechanism="PLAIN", response="\x00guest\x00guest",
                                locale="en_US"),
    commands.Connection.SecureOk(response="secret"),
    commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
    commands.Connection.Open(virtual_host="/vh"),
    commands.Connection.Close(320, "CONNECTION_FORCED - bye", 10, 50),
    commands.Connection.CloseOk(),
    commands.Connection.UpdateSecret(new_secret="tok", reason="refresh"),
    commands.Channel.Open(),
    commands.Channel.Flow(active=True),
    commands.Channel.FlowOk(active=False),
    commands.Channel.Close(404, "NOT_FOUND - no queue 'q'", 50, 10),
    commands.Channel.CloseOk(),
    commands.Exchange.Declare(exchange="ex.1", exchange_type="topic", passive=False, durable=True,
                              auto_delete=True, internal=True, nowait=False, arguments=TABLE),
    commands.Exchange.Delete(exchange="ex.1", if_unused=True, nowait=True),
    commands.Exchange.Bind(destination="d", source="s", routing_key="a.*.#", nowait=True,
                           arguments={"x-match": "any"}),
    commands.Exchange.Unbind(destination="d", source="s", routing_key="rk", arguments={}),
    commands.Queue.Declare(queue="q-1", passive=True, durable=False, exclusive=True,
                           auto_delete=True, nowait=True, arguments={"x-max-length": 10}),
    commands.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k", nowait=False,
                        arguments={"a": "b"}),
    commands.Queue.Purge(queue="q", nowait=True),
    commands.Queue.Delete(queue="q", if_unused=True, if_empty=True, nowait=True),
    commands.Queue.Unbind(queue="q", exchange="e", routing_key="k", arguments={"z": 0}),
    commands.Basic.Qos(prefetch_size=0, prefetch_count=250, global_=True),
    commands.Basic.Consume(queue="q", consumer_tag="ctag-1", no_local=True, no_ack=True,
                           exclusive=True, nowait=False, arguments={"x-priority": 5}),
    commands.Basic.Cancel(consumer_tag="ctag-1", nowait=True),
    commands.Basic.Get(queue="q", no_ack=True),
    commands.Basic.Ack(delivery_tag=2**63 - 1, multiple=True),  # pamqp: signed
    commands.Basic.Reject(delivery_tag=42, requeue=False),
    commands.Basic.Nack(delivery_tag=7, multiple=True, requeue=False),
    commands.Basic.Recover(requeue=True),
    _recover_async(),
    commands.Basic.Deliver(consumer_tag="c", delivery_tag=9, redelivered=True, exchange="e",
                           routing_key="r"),
    commands.Basic.Return(312, "NO_ROUTE", "e", "r"),
    commands.Confirm.Select(nowait=True),
    commands.Tx.Select(),
    commands.Tx.Commit(),
    commands.Tx.Rollback(),
]

_SAMPLE = {"octet": [7], "short": [513, 0], "long": [70000, 0], "longlong": [2**40 + 3, 0],
           "bit": [True], "shortstr": ["q.1", ""], "longstr": ["long\x00str", ""],
           "table": [TABLE, {}]}


def _filled(cls: type[base.Frame]) -> base.Frame:
    """An instance of ``cls`` with a non-default value in every argument pamqp's validate allows."""
    method = cls()
    for name in cls.__slots__:
        for value in _SAMPLE[cls.amqp_type(name)]:
            old = getattr(method, name)
            setattr(method, name, value)
            try:
                method.validate()
            except (ValueError, TypeError):
                setattr(method, name, old)
                continue
            break
    method.marshal()  # must be encodable
    return method


with warnings.catch_warnings():  # Basic.RecoverAsync warns that it is deprecated
    warnings.simplefilter("ignore", DeprecationWarning)
    # pamqp's own commands only: extension classes (cluster/codec.py) register themselves too,
    # when something imported them before this module is collected
    EVERY_COMMAND = [_filled(cls) for _, cls in sorted(commands.INDEX_MAPPING.items())
                     if cls is not commands.Basic.Publish and cls.__module__ == commands.__name__]
ALL_CASES = REPRESENTATIVE + EVERY_COMMAND


def _payload(method: base.Frame) -> bytes:
    return frame.marshal(method, 1)[7:-1]


def _ids(m: base.Frame) -> str:
    return m.name


def _assert_same_arguments(got: base.Frame, want: base.Frame) -> None:
    assert type(got) is type(want)
    for name in want.__slots__:
        assert getattr(got, name) == getattr(want, name), name


@pytest.mark.parametrize("method", ALL_CASES, ids=_ids)
def test_decode_round_trips_pamqp(method: base.Frame) -> None:
    decoded = decode_method(_payload(method))
    _assert_same_arguments(decoded, method)
    assert method_ids(decoded) == (method.index >> 16, method.index & 0xFFFF)


def test_every_pamqp_command_is_covered() -> None:
    covered = {type(m) for m in ALL_CASES} | {commands.Basic.Publish}
    # Only pamqp's own commands: extension classes (cluster/codec.py) register themselves too.
    assert covered == {cls for cls in commands.INDEX_MAPPING.values()
                       if cls.__module__ == commands.__name__}


@pytest.mark.parametrize("method", ALL_CASES, ids=_ids)
@pytest.mark.parametrize("channel", [0, 1, 0xFFFF])
def test_encode_method_equals_pamqp_marshal(method: base.Frame, channel: int) -> None:
    assert encode_method(channel, method) == frame.marshal(method, channel)


def test_encode_method_propagates_pamqp_validation() -> None:
    method = commands.Basic.Ack(1)
    method.delivery_tag = "not an int"
    with pytest.raises((ValueError, TypeError)):
        encode_method(1, method)


# -- malformed input ------------------------------------------------------------------------------


def _assert_code(exc_info: pytest.ExceptionInfo[ConnectionException], code: int) -> None:
    assert type(exc_info.value) is ConnectionException
    assert exc_info.value.reply_code == code


@pytest.mark.parametrize("method", ALL_CASES, ids=_ids)
def test_every_truncation_is_502(method: base.Frame) -> None:
    payload = _payload(method)
    for cut in range(len(payload)):
        with pytest.raises(ConnectionException) as exc_info:
            decode_method(payload[:cut])
        _assert_code(exc_info, c.SYNTAX_ERROR)
        if cut >= 4:
            assert (exc_info.value.class_id, exc_info.value.method_id) == (
                method.index >> 16, method.index & 0xFFFF)


@pytest.mark.parametrize("method", ALL_CASES, ids=_ids)
def test_trailing_bytes_are_502(method: base.Frame) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(_payload(method) + b"\x00")
    _assert_code(exc_info, c.SYNTAX_ERROR)


def test_string_truncated_inside_its_bytes_is_502() -> None:
    # pamqp alone would decode the locale as "en_" instead of failing
    payload = _payload(commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                                   response="\x00u\x00p", locale="en_US"))
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload[:-2])
    _assert_code(exc_info, c.SYNTAX_ERROR)


def test_deeply_nested_table_is_502_not_recursion_error() -> None:
    inner = b""
    for _ in range(3000):
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    entry = b"\x01k" + inner
    table = struct.pack(">I", len(entry)) + entry
    payload = struct.pack(">I", commands.Queue.Declare.index) + b"\x00\x00\x01q\x00" + table
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload)
    _assert_code(exc_info, c.SYNTAX_ERROR)


def test_unknown_field_type_in_table_is_502() -> None:
    entry = b"\x01kZ"
    table = struct.pack(">I", len(entry)) + entry
    payload = struct.pack(">I", commands.Queue.Declare.index) + b"\x00\x00\x01q\x00" + table
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload)
    _assert_code(exc_info, c.SYNTAX_ERROR)


@given(st.binary(max_size=3))
def test_payload_under_4_bytes_is_502(payload: bytes) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload)
    _assert_code(exc_info, c.SYNTAX_ERROR)


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x00\x3c", b"\x00\x3c\x00"])
def test_publish_prefix_shorter_than_4_bytes_is_502(payload: bytes) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload)
    _assert_code(exc_info, c.SYNTAX_ERROR)


@given(st.integers(0, 2**32 - 1).filter(lambda i: i not in commands.INDEX_MAPPING),
       st.binary(max_size=20))
def test_unknown_method_is_540(index: int, args: bytes) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(struct.pack(">I", index) + args)
    _assert_code(exc_info, c.NOT_IMPLEMENTED)
    assert exc_info.value.class_id == index >> 16
    assert exc_info.value.method_id == index & 0xFFFF


@pytest.mark.parametrize("index", [0x003C0000, 0x003C0029, 0x00140000, 0x00FF000A, 0x00550014])
def test_unknown_method_examples_are_540(index: int) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(struct.pack(">I", index))
    _assert_code(exc_info, c.NOT_IMPLEMENTED)


def _publish_payload(exchange: str = "ex", routing_key: str = "rk", mandatory: bool = False,
                     immediate: bool = False) -> bytes:
    return _payload(commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                           mandatory=mandatory, immediate=immediate))


SEEDS = [_payload(m) for m in ALL_CASES] + [_publish_payload("e", "r.k", True, True)]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "append"]))
        pos = draw(st.integers(0, len(data)))
        if op == "truncate":
            del data[pos:]
        elif op == "flip" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        else:
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@given(mutated())
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_payloads_only_raise_connection_exception(payload: bytes) -> None:
    try:
        result = decode_method(payload)
    except ConnectionException as exc:
        assert type(exc) is ConnectionException
        assert exc.reply_code in (c.SYNTAX_ERROR, c.NOT_IMPLEMENTED)
        return
    assert isinstance(result, Publish | base.Frame)


@given(st.binary(max_size=64))
@settings(max_examples=1000)
def test_random_bytes_after_valid_index_only_raise_connection_exception(args: bytes) -> None:
    for index in (commands.Queue.Declare.index, commands.Connection.StartOk.index,
                  commands.Basic.Consume.index, PUBLISH_INDEX):
        try:
            decode_method(struct.pack(">I", index) + args)
        except ConnectionException as exc:
            assert exc.reply_code == c.SYNTAX_ERROR


# -- Basic.Publish fast path ---------------------------------------------------------------------


@pytest.mark.parametrize("mandatory", [False, True])
@pytest.mark.parametrize("immediate", [False, True])
def test_publish_fast_path(mandatory: bool, immediate: bool) -> None:
    got = decode_method(_publish_payload("amq.topic", "a.b.c", mandatory, immediate))
    assert type(got) is Publish
    assert got == Publish("amq.topic", "a.b.c", mandatory, immediate,
                          b"\x09amq.topic\x05a.b.c")
    assert method_ids(got) == (60, 40)


def test_publish_default_exchange_empty_names() -> None:
    got = decode_method(_publish_payload("", ""))
    assert got == Publish("", "", False, False, b"\x00\x00")


utf8_names = st.text(st.characters(codec="utf-8"), max_size=255).filter(
    lambda s: len(s.encode()) <= 255)


def _shortstr(s: str) -> bytes:
    raw = s.encode()
    return bytes((len(raw),)) + raw


@given(utf8_names, utf8_names, st.integers(0, 0xFFFF), st.integers(0, 255))
@settings(max_examples=500)
def test_publish_any_utf8_names_agree_with_pamqp(exchange: str, routing_key: str, ticket: int,
                                                 bits: int) -> None:
    routing = _shortstr(exchange) + _shortstr(routing_key)
    payload = struct.pack(">IH", PUBLISH_INDEX, ticket) + routing + bytes((bits,))
    got = decode_method(payload)
    want = commands.Basic.Publish()
    want.unmarshal(payload[4:])
    assert type(got) is Publish
    assert (got.exchange, got.routing_key, got.mandatory, got.immediate) == (
        want.exchange, want.routing_key, want.mandatory, want.immediate)
    assert (got.exchange, got.routing_key) == (exchange, routing_key)
    assert got.routing_raw == routing


def test_publish_every_truncation_and_trailing_byte_is_502() -> None:
    payload = _publish_payload("exchange", "key", True)
    for cut in range(len(payload)):
        with pytest.raises(ConnectionException) as exc_info:
            decode_method(payload[:cut])
        _assert_code(exc_info, c.SYNTAX_ERROR)
        if cut >= 4:
            assert (exc_info.value.class_id, exc_info.value.method_id) == (60, 40)
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(payload + b"\x00")
    _assert_code(exc_info, c.SYNTAX_ERROR)


@pytest.mark.parametrize("field", ["exchange", "routing_key"])
def test_publish_invalid_utf8_is_502(field: str) -> None:
    bad = b"\x02\xc3\x28"
    ok = b"\x01a"
    routing = bad + ok if field == "exchange" else ok + bad
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(struct.pack(">IH", PUBLISH_INDEX, 0) + routing + b"\x00")
    _assert_code(exc_info, c.SYNTAX_ERROR)


@given(utf8_names, utf8_names, st.integers(0, 255))
def test_publish_length_byte_overrun_is_502(exchange: str, routing_key: str, extra: int) -> None:
    routing = _shortstr(exchange) + _shortstr(routing_key)
    payload = struct.pack(">IH", PUBLISH_INDEX, 0) + routing + b"\x00"
    # declare the routing key longer than what is left in the frame
    rpos = 6 + 1 + len(exchange.encode())
    assume(payload[rpos] + extra + 1 <= 255)
    broken = bytearray(payload)
    broken[rpos] = payload[rpos] + extra + 1
    with pytest.raises(ConnectionException) as exc_info:
        decode_method(bytes(broken))
    _assert_code(exc_info, c.SYNTAX_ERROR)
