"""The quorum queue state machine's RabbitMQ 4.0 rules (issue 25), pure: two priorities favoured
2:1, the order requeued messages come back in, the delivery limit, per-message TTL, at-least-once
dead letters held until settled, and the snapshot format (version 2 reads version 1).
Sources: RabbitMQ "Quorum Queues" 4.0 (priorities, poison message handling, repeated requeues,
at-least-once dead-lettering); ``rabbit_fifo`` / ``rabbit_fifo_q`` 4.0."""

from __future__ import annotations

import json
import random

from cluster.quorum import config as qconfig
from cluster.raft import fifo as f
from cluster.tests.test_raft_fifo import Q, assert_replicas_agree
from queues.arguments import parse_arguments


def pub(seq: int, body: bytes, *, high: bool = False, ttl: int = -1, now: int = 0) -> f.Enqueue:
    return f.Enqueue("p", seq, None, b"h", body, now, high, ttl)


def bodies(effects: list[f.Effect]) -> list[bytes]:
    return [e.body for e in effects if isinstance(e, f.Deliver)]


def test_high_priority_is_favoured_two_to_one_and_an_older_high_one_goes_first() -> None:
    q = Q()
    for i in range(3):
        q(pub(i + 1, b"n%d" % i))
    for i in range(6):
        q(pub(i + 4, b"h%d" % i, high=True))
    assert bodies(q(f.Checkout("c", 0, 0))) == [b"h0", b"h1", b"n0", b"h2", b"h3", b"n1",
                                                 b"h4", b"h5", b"n2"]
    older = Q()
    for i in range(3):
        older(pub(i + 1, b"h%d" % i, high=True))
    older(pub(4, b"n0"))
    # the normal one's turn comes at the third, but the high one is older: it goes first
    assert bodies(older(f.Checkout("c", 0, 0))) == [b"h0", b"h1", b"h2", b"n0"]


def test_requeued_messages_come_back_first_in_the_order_they_were_returned() -> None:
    q = Q(delivery_limit=20)
    for i in range(3):
        q(pub(i + 1, b"m%d" % i))
    assert bodies(q(f.Checkout("c", 2, 0))) == [b"m0", b"m1"]
    q(f.Checkout("c", -1, 0))   # suspended: both come back before anything is delivered
    q(f.Return("c", (2,)))
    q(f.Return("c", (1,)))
    assert bodies(q(f.Checkout("c", 3, 0))) == [b"m1", b"m0", b"m2"]


def test_without_a_delivery_limit_a_requeue_goes_to_the_back_but_a_cancel_to_the_front() -> None:
    q = Q(delivery_limit=None)
    for i in range(3):
        q(pub(i + 1, b"m%d" % i))
    assert bodies(q(f.Checkout("c", 1, 0))) == [b"m0"]
    assert bodies(q(f.Return("c", (1,)))) == [b"m1"]   # m0 went behind m2
    assert bodies(q(f.Cancel("c", 0))) == []
    assert [m.body for m in q.q.ready_messages()] == [b"m1", b"m2", b"m0"]   # m1 first again


def test_the_delivery_limit_counts_every_return_and_zero_allows_none() -> None:
    q = Q(delivery_limit=0)
    q(pub(1, b"m"))
    q(f.Checkout("c", 0, 0))
    assert q(f.Return("c", (1,))) == [f.DeadLetter("delivery_limit", b"h", b"m", 1)]
    two = Q(delivery_limit=1)
    two(pub(1, b"m"))
    two(f.Checkout("c", 0, 0))
    assert bodies(two(f.Cancel("c", 0))) == []           # a cancel counts (count 1)
    eff = two(f.Checkout("d", 0, 0))
    assert [e.delivery_count for e in eff if isinstance(e, f.Deliver)] == [1]
    assert two(f.Return("d", (1,))) == [f.DeadLetter("delivery_limit", b"h", b"m", 2)]


def test_per_message_ttl_the_lower_wins_and_only_the_head_expires() -> None:
    q = Q(message_ttl_ms=100)
    q(pub(1, b"own50", ttl=50, now=0))      # its own 50 < the queue's 100
    q(pub(2, b"queue100", ttl=500, now=0))  # the queue's 100 < its own 500
    assert q(f.Expire(60)) == [f.DeadLetter("expired", b"h", b"own50", 0)]
    assert q(f.Expire(99)) == []
    assert q(f.Expire(100)) == [f.DeadLetter("expired", b"h", b"queue100", 0)]
    head = Q()
    head(pub(1, b"forever", now=0))
    head(pub(2, b"short", ttl=10, now=0))
    assert head(f.Expire(1000)) == []        # behind a message without TTL: not at the head
    eff = head(f.Dequeue("g", True, 1000))   # the head leaves; the next command expires it
    assert [e.body for e in eff if isinstance(e, f.Dequeued)] == [b"forever"]
    assert head(f.Expire(1000)) == [f.DeadLetter("expired", b"h", b"short", 0)]


