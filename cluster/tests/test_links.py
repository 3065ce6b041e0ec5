"""Peer links against a misbehaving member (bad input never crashes a broker): a fake member on
127.0.0.1 completes the link handshake, then sends a frame that is not valid AMQP. The link must
fail like a broken socket (``on_failure`` and ``on_down`` for that node) and nothing may escape
into the broker's task group. A member that refuses a request by closing the link's channel
makes the sender take back what it relayed on that channel (``on_down``), the link staying up.
Source: AMQP 0-9-1 §4.2.3 (a malformed method frame is a connection error: 540 / 502 / 501),
DESIGN.md §6, issue 10."""

from __future__ import annotations

import contextlib
import struct

import anyio
import pytest
from pamqp import commands as cmd
from pamqp import frame as pframe

from amqp_broker.protocol.framing import FrameSplitter
from cluster.links import PeerLinks, Settle, _decode_settle
from cluster.secret import MECHANISM

SECRET = b"s" * 32
BAD_FRAMES = {
    "unknown method (540)": struct.pack(">BHIHH", 1, 1, 4, 60, 99) + b"\xce",
    "truncated arguments (502)": struct.pack(">BHIHH", 1, 1, 5, 60, 80) + b"\x00\xce",
    "bad frame end (501)": struct.pack(">BHI", 1, 1, 4) + b"\x00\x3c\x00\x50" + b"\x00",
}


async def _open_as_member(stream):
    """Take the link's handshake as a broker would (any Secure-Ok is taken) up to Channel.Open-Ok
    on channel 1; returns ``next_method()``, which reads the link's next method."""
    splitter = FrameSplitter(4096)
    methods: list = []

    async def next_method():
        while not methods:
            for ftype, _channel, payload in splitter.feed(await stream.receive()):
                if ftype == 1:
                    methods.append(pframe.unmarshal(struct.pack(">BHI", 1, 0, len(payload))
                                                    + payload + b"\xce")[2])
        return methods.pop(0)

    assert (await stream.receive(8)) == b"AMQP\x00\x00\x09\x01"
    await stream.send(pframe.marshal(cmd.Connection.Start(0, 9, {}, MECHANISM, "en_US"), 0))
    assert isinstance(await next_method(), cmd.Connection.StartOk)
    await stream.send(pframe.marshal(cmd.Connection.Secure("00" * 32), 0))
    assert isinstance(await next_method(), cmd.Connection.SecureOk)
    await stream.send(pframe.marshal(cmd.Connection.Tune(2047, 131072, 0), 0))
    assert isinstance(await next_method(), cmd.Connection.TuneOk)
    assert isinstance(await next_method(), cmd.Connection.Open)
    await stream.send(pframe.marshal(cmd.Connection.OpenOk(), 0))
    assert isinstance(await next_method(), cmd.Channel.Open)
    await stream.send(pframe.marshal(cmd.Channel.OpenOk(), 1))
    return next_method


