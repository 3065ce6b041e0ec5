"""Tests for routing.values, routing.destination and routing.binding (identity rules)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from routing.binding import Binding
from routing.destination import Destination, exchange, queue
from routing.values import field_equal, freeze_table


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1, True),
        (1, True, False),
        (True, 1, False),
        (0, False, False),
        (True, True, True),
        (1, 1.0, False),
        (1.5, 1.5, True),
        ("abc", "abc", True),
        ("abc", b"abc", True),
        (b"abc", "abc", True),
        ("abc", "abd", False),
        ("1", 1, False),
        (None, None, True),
        (None, 0, False),
        ([1, "a"], [1, b"a"], True),
        ([1], [True], False),
        ([1, 2], [1], False),
        ({"a": 1}, {"a": 1}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": 1}, {"b": 1}, False),
        (Decimal("1.5"), Decimal("1.5"), True),
        (Decimal("1"), 1, False),
        (datetime(2020, 1, 1), datetime(2020, 1, 1), True),
    ],
)
def test_field_equal_follows_erlang_exact_match(a: object, b: object, equal: bool) -> None:
    assert field_equal(a, b) is equal


def test_freeze_table_is_order_independent_and_type_aware() -> None:
    assert freeze_table({"a": 1, "b": "x"}) == freeze_table({"b": "x", "a": 1})
    assert freeze_table({"a": 1}) != freeze_table({"a": True})
    assert freeze_table({"a": 1}) != freeze_table({"a": 1.0})
    assert freeze_table(None) == freeze_table({}) == ()
    assert freeze_table({"a": [1, {"b": [2]}]}) == freeze_table({"a": [1, {"b": [2]}]})
    hash(freeze_table({"a": [1, {"b": [2]}], "c": bytearray(b"x")}))


def test_destination_kinds_and_helpers() -> None:
    assert queue("q") == Destination("queue", "q")
    assert exchange("x") == Destination("exchange", "x")
    assert queue("n") != exchange("n")
    assert Destination.of_queue("q") == queue("q")
    assert Destination.of_exchange("x") == exchange("x")
    assert queue("q").is_queue and not queue("q").is_exchange
    assert exchange("x").is_exchange
    with pytest.raises(ValueError):
        Destination("topic", "x")  # type: ignore[arg-type]
    assert len({queue("a"), queue("a"), exchange("a")}) == 2


def test_binding_identity_includes_arguments_with_types() -> None:
    b1 = Binding("x", queue("q"), "k", {"a": 1})
    assert b1 == Binding("x", queue("q"), "k", {"a": 1})
    assert hash(b1) == hash(Binding("x", queue("q"), "k", {"a": 1}))
    assert b1 != Binding("x", queue("q"), "k", {"a": True})
    assert b1 != Binding("x", queue("q"), "k", {})
    assert b1 != Binding("x", queue("q"), "k2", {"a": 1})
    assert b1 != Binding("y", queue("q"), "k", {"a": 1})
    assert Binding("x", queue("q"), "k") == Binding("x", queue("q"), "k", {})


def test_binding_copies_its_arguments() -> None:
    args = {"a": 1}
    b = Binding("x", queue("q"), "k", args)
    args["a"] = 2
    assert b.arguments == {"a": 1}
