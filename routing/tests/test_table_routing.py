"""Tests for RoutingTable.route across exchanges: exchange-to-exchange bindings, alternate
exchanges, sender-selected distribution (CC/BCC) and lazy headers."""

from __future__ import annotations

from typing import Any

import pytest

from routing import InvalidArgument, RoutingTable
from routing.destination import exchange, queue


def table_with_queues(*names: str) -> RoutingTable:
    t = RoutingTable()
    for n in names:
        t.add_queue(n)
    return t


# ------------------------------------------------------------------------------- exchange-to-exchange


def test_e2e_chain() -> None:
    t = table_with_queues("q1", "q3")
    for name in ("x1", "x2", "x3"):
        t.declare_exchange(name, "direct")
    t.bind("x1", queue("q1"), "k")
    t.bind("x1", exchange("x2"), "k")
    t.bind("x2", exchange("x3"), "k")
    t.bind("x3", queue("q3"), "k")
    t.bind("x3", queue("q1"), "k")
    assert t.route("x1", "k") == {"q1", "q3"}
    assert t.route("x2", "k") == {"q1", "q3"}
    assert t.route("x1", "other") == set()


def test_e2e_uses_destination_type_and_same_key() -> None:
    t = table_with_queues("q")
    t.declare_exchange("src", "fanout")
    t.declare_exchange("dst", "topic")
    t.bind("src", exchange("dst"), "irrelevant")
    t.bind("dst", queue("q"), "stock.#")
    assert t.route("src", "stock.nyse") == {"q"}
    assert t.route("src", "fx.eur") == set()


def test_e2e_cycle_terminates() -> None:
    t = table_with_queues("qa", "qb")
    t.declare_exchange("a", "fanout")
    t.declare_exchange("b", "fanout")
    t.bind("a", exchange("b"), "")
    t.bind("b", exchange("a"), "")
    assert t.route("a", "k") == set()
    t.bind("a", queue("qa"), "")
    t.bind("b", queue("qb"), "")
    assert t.route("a", "k") == {"qa", "qb"}
    assert t.route("b", "k") == {"qa", "qb"}


def test_self_binding_terminates() -> None:
    t = table_with_queues("q")
    t.declare_exchange("a", "topic")
    t.bind("a", exchange("a"), "#")
    t.bind("a", queue("q"), "x")
    assert t.route("a", "x") == {"q"}
    assert t.route("a", "y") == set()


def test_diamond_visits_each_exchange_once() -> None:
    t = table_with_queues("q")
    for name in ("top", "left", "right", "bottom"):
        t.declare_exchange(name, "fanout")
    t.bind("top", exchange("left"), "")
    t.bind("top", exchange("right"), "")
    t.bind("left", exchange("bottom"), "")
    t.bind("right", exchange("bottom"), "")
    t.bind("bottom", queue("q"), "")
    assert t.route("top", "") == {"q"}


# ------------------------------------------------------------------------------- alternate exchanges


def test_alternate_exchange_on_no_match() -> None:
    t = table_with_queues("q", "unrouted")
    t.declare_exchange("ae", "fanout")
    t.bind("ae", queue("unrouted"), "")
    t.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    t.bind("x", queue("q"), "k")
    assert t.route("x", "k") == {"q"}
    assert t.route("x", "other") == {"unrouted"}


def test_alternate_exchange_not_used_when_a_binding_matched_an_empty_exchange() -> None:
    t = table_with_queues("unrouted")
    t.declare_exchange("ae", "fanout")
    t.bind("ae", queue("unrouted"), "")
    t.declare_exchange("dead-end", "direct")
    t.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    t.bind("x", exchange("dead-end"), "k")
    # x itself matched a binding (to dead-end), so its AE does not apply
    assert t.route("x", "k") == set()
    assert t.route("x", "z") == {"unrouted"}


def test_alternate_exchange_of_an_e2e_destination() -> None:
    t = table_with_queues("unrouted")
    t.declare_exchange("ae", "fanout")
    t.bind("ae", queue("unrouted"), "")
    t.declare_exchange("inner", "direct", arguments={"alternate-exchange": "ae"})
    t.declare_exchange("outer", "fanout")
    t.bind("outer", exchange("inner"), "")
    assert t.route("outer", "k") == {"unrouted"}


def test_alternate_exchange_chain() -> None:
    t = table_with_queues("last")
    t.declare_exchange("c", "topic")
    t.bind("c", queue("last"), "#")
    t.declare_exchange("b", "direct", arguments={"alternate-exchange": "c"})
    t.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    assert t.route("a", "anything") == {"last"}


