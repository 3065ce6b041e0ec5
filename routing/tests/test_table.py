"""Tests for routing.table: exchanges, bindings, basic routing, deletion and auto-delete cascades.
(Cross-exchange routing is in test_table_routing.py.)"""

from __future__ import annotations

import pytest

from routing import (
    AccessRefused,
    Binding,
    InvalidArgument,
    NotFound,
    RoutingTable,
    UnknownExchangeType,
)
from routing.destination import exchange, queue


def table_with_queues(*names: str) -> RoutingTable:
    t = RoutingTable()
    for n in names:
        t.add_queue(n)
    return t


# ------------------------------------------------------------------------------- exchanges


def test_predeclared_exchanges() -> None:
    t = RoutingTable()
    types = {x.name: x.type for x in t.exchanges()}
    assert types == {
        "": "direct",
        "amq.direct": "direct",
        "amq.fanout": "fanout",
        "amq.topic": "topic",
        "amq.headers": "headers",
        "amq.match": "headers",
    }
    assert all(x.durable for x in t.exchanges())
    assert t.get_exchange("") is not None and t.get_exchange("").is_default  # type: ignore[union-attr]


def test_is_reserved() -> None:
    assert RoutingTable.is_reserved("")
    assert RoutingTable.is_reserved("amq.direct")
    assert RoutingTable.is_reserved("amq.anything")
    assert not RoutingTable.is_reserved("amqfoo")
    assert not RoutingTable().is_reserved("logs")


