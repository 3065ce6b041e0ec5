"""Unit tests of quorum queues' pure parts (issue 12) over a fake transport
(``cluster.tests.quorum_fake``): the machine's exactly-once commands, the outbox, forwarding to the
leader and re-forwarding after a leader change (the leader removing itself too), re-sending a
lost forward after ``RESEND_MS`` or at once to a leader named by a members notice, confirm
tokens, deliveries on the consumer's
member, settles, requeues with x-delivery-count, Down of a member, delivery-limit and dead
letters, suspended consumers, the in-sync members the leader computes and tells. No sockets, no real time."""

from __future__ import annotations

from cluster.quorum import config as qconfig
from cluster.quorum.group import RESEND_MS, decode_status, encode_status
from cluster.quorum.machine import (
    Applied,
    Cancelled,
    Gap,
    QuorumMachine,
    decode_envelope,
    down_envelope,
    envelope,
)
from cluster.quorum.members import DELETE
from cluster.quorum.outbox import Outbox
from cluster.raft import fifo as f
from cluster.tests.quorum_fake import FakeConsumer, Net, Waiter
from queues.errors import InvalidArgument


def enq(body: bytes, seq: int = 0) -> bytes:
    return f.encode(f.Enqueue("p", seq, None, b"\x00\x01q" + b"\x00" * 14, body, 0))


# ------------------------------------------------------------------ machine
def test_machine_applies_each_origin_seq_once_and_reports_gaps():
    m = QuorumMachine(f.FifoConfig())
    assert m.apply(1, envelope("a#1", 1, enq(b"x"))) == [Applied("a#1", 1)]
    assert m.apply(2, envelope("a#1", 1, enq(b"x"))) == [Applied("a#1", 1)]   # dup: dropped
    assert m.apply(3, envelope("a#1", 3, enq(b"z"))) == [Gap("a#1", 2)]
    assert m.apply(4, envelope("a#1", 2, enq(b"y"))) == [Applied("a#1", 2)]
    assert m.message_count == 2
    assert decode_envelope(envelope("a#1", 7, b"cmd")) == ("a#1", 7, 0, b"cmd")


def test_a_newer_incarnation_cancels_the_old_ones_consumers_and_mutes_them():
    m = QuorumMachine(f.FifoConfig())
    m.apply(1, envelope("a#1", 1, f.encode(f.Checkout("a#1/1", 10, 0))))
    effects = m.apply(2, envelope("b#1", 1, enq(b"x")))
    assert any(isinstance(e, f.Deliver) and e.consumer == "a#1/1" for e in effects)
    effects = m.apply(3, envelope("a#2", 1, f.encode(f.Checkout("a#2/1", 10, 0))))
    assert Cancelled("a#1/1") in effects
    assert any(isinstance(e, f.Deliver) and e.consumer == "a#2/1" and e.delivery_count == 1
               for e in effects)   # returned by the cancel, redelivered to the new consumer
    assert m.apply(4, envelope("a#1", 2, enq(b"late"))) == []   # the old incarnation is muted


def test_down_returns_a_members_messages_redelivered():
    m = QuorumMachine(f.FifoConfig())
    m.apply(1, envelope("a#1", 1, f.encode(f.Checkout("a#1/1", 10, 0))))
    m.apply(2, envelope("b#1", 1, enq(b"x")))
    assert m.message_count == 0
    effects = m.apply(3, down_envelope("a"))
    assert effects == [Cancelled("a#1/1")]
    assert m.message_count == 1 and m.fifo.head().delivery_count == 1
    copy = QuorumMachine(f.FifoConfig())
    copy.restore(m.snapshot())
    assert copy.snapshot() == m.snapshot()


def test_outbox_numbers_keeps_and_forgets():
    box = Outbox("a#1")
    assert [box.add(b"1"), box.add(b"2"), box.add(b"3")] == [1, 2, 3]
    assert len(box.take_unsent(5)) == 3 and box.take_unsent(6) == []
    assert box.applied_up_to(2) and not box.applied_up_to(1)
    assert [decode_envelope(e)[1] for e in box.all_pending(7)] == [3]
    assert box.stale(2007, 2000) and not box.stale(2006, 2000)


