"""Tests for routing.exchange_types.delayed: the x-delayed-message plugin's pure rules.

Source: rabbitmq-delayed-message-exchange ``rabbit_delayed_message_utils:get_delay/1`` (integers
as they are, strings parsed, floats truncated), ``delay_message/2`` (held when 0 < delay =<
2^32-1), ``validate/1`` (x-delayed-type required, an existing type).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from routing.destination import queue
from routing.errors import InvalidArgument, UnknownExchangeType
from routing.exchange_types.delayed import MAX_DELAY_MS, DelayedMatcher, delay_of, due_headers
from routing.table import RoutingTable


@pytest.mark.parametrize("value, delay", [
    (5000, 5000), ("250", 250), (b"250", 250), (1.9, 1), (Decimal("7.5"), 7),
    (MAX_DELAY_MS, MAX_DELAY_MS), (MAX_DELAY_MS + 1, None), (0, None), (-5, None),
    ("soon", None), (True, None), (None, None), (float("nan"), None), ([1], None),
])
def test_delay_of_reads_x_delay_as_the_plugin(value, delay) -> None:
    assert delay_of({"x-delay": value}) == delay


def test_no_headers_or_no_x_delay_routes_at_once() -> None:
    assert delay_of(None) is None
    assert delay_of({}) is None
    assert delay_of({"x-other": 5}) is None


def test_due_headers_negate_the_delay_and_keep_the_rest() -> None:
    src = {"x-delay": 300, "k": "v"}
    assert due_headers(src, 300) == {"x-delay": -300, "k": "v"}
    assert src == {"x-delay": 300, "k": "v"}


def test_a_delayed_exchange_routes_as_its_x_delayed_type() -> None:
    t = RoutingTable()
    t.add_queue("a")
    t.add_queue("h")
    t.declare_exchange("dt", "x-delayed-message", arguments={"x-delayed-type": "topic"})
    t.declare_exchange("dh", "x-delayed-message", arguments={"x-delayed-type": "headers"})
    assert isinstance(t.get_exchange("dt").matcher, DelayedMatcher)
    t.bind("dt", queue("a"), "a.*")
    t.bind("dh", queue("h"), "", {"x-match": "all", "k": "v"})
    assert t.route("dt", "a.b") == {"a"}
    assert t.route("dt", "b.a") == set()
    assert t.route("dh", "", {"k": "v"}) == {"h"}
    assert t.route("dh", "", {"k": "w"}) == set()
    with pytest.raises(InvalidArgument):  # the headers type's own binding check
        t.bind("dh", queue("h"), "", {"x-match": "some"})
    assert t.unbind("dt", queue("a"), "a.*")
    assert t.route("dt", "a.b") == set()


@pytest.mark.parametrize("arguments, error", [
    ({}, InvalidArgument), ({"x-delayed-type": 1}, InvalidArgument),
    ({"x-delayed-type": "x-delayed-message"}, InvalidArgument),
    ({"x-delayed-type": "nope"}, UnknownExchangeType),
])
def test_a_delayed_exchange_needs_a_known_x_delayed_type(arguments, error) -> None:
    with pytest.raises(error):
        RoutingTable().declare_exchange("d", "x-delayed-message", arguments=arguments)
