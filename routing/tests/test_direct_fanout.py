"""Tests for the direct and fanout matchers and the shared Matcher bookkeeping."""

from __future__ import annotations

import pytest

from routing.destination import exchange, queue
from routing.errors import UnknownExchangeType
from routing.exchange_types import EXCHANGE_TYPES, DirectMatcher, FanoutMatcher, matcher_for


def test_direct_routes_exact_key_only() -> None:
    m = DirectMatcher("d")
    assert m.bind(queue("q1"), "a", {})
    assert m.bind(queue("q2"), "a", None)
    assert m.bind(queue("q3"), "b", {})
    assert set(m.route("a", None)) == {queue("q1"), queue("q2")}
    assert set(m.route("b", None)) == {queue("q3")}
    assert list(m.route("A", None)) == []
    assert list(m.route("a.b", None)) == []
    assert m.targets("a").queue_names == {"q1", "q2"}
    assert m.targets("a").only_queues
    assert m.targets("zzz").destinations == ()


def test_direct_same_key_different_arguments_are_two_bindings() -> None:
    m = DirectMatcher("d")
    assert m.bind(queue("q"), "k", {"x": 1})
    assert m.bind(queue("q"), "k", {"x": 2})
    assert not m.bind(queue("q"), "k", {"x": 1})
    assert len(m) == 2
    assert list(m.route("k", None)) == [queue("q")]
    assert m.unbind(queue("q"), "k", {"x": 1})
    assert list(m.route("k", None)) == [queue("q")]  # still bound by the other one
    assert not m.unbind(queue("q"), "k", {"x": 1})
    assert m.unbind(queue("q"), "k", {"x": 2})
    assert list(m.route("k", None)) == []
    assert len(m) == 0


def test_direct_targets_reflect_changes() -> None:
    m = DirectMatcher("d")
    m.bind(queue("q"), "k", {})
    first = m.targets("k")
    assert m.targets("k") is first  # cached
    m.bind(exchange("x2"), "k", {})
    t = m.targets("k")
    assert not t.only_queues
    assert set(t.destinations) == {queue("q"), exchange("x2")}
    assert t.queue_names == {"q"}


def test_unbind_destination_and_bindings_listing() -> None:
    m = DirectMatcher("src")
    m.bind(queue("q"), "a", {})
    m.bind(queue("q"), "b", {"z": [1, 2]})
    m.bind(queue("r"), "a", {})
    listed = list(m.bindings())
    assert [(b.source, b.destination, b.binding_key) for b in listed] == [
        ("src", queue("q"), "a"),
        ("src", queue("q"), "b"),
        ("src", queue("r"), "a"),
    ]
    assert listed[1].arguments == {"z": [1, 2]}
    assert len(list(m.bindings_to(queue("q")))) == 2
    assert m.unbind_destination(queue("q")) == 2
    assert m.unbind_destination(queue("q")) == 0
    assert list(m.route("a", None)) == [queue("r")]
    assert list(m.route("b", None)) == []
    assert len(m) == 1
    assert list(m.destinations()) == [queue("r")]


def test_fanout_ignores_key_and_headers() -> None:
    m = FanoutMatcher("f")
    assert m.bind(queue("q1"), "", {})
    assert m.bind(queue("q2"), "whatever", {})
    assert m.bind(queue("q1"), "other", {})
    assert set(m.route("anything", {"h": 1})) == {queue("q1"), queue("q2")}
    assert m.targets("x").queue_names == {"q1", "q2"}
    assert m.unbind(queue("q1"), "", {})
    assert set(m.route("", None)) == {queue("q1"), queue("q2")}
    assert m.unbind_destination(queue("q1")) == 1
    assert set(m.route("", None)) == {queue("q2")}
    m.clear()
    assert len(m) == 0 and list(m.route("", None)) == []


def test_registry() -> None:
    assert set(EXCHANGE_TYPES) == {"direct", "fanout", "topic", "headers", "x-delayed-message"}
    assert isinstance(matcher_for("direct", "x"), DirectMatcher)
    assert matcher_for("fanout", "x").source == "x"
    with pytest.raises(UnknownExchangeType):
        matcher_for("x-consistent-hash", "x")