def test_config_refuses_other_types_arguments_and_chooses_groups_deterministically():
    for bad in ({"x-max-priority": 5}, {"x-queue-mode": "lazy"},
                {"x-overflow": "reject-publish-dlx"}, {"x-delivery-limit": "5"},
                {"x-dead-letter-strategy": "twice"}):
        try:
            qconfig.check_arguments(bad)
        except InvalidArgument:
            continue
        raise AssertionError(f"{bad} accepted")
    qconfig.check_arguments({"x-delivery-limit": 3, "x-max-length": 10})
    qconfig.check_arguments({"x-delivery-limit": -1})   # RabbitMQ 4.0: no limit
    view = ["n5", "n2", "n4", "n3", "n6"]
    group = qconfig.choose_members(view, 3, "/", "orders")
    assert len(group) == 3 and group == qconfig.choose_members(reversed(view), 3, "/", "orders")
    assert qconfig.choose_members(["n2"], 3, "/", "q") == ("n2",)
    assert qconfig.group_id("/", "q", group, 1) != qconfig.group_id("/", "q", group, 2)


# ------------------------------------------------------------------ groups over the fake network
def started(seed: int = 1, config: f.FifoConfig | None = None) -> Net:
    net = Net(seed=seed, config=config)
    net.run_until(lambda: net.leader() is not None)
    return net


def test_a_publish_on_a_follower_is_forwarded_and_confirmed_once_applied_there():
    net = started()
    leader = net.leader()
    follower = next(m for m in net.members.values() if m is not leader)
    waiter = Waiter()
    token = follower.publish("hello")
    follower.queue.watch(waiter)
    assert waiter.safe < token
    net.run_until(lambda: waiter.safe >= token, 1000)
    for m in net.members.values():
        net.run_until(lambda m=m: m.queue.message_count == 1, 500)


def test_re_forwarding_after_the_leader_dies_loses_nothing_and_duplicates_nothing():
    net = started(seed=3)
    leader = net.leader()
    follower = next(m for m in net.members.values() if m is not leader)
    waiter = Waiter()
    tokens = [follower.publish(f"m{i}") for i in range(20)]
    follower.queue.watch(waiter)
    follower.queue.dispatch()   # the Forward to the leader is in flight
    batch, net.inflight = net.inflight, []
    for frm, _to, (kind, payload) in batch:   # the leader gets it and appends, then dies
        if kind == "fwd":
            leader.run(leader.group.forwarded(frm, payload))
    net.kill(leader.name)       # its unsynced appends and AppendEntries are lost
    net.run_until(lambda: waiter.safe >= tokens[-1], 5000)
    new_leader = net.leader()
    assert new_leader is not None and new_leader is not leader
    consumer = FakeConsumer()
    follower.queue.add_consumer(consumer)
    net.woken.add(follower.name)
    net.run_until(lambda: len(consumer.got) >= 20, 2000)
    net.advance(10, 20)
    bodies = [e.message.body.decode() for e in consumer.got]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(20))   # each exactly once


def test_lossy_links_gaps_are_re_sent_and_every_confirmed_message_is_there():
    net = started(seed=5)
    net.loss = 0.2
    follower = next(m for m in net.members.values() if not m.group.is_leader)
    waiter = Waiter()
    tokens = [follower.publish(f"m{i}") for i in range(50)]
    follower.queue.watch(waiter)
    net.run_until(lambda: waiter.safe >= tokens[-1], 20000)
    net.loss = 0.0
    net.advance(10, 50)
    leader = net.leader()
    assert leader is not None
    bodies = sorted(m.body.decode() for m in leader.group.machine.fifo.ready_messages())
    assert bodies == sorted(f"m{i}" for i in range(50))


def _lose_forwards(net: Net) -> None:
    net.inflight = [m for m in net.inflight if m[2][0] != "fwd"]


def _ready(member) -> list[str]:
    return sorted(m.body.decode() for m in member.group.machine.fifo.ready_messages())


def test_a_lost_forward_is_sent_again_after_resend_ms_when_nothing_else_happens():
    # issue 12: the queue sent its commands stamped with the wall clock, the re-send timer ran
    # on the Raft (monotonic) clock: a lost forward followed by nothing was never sent again
    net = started(seed=9)
    follower = next(m for m in net.members.values() if not m.group.is_leader)
    outside = net.add_remote("d")
    waiters = {m.name: Waiter() for m in (follower, outside)}
    tokens = {m.name: m.publish(f"from {m.name}") for m in (follower, outside)}
    for m in (follower, outside):
        m.queue.watch(waiters[m.name])
        m.queue.dispatch()
    _lose_forwards(net)
    net.run_until(lambda: all(waiters[n].safe >= t for n, t in tokens.items()), 3 * RESEND_MS)
    net.advance(10, 20)
    assert _ready(net.leader()) == sorted(f"from {n}" for n in tokens)   # each once


