"""The store against an in-memory model, driven by hypothesis.

Rules: append (to 1-3 queues), ack, ack of something not held, mark delivered, delete queue, sync,
read a body, power loss (everything after the last sync is lost: files cut back to their size at
that sync), clean restart. Invariant after every restart: each queue's recovered messages are
exactly the model's (synced, for a power loss) unacked messages, in publish order, with the
redelivered flag of the model. Tiny segments and write buffer so that roll-over, early writes,
deletion and compaction all happen within a few dozen steps.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from queues.store import MessageStore

from .support import msg, power_loss, snapshot_sizes

QUEUES = ("a", "b", "c")
OPTIONS = dict(segment_bytes=4096, write_buffer_bytes=700, compact_max_bytes=2048)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-stateful-"))
        self.store = MessageStore(self.dir, **OPTIONS)
        self.bodies: dict[int, bytes] = {}
        self.live: dict[str, list[int]] = {q: [] for q in QUEUES}  # what the store should hold
        self.delivered: set[int] = set()
        self.synced_live = {q: [] for q in QUEUES}  # self.live as of the last sync
        self.synced_sizes = snapshot_sizes(self.dir)
        self.max_id = 0

    def teardown(self) -> None:
        self.store.abandon()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True),
          size=st.integers(0, 900), tag=st.integers(0, 255))
    def append(self, queues, size, tag):
        body = bytes([tag]) * size
        sid = self.store.append(queues, msg(body, routing_key=f"k{tag}"))
        assert sid > self.max_id
        self.max_id = sid
        self.bodies[sid] = body
        for q in queues:
            self.live[q].append(sid)

    @precondition(lambda self: any(self.live.values()))
    @rule(data=st.data())
    def ack(self, data):
        q = data.draw(st.sampled_from([q for q in QUEUES if self.live[q]]))
        sid = data.draw(st.sampled_from(self.live[q]))
        assert self.store.ack(q, sid)
        self.live[q].remove(sid)

    @precondition(lambda self: any(self.live.values()))
    @rule(data=st.data())
    def ack_many(self, data):
        q = data.draw(st.sampled_from([q for q in QUEUES if self.live[q]]))
        ids = data.draw(st.lists(st.sampled_from(self.live[q]), min_size=1, max_size=5))
        assert self.store.ack_many(q, ids + [10**9]) == len(set(ids))
        for sid in set(ids):
            self.live[q].remove(sid)

    @rule()
    def compact(self):
        self.store.compact()
        self.synced_live = {q: list(ids) for q, ids in self.live.items()}
        self.synced_sizes = snapshot_sizes(self.dir)

    @rule(q=st.sampled_from(QUEUES), sid=st.integers(0, 200))
    def ack_not_held(self, q, sid):
        if sid not in self.live[q]:
            assert not self.store.ack(q, sid)

    @precondition(lambda self: any(self.live.values()))
    @rule(data=st.data())
    def deliver(self, data):
        q = data.draw(st.sampled_from([q for q in QUEUES if self.live[q]]))
        sid = data.draw(st.sampled_from(self.live[q]))
        assert self.store.mark_delivered(q, sid)
        self.delivered.add(sid)

    @rule(q=st.sampled_from(QUEUES))
    def delete_queue(self, q):
        assert self.store.delete_queue(q) == len(self.live[q])
        self.live[q] = []

    @rule()
    def sync(self):
        assert self.store.sync() == self.store.stats().next_id - 1 >= self.max_id
        self.synced_live = {q: list(ids) for q, ids in self.live.items()}
        self.synced_sizes = snapshot_sizes(self.dir)

    @precondition(lambda self: any(self.live.values()))
    @rule(data=st.data())
    def read_body(self, data):
        q = data.draw(st.sampled_from([q for q in QUEUES if self.live[q]]))
        sid = data.draw(st.sampled_from(self.live[q]))
        assert self.store.read_body(sid) == self.bodies[sid]

    def _check_recovered(self, redelivered_all: bool) -> None:
        rec = self.store.recover()
        for q in QUEUES:
            got = rec.get(q, [])
            assert [r.store_id for r in got] == self.live[q], q
            assert [r.message.body for r in got] == [self.bodies[s] for s in self.live[q]]
            assert [r.redelivered for r in got] == [
                redelivered_all or s in self.delivered for s in self.live[q]]
        assert set(rec) <= set(QUEUES)

    @rule()
    def power_loss(self):
        power_loss(self.store, self.synced_sizes)
        self.live = {q: list(ids) for q, ids in self.synced_live.items()}
        self.store = MessageStore(self.dir, **OPTIONS)
        self._check_recovered(redelivered_all=True)
        self.delivered = {s for ids in self.live.values() for s in ids}
        # ids that never became durable may be handed out again; recovered ones never are
        self.max_id = self.store.stats().next_id - 1
        self._after_restart()

    @rule()
    def clean_restart(self):
        self.store.close()
        self.store = MessageStore(self.dir, **OPTIONS)
        assert self.store.recovered_clean
        self._check_recovered(redelivered_all=False)
        self._after_restart()

    def _after_restart(self):
        self.synced_live = {q: list(ids) for q, ids in self.live.items()}
        self.synced_sizes = snapshot_sizes(self.dir)

    @invariant()
    def lengths_agree(self):
        for q in QUEUES:
            assert self.store.queue_length(q) == len(self.live[q])

    @invariant()
    def disk_stays_bounded(self):
        live = sum(len(self.bodies[s]) for s in {s for ids in self.live.values() for s in ids})
        files = len(snapshot_sizes(self.dir))
        # generous: live data, plus files pinned by acks for sparse files, plus the active ones
        assert files <= 6 + 4 * (live // 4096 + 1) + len(self.store._index.files()) // 2


StoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestStore = StoreMachine.TestCase
