"""Tests for queues.dead_letter: the x-death history and dead-letter routing keys.

Expected layout: "RabbitMQ: Dead Letter Exchanges"; rabbitmq-server ``mc.erl`` record_death,
``mc_amqpl.erl`` death tables, ``rabbit_dead_letter.erl``.
"""

from __future__ import annotations

import datetime

from queues.dead_letter import (
    dead_letter_routing_keys,
    death_routing_keys,
    is_death_cycle,
    make_dead_letter,
)
from queues.tests.fakes import msg, wire

NOW = 1_700_000_000.75


def dl(message, reason="rejected", queue="q1", dlx="dlx", dlrk=None, now=NOW):
    dead, keys = make_dead_letter(message, reason=reason, queue=queue, dead_letter_exchange=dlx,
                                  dead_letter_routing_key=dlrk, now=now)
    return wire(dead), keys  # as the next hop would decode it


def test_first_death():
    m = msg(b"body", routing_key="rk", exchange="ex", headers={"CC": ["cc1", "cc2"], "a": 1},
            message_id="m1")
    dead, keys = dl(m, reason="expired")
    h = dead.headers
    assert h["x-death"] == [{
        "count": 1, "reason": "expired", "queue": "q1",
        "time": datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC),
        "exchange": "ex", "routing-keys": ["rk", "cc1", "cc2"],
    }]
    assert (h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"]) == (
        "expired", "q1", "ex")
    assert (h["x-last-death-reason"], h["x-last-death-queue"], h["x-last-death-exchange"]) == (
        "expired", "q1", "ex")
    assert h["a"] == 1 and h["CC"] == ["cc1", "cc2"]
    assert dead.message_id == "m1" and dead.body == b"body"
    assert dead.exchange == "dlx" and dead.routing_key == "rk"
    assert keys == ["rk", "cc1", "cc2"]


def test_original_message_untouched():
    m = msg(headers={"CC": ["c"]}, expiration="500")
    before = (m.header_payload, dict(m.headers))
    dl(m)
    assert (m.header_payload, dict(m.headers)) == before
    assert m.expiration == "500"


def test_per_message_expiration_moved_to_original_expiration():
    dead, _ = dl(msg(expiration="5000"), reason="expired")
    assert dead.expiration is None
    assert dead.headers["x-death"][0]["original-expiration"] == "5000"


def test_no_original_expiration_without_expiration():
    dead, _ = dl(msg())
    assert "original-expiration" not in dead.headers["x-death"][0]


def test_dead_letter_routing_key_replaces_keys_and_drops_cc():
    m = msg(routing_key="rk", headers={"CC": ["c1"], "BCC": ["b1"]})
    dead, keys = dl(m, dlrk="dead-key")
    assert keys == ["dead-key"]
    assert dead.routing_key == "dead-key"
    assert "CC" not in dead.headers and "BCC" not in dead.headers
    assert dead.headers["x-death"][0]["routing-keys"] == ["rk", "c1"]  # BCC never recorded


def test_without_dlrk_routes_with_original_cc_and_bcc_keys():
    m = msg(routing_key="rk", headers={"CC": ["c1"], "BCC": ["b1"]})
    assert dead_letter_routing_keys(m, None) == ["rk", "c1", "b1"]
    assert death_routing_keys(m) == ["rk", "c1"]
    dead, keys = dl(m)
    assert keys == ["rk", "c1", "b1"]
    assert dead.headers["CC"] == ["c1"] and "BCC" not in dead.headers


def test_same_queue_and_reason_increments_and_moves_to_front():
    m = msg(exchange="orig")
    d1, _ = dl(m, reason="expired", queue="q1", now=100)
    d2, _ = dl(d1, reason="rejected", queue="q2", now=200)
    d3, _ = dl(d2, reason="expired", queue="q1", now=300)
    deaths = d3.headers["x-death"]
    assert [(t["queue"], t["reason"], t["count"]) for t in deaths] == [("q1", "expired", 2),
                                                                       ("q2", "rejected", 1)]
    # fields other than count are those of the first death of that pair
    assert deaths[0]["time"] == datetime.datetime.fromtimestamp(100, tz=datetime.UTC)
    assert deaths[0]["exchange"] == "orig"
    assert deaths[1]["exchange"] == "dlx"  # second death: published to the DLX by then
    h = d3.headers
    assert (h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"]) == (
        "expired", "q1", "orig")
    assert (h["x-last-death-reason"], h["x-last-death-queue"], h["x-last-death-exchange"]) == (
        "expired", "q1", "dlx")


def test_new_pair_prepended():
    d1, _ = dl(msg(), reason="maxlen", queue="a")
    d2, _ = dl(d1, reason="expired", queue="a")
    assert [(t["queue"], t["reason"]) for t in d2.headers["x-death"]] == [("a", "expired"),
                                                                          ("a", "maxlen")]


def test_invalid_x_death_is_reset():
    dead, _ = dl(msg(headers={"x-death": "garbage"}))
    assert len(dead.headers["x-death"]) == 1
    assert dead.headers["x-death"][0]["count"] == 1
    assert "x-first-death-reason" not in dead.headers  # RabbitMQ only sets it on a fresh history


def test_legacy_duplicate_pairs_are_merged():
    t = {"count": 2, "reason": "expired", "queue": "q1", "exchange": "e", "routing-keys": ["k"]}
    dead, _ = dl(msg(headers={"x-death": [t, dict(t, count=3)]}), reason="expired", queue="q1")
    assert [x["count"] for x in dead.headers["x-death"]] == [6]


def test_is_death_cycle():
    m = msg()
    assert not is_death_cycle("q1", m)
    d1, _ = dl(m, reason="expired", queue="q1")
    assert is_death_cycle("q1", d1)
    assert not is_death_cycle("q2", d1)
    d2, _ = dl(d1, reason="maxlen", queue="q2")
    assert is_death_cycle("q1", d2) and is_death_cycle("q2", d2)
    d3, _ = dl(d2, reason="rejected", queue="q3")  # a client rejection breaks the cycle
    assert not is_death_cycle("q1", d3)
    assert not is_death_cycle("q3", d3)
