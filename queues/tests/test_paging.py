"""Paging (issue 4, "Larger than RAM"): a queue with ``page_in`` and ``memory_budget`` keeps at most
its budget of stored bodies in RAM, reads the rest back as consumers reach them, and behaves exactly
like an unpaged queue otherwise (order, redelivered flags, acks, requeues, dead-lettering, TTL,
purge/delete, recovery of unloaded messages). ``FakeStore`` stands in for the message store."""

from __future__ import annotations

import random

import pytest
from pamqp import commands

from queues import Message, Queue, parse_arguments
from queues.paged_list import CHUNK, PagedReadyList
from queues.tests.fakes import DeadLetters, FakeClock, FakeConsumer
from queues.tests.queue_factory import bodies

Props = commands.Basic.Properties


class FakeStore:
    """Stored messages by store id; ``load`` is the queue's ``page_in`` (a fresh copy each read,
    as the real store returns); ``reads`` counts them; ``lost`` ids read back as None."""

    def __init__(self) -> None:
        self.messages: dict[int, Message] = {}
        self.next_id = 1
        self.reads = 0
        self.lost: set[int] = set()

    def persist(self, msg: Message) -> Message:
        msg.store_id = self.next_id
        self.messages[self.next_id] = msg
        self.next_id += 1
        return msg

    def load(self, sid: int) -> Message | None:
        self.reads += 1
        if sid in self.lost:
            return None
        m = self.messages[sid]
        out = Message(m.exchange, m.routing_key, m.header_payload, m.body)
        out.store_id = sid
        return out


def stored(store: FakeStore, body: bytes, props: Props | None = None) -> Message:
    return store.persist(Message.build("", "q", body, props or Props(delivery_mode=2)))


def paged_queue(store: FakeStore, budget: int, args=None, **kw) -> Queue:
    return Queue("q", parse_arguments(args), clock=kw.pop("clock", FakeClock()),
                 wall_clock=lambda: 1_700_000_000.0, arguments=args, page_in=store.load,
                 memory_budget=budget, **kw)


def body(i: int) -> bytes:
    return b"%05d" % i  # 5 bytes each


def test_bodies_beyond_the_budget_are_not_in_ram_and_come_back_in_order() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=20)
    for i in range(100):
        q.publish(stored(store, body(i)))
    assert q.paging and q.message_count == 100 and q.message_bytes == 500
    count, nbytes = q.in_memory()
    assert count == 4 and nbytes == 20  # the window: 4 bodies of 5 bytes
    assert q._ready.paged_count == 96
    assert store.reads == 0
    c = FakeConsumer("c", no_ack=True)
    q.add_consumer(c)
    assert c.bodies() == [body(i) for i in range(100)]
    assert q.message_count == 0 and q.message_bytes == 0 and q.in_memory() == (0, 0)
    assert store.reads == 96  # every paged body read back exactly once


def test_page_in_is_batched_and_capped_by_the_budget() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=12)
    for i in range(50):
        q.publish(stored(store, body(i)))
    assert q.get(no_ack=True).message.body == body(0)
    assert q.get(no_ack=True).message.body == body(1)
    assert store.reads == 0  # still the window
    assert q.get(no_ack=True).message.body == body(2)  # window empty: one batch of 3 (>= 12 B)
    assert store.reads == 3 and q.in_memory() == (2, 10)


def test_budget_zero_keeps_only_what_is_being_delivered() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=0)
    for i in range(10):
        q.publish(stored(store, body(i)))
    assert q.in_memory() == (0, 0) and q.message_count == 10
    assert [q.get(no_ack=True).message.body for _ in range(10)] == [body(i) for i in range(10)]
    assert q.get(no_ack=True) is None