def test_alternate_exchange_cycle_terminates() -> None:
    t = table_with_queues("q")
    t.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    t.declare_exchange("b", "direct", arguments={"alternate-exchange": "a"})
    t.declare_exchange("self", "direct", arguments={"alternate-exchange": "self"})
    assert t.route("a", "k") == set()
    assert t.route("self", "k") == set()
    t.bind("b", queue("q"), "k")
    assert t.route("a", "k") == {"q"}


def test_missing_alternate_exchange_is_ignored_until_declared() -> None:
    t = table_with_queues("q")
    t.declare_exchange("x", "direct", arguments={"alternate-exchange": "later"})
    assert t.route("x", "k") == set()
    t.declare_exchange("later", "fanout")
    t.bind("later", queue("q"), "")
    assert t.route("x", "k") == {"q"}
    t.delete_exchange("later")
    assert t.route("x", "k") == set()


def test_alternate_exchange_with_headers_exchange() -> None:
    t = table_with_queues("q", "unrouted")
    t.declare_exchange("ae", "fanout")
    t.bind("ae", queue("unrouted"), "")
    t.declare_exchange("h", "headers", arguments={"alternate-exchange": "ae"})
    t.bind("h", queue("q"), "", {"kind": "a"})
    assert t.route("h", "", {"kind": "a"}) == {"q"}
    assert t.route("h", "", {"kind": "b"}) == {"unrouted"}


# ------------------------------------------------------------------------------- CC / BCC


def test_cc_and_bcc_add_routing_keys() -> None:
    t = table_with_queues("q1", "q2", "q3", "q4")
    for i in range(1, 5):
        t.bind("amq.direct", queue(f"q{i}"), f"k{i}")
    hdrs = {"CC": ["k2", b"k3"], "BCC": ["k4", "nope"]}
    assert t.route("amq.direct", "k1", hdrs) == {"q1", "q2", "q3", "q4"}
    assert t.route("amq.direct", "none", {"BCC": ["k4"]}) == {"q4"}
    assert t.route("amq.direct", "k1", {"CC": []}) == {"q1"}


def test_cc_on_default_exchange() -> None:
    t = table_with_queues("a", "b")
    assert t.route("", "a", {"CC": ["b", "missing"]}) == {"a", "b"}
    assert t.route("", "missing", {"BCC": ["b"]}) == {"b"}


def test_cc_keys_propagate_through_e2e() -> None:
    t = table_with_queues("q1", "q2")
    t.declare_exchange("front", "fanout")
    t.declare_exchange("back", "topic")
    t.bind("front", exchange("back"), "")
    t.bind("back", queue("q1"), "one.*")
    t.bind("back", queue("q2"), "two.*")
    assert t.route("front", "one.x", {"CC": ["two.y"]}) == {"q1", "q2"}


def test_cc_suppresses_alternate_exchange_when_any_key_matched() -> None:
    t = table_with_queues("q", "unrouted")
    t.declare_exchange("ae", "fanout")
    t.bind("ae", queue("unrouted"), "")
    t.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    t.bind("x", queue("q"), "cc-key")
    assert t.route("x", "nomatch", {"CC": ["cc-key"]}) == {"q"}
    assert t.route("x", "nomatch", {"CC": ["nomatch2"]}) == {"unrouted"}


def test_invalid_cc_raises() -> None:
    t = table_with_queues("q")
    with pytest.raises(InvalidArgument):
        t.route("", "q", {"CC": "q"})


def test_has_headers_false_skips_cc_and_headers() -> None:
    t = table_with_queues("a", "b", "h")
    t.bind("amq.headers", queue("h"), "", {})  # x-match all, no conditions: matches anything
    t.bind("amq.headers", queue("b"), "", {"x-match": "any", "k": 1})

    def boom() -> dict[str, Any]:
        raise AssertionError("headers must not be decoded")

    assert t.route("", "a", boom, has_headers=False) == {"a"}
    assert t.route("", "a", {"CC": ["b"]}, has_headers=False) == {"a"}
    assert t.route("amq.headers", "", boom, has_headers=False) == {"h"}


def test_lazy_headers_called_once_when_needed() -> None:
    t = table_with_queues("a", "b", "h")
    t.declare_exchange("to-headers", "fanout")
    t.bind("to-headers", exchange("amq.headers"), "")
    t.bind("amq.headers", queue("h"), "", {"k": 1})
    calls = []

    def getter() -> dict[str, Any]:
        calls.append(1)
        return {"CC": ["b"], "k": 1}

    assert t.route("", "a", getter) == {"a", "b"}
    assert len(calls) == 1
    assert t.route("to-headers", "", getter) == {"h"}
    assert len(calls) == 2
    assert t.route("", "a", lambda: None) == {"a"}
