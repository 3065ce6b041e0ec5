"""The cluster metadata log's answers to x-delayed-message declares: the same as one broker's
(``interop_tests/test_delayed_exchange.py``), refusals as outcomes, never an exception out of
the machine's apply (which every member runs for every committed entry)."""

from __future__ import annotations

from cluster.metadata import commands as m
from cluster.metadata.outcomes import Declared, Refused
from cluster.tests.test_metadata_machine import Member

MISSING = ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must bean existing "
           "exchnage type")


def test_delayed_exchange_declares_through_the_metadata_log() -> None:
    n = Member()
    assert n.apply(m.DeclareExchange("/", "d", "x-delayed-message",
                                     arguments={"x-delayed-type": "topic"})) == Declared("d", True)
    assert n.vhost.routing.get_exchange("d").type == "x-delayed-message"
    assert n.apply(m.DeclareExchange("/", "e", "x-delayed-message")) == Refused(406, MISSING)
    assert n.apply(m.DeclareExchange("/", "f", "x-delayed-message",
                                     arguments={"x-delayed-type": "nope"})) == Refused(
        503, "COMMAND_INVALID - unknown exchange type 'nope'", connection_level=True)
    assert n.vhost.routing.get_exchange("f") is None
