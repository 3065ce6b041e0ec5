"""Property tests for queues.queue.Queue: a hypothesis state machine and a priority property.

The state machine drives one queue (random x-arguments: TTL, length limit + overflow, DLX,
x-max-priority, single active consumer) with random publish / consume (random prefetch, no-ack,
consumer priority) / ack / requeue / reject / get / cancel / block / clock / purge steps, acting
like the broker core (it dispatches after freeing credit and requeues a cancelled consumer's
unacked entries). A model tracks where every published message is and checks:

* prefetch is never exceeded;
* no entry is both ready and unacked; every accepted message is exactly once ready, unacked,
  acked, delivered no-ack, or gone (expired / maxlen / rejected / purged); refused ones are never
  queued (conservation); the queue's counters match the model;
* every delivery (and Basic.Get) takes the head of the model's ready set ordered by (priority
  desc, seq asc): so requeued messages come back before later ones, in their original order;
* a ready message is never left behind while a consumer could take it; SAC delivers only to the
  active consumer; drop-head keeps the ready count within x-max-length;
* each dead-lettering matches the entry and reason that left the queue.

Sources: "RabbitMQ: Consumer Prefetch", "RabbitMQ: Consumer Acknowledgements", "RabbitMQ: TTL",
"RabbitMQ: Queue Length Limit", "RabbitMQ: Priority Queue", "RabbitMQ: Dead Letter Exchanges".
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from queues import PublishResult, Queue, parse_arguments
from queues.entry import QueueEntry
from queues.message import Message
from queues.tests.fakes import FakeClock, FakeConsumer, msg

GONE = {"acked", "noack", "expired", "maxlen", "rejected", "purged"}


def msg_id(message: Message) -> int:
    return int(message.body.split(b":", 1)[0])


def order_key(entry: QueueEntry) -> tuple[int, int]:
    return (-entry.priority, entry.seq)


class ModelConsumer(FakeConsumer):
    """A FakeConsumer that reports deliveries to the state machine."""

    def __init__(self, machine: QueueMachine, tag: str, **kw) -> None:
        super().__init__(tag, **kw)
        self.machine = machine

    def deliver(self, queue, entry):
        if not self.no_ack and self.prefetch:
            assert len(self.unacked) < self.prefetch, "prefetch exceeded"
        assert not self.blocked, "delivered to a blocked consumer"
        super().deliver(queue, entry)
        self.machine.on_delivered(self, entry)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.state: dict[int, str] = {}
        self.entries: dict[int, QueueEntry] = {}
        self.consumers: list[ModelConsumer] = []
        self.got: list[QueueEntry] = []  # Basic.Get no_ack=False entries held by "the core"
        self.dead: list[tuple[int, str]] = []
        self.next_id = 0
        self.pending: int | None = None
        self.tags = 0
        self.expected_active: ModelConsumer | None = None

    @initialize(ttl=st.one_of(st.none(), st.integers(0, 50)),
                max_length=st.one_of(st.none(), st.integers(0, 4)),
                overflow=st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
                dlx=st.booleans(), max_priority=st.one_of(st.none(), st.integers(0, 3)),
                sac=st.booleans())
    def setup(self, ttl, max_length, overflow, dlx, max_priority, sac):
        args: dict[str, object] = {"x-overflow": overflow, "x-single-active-consumer": sac}
        if ttl is not None:
            args["x-message-ttl"] = ttl
        if max_length is not None:
            args["x-max-length"] = max_length
        if dlx:
            args["x-dead-letter-exchange"] = "dlx"
        if max_priority is not None:
            args["x-max-priority"] = max_priority
        self.settings = parse_arguments(args)
        self.q = Queue("q", self.settings, clock=self.clock, wall_clock=lambda: 1e9,
                       dead_letter=self.on_dead_letter, on_discard=self.on_discard)

    # --- callbacks from the queue -----------------------------------------------------------

    def _known(self, entry: QueueEntry) -> int:
        i = msg_id(entry.message)
        if i not in self.state:  # the message being published right now
            assert i == self.pending
            self.state[i] = "ready"
            self.entries[i] = entry
        assert self.entries[i] is entry
        return i

    def _check_is_head(self, entry: QueueEntry) -> None:
        ready = [self.entries[i] for i, s in self.state.items() if s == "ready"]
        assert order_key(entry) == min(map(order_key, ready)), "not delivered in order"

    def on_delivered(self, consumer: ModelConsumer, entry: QueueEntry) -> None:
        i = self._known(entry)
        assert self.state[i] == "ready"
        self._check_is_head(entry)
        if self.settings.single_active_consumer:
            assert consumer is self.q.active_consumer
        self.state[i] = "noack" if consumer.no_ack else "unacked"

    def on_discard(self, entry: QueueEntry, reason: str) -> None:
        i = self._known(entry)
        if reason == "rejected":
            assert self.state[i] == "unacked"
        else:
            assert self.state[i] == "ready"
        if reason in ("expired", "maxlen", "rejected") and self.settings.dead_letter_exchange:
            assert self.dead and self.dead[-1] == (i, reason)
        self.state[i] = reason

    def on_dead_letter(self, message: Message, exchange: str, routing_keys: list[str]) -> None:
        assert exchange == "dlx" and routing_keys == ["rk"]
        death = message.headers["x-death"][0]  # type: ignore[index]
        assert death["queue"] == "q" and death["count"] == 1
        self.dead.append((msg_id(message), death["reason"]))

    # --- rules (the machine acts as the broker core) ----------------------------------------

    @rule(size=st.integers(0, 3), priority=st.one_of(st.none(), st.integers(0, 5)),
          expiration=st.one_of(st.none(), st.integers(0, 60)))
    def publish(self, size, priority, expiration):
        i = self.next_id
        self.next_id += 1
        props = {}
        if priority is not None:
            props["priority"] = priority
        if expiration is not None:
            props["expiration"] = str(expiration)
        self.pending = i
        n_dead = len(self.dead)
        result = self.q.publish(msg(b"%d:" % i + b"x" * size, routing_key="rk", **props))
        self.pending = None
        if result is PublishResult.REJECTED:
            assert i not in self.state
            assert self.settings.overflow != "drop-head"
            self.state[i] = "refused"
            if self.settings.overflow == "reject-publish-dlx" and self.settings.dead_letter_exchange:
                assert self.dead[n_dead:] == [(i, "maxlen")]
            else:
                assert len(self.dead) == n_dead
        elif i not in self.state:
            (entry,) = [e for e in self.q.ready_entries() if msg_id(e.message) == i]
            self.state[i] = "ready"
            self.entries[i] = entry

    @rule(prefetch=st.integers(0, 3), no_ack=st.booleans(), priority=st.integers(0, 2))
    def consume(self, prefetch, no_ack, priority):
        self.tags += 1
        c = ModelConsumer(self, f"c{self.tags}", prefetch=prefetch, no_ack=no_ack,
                          priority=priority)
        self.consumers.append(c)
        if self.expected_active is None:
            self.expected_active = c
        self.q.add_consumer(c)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def cancel(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        self.consumers.remove(c)
        if c is self.expected_active:  # highest priority, then earliest registered
            self.expected_active = max(self.consumers, key=lambda x: x.priority, default=None)
        assert self.q.remove_consumer(c)
        pending, c.unacked = list(c.unacked), []
        for e in pending:
            self.state[msg_id(e.message)] = "ready"
        self.q.requeue_many(pending)  # channel close / cancel: the core requeues

    def _pick_unacked(self, data) -> tuple[ModelConsumer | None, QueueEntry] | None:
        holders = [c for c in self.consumers if c.unacked]
        choices: list[tuple[ModelConsumer | None, QueueEntry]] = [
            (c, e) for c in holders for e in c.unacked] + [(None, e) for e in self.got]
        if not choices:
            return None
        return data.draw(st.sampled_from(choices))

    def _release(self, holder: ModelConsumer | None, entry: QueueEntry) -> None:
        if holder is None:
            self.got.remove(entry)
        else:
            holder.take(entry)

    @rule(data=st.data(), action=st.sampled_from(["ack", "requeue", "reject"]))
    def settle(self, data, action):
        picked = self._pick_unacked(data)
        if picked is None:
            return
        holder, entry = picked
        self._release(holder, entry)
        i = msg_id(entry.message)
        assert self.state[i] == "unacked"
        if action == "ack":
            self.state[i] = "acked"
            self.q.ack(entry)
        elif action == "requeue":
            self.state[i] = "ready"
            self.q.requeue(entry)
        else:
            self.q.reject(entry)
            assert self.state[i] == "rejected"
        self.q.dispatch()  # credit was freed

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def nack_all_requeue(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        pending, c.unacked = list(c.unacked), []
        data.draw(st.randoms()).shuffle(pending)
        for e in pending:
            self.state[msg_id(e.message)] = "ready"
        self.q.requeue_many(pending)
        self.q.dispatch()

    @rule(no_ack=st.booleans())
    def get(self, no_ack):
        entry = self.q.get(no_ack)
        if entry is None:
            assert not [i for i, s in self.state.items() if s == "ready"]
            return
        i = msg_id(entry.message)
        assert self.state[i] == "ready"
        self._check_is_head(entry)
        if no_ack:
            self.state[i] = "noack"
        else:
            self.state[i] = "unacked"
            self.got.append(entry)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def toggle_block(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        c.blocked = not c.blocked
        if not c.blocked:
            self.q.dispatch()

    @rule(ms=st.integers(1, 40))
    def advance_clock(self, ms):
        self.clock.advance(ms)
        self.q.expire()

    @rule()
    def purge(self):
        ready = sum(1 for s in self.state.values() if s == "ready")
        assert self.q.purge() == ready

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def conservation(self):
        if not hasattr(self, "q"):
            return
        q = self.q
        ready = [msg_id(e.message) for e in q.ready_entries()]
        unacked = [msg_id(e.message) for e in q.unacked_entries()]
        assert len(ready) == len(set(ready)) and len(unacked) == len(set(unacked))
        assert not set(ready) & set(unacked)
        assert set(ready) == {i for i, s in self.state.items() if s == "ready"}
        assert set(unacked) == {i for i, s in self.state.items() if s == "unacked"}
        held = [msg_id(e.message) for c in self.consumers for e in c.unacked]
        held += [msg_id(e.message) for e in self.got]
        assert sorted(held) == sorted(unacked)
        assert set(self.state) == set(range(self.next_id))
        assert set(self.state.values()) <= GONE | {"ready", "unacked", "refused"}
        assert q.message_count == len(ready) and q.unacked_count == len(unacked)
        assert q.message_bytes == sum(len(e.message.body) for e in q.ready_entries())
        assert q.consumer_count == len(self.consumers)

    @invariant()
    def nothing_left_behind(self):
        if not hasattr(self, "q") or not self.q.message_count:
            return
        if self.settings.single_active_consumer:
            active = self.q.active_consumer
            assert active is None or not active.can_deliver()
        else:
            assert not any(c.can_deliver() for c in self.consumers)

    @invariant()
    def within_max_length(self):
        if not hasattr(self, "q"):
            return
        s = self.settings
        if s.max_length is not None and s.overflow == "drop-head":
            assert self.q.message_count <= s.max_length

    @invariant()
    def sac_active_is_earliest_highest(self):
        if not hasattr(self, "q") or not self.settings.single_active_consumer:
            return
        assert self.q.active_consumer is self.expected_active


QueueMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestQueueStateMachine = QueueMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(max_priority=st.integers(0, 10),
       priorities=st.lists(st.one_of(st.none(), st.integers(0, 255)), max_size=30),
       requeue_mask=st.lists(st.booleans(), max_size=30))
def test_priority_delivery_order(max_priority, priorities, requeue_mask):
    """Deliveries come out by capped priority (desc), FIFO within a priority, also after requeue."""
    q = Queue("p", parse_arguments({"x-max-priority": max_priority}), clock=FakeClock())
    for n, p in enumerate(priorities):
        q.publish(msg(b"%d:" % n) if p is None else msg(b"%d:" % n, priority=p))
    # take some out and requeue them: order must be unaffected
    taken = [q.get(no_ack=False) for _ in range(len(priorities) // 2)]
    q.requeue_many([e for e, back in zip(taken, requeue_mask, strict=False) if back])
    for e, back in zip(taken, requeue_mask + [False] * len(taken), strict=False):
        if not back:
            q.ack(e)
    c = FakeConsumer("c", no_ack=True)
    q.add_consumer(c)
    got = [(msg_id(e.message), e.priority) for e in c.delivered]
    acked = {msg_id(e.message) for e, back in zip(taken, requeue_mask + [False] * len(taken),
                                                  strict=False) if not back}
    expected = sorted(((n, min(p or 0, max_priority)) for n, p in enumerate(priorities)
                       if n not in acked), key=lambda t: (-t[1], t[0]))
    assert got == expected
    assert q.message_count == 0