def test_declare_creates_then_returns_existing() -> None:
    t = RoutingTable()
    x = t.declare_exchange("logs", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    assert x.type == "topic" and x.durable and x.alternate_exchange == "ae"
    again = t.declare_exchange("logs", "fanout", durable=False)
    assert again is x  # equivalence is the core's check
    assert t.get_exchange("logs") is x and t.has_exchange("logs")
    assert t.get_exchange("nope") is None


def test_declare_unknown_type_raises_even_if_exists() -> None:
    t = RoutingTable()
    with pytest.raises(UnknownExchangeType):
        t.declare_exchange("x", "x-consistent-hash")
    t.declare_exchange("x", "direct")
    with pytest.raises(UnknownExchangeType):
        t.declare_exchange("x", "bogus")
    assert t.get_exchange("x") is not None


def test_declare_rejects_bad_alternate_exchange() -> None:
    with pytest.raises(InvalidArgument):
        RoutingTable().declare_exchange("x", "direct", arguments={"alternate-exchange": 1})


def test_default_exchange_is_protected() -> None:
    t = table_with_queues("q")
    t.declare_exchange("x", "direct")
    with pytest.raises(AccessRefused):
        t.bind("", queue("q"), "q")
    with pytest.raises(AccessRefused):
        t.bind("x", exchange(""), "k")
    with pytest.raises(AccessRefused):
        t.unbind("", queue("q"), "q")
    with pytest.raises(AccessRefused):
        t.delete_exchange("")
    with pytest.raises(AccessRefused):
        t.get_exchange("").matcher.bind(queue("q"), "q", {})  # type: ignore[union-attr]


def test_delete_unknown_exchange_is_noop() -> None:
    assert RoutingTable().delete_exchange("nope") == []


# ------------------------------------------------------------------------------- bindings


def test_bind_checks_existence_and_reports_newness() -> None:
    t = table_with_queues("q")
    t.declare_exchange("x", "direct")
    with pytest.raises(NotFound):
        t.bind("missing", queue("q"), "k")
    with pytest.raises(NotFound):
        t.bind("x", queue("missing"), "k")
    with pytest.raises(NotFound):
        t.bind("x", exchange("missing"), "k")
    assert t.bind("x", queue("q"), "k")
    assert not t.bind("x", queue("q"), "k", {})
    assert t.bind("x", queue("q"), "k", {"a": 1})
    assert t.has_binding("x", queue("q"), "k")
    assert t.has_binding("x", queue("q"), "k", {"a": 1})
    assert not t.has_binding("x", queue("q"), "k", {"a": True})
    assert t.has_binding("", queue("q"), "q")
    assert not t.has_binding("", queue("q"), "other")


def test_headers_binding_validation_through_table() -> None:
    t = table_with_queues("q")
    with pytest.raises(InvalidArgument):
        t.bind("amq.match", queue("q"), "", {"x-match": "none"})
    assert list(t.bindings()) == []


def test_unbind() -> None:
    t = table_with_queues("q")
    t.declare_exchange("x", "direct")
    t.bind("x", queue("q"), "k")
    assert not t.unbind("x", queue("q"), "other")
    assert not t.unbind("nope", queue("q"), "k")
    r = t.unbind("x", queue("q"), "k")
    assert r and r.existed and r.auto_deleted == ()
    assert t.route("x", "k") == set()
    assert list(t.bindings_of_queue("q")) == []


def test_binding_listings() -> None:
    t = table_with_queues("q1", "q2")
    t.declare_exchange("x", "direct")
    t.declare_exchange("y", "fanout")
    t.bind("x", queue("q1"), "a", {"z": 1})
    t.bind("y", queue("q1"), "")
    t.bind("y", exchange("x"), "")
    assert set(t.bindings()) == {
        Binding("x", queue("q1"), "a", {"z": 1}),
        Binding("y", queue("q1"), ""),
        Binding("y", exchange("x"), ""),
    }
    assert set(t.bindings(include_default=True)) == set(t.bindings()) | {
        Binding("", queue("q1"), "q1"),
        Binding("", queue("q2"), "q2"),
    }
    assert set(t.bindings_of_queue("q1")) == {
        Binding("x", queue("q1"), "a", {"z": 1}),
        Binding("y", queue("q1"), ""),
    }
    assert list(t.bindings_of_queue("q2")) == []
    assert list(t.bindings_of_queue("q2", include_default=True)) == [Binding("", queue("q2"), "q2")]
    assert list(t.bindings_to(exchange("x"))) == [Binding("y", exchange("x"), "")]
    assert len(list(t.bindings_from("y"))) == 2
    assert list(t.bindings_from("nope")) == []
    assert t.is_unused("amq.direct") and not t.is_unused("x") and not t.is_unused("nope")


# ------------------------------------------------------------------------------- routing basics


def test_default_exchange_routes_by_queue_name() -> None:
    t = table_with_queues("q")
    assert t.route("", "q") == {"q"}
    assert t.route("", "nope") == set()
    t.add_queue("q")  # idempotent
    assert t.has_queue("q")
    t.remove_queue("q")
    assert not t.has_queue("q")
    assert t.route("", "q") == set()


def test_route_unknown_exchange_is_empty() -> None:
    assert RoutingTable().route("nope", "k") == set()


def test_route_returns_a_fresh_set() -> None:
    t = table_with_queues("q")
    t.bind("amq.direct", queue("q"), "k")
    r = t.route("amq.direct", "k")
    r.add("junk")
    assert t.route("amq.direct", "k") == {"q"}
    r2 = t.route("", "q")
    r2.clear()
    assert t.route("", "q") == {"q"}


def test_each_predeclared_type_routes() -> None:
    t = table_with_queues("d", "f", "t", "h")
    t.bind("amq.direct", queue("d"), "k")
    t.bind("amq.fanout", queue("f"), "ignored")
    t.bind("amq.topic", queue("t"), "a.*")
    t.bind("amq.headers", queue("h"), "", {"x-match": "any", "color": "red"})
    assert t.route("amq.direct", "k") == {"d"}
    assert t.route("amq.direct", "K") == set()
    assert t.route("amq.fanout", "x") == {"f"}
    assert t.route("amq.topic", "a.b") == {"t"}
    assert t.route("amq.topic", "a.b.c") == set()
    assert t.route("amq.headers", "", {"color": "red"}) == {"h"}
    assert t.route("amq.headers", "", {"color": "blue"}) == set()
    assert t.route("amq.headers", "", None) == set()


def test_queue_bound_twice_counted_once() -> None:
    t = table_with_queues("q")
    t.bind("amq.topic", queue("q"), "a.*")
    t.bind("amq.topic", queue("q"), "*.b")
    assert t.route("amq.topic", "a.b") == {"q"}


# ------------------------------------------------------------------------------- deletion / auto-delete


def test_delete_exchange_removes_bindings_both_ways() -> None:
    t = table_with_queues("q")
    t.declare_exchange("x", "direct")
    t.declare_exchange("up", "fanout")
    t.bind("x", queue("q"), "k")
    t.bind("up", exchange("x"), "")
    assert t.route("up", "k") == {"q"}
    assert t.delete_exchange("x") == []
    assert t.get_exchange("x") is None
    assert list(t.bindings_of_queue("q")) == []
    assert list(t.bindings_from("up")) == []
    assert list(t.bindings_to(exchange("x"))) == []
    assert t.route("up", "k") == set()
    # re-declaring does not resurrect anything
    t.declare_exchange("x", "direct")
    assert t.route("x", "k") == set() and t.route("up", "k") == set()


def test_delete_exchange_bound_to_itself() -> None:
    t = RoutingTable()
    t.declare_exchange("loop", "fanout")
    t.bind("loop", exchange("loop"), "")
    assert t.delete_exchange("loop") == []
    assert list(t.bindings()) == []


def test_auto_delete_on_last_unbind() -> None:
    t = table_with_queues("q1", "q2")
    t.declare_exchange("ad", "direct", auto_delete=True)
    t.bind("ad", queue("q1"), "k")
    t.bind("ad", queue("q2"), "k")
    r = t.unbind("ad", queue("q1"), "k")
    assert r and r.auto_deleted == ()
    assert t.has_exchange("ad")
    r = t.unbind("ad", queue("q2"), "k")
    assert r and r.auto_deleted == ("ad",)
    assert not t.has_exchange("ad")


def test_auto_delete_exchange_never_bound_survives() -> None:
    t = table_with_queues("q")
    t.declare_exchange("ad", "fanout", auto_delete=True)
    assert t.remove_queue("q") == []
    assert t.has_exchange("ad")


def test_remove_queue_removes_bindings_and_auto_deletes() -> None:
    t = table_with_queues("q", "other")
    t.declare_exchange("ad", "fanout", auto_delete=True)
    t.declare_exchange("keep", "fanout", auto_delete=True)
    t.declare_exchange("plain", "fanout")
    t.bind("ad", queue("q"), "")
    t.bind("keep", queue("q"), "")
    t.bind("keep", queue("other"), "")
    t.bind("plain", queue("q"), "")
    assert t.remove_queue("q") == ["ad"]
    assert not t.has_exchange("ad")
    assert t.has_exchange("keep") and t.has_exchange("plain")
    assert t.route("keep", "") == {"other"}
    assert t.route("plain", "") == set()
    assert t.remove_queue("never-existed") == []


def test_auto_delete_cascades_through_e2e() -> None:
    t = table_with_queues("q")
    t.declare_exchange("ad1", "fanout", auto_delete=True)
    t.declare_exchange("ad2", "fanout", auto_delete=True)
    t.declare_exchange("durable", "fanout")
    t.bind("ad1", exchange("ad2"), "")
    t.bind("ad2", queue("q"), "")
    t.bind("durable", exchange("ad1"), "")
    assert sorted(t.remove_queue("q")) == ["ad1", "ad2"]
    assert not t.has_exchange("ad1") and not t.has_exchange("ad2")
    assert t.has_exchange("durable") and list(t.bindings_from("durable")) == []


def test_unbind_cascade_reports_all() -> None:
    t = table_with_queues("q")
    t.declare_exchange("outer", "fanout", auto_delete=True)
    t.declare_exchange("inner", "fanout", auto_delete=True)
    t.bind("outer", exchange("inner"), "")
    t.bind("inner", queue("q"), "")
    r = t.unbind("inner", queue("q"), "")
    assert r.auto_deleted == ("inner", "outer")


def test_delete_exchange_cascades_to_auto_delete_sources() -> None:
    t = RoutingTable()
    t.declare_exchange("target", "fanout")
    t.declare_exchange("ad", "fanout", auto_delete=True)
    t.bind("ad", exchange("target"), "")
    assert t.delete_exchange("target") == ["ad"]
    assert not t.has_exchange("ad")


def test_auto_delete_cycle_is_deleted_once() -> None:
    t = table_with_queues("q")
    t.declare_exchange("a", "fanout", auto_delete=True)
    t.declare_exchange("b", "fanout", auto_delete=True)
    t.bind("a", exchange("b"), "")
    t.bind("b", exchange("a"), "")
    t.bind("b", queue("q"), "")
    # b still has its binding to a, so nothing is auto-deleted
    assert t.remove_queue("q") == []
    assert t.delete_exchange("a") == ["b"]
    assert list(t.exchanges()) == [x for x in t.exchanges() if x.name not in ("a", "b")]
    assert list(t.bindings()) == []