def test_transient_messages_behind_paged_ones_are_held_in_order() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=10)
    for i in range(6):
        msg = stored(store, body(i)) if i % 2 else Message.build("", "q", body(i))
        q.publish(msg)
    count, nbytes = q.in_memory()
    assert nbytes == 10 + 10  # window (0, 1) + the held transient messages 2 and 4
    assert bodies(q.ready_entries()) == [body(i) for i in range(6)]
    assert [q.get(no_ack=True).message.body for _ in range(6)] == [body(i) for i in range(6)]


def test_ack_requeue_and_reject_of_paged_messages_keep_bodies() -> None:
    store = FakeStore()
    dls = DeadLetters()
    q = paged_queue(store, budget=10, args={"x-dead-letter-exchange": "dlx"}, dead_letter=dls)
    for i in range(20):
        q.publish(stored(store, body(i)))
    c = FakeConsumer("c", prefetch=4)
    q.add_consumer(c)
    assert c.bodies() == [body(i) for i in range(4)]
    first, second, third, fourth = c.unacked
    c.unacked.clear()
    q.ack(first)
    q.reject(second)  # dead-lettered with its body
    assert [m.body for m, _, _ in dls.calls] == [body(1)]
    c.blocked = True
    q.requeue_many([third, fourth])  # back in front, redelivered, bodies intact
    ready = q.ready_entries()
    assert bodies(ready)[:3] == [body(2), body(3), body(4)]
    assert [e.redelivered for e in ready[:3]] == [True, True, False]
    assert q.message_count == 18 and q.message_bytes == 90
    assert q.in_memory()[1] <= 10
    c.blocked = False
    c.prefetch = 0
    q.dispatch()
    got = c.bodies()[4:]
    assert got == [body(i) for i in range(2, 20)]
    assert [e.redelivered for e in c.delivered[4:6]] == [True, True]
    assert [e.delivery_count for e in c.delivered[4:6]] == [2, 2]


def test_requeues_past_the_budget_spill_the_window_tail_as_held_entries() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=10)
    for i in range(10):
        q.publish(stored(store, body(i)))
    c = FakeConsumer("c", prefetch=5)
    q.add_consumer(c)
    delivered = list(c.unacked)  # 0..4, 2..4 through page-ins
    c.unacked.clear()
    c.blocked = True
    q.requeue(delivered[0])
    q.requeue(delivered[4])  # window over budget: its newest entry is paged
    q.requeue_many(delivered[1:4])  # requeued entries spill as held (delivery count kept)
    assert bodies(q.ready_entries()) == [body(i) for i in range(10)]
    assert [e.redelivered for e in q.ready_entries()] == [True] * 5 + [False] * 5
    assert q.message_bytes == 50 and q.message_count == 10 and q.in_memory()[1] <= 10 + 15
    c.blocked = False
    c.prefetch = 0
    q.dispatch()
    assert c.bodies()[5:] == [body(i) for i in range(10)]
    assert [e.delivery_count for e in c.delivered[5:]] == [2] * 5 + [1] * 5


def test_requeue_into_the_paged_tail_goes_between_paged_entries() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=0)
    for i in range(4):
        q.publish(stored(store, body(i)))
    e0, e1, e2 = (q.get(no_ack=False) for _ in range(3))
    q.requeue(e0)  # spilled: the paged head is now 0
    q.requeue(e2)  # behind the paged head: held between 0 and 3
    q.requeue(e1)
    assert q._ready.paged_count == 4 and q.in_memory() == (3, 15)
    got = [q.get(no_ack=True) for _ in range(4)]
    assert [e.message.body for e in got] == [body(i) for i in range(4)]
    assert [e.redelivered for e in got] == [True, True, True, False]
    assert got[:3] == [e0, e1, e2]  # the held entries themselves


def test_expiry_of_paged_messages_dead_letters_them_with_their_bodies() -> None:
    store = FakeStore()
    clock = FakeClock()
    dls = DeadLetters()
    q = paged_queue(store, budget=10, args={"x-message-ttl": 100, "x-dead-letter-exchange": "d"},
                    clock=clock, dead_letter=dls)
    for i in range(10):
        q.publish(stored(store, body(i)))
    assert q.next_expiry() == clock.now + 100
    clock.advance(100)
    assert q.expire() == 10
    assert [m.body for m, _, _ in dls.calls] == [body(i) for i in range(10)]
    assert q.message_count == 0 and q.message_bytes == 0 and q.next_expiry() is None