def test_a_broker_outside_the_group_told_of_a_new_leader_re_sends_to_it_at_once():
    net = started(seed=13)
    outside = net.add_remote("d")
    waiter = Waiter()
    token = outside.publish("x")
    outside.queue.watch(waiter)
    outside.queue.dispatch()
    _lose_forwards(net)
    leader = net.leader()
    assert leader is not None
    members = leader.group.members
    outside.run(outside.group.told(leader.name, members, net.now))   # its members notice
    net.run_until(lambda: waiter.safe >= token, RESEND_MS // 2)   # not the re-send timer
    assert outside.group.told(leader.name, members, net.now) == []   # the same one: no re-send
    assert _ready(leader) == ["x"]


def test_the_leader_removing_itself_under_publishers_confirms_every_publish_once():
    # Raft thesis §4.2.2: the removed leader steps down once its removal is committed; §6.3:
    # commands lost with the change are retried and applied once (per-origin seqs). Publishers
    # on a follower and on the old leader, which then serves the queue from outside the group
    net = started(seed=11)
    old = net.leader()
    assert old is not None
    follower = next(m for m in net.members.values() if m is not old)
    w_old, w_follower = Waiter(), Waiter()
    for i in range(5):           # proposed by the old leader after its own removal entry
        old.publish(f"o{i}")
    follower.publish("f0")
    old.queue.watch(w_old)
    follower.queue.watch(w_follower)
    reason, actions = old.group.change(DELETE, old.name)
    assert reason is None
    old.run(actions)
    follower.queue.dispatch()
    _lose_forwards(net)          # the follower's forward to the old leader is lost
    net.run_until(lambda: net.leader() not in (None, old))
    new = net.leader()
    assert new is not None and old.name not in new.group.members
    outside = net.leave(old.name)
    more = [follower.publish(f"f{i}") for i in range(1, 10)]
    later = [outside.publish(f"p{i}") for i in range(5)]
    follower.queue.dispatch()
    outside.queue.dispatch()
    _lose_forwards(net)          # and the first forwards to the new leader too
    net.run_until(lambda: w_follower.safe >= more[-1] and w_old.safe >= later[-1],
                  5 * RESEND_MS)
    assert not w_old.failed and not w_follower.failed
    net.advance(10, 50)
    expected = sorted([f"o{i}" for i in range(5)] + [f"f{i}" for i in range(10)] +
                      [f"p{i}" for i in range(5)])
    for name in new.group.members:
        assert _ready(net.members[name]) == expected   # every publish, each once


def test_consumer_on_another_member_gets_acks_and_requeues_with_delivery_count():
    net = started(seed=7)
    names = list(net.members)
    pub, sub = net.members[names[0]], net.members[names[1]]
    consumer = FakeConsumer(prefetch=10)
    sub.queue.add_consumer(consumer)
    net.woken.add(sub.name)
    for i in range(3):
        pub.publish(f"m{i}")
    net.run_until(lambda: len(consumer.got) == 3, 2000)
    first = consumer.got[0]
    assert not first.redelivered
    sub.queue.requeue_many([first])
    sub.queue.ack_many(consumer.got[1:3])
    net.run_until(lambda: len(consumer.got) == 4, 2000)
    again = consumer.got[3]
    assert again.redelivered and again.message.headers["x-delivery-count"] == 1
    sub.queue.ack(again)
    net.run_until(lambda: all(m.queue.message_count == 0 and not
                              m.group.machine.fifo.consumers[next(iter(
                                  m.group.machine.fifo.consumers))].out
                              for m in net.members.values()), 2000)


def test_a_member_leaving_the_view_has_its_messages_redelivered_elsewhere():
    net = started(seed=9)
    names = list(net.members)
    leader = net.leader()
    assert leader is not None
    others = [n for n in names if n != leader.name]
    holder, other = net.members[others[0]], net.members[others[1]]
    held = FakeConsumer(prefetch=5)
    holder.queue.add_consumer(held)
    net.woken.add(holder.name)
    for i in range(5):
        leader.publish(f"m{i}")
    net.run_until(lambda: len(held.got) == 5, 2000)
    second = FakeConsumer(prefetch=5)
    other.queue.add_consumer(second)
    net.woken.add(other.name)
    net.kill(holder.name)
    net.run_until(lambda: len(second.got) == 5, 3000)
    assert all(e.redelivered for e in second.got)


def test_delivery_limit_dead_letters_on_the_leader_only():
    net = started(seed=11, config=f.FifoConfig(delivery_limit=1))
    leader = net.leader()
    assert leader is not None
    consumer = FakeConsumer(prefetch=1)
    leader.queue.add_consumer(consumer)
    net.woken.add(leader.name)
    leader.publish("poison")
    for n in range(2):
        net.run_until(lambda n=n: len(consumer.got) == n + 1, 2000)
        leader.queue.requeue_many([consumer.got[-1]])
    net.run_until(lambda: len(leader.dead_letters) == 1, 2000)
    net.advance(10, 20)
    assert leader.dead_letters[0][1] == "delivery_limit"
    assert sum(len(m.dead_letters) for m in net.members.values()) == 1


def test_cancel_with_unsettled_deliveries_suspends_then_cancels():
    net = started(seed=13)
    leader = net.leader()
    assert leader is not None
    consumer = FakeConsumer(prefetch=2)
    leader.queue.add_consumer(consumer)
    net.woken.add(leader.name)
    for i in range(4):
        leader.publish(f"m{i}")
    net.run_until(lambda: len(consumer.got) == 2, 2000)
    assert leader.queue.remove_consumer(consumer)
    net.advance(10, 10)
    cid = consumer.got[0].cid
    assert leader.group.machine.fifo.consumers[cid].prefetch == -1   # suspended, still holds 2
    leader.queue.ack_many(consumer.got)
    net.run_until(lambda: cid not in leader.group.machine.fifo.consumers, 2000)
    assert leader.queue.message_count == 2 and len(consumer.got) == 2


def test_a_restarted_member_catches_up_from_the_log():
    net = started(seed=15)
    leader = net.leader()
    assert leader is not None
    follower = next(m for m in net.members.values() if m is not leader)
    net.kill(follower.name)
    for i in range(10):
        leader.publish(f"m{i}")
    net.run_until(lambda: leader.queue.message_count == 10, 2000)
    back = net.restart(follower.name, incarnation=2)
    net.run_until(lambda: back.queue.message_count == 10, 3000)


def test_reject_publish_overflow_nacks_the_refused_publishes():
    net = started(seed=17, config=f.FifoConfig(max_length=2, overflow="reject-publish"))
    follower = next(m for m in net.members.values() if not m.group.is_leader)
    waiter = Waiter()
    tokens = [follower.publish(f"m{i}") for i in range(4)]
    follower.queue.watch(waiter)
    net.run_until(lambda: waiter.safe >= tokens[-1], 2000)
    assert waiter.failed == set(tokens[2:])
    assert follower.queue.message_count == 2


class Answers:
    """What ``get_then`` answered: (body or None, remaining), and the entries, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes | None, int]] = []
        self.entries: list = []

    def __call__(self, entry, remaining: int) -> None:
        self.got.append((None if entry is None else entry.message.body, remaining))
        if entry is not None:
            self.entries.append(entry)


def test_basic_get_is_answered_when_its_dequeue_is_applied_and_settles_like_a_delivery():
    net = started(seed=19, config=f.FifoConfig(delivery_limit=20))   # requeues to the head
    names = list(net.members)
    pub, getter = net.members[names[0]], net.members[names[1]]
    for i in range(3):
        pub.publish(f"m{i}")
    net.run_until(lambda: getter.queue.message_count == 3, 2000)
    answers = Answers()
    getter.queue.get_then(False, answers)
    getter.queue.get_then(True, answers)
    assert answers.got == []   # not before the log has applied them
    net.run_until(lambda: len(answers.got) == 2, 2000)
    assert answers.got == [(b"m0", 2), (b"m1", 1)]
    net.run_until(lambda: all(m.queue.message_count == 1 for m in net.members.values()), 2000)
    getter.queue.requeue_many([answers.entries[0]])
    getter.queue.get_then(False, answers)   # right after the requeue: it sees m0 again
    net.run_until(lambda: len(answers.got) == 3, 2000)
    again = answers.entries[-1]
    assert answers.got[-1] == (b"m0", 1) and again.redelivered
    getter.queue.ack(again)
    getter.queue.get_then(True, answers)
    getter.queue.get_then(True, answers)
    net.run_until(lambda: len(answers.got) == 5, 2000)
    assert answers.got[3:] == [(b"m2", 0), (None, 0)]   # then Get-Empty
    net.run_until(lambda: all(m.queue.message_count == 0 for m in net.members.values()), 2000)


def test_basic_gets_on_two_members_at_once_never_hand_out_one_message_twice():
    net = started(seed=23)
    names = list(net.members)
    for i in range(6):
        net.members[names[0]].publish(f"m{i}")
    net.run_until(lambda: all(m.queue.message_count == 6 for m in net.members.values()), 2000)
    answers = {n: Answers() for n in names}
    for _ in range(3):   # every member asks before any Dequeue is applied
        for n in names:
            net.members[n].queue.get_then(True, answers[n])
    net.run_until(lambda: all(len(a.got) == 3 for a in answers.values()), 3000)
    bodies = [b for a in answers.values() for b, _ in a.got]
    got = sorted(b for b in bodies if b is not None)
    assert got == [f"m{i}".encode() for i in range(6)]   # each once, none twice
    assert bodies.count(None) == 3


def test_a_get_pending_when_its_queue_is_deleted_is_answered_empty():
    net = started(seed=29)
    member = net.members[list(net.members)[0]]
    answers = Answers()
    member.queue.get_then(False, answers)
    member.queue.delete()
    assert answers.got == [(None, 0)]   # Get-Empty at once, never a hung client


def test_the_dequeue_command_round_trips_and_old_logs_take_still_decode():
    assert f.decode(f.encode(f.Dequeue("a#1/get", True, 42))) == f.Dequeue("a#1/get", True, 42)
    assert f.decode(f.encode(f.Take("a#1/get", 7))) == f.Take("a#1/get", 7)


def test_a_broker_outside_the_group_forwards_and_hears_its_confirms():
    net = started(seed=21)
    outside = net.add_remote("d")
    waiter = Waiter()
    tokens = [outside.publish(f"m{i}") for i in range(10)]
    outside.queue.watch(waiter)
    net.run_until(lambda: waiter.safe >= tokens[-1], 3000)
    leader = net.leader()
    assert leader is not None
    net.kill(leader.name)   # the next ones reach the new leader after a re-send
    more = [outside.publish(f"n{i}") for i in range(10)]
    net.run_until(lambda: waiter.safe >= more[-1], 10000)
    survivor = net.leader()
    assert survivor is not None
    bodies = sorted(m.body.decode() for m in survivor.group.machine.fifo.ready_messages())
    assert bodies == sorted([f"m{i}" for i in range(10)] + [f"n{i}" for i in range(10)])


def test_no_down_before_the_cluster_view_is_known():
    net = started(seed=23)
    leader = net.leader()
    assert leader is not None
    other = next(m for m in net.members.values() if m is not leader)
    other.queue.add_consumer(FakeConsumer())
    net.woken.add(other.name)
    net.advance(10, 10)
    assert leader.group.leader_duties(net.now, net.now, None) == []   # view unknown: no Down
    assert leader.group.leader_duties(net.now, net.now, {leader.name}) != []


def test_in_sync_members_shrink_when_one_falls_behind_and_grow_back_after_catching_up():
    assert decode_status(encode_status(7, ("a", "c"))) == (7, ("a", "c"))
    net = started(seed=25)
    leader = net.leader()
    assert leader is not None
    everyone = tuple(sorted(net.names))
    net.run_until(lambda: all(m.group.in_sync == everyone for m in net.members.values()), 3000)
    follower = next(m for m in net.members.values() if m is not leader)
    net.kill(follower.name)
    leader.publish("m0")   # the commit index moves on without it
    rest = tuple(n for n in everyone if n != follower.name)
    net.run_until(lambda: all(m.group.in_sync == rest for n, m in net.members.items()
                              if n != follower.name), 3000)
    for i in range(20):
        leader.publish(f"n{i}")
    back = net.restart(follower.name, incarnation=2)
    assert back.group.in_sync is None   # not told yet in this term
    net.run_until(lambda: all(m.group.in_sync == everyone for m in net.members.values()), 5000)
    assert back.queue.message_count == 21


def test_the_leader_times_an_entry_from_proposal_to_application():
    """``commit_latency_ms`` (Prometheus' rabbitmq_raft_entry_commit_latency_seconds, as Ra's
    commit_latency): an entry proposed while the followers are cut off for 200 ms is applied
    200 ms or more after it was proposed."""
    net = started()
    leader = net.leader()
    assert leader is not None and leader.group.commit_latency_ms == 0
    others = [n for n in net.names if n != leader.name]
    net.cut = {frozenset((leader.name, n)) for n in others}
    waiter = Waiter()
    token = leader.publish("slow")
    leader.queue.watch(waiter)
    leader.queue.dispatch()
    net.advance(10, 20)
    assert waiter.safe < token
    net.cut = set()
    net.run_until(lambda: waiter.safe >= token, 2000)
    assert 200 <= leader.group.commit_latency_ms <= 2000
    leader = net.leader()   # the cut may have moved the leadership
    assert leader is not None
    waiter = Waiter()
    token = leader.publish("fast")   # a new probe: the next entry is timed again
    leader.queue.watch(waiter)
    net.run_until(lambda: waiter.safe >= token, 2000)
    assert leader.group.commit_latency_ms < 200