def test_ttl_zero_is_delivered_only_within_the_millisecond_it_came() -> None:
    q = Q()
    q(f.Checkout("c", 0, 0))
    assert bodies(q(pub(1, b"now", ttl=0, now=5))) == [b"now"]
    idle = Q()
    idle(pub(1, b"late", ttl=0, now=5))
    assert idle(f.Expire(5)) == []
    assert idle(f.Expire(6)) == [f.DeadLetter("expired", b"h", b"late", 0)]


def test_at_least_once_dead_letters_stay_and_count_until_settled() -> None:
    q = Q(max_length=2, overflow="reject-publish", dlx_at_least_once=True)
    q(pub(1, b"a"))
    q(f.Checkout("c", 0, 0))
    assert q(f.Discard("c", (1,))) == [f.DeadLetter("rejected", b"h", b"a", 0, 1)]
    assert q.q.message_count() == 0 and list(q.q.dlx) == [1]
    q(f.Checkout("c", -1, 0))   # suspended: b stays ready
    q(pub(2, b"b"))
    assert q(pub(3, b"c")) == [f.Rejected("p", 3)]   # one held + one ready = max-length
    q(f.DlxSettle((1, 99)))                            # 99: unknown, ignored
    assert not q.q.dlx and q(pub(4, b"d")) == [f.Confirm("p", 4)]


def test_commands_round_trip_and_a_plain_publish_keeps_the_old_encoding() -> None:
    for cmd in (pub(1, b"x", high=True), pub(2, b"y", ttl=0), pub(3, b"z", high=True, ttl=9),
                f.DlxSettle((1, 2, 3))):
        assert f.decode(f.encode(cmd)) == cmd
    plain = f.encode(pub(4, b"w"))
    assert plain[0] == 1 and f.decode(plain) == pub(4, b"w")


def test_a_version_one_snapshot_loads_as_normal_messages() -> None:
    q = Q()
    q(pub(1, b"a"))
    snap = json.loads(q.q.snapshot())
    old = {k: snap[k] for k in ("ready", "consumers", "dedup", "rr")}   # format 1's keys
    r = Q()
    r.q.restore(json.dumps(old).encode())
    assert [m.body for m in r.q.ready_messages()] == [b"a"] and r.q.message_count() == 1
    assert json.loads(r.q.snapshot())["v"] == f.SNAPSHOT_VERSION


def test_replicas_agree_and_snapshots_restore_with_priorities_ttl_and_held_dead_letters() -> None:
    rng = random.Random(25)
    cmds: list[f.Command] = []
    for i in range(500):
        k = rng.random()
        if k < 0.45:
            cmds.append(pub(i, b"%d" % i, high=rng.random() < 0.4,
                            ttl=rng.choice([-1, -1, 0, 30, 300]), now=i))
        elif k < 0.55:
            cmds.append(f.Checkout(rng.choice("abc"), rng.randint(-1, 3), i))
        elif k < 0.6:
            cmds.append(f.Cancel(rng.choice("abc"), i))
        elif k < 0.65:
            cmds.append(f.DlxSettle(tuple(rng.sample(range(1, i + 2), 2))))
        else:
            ids = tuple(rng.sample(range(1, i + 1), min(i, 3))) if i else ()
            consumer = rng.choice("abc")
            cmds.append(rng.choice([f.Settle(consumer, ids), f.Discard(consumer, ids),
                                    f.Return(consumer, ids, i)]))
    for limit in (3, None):
        assert_replicas_agree(cmds, max_length=40, overflow="reject-publish",
                              delivery_limit=limit, message_ttl_ms=200, dlx_at_least_once=True)


def test_the_declaration_gives_rabbitmq_4_defaults_and_strategy_fallbacks() -> None:
    plain = parse_arguments({"x-queue-type": "quorum"})
    assert qconfig.fifo_config(plain, {}).delivery_limit == 20
    assert qconfig.fifo_config(plain, {"x-delivery-limit": -1}).delivery_limit is None
    assert qconfig.fifo_config(plain, {"x-delivery-limit": 0}).delivery_limit == 0
    args = {"x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once"}
    on, warning = qconfig.dead_letter_strategy(
        parse_arguments({**args, "x-overflow": "reject-publish"}), args)
    assert on and warning is None
    on, warning = qconfig.dead_letter_strategy(parse_arguments(args), args, "queue 'q'")
    assert not on and warning is not None and warning.startswith(
        "Falling back to dead-letter-strategy at-most-once for queue 'q' because")
    no_dlx = {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    on, warning = qconfig.dead_letter_strategy(parse_arguments(no_dlx), no_dlx)
    assert not on and warning is not None and warning.startswith("Disabling dead-lettering")
