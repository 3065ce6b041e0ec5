"""Publisher confirms: the ConfirmTracker (unit and property tests) and confirm mode on the wire."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands as cmd

from amqp_broker.core.confirms import ConfirmTracker
from amqp_broker.protocol import constants as c

from .client import Client


# ------------------------------------------------------------------------------ tracker
def test_tracker_numbers_from_one() -> None:
    t = ConfirmTracker()
    assert [t.next_seq() for _ in range(3)] == [1, 2, 3]
    assert not t.pending and t.drain() == []


def test_tracker_merges_acks_and_keeps_nacks_single() -> None:
    t = ConfirmTracker()
    for seq, ok in [(1, True), (2, True), (3, False), (4, False), (5, True), (6, True),
                    (7, True), (8, False), (9, True)]:
        t.settle(seq, ok)
    assert t.pending
    assert t.drain() == [(2, True, True), (3, False, False), (4, False, False), (7, True, True),
                         (8, False, False), (9, False, True)]
    assert not t.pending and t.drain() == []


def test_tracker_emits_only_the_contiguous_prefix() -> None:
    t = ConfirmTracker()
    t.settle(2, True)
    t.settle(3, True)
    assert not t.pending and t.drain() == []
    t.settle(1, True)
    assert t.drain() == [(3, True, True)]
    t.settle(5, False)
    assert t.drain() == []
    t.settle(4, True)
    assert t.drain() == [(4, False, True), (5, False, False)]


def apply_frames(frames, confirmed: list[int], outcomes: dict[int, bool]) -> None:
    """What a client does with Ack/Nack frames: ``multiple`` covers every unconfirmed tag up to
    the tag. Asserts each seq is confirmed once, in increasing order, with its own outcome."""
    for tag, multiple, ack in frames:
        top = confirmed[-1] if confirmed else 0
        assert tag > top, f"frame for {tag} after {top} was confirmed"
        newly = list(range(top + 1, tag + 1)) if multiple else [tag]
        assert newly[0] == top + 1, f"single frame for {tag} skips {top + 1}"
        for seq in newly:
            assert outcomes[seq] == ack, f"seq {seq}: outcome {outcomes[seq]}, frame says {ack}"
        confirmed.extend(newly)


@given(st.lists(st.booleans(), min_size=1, max_size=60).flatmap(
    lambda oks: st.tuples(st.just(oks), st.permutations(range(1, len(oks) + 1)),
                          st.lists(st.integers(0, len(oks)), max_size=8))))
def test_tracker_random_settle_order(case) -> None:
    oks, order, drain_points = case
    outcomes = {seq: ok for seq, ok in enumerate(oks, 1)}
    t = ConfirmTracker()
    for _ in oks:
        t.next_seq()
    confirmed: list[int] = []
    for i, seq in enumerate(order):
        t.settle(seq, outcomes[seq])
        if i in drain_points or t.pending and i % 3 == 0:
            frames = t.drain()
            apply_frames(frames, confirmed, outcomes)
            # whatever was emitted is exactly the settled contiguous prefix
            settled = set(order[:i + 1])
            prefix = 0
            while prefix + 1 in settled:
                prefix += 1
            assert confirmed == list(range(1, prefix + 1))
    apply_frames(t.drain(), confirmed, outcomes)
    assert confirmed == list(range(1, len(oks) + 1))
    assert not t.pending and t.drain() == []


@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_tracker_in_order_frames_are_minimal(oks) -> None:
    t = ConfirmTracker()
    for ok in oks:
        t.settle(t.next_seq(), ok)
    frames = t.drain()
    assert sum(not ack for _, _, ack in frames) == oks.count(False)
    # at most one ack frame per run of acks
    runs = sum(1 for i, ok in enumerate(oks) if ok and (i == 0 or not oks[i - 1]))
    assert sum(ack for _, _, ack in frames) == runs


# ------------------------------------------------------------------------------ on the wire
def confirm_client(make_client) -> Client:
    cl = make_client()
    cl.call(1, cmd.Confirm.Select())
    return cl


def test_select_ok_and_nowait(make_client) -> None:
    cl = make_client(channels=2)
    cl.call(1, cmd.Confirm.Select())
    cl.call(1, cmd.Confirm.Select())  # again: fine
    cl.send(2, cmd.Confirm.Select(nowait=True))
    cl.expect_nothing()
    cl.declare_queue(2, "q")
    cl.publish(2, "", "q", b"x")
    ack = cl.expect(cmd.Basic.Ack, 2)
    assert (ack.delivery_tag, ack.multiple) == (1, False)


def test_hundred_publishes_in_one_chunk_get_one_ack(make_client) -> None:
    cl = confirm_client(make_client)
    cl.declare_queue(1, "q")
    cl.send_raw(b"".join(cl.encode_publish(1, "", "q", b"%d" % i) for i in range(100)))
    ack = cl.expect(cmd.Basic.Ack, 1)
    assert (ack.delivery_tag, ack.multiple) == (100, True)
    cl.expect_nothing()
    cl.publish(1, "", "q", b"next")
    ack = cl.expect(cmd.Basic.Ack, 1)
    assert (ack.delivery_tag, ack.multiple) == (101, False)


def test_unroutable_mandatory_is_returned_before_its_ack(make_client) -> None:
    cl = confirm_client(make_client)
    cl.publish(1, "amq.direct", "nowhere", b"lost", cmd.Basic.Properties(message_id="m1"),
               mandatory=True)
    ret = cl.expect_message(cmd.Basic.Return, 1)
    assert (ret.method.reply_code, ret.method.reply_text) == (c.NO_ROUTE, "NO_ROUTE")
    assert (ret.method.exchange, ret.method.routing_key) == ("amq.direct", "nowhere")
    assert ret.body == b"lost" and ret.properties.message_id == "m1"
    ack = cl.expect(cmd.Basic.Ack, 1)
    assert ack.delivery_tag == 1
    cl.publish(1, "amq.direct", "nowhere", b"dropped")  # not mandatory: just acked
    assert cl.expect(cmd.Basic.Ack, 1).delivery_tag == 2
    cl.expect_nothing()


def test_reject_publish_overflow_nacks_only_that_message(make_client) -> None:
    cl = confirm_client(make_client)
    cl.declare_queue(1, "small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    cl.declare_queue(1, "big")
    cl.send_raw(b"".join(cl.encode_publish(1, "", q, b"x")
                         for q in ("small", "small", "small", "big", "big", "small")))
    frames = cl.methods()
    got = [(type(f).__name__, f.delivery_tag, f.multiple) for _, f in frames]
    assert got == [("Ack", 2, True), ("Nack", 3, False), ("Ack", 5, True), ("Nack", 6, False)]
    assert all(f.requeue is False for _, f in frames if isinstance(f, cmd.Basic.Nack))
    cl.call(1, cmd.Queue.Purge(queue="small"))
    cl.publish(1, "", "small", b"fits again")
    assert cl.expect(cmd.Basic.Ack, 1).delivery_tag == 7


def test_confirms_are_per_channel(make_client) -> None:
    cl = make_client(channels=2)
    cl.call(1, cmd.Confirm.Select())
    cl.call(2, cmd.Confirm.Select())
    cl.declare_queue(1, "q")
    cl.send_raw(cl.encode_publish(1, "", "q", b"a") + cl.encode_publish(2, "", "q", b"b")
                + cl.encode_publish(1, "", "q", b"c"))
    acks = {ch: (f.delivery_tag, f.multiple) for ch, f in cl.methods()}
    assert acks == {1: (2, True), 2: (1, False)}


def test_no_confirms_without_select(client) -> None:
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"x")
    client.expect_nothing()


def test_publish_split_over_chunks_is_confirmed_once_complete(make_client) -> None:
    cl = confirm_client(make_client)
    cl.declare_queue(1, "q")
    data = cl.encode_publish(1, "", "q", b"x" * 100)
    cl.send_raw(data[:30])
    cl.expect_nothing()
    cl.send_raw(data[30:])
    assert cl.expect(cmd.Basic.Ack, 1).delivery_tag == 1


def test_confirms_come_before_a_channel_close_in_the_same_chunk(make_client) -> None:
    """Publishes 1 and 2 are routed, then publish 3 names a missing exchange (404). The acks of 1
    and 2 may be sent or not, but nothing may follow our Channel.Close on that channel."""
    cl = confirm_client(make_client)
    cl.declare_queue(1, "q")
    cl.send_raw(cl.encode_publish(1, "", "q", b"1") + cl.encode_publish(1, "", "q", b"2")
                + cl.encode_publish(1, "missing", "q", b"3"))
    frames = [f for ch, f in cl.methods() if ch == 1]
    close_at = next(i for i, f in enumerate(frames) if isinstance(f, cmd.Channel.Close))
    assert frames[close_at].reply_code == c.NOT_FOUND
    assert frames[close_at + 1:] == [], f"frames after Channel.Close: {frames[close_at + 1:]}"
