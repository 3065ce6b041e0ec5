"""Tests for queues.consumers: round robin, consumer priorities, single active consumer."""

from __future__ import annotations

import pytest

from queues.consumers import (
    ConsumerSet,
    DirectConsumer,
    can_deliver,
    consumer_no_ack,
    deliver_to,
)
from queues.tests.fakes import FakeConsumer


def picks(cs: ConsumerSet, n: int) -> list[str | None]:
    out = []
    for _ in range(n):
        c = cs.pick()
        out.append(c.tag if c is not None else None)
    return out


def test_round_robin():
    cs = ConsumerSet()
    for t in "abc":
        cs.add(FakeConsumer(t))
    assert picks(cs, 6) == list("abcabc")


def test_blocked_consumer_keeps_its_turn():
    cs = ConsumerSet()
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    for x in (a, b, c):
        cs.add(x)
    a.blocked = True
    assert picks(cs, 2) == ["b", "c"]
    a.blocked = False
    assert picks(cs, 3) == ["a", "b", "c"]


def test_none_can_deliver():
    cs = ConsumerSet()
    assert cs.pick() is None
    a = FakeConsumer("a")
    a.blocked = True
    cs.add(a)
    assert cs.pick() is None


def test_priorities_served_first_and_lower_only_when_blocked():
    cs = ConsumerSet()
    lo, hi1, hi2 = FakeConsumer("lo"), FakeConsumer("hi1", priority=5), FakeConsumer("hi2",
                                                                                      priority=5)
    for x in (lo, hi1, hi2):
        cs.add(x)
    assert picks(cs, 4) == ["hi1", "hi2", "hi1", "hi2"]
    hi1.blocked = hi2.blocked = True
    assert picks(cs, 2) == ["lo", "lo"]
    hi2.blocked = False
    assert picks(cs, 1) == ["hi2"]


def test_negative_priority():
    cs = ConsumerSet()
    cs.add(FakeConsumer("neg", priority=-3))
    cs.add(FakeConsumer("zero"))
    assert picks(cs, 2) == ["zero", "zero"]


def test_add_twice_and_remove_unknown():
    cs = ConsumerSet()
    a = FakeConsumer("a")
    cs.add(a)
    with pytest.raises(ValueError):
        cs.add(a)
    assert cs.remove(FakeConsumer("x")) is False
    assert cs.remove(a) is True
    assert len(cs) == 0 and not cs and cs.pick() is None


def test_consumers_need_not_be_hashable():
    class Unhashable(FakeConsumer):
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other):
            return True

    cs = ConsumerSet()
    a, b = Unhashable("a"), Unhashable("b")
    cs.add(a)
    cs.add(b)
    assert cs.remove(b)
    assert [c.tag for c in cs] == ["a"]


def test_iteration_in_registration_order():
    cs = ConsumerSet()
    xs = [FakeConsumer("a", priority=1), FakeConsumer("b"), FakeConsumer("c", priority=9)]
    for x in xs:
        cs.add(x)
    assert [c.tag for c in cs] == ["a", "b", "c"]
    assert xs[1] in cs


def test_single_active_consumer():
    cs = ConsumerSet(single_active=True)
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    for x in (a, b, c):
        cs.add(x)
    assert cs.active is a
    assert picks(cs, 3) == ["a", "a", "a"]
    a.blocked = True
    assert cs.pick() is None  # others never receive while a is active
    cs.remove(b)
    assert cs.active is a
    cs.remove(a)
    assert cs.active is c
    assert picks(cs, 1) == ["c"]
    cs.remove(c)
    assert cs.active is None and cs.pick() is None
    d = FakeConsumer("d")
    cs.add(d)
    assert cs.active is d


def test_single_active_consumer_next_is_highest_priority_then_earliest():
    cs = ConsumerSet(single_active=True)
    a, b, c, d = (FakeConsumer("a"), FakeConsumer("b", priority=2), FakeConsumer("c", priority=2),
                  FakeConsumer("d"))
    for x in (a, b, c, d):
        cs.add(x)
    assert cs.active is a  # a later, higher-priority consumer does not take over
    cs.remove(a)
    assert cs.active is b
    cs.remove(b)
    assert cs.active is c
    cs.remove(c)
    assert cs.active is d


def test_clear():
    cs = ConsumerSet(single_active=True)
    a, b = FakeConsumer("a"), FakeConsumer("b")
    cs.add(a)
    cs.add(b)
    assert cs.clear() == [a, b]
    assert cs.active is None and len(cs) == 0


def test_direct_consumer_base_is_abstract():
    """DirectConsumer (the core's ChannelConsumer's base: compiled code calls it natively; the
    core's delivery tests run through it) adds no behaviour of its own: its subclass must give
    can_deliver and deliver. An interpreted class cannot subclass it once compiled, so the
    queue tests' fakes are plain protocol objects, served through the same helpers."""
    base = DirectConsumer(no_ack=False)
    assert consumer_no_ack(base) is False
    with pytest.raises(NotImplementedError):
        can_deliver(base)
    with pytest.raises(NotImplementedError):
        deliver_to(base, None, None)


def test_protocol_consumer_through_the_helpers():
    plain = FakeConsumer("plain", no_ack=True, prefetch=1)
    assert can_deliver(plain) and consumer_no_ack(plain)
    deliver_to(plain, None, "entry")
    assert plain.delivered == ["entry"]