@contextlib.asynccontextmanager
async def _member(serve):
    """A fake member listening on 127.0.0.1 (``serve(stream)`` per connection): yields (task
    group, "host:port"); cancels the task group on the way out."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield tg, f"127.0.0.1:{port}"
        tg.cancel_scope.cancel()


async def _until_closed(stream) -> None:
    with anyio.move_on_after(5):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass  # the link closed its socket


async def _fake_member(stream, bad: bytes, in_handshake: bool) -> None:
    """Handshake as a broker would, then send ``bad``: right behind Channel.Open-Ok (the
    handshake reads it) or once the link is open (its reader does)."""
    await _open_as_member(stream)
    if not in_handshake:
        await anyio.sleep(0.3)  # the link is open now: its reader gets the bad frame
    await stream.send(bad)
    await _until_closed(stream)


@pytest.mark.parametrize("in_handshake", [True, False], ids=["in-handshake", "open-link"])
@pytest.mark.parametrize("bad", list(BAD_FRAMES.values()), ids=list(BAD_FRAMES))
def test_a_malformed_frame_from_a_member_fails_the_link_not_the_broker(bad: bytes,
                                                                       in_handshake: bool) -> None:
    failed: list[str] = []
    down: list[str] = []

    async def main() -> None:
        async with _member(lambda s: _fake_member(s, bad, in_handshake)) as (tg, address):
            links = PeerLinks("me", SECRET, on_failure=failed.append, on_down=down.append)
            links.start(tg)
            links.connect("bad-peer", address)
            with anyio.fail_after(10):
                while not failed:
                    await anyio.sleep(0.02)

    anyio.run(main)
    assert failed == ["bad-peer"] and down == ["bad-peer"]


@pytest.mark.parametrize(("method", "expected"), [
    (cmd.Basic.Ack(7, False), Settle(7, False, "ack")),
    (cmd.Basic.Ack(9, True), Settle(9, True, "ack")),
    (cmd.Basic.Nack(3, False, True), Settle(3, False, "requeue")),
    (cmd.Basic.Nack(4, True, False), Settle(4, True, "reject")),
    (cmd.Basic.Reject(5, True), Settle(5, False, "requeue")),
    (cmd.Basic.Reject(6, False), Settle(6, False, "reject")),
], ids=lambda v: repr(v) if isinstance(v, Settle) else v.name)  # pamqp's repr has an address
def test_settles_decode_as_pamqp_encodes_them(method: object, expected: Settle) -> None:
    """A member's Basic.Ack / Nack / Reject (encoded by pamqp, as any client would) reads as the
    outcome the relay applies; other methods are left to the generic decoder."""
    payload = pframe.marshal(method, 1)[7:-1]  # type: ignore[arg-type]
    assert _decode_settle(payload) == expected
    assert _decode_settle(pframe.marshal(cmd.Basic.Qos(0, 10, False), 1)[7:-1]) is None


async def _refusing_member(stream, reopened: list[bool]) -> None:
    """Handshake, then refuse the first request on channel 1 with Channel.Close 406, take the
    link's Close-Ok and Channel.Open, answer Open-Ok, and keep the link open."""
    next_method = await _open_as_member(stream)
    assert isinstance(await next_method(), cmd.Queue.Declare)
    await stream.send(pframe.marshal(cmd.Channel.Close(406, "PRECONDITION_FAILED - no", 50, 10),
                                     1))
    assert isinstance(await next_method(), cmd.Channel.CloseOk)
    assert isinstance(await next_method(), cmd.Channel.Open)
    await stream.send(pframe.marshal(cmd.Channel.OpenOk(), 1))
    reopened.append(True)
    await _until_closed(stream)


def test_a_member_closing_the_link_channel_makes_the_sender_take_back_its_relays() -> None:
    """A member that refuses a propagated method closes the link's channel, and with it the
    settle state of what we relayed on it: ``on_down`` must run (the broker requeues every
    unsettled transfer to that member) while the link itself stays up."""
    failed: list[str] = []
    down: list[str] = []
    replies: list[object] = []
    reopened: list[bool] = []

    async def main() -> None:
        async with _member(lambda s: _refusing_member(s, reopened)) as (tg, address):
            links = PeerLinks("me", SECRET, on_failure=failed.append, on_down=down.append)
            links.start(tg)
            links.send("peer", address, cmd.Queue.Declare(queue="q"), on_reply=replies.append)
            with anyio.fail_after(10):
                while not down:
                    await anyio.sleep(0.02)
            assert links.can_send("peer")  # the link is still up
            assert down == ["peer"] and failed == []
        # (ending the link on the way out calls on_down again)

    anyio.run(main)
    assert replies == [(406, "PRECONDITION_FAILED - no")]
    assert reopened == [True]


async def _recording_member(stream, got: list) -> None:
    """Handshake as a broker would, then record every method the link sends."""
    next_method = await _open_as_member(stream)
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while True:
            got.append(await next_method())


def test_sends_to_seeds_of_unknown_name_go_to_each_seed_s_address() -> None:
    """A joiner knows its seeds by address only (node name ``""``): a method sent to one seed
    must reach that seed, not another seed whose link is still open. Before, both went over one
    link keyed ``""``: two brokers restarted after a power loss, each seeding the other and the
    leader, sent every Join to each other (a joiner ignores Joins) and never joined again."""
    got_a: list = []
    got_b: list = []

    async def main() -> None:
        async with _member(lambda s: _recording_member(s, got_a)) as (tg, a), \
                _member(lambda s: _recording_member(s, got_b)) as (_tg, b):
            links = PeerLinks("me", SECRET, on_failure=lambda n: None)
            links.start(tg)
            links.send("", a, cmd.Queue.Declare(queue="to-a"))
            with anyio.fail_after(10):
                while not got_a:
                    await anyio.sleep(0.02)
            links.send("", b, cmd.Queue.Declare(queue="to-b"))
            with anyio.fail_after(10):
                while not got_b:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert [m.queue for m in got_a] == ["to-a"]
    assert [m.queue for m in got_b] == ["to-b"]