def test_next_expiry_reads_the_paged_head_without_loading_it() -> None:
    store = FakeStore()
    clock = FakeClock()
    q = paged_queue(store, budget=0, clock=clock)
    q.publish(stored(store, body(0), Props(delivery_mode=2, expiration="50")))
    q.publish(stored(store, body(1)))
    assert q.next_expiry() == clock.now + 50 and store.reads == 0
    clock.advance(50)
    assert q.expire() == 1
    assert q.next_expiry() is None
    assert q.get(no_ack=True).message.body == body(1)


def test_purge_and_delete_release_paged_messages_by_store_id() -> None:
    store = FakeStore()
    discards: list[tuple[int | None, str]] = []
    q = paged_queue(store, budget=10, on_discard=lambda e, r: discards.append(
        (e.message.store_id, r)))
    for i in range(30):
        q.publish(stored(store, body(i)))
    assert q.purge() == 30
    assert discards == [(i + 1, "purged") for i in range(30)]
    assert store.reads == 0  # purging reads nothing back
    assert q.message_count == 0 and q.in_memory() == (0, 0)
    discards.clear()
    for i in range(30):
        q.publish(stored(store, body(i)))
    gone = q.delete()
    assert len(gone) == 30 and [e.message.store_id for e in gone] == list(range(31, 61))
    assert [sid for sid, _ in discards] == list(range(31, 61))


def test_restore_of_unloaded_messages_pages_them() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=10)
    for i in range(6):
        msg = stored(store, body(i))
        if i < 2:
            q.restore(msg, redelivered=True)
        else:  # as MessageStore.iter_recovered(body_budget=...) hands them: body left on disk
            copy = Message(msg.exchange, msg.routing_key, msg.header_payload, b"")
            copy.store_id = msg.store_id
            q.restore(copy, redelivered=i % 2 == 1, body_loaded=False)
    assert q.message_count == 6 and q.message_bytes == 30 and q.in_memory() == (2, 10)
    got = [q.get(no_ack=True) for _ in range(6)]
    assert [e.message.body for e in got] == [body(i) for i in range(6)]
    assert [e.redelivered for e in got] == [True, True, False, True, False, True]


def test_restore_unloaded_needs_a_paging_queue() -> None:
    q = Queue("q", parse_arguments(None), clock=FakeClock())
    msg = Message.build("", "q", b"abc")
    with pytest.raises(ValueError):
        q.restore(Message("", "q", msg.header_payload, b""), False, body_loaded=False)


def test_an_unreadable_paged_message_is_dropped_and_accounted() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=5)
    for i in range(4):
        q.publish(stored(store, body(i)))
    store.lost.add(3)
    got = [q.get(no_ack=True) for _ in range(4)]
    assert [e.message.body for e in got if e is not None] == [body(0), body(1), body(3)]
    assert got[-1] is None and q.message_count == 0 and q.message_bytes == 0


def test_priority_queues_do_not_page() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=5, args={"x-max-priority": 5})
    assert not q.paging
    for i in range(4):
        q.publish(stored(store, body(i)))
    assert q.in_memory() == (4, 20)


def test_many_chunks_of_paged_entries() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=100)
    n = CHUNK * 2 + 17
    for i in range(n):
        q.publish(stored(store, body(i)))
    assert len(q._ready._chunks) == 3
    assert [q.get(no_ack=True).message.body for _ in range(n)] == [body(i) for i in range(n)]


