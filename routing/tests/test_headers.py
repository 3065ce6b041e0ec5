"""Tests for the headers matcher, following RabbitMQ rabbit_exchange_type_headers."""

from __future__ import annotations

from typing import Any

import pytest

from routing.destination import queue
from routing.errors import InvalidArgument
from routing.exchange_types.headers import HeadersMatcher, HeadersSpec, parse_x_match


def matches(args: dict[str, Any], headers: dict[str, Any] | None) -> bool:
    return HeadersSpec.compile(args).matches(headers)


def test_x_match_parsing() -> None:
    assert parse_x_match(None) == "all"
    assert parse_x_match({}) == "all"
    assert parse_x_match({"a": 1}) == "all"
    for mode in ("all", "any", "all-with-x", "any-with-x"):
        assert parse_x_match({"x-match": mode}) == mode
    assert parse_x_match({"x-match": b"any"}) == "any"
    for bad in ("ALL", "some", "", 1, True, None, b"\xff"):
        with pytest.raises(InvalidArgument):
            parse_x_match({"x-match": bad})


def test_bind_rejects_invalid_x_match() -> None:
    m = HeadersMatcher("h")
    with pytest.raises(InvalidArgument):
        m.bind(queue("q"), "", {"x-match": "most"})
    assert len(m) == 0


def test_all_mode() -> None:
    args = {"x-match": "all", "format": "pdf", "type": "report"}
    assert matches(args, {"format": "pdf", "type": "report"})
    assert matches(args, {"format": "pdf", "type": "report", "extra": 1})
    assert not matches(args, {"format": "pdf"})
    assert not matches(args, {"format": "pdf", "type": "log"})
    assert not matches(args, None)
    assert matches({"format": "pdf"}, {"format": "pdf"})  # default is all


def test_any_mode() -> None:
    args = {"x-match": "any", "format": "pdf", "type": "report"}
    assert matches(args, {"format": "pdf"})
    assert matches(args, {"type": "report", "format": "zip"})
    assert not matches(args, {"format": "zip"})
    assert not matches(args, {})
    assert not matches(args, None)


def test_empty_conditions() -> None:
    assert matches({}, None)  # all of nothing
    assert matches({"x-match": "all"}, {"a": 1})
    assert not matches({"x-match": "any"}, {"a": 1})  # any of nothing
    assert matches({"x-match": "all", "x-foo": 1}, {})  # x- ignored -> no conditions
    assert not matches({"x-match": "any", "x-foo": 1}, {"x-foo": 1})


def test_x_arguments_ignored_unless_with_x() -> None:
    assert matches({"x-match": "all", "x-tenant": "a", "format": "pdf"}, {"format": "pdf"})
    assert not matches(
        {"x-match": "all-with-x", "x-tenant": "a", "format": "pdf"}, {"format": "pdf"}
    )
    assert matches(
        {"x-match": "all-with-x", "x-tenant": "a", "format": "pdf"},
        {"format": "pdf", "x-tenant": "a"},
    )
    assert not matches({"x-match": "any", "x-tenant": "a"}, {"x-tenant": "a"})
    assert matches({"x-match": "any-with-x", "x-tenant": "a"}, {"x-tenant": "a"})
    assert not matches({"x-match": "any-with-x", "x-tenant": "a"}, {"x-tenant": "b"})


def test_x_match_itself_is_never_a_condition() -> None:
    assert matches({"x-match": "all-with-x"}, {})
    assert not matches({"x-match": "any-with-x"}, {"x-match": "any-with-x"})


def test_void_value_means_present() -> None:
    assert matches({"k": None}, {"k": "anything"})
    assert matches({"k": None}, {"k": None})
    assert matches({"k": None}, {"k": 0})
    assert not matches({"k": None}, {"other": 1})
    assert matches({"x-match": "any", "k": None, "j": 1}, {"k": False})
    assert not matches({"k": 1}, {"k": None})  # void header does not equal a value


def test_bool_and_int_are_different() -> None:
    assert not matches({"flag": True}, {"flag": 1})
    assert not matches({"n": 1}, {"n": True})
    assert not matches({"n": 0}, {"n": False})
    assert matches({"flag": True}, {"flag": True})
    assert matches({"n": 1}, {"n": 1})
    assert not matches({"n": 1}, {"n": 1.0})
    assert matches({"s": "abc"}, {"s": b"abc"})


def test_matcher_routes_and_ignores_keys() -> None:
    m = HeadersMatcher("h")
    m.bind(queue("pdf"), "", {"x-match": "all", "format": "pdf"})
    m.bind(queue("any"), "ignored-key", {"x-match": "any", "format": "zip", "urgent": True})
    m.bind(queue("everything"), "", {})
    assert set(m.route("k", {"format": "pdf"})) == {queue("pdf"), queue("everything")}
    assert set(m.route("", {"urgent": True})) == {queue("any"), queue("everything")}
    assert set(m.route("", None)) == {queue("everything")}
    assert m.needs_headers
    assert m.unbind(queue("everything"), "", {})
    assert not m.unbind(queue("pdf"), "", {"format": "pdf"})  # x-match differs: other binding
    assert m.unbind(queue("pdf"), "", {"x-match": "all", "format": "pdf"})
    assert set(m.route("", {"format": "pdf"})) == set()
    assert m.unbind_destination(queue("any")) == 1
    assert len(m) == 0
    with pytest.raises(NotImplementedError):
        m.targets("")
