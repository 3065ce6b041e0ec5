"""Tests for routing.exchange (attributes, alternate-exchange, equivalence) and CC/BCC parsing."""

from __future__ import annotations

import pytest

from routing.errors import InvalidArgument, UnknownExchangeType
from routing.exchange import Exchange, alternate_exchange_of
from routing.exchange_types import DirectMatcher, TopicMatcher
from routing.sender_selected import sender_selected_keys


def test_exchange_builds_its_matcher_and_reads_alternate_exchange() -> None:
    x = Exchange("t", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    assert isinstance(x.matcher, TopicMatcher)
    assert x.matcher.source == "t"
    assert x.alternate_exchange == "ae"
    assert x.durable and not x.auto_delete and not x.internal
    assert Exchange("d", "direct").alternate_exchange is None
    assert isinstance(Exchange("d", "direct").matcher, DirectMatcher)
    assert not Exchange("d", "direct").is_default


def test_exchange_rejects_unknown_type_and_bad_alternate_exchange() -> None:
    with pytest.raises(UnknownExchangeType):
        Exchange("x", "nope")
    with pytest.raises(InvalidArgument):
        Exchange("x", "direct", arguments={"alternate-exchange": 5})


def test_alternate_exchange_of() -> None:
    assert alternate_exchange_of(None) is None
    assert alternate_exchange_of({}) is None
    assert alternate_exchange_of({"alternate-exchange": b"ae"}) == "ae"
    with pytest.raises(InvalidArgument):
        alternate_exchange_of({"alternate-exchange": b"\xff"})


def test_exchange_arguments_are_copied() -> None:
    args = {"alternate-exchange": "ae"}
    x = Exchange("x", "direct", arguments=args)
    args["alternate-exchange"] = "other"
    assert x.arguments == {"alternate-exchange": "ae"}


def test_is_equivalent_follows_rabbitmq() -> None:
    x = Exchange("x", "direct", durable=True, arguments={"alternate-exchange": "ae", "k": 1})
    assert x.is_equivalent("direct", durable=True, arguments={"alternate-exchange": "ae"})
    assert x.is_equivalent("direct", durable=True, arguments={"alternate-exchange": b"ae", "k": 2})
    assert not x.is_equivalent("topic", durable=True, arguments={"alternate-exchange": "ae"})
    assert not x.is_equivalent("direct", durable=False, arguments={"alternate-exchange": "ae"})
    assert not x.is_equivalent(
        "direct", durable=True, auto_delete=True, arguments={"alternate-exchange": "ae"}
    )
    assert not x.is_equivalent(
        "direct", durable=True, internal=True, arguments={"alternate-exchange": "ae"}
    )
    assert not x.is_equivalent("direct", durable=True)
    assert not x.is_equivalent("direct", durable=True, arguments={"alternate-exchange": "b"})


def test_sender_selected_keys() -> None:
    assert sender_selected_keys(None) == ()
    assert sender_selected_keys({}) == ()
    assert sender_selected_keys({"other": 1}) == ()
    assert sender_selected_keys({"CC": ["a", b"b"], "BCC": ("c",)}) == ("a", "b", "c")
    assert sender_selected_keys({"BCC": ["c"]}) == ("c",)
    assert sender_selected_keys({"CC": ["a", 1, None, True, b"d"]}) == ("a", "d")
    assert sender_selected_keys({"CC": []}) == ()
    for bad in ("a", b"a", 1, None, {"a": 1}):
        with pytest.raises(InvalidArgument):
            sender_selected_keys({"CC": bad})
        with pytest.raises(InvalidArgument):
            sender_selected_keys({"BCC": bad})