@pytest.mark.parametrize("seed", range(12))
def test_paged_queue_behaves_like_an_unpaged_one(seed: int) -> None:
    """Random publishes (persistent or not), gets, consumer deliveries, acks, requeues, rejects
    and purges against a paged queue and a plain one: the same deliveries, flags and counters."""
    rnd = random.Random(seed)
    store = FakeStore()
    dl_paged, dl_plain = DeadLetters(), DeadLetters()
    args = {"x-dead-letter-exchange": "dlx"}
    paged = paged_queue(store, budget=rnd.choice([0, 7, 23, 60]), args=args, dead_letter=dl_paged)
    plain = Queue("q", parse_arguments(args), clock=FakeClock(), arguments=args,
                  dead_letter=dl_plain, wall_clock=lambda: 1_700_000_000.0)
    c_paged, c_plain = FakeConsumer("c", prefetch=3), FakeConsumer("c", prefetch=3)
    c_paged.blocked = c_plain.blocked = True
    paged.add_consumer(c_paged)
    plain.add_consumer(c_plain)
    gets: list[tuple] = []
    for step in range(400):
        op = rnd.random()
        if op < 0.45:
            b = b"m%d" % step + b"." * rnd.randrange(5)
            props = Props(delivery_mode=2 if rnd.random() < 0.8 else 1)
            m = Message.build("", "q", b, props)
            if m.persistent:
                store.persist(m)
            paged.publish(m)
            plain.publish(m)
        elif op < 0.6:
            no_ack = rnd.random() < 0.5
            a, b_ = paged.get(no_ack), plain.get(no_ack)
            assert (a is None) == (b_ is None)
            if a is not None:
                assert (a.message.body, a.redelivered, a.seq) == (
                    b_.message.body, b_.redelivered, b_.seq)
                if not no_ack:
                    gets.append((a, b_))
        elif op < 0.7:
            c_paged.blocked = c_plain.blocked = not c_paged.blocked
            paged.dispatch()
            plain.dispatch()
        elif op < 0.9 and (c_paged.unacked or gets):
            if gets and (not c_paged.unacked or rnd.random() < 0.5):
                a, b_ = gets.pop(rnd.randrange(len(gets)))
            else:
                k = rnd.randrange(len(c_paged.unacked))
                a, b_ = c_paged.unacked.pop(k), c_plain.unacked.pop(k)
            what = rnd.random()
            if what < 0.4:
                paged.ack(a)
                plain.ack(b_)
            elif what < 0.8:
                paged.requeue(a)
                plain.requeue(b_)
            else:
                paged.reject(a)
                plain.reject(b_)
        elif op < 0.92:
            assert paged.purge() == plain.purge()
        assert c_paged.bodies() == c_plain.bodies()
        assert [e.redelivered for e in c_paged.delivered] == [
            e.redelivered for e in c_plain.delivered]
        assert (paged.message_count, paged.message_bytes, paged.unacked_count) == (
            plain.message_count, plain.message_bytes, plain.unacked_count)
        assert paged.in_memory()[1] <= max(plain.message_bytes, 0)
        assert [m.body for m, _, _ in dl_paged.calls] == [m.body for m, _, _ in dl_plain.calls]
    assert bodies(paged.ready_entries()) == bodies(plain.ready_entries())


def test_paged_ready_list_in_isolation() -> None:
    store = FakeStore()
    lst = PagedReadyList(store.load, budget=10)
    assert not lst and len(lst) == 0 and lst.peek() is None and lst.next_expiry() is None
    with pytest.raises(IndexError):
        lst.popleft()


def test_iter_ready_reads_paged_entries_one_at_a_time() -> None:
    store = FakeStore()
    q = paged_queue(store, budget=10)
    for i in range(20):
        q.publish(stored(store, body(i)))
    it = q.iter_ready()
    first = [next(it).message.body for _ in range(3)]
    assert first == [body(0), body(1), body(2)] and store.reads == 1
    assert [e.message.body for e in it] == [body(i) for i in range(3, 20)]
    assert q.message_count == 20 and q.in_memory() == (2, 10)  # iterating changes nothing
