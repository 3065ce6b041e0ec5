"""Tests for queues.ready_list and queues.entry: delivery order, requeue position, head expiry."""

from __future__ import annotations

import pytest

from queues.entry import QueueEntry
from queues.ready_list import PriorityReadyList, ReadyList
from queues.tests.fakes import msg


def entry(seq: int, *, priority: int = 0, expires_at: int | None = None) -> QueueEntry:
    return QueueEntry(msg(str(seq)), seq, expires_at, priority)


def seqs(lst) -> list[int]:
    return [e.seq for e in lst]


def test_entry_defaults():
    e = QueueEntry(msg(), 7)
    assert (e.seq, e.redelivered, e.expires_at, e.priority, e.delivery_count) == (7, False, None,
                                                                                 0, 0)
    assert not hasattr(e, "__dict__")  # slotted
    assert "seq=7" in repr(e)


def test_fifo():
    r = ReadyList()
    assert not r and len(r) == 0 and r.peek() is None
    for i in range(3):
        r.append(entry(i))
    assert len(r) == 3 and r.peek().seq == 0
    assert seqs([r.popleft() for _ in range(3)]) == [0, 1, 2]
    with pytest.raises(IndexError):
        r.popleft()


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 1, 0], [1, 0, 2], [2, 0, 1]])
def test_insert_by_seq(order):
    r = ReadyList()
    for s in (3, 5, 7):
        r.append(entry(s))
    for s in order:
        r.insert(entry(s))
    r.insert(entry(4))
    r.insert(entry(6))
    r.insert(entry(9))
    assert seqs(r) == [0, 1, 2, 3, 4, 5, 6, 7, 9]


def test_pop_expired_only_from_head():
    r = ReadyList()
    r.append(entry(0, expires_at=10))
    r.append(entry(1))  # no TTL: stops expiry even if later ones are expired
    r.append(entry(2, expires_at=5))
    assert r.next_expiry() == 10
    assert r.pop_expired(9) == []
    assert seqs(r.pop_expired(10)) == [0]
    assert r.next_expiry() is None
    assert r.pop_expired(100) == []
    assert seqs(r) == [1, 2]


def test_clear():
    r = ReadyList()
    for i in range(3):
        r.append(entry(i))
    assert seqs(r.clear()) == [0, 1, 2]
    assert len(r) == 0


def test_priority_order_highest_first_fifo_within():
    r = PriorityReadyList()
    for s, p in [(0, 1), (1, 5), (2, 1), (3, 5), (4, 0)]:
        r.append(entry(s, priority=p))
    assert len(r) == 5
    assert seqs(r) == [1, 3, 0, 2, 4]
    assert seqs([r.popleft() for _ in range(5)]) == [1, 3, 0, 2, 4]
    assert not r and r.peek() is None
    with pytest.raises(IndexError):
        r.popleft()


def test_priority_requeue_keeps_place_within_priority():
    r = PriorityReadyList()
    for s, p in [(0, 2), (1, 2), (2, 2), (3, 0)]:
        r.append(entry(s, priority=p))
    a, b = r.popleft(), r.popleft()
    r.insert(b)
    r.insert(a)
    assert seqs(r) == [0, 1, 2, 3]


def test_priority_expiry_checks_every_head():
    r = PriorityReadyList()
    r.append(entry(0, priority=3))
    r.append(entry(1, priority=1, expires_at=50))
    r.append(entry(2, priority=1, expires_at=60))
    r.append(entry(3, priority=0, expires_at=40))
    assert r.next_expiry() == 40
    assert seqs(r.pop_expired(55)) == [1, 3]
    assert len(r) == 2 and seqs(r) == [0, 2]
    assert r.next_expiry() == 60
    assert seqs(r.clear()) == [0, 2]
    assert len(r) == 0 and r.next_expiry() is None
