"""The replicated queue's state machine (``cluster.raft.fifo``): pure, deterministic."""

from __future__ import annotations

import itertools
import random

from cluster.raft import fifo as f


class Q:
    """A FifoQueue fed through the byte encoding, with Raft-like increasing indexes."""

    def __init__(self, **cfg: object) -> None:
        self.q = f.FifoQueue(f.FifoConfig(**cfg))  # type: ignore[arg-type]
        self.index = itertools.count(1)

    def __call__(self, cmd: f.Command) -> list[f.Effect]:
        return self.q.apply(next(self.index), f.encode(cmd))


def pub(seq: int, body: bytes = b"x", now: int = 0, key: str | None = None) -> f.Enqueue:
    return f.Enqueue("p", seq, key, b"h", body, now)


def test_commands_round_trip_through_bytes() -> None:
    for cmd in (pub(1, b"\x00\xff"), f.Checkout("c", 5, 1), f.Cancel("c", 2),
                f.Settle("c", (1, 2)), f.Return("c", (3,), 4), f.Discard("c", ()), f.Expire(9),
                f.Purge()):
        assert f.decode(f.encode(cmd)) == cmd


def test_enqueue_confirms_and_delivers_in_order_within_prefetch() -> None:
    q = Q()
    assert q(pub(1)) == [f.Confirm("p", 1)]
    q(pub(2))
    q(pub(3))
    eff = q(f.Checkout("c", 2, 0))
    assert [e.msg_id for e in eff if isinstance(e, f.Deliver)] == [1, 2]
    eff = q(f.Settle("c", (1,)))
    assert [e.msg_id for e in eff if isinstance(e, f.Deliver)] == [3]


def test_return_redelivers_with_count_and_delivery_limit_dead_letters() -> None:
    q = Q(delivery_limit=2)
    q(pub(1))
    first = q(f.Checkout("c", 1, 0))
    assert first[0] == f.Deliver("c", 1, b"h", b"x", 0)
    again = q(f.Return("c", (1,)))
    assert again == [f.Deliver("c", 1, b"h", b"x", 1)]      # x-delivery-count 1
    assert q(f.Return("c", (1,))) == [f.Deliver("c", 1, b"h", b"x", 2)]
    assert q(f.Return("c", (1,))) == [f.DeadLetter("delivery_limit", b"h", b"x", 3)]


def test_discard_dead_letters_and_cancel_requeues() -> None:
    q = Q()
    q(pub(1))
    q(pub(2))
    q(f.Checkout("a", 0, 0))
    assert q(f.Discard("a", (1,))) == [f.DeadLetter("rejected", b"h", b"x", 0)]
    eff = q(f.Cancel("a", 0))
    assert eff == [] and q.q.message_count() == 1 and q.q.head().delivery_count == 1


def test_max_length_drop_head_and_reject_publish() -> None:
    q = Q(max_length=2)
    q(pub(1, b"a"))
    q(pub(2, b"b"))
    eff = q(pub(3, b"c"))
    assert f.DeadLetter("maxlen", b"h", b"a", 0) in eff and f.Confirm("p", 3) in eff
    r = Q(max_length_bytes=3, overflow="reject-publish")
    r(pub(1, b"ab"))
    assert r(pub(2, b"cd")) == [f.Rejected("p", 2)]
    assert r.q.message_count() == 1


def test_ttl_expires_from_the_clock_in_commands() -> None:
    q = Q(message_ttl_ms=100)
    q(pub(1, now=0))
    q(pub(2, now=50))
    assert q(f.Expire(120)) == [f.DeadLetter("expired", b"h", b"x", 0)]
    assert q.q.message_count() == 1


def test_dedup_window_confirms_duplicates_without_enqueueing() -> None:
    q = Q(dedup_window=2)
    q(pub(1, key="a"))
    assert q(pub(2, key="a")) == [f.Confirm("p", 2)] and q.q.message_count() == 1
    q(pub(3, key="b"))
    q(pub(4, key="c"))        # "a" falls out of the window
    q(pub(5, key="a"))
    assert q.q.message_count() == 4


def test_single_active_consumer_gets_everything_until_it_goes() -> None:
    q = Q(single_active_consumer=True)
    q(f.Checkout("a", 0, 0))
    q(f.Checkout("b", 0, 0))
    eff = q(pub(1)) + q(pub(2))
    assert {e.consumer for e in eff if isinstance(e, f.Deliver)} == {"a"}
    eff = q(f.Cancel("a", 0))
    assert {e.consumer for e in eff if isinstance(e, f.Deliver)} == {"b"}


def test_replicas_applying_the_same_commands_agree_and_snapshots_restore() -> None:
    rng = random.Random(3)
    cmds: list[f.Command] = []
    for i in range(400):
        k = rng.random()
        if k < 0.5:
            cmds.append(pub(i, b"%d" % i, now=i, key=rng.choice([None, str(rng.randint(0, 50))])))
        elif k < 0.6:
            cmds.append(f.Checkout(rng.choice("abc"), rng.randint(0, 3), i))
        elif k < 0.7:
            cmds.append(f.Cancel(rng.choice("abc"), i))
        else:
            ids = tuple(rng.sample(range(1, i + 1), min(i, 3))) if i else ()
            consumer = rng.choice("abc")
            cmds.append(rng.choice([f.Settle(consumer, ids), f.Discard(consumer, ids),
                                    f.Return(consumer, ids, i)]))
    assert_replicas_agree(cmds, max_length=30, delivery_limit=3, message_ttl_ms=200,
                          dedup_window=20, single_active_consumer=False)


def assert_replicas_agree(cmds: list[f.Command], **cfg: object) -> None:
    """Two replicas applying ``cmds`` agree, and a third restored from a snapshot taken
    halfway makes the same effects and reaches the same state."""
    one, two = Q(**cfg), Q(**cfg)
    effects_one = [one(c) for c in cmds]
    half = len(cmds) // 2
    for c in cmds[:half]:
        two(c)
    three = Q(**cfg)
    three.q.restore(two.q.snapshot())
    three.index = itertools.count(half + 1)
    effects_three = [three(c) for c in cmds[half:]]
    assert effects_three == effects_one[half:]
    assert three.q.snapshot() == one.q.snapshot()
