"""DefinitionsStore: save/load round trips, replace, cascades, transactions, reopen, schema."""

from __future__ import annotations

import datetime
import decimal
import sqlite3

import pytest

from amqp_broker.definitions import (
    SCHEMA_VERSION,
    BindingDef,
    DefinitionsError,
    DefinitionsStore,
    ExchangeDef,
    Permission,
    QueueDef,
    User,
    VHost,
)

from .test_codec import ALL_TYPES, same


@pytest.fixture
def path(tmp_path):
    return tmp_path / "defs.sqlite3"


@pytest.fixture
def defs(path):
    with DefinitionsStore(path) as store:
        store.save_vhost("/")
        yield store


def test_empty_database_has_the_schema(path):
    with DefinitionsStore(path) as store:
        assert store.load().queues == ()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_round_trip_after_reopen(path, defs):
    defs.save_vhost("prod", "production", ("critical", "eu"))
    defs.save_user("guest", "aGFzaA==", tags=("administrator",))
    defs.save_permission("guest", "/", "^amq\\.gen.*", ".*", "")
    defs.save_exchange("/", "events", "topic", arguments={"alternate-exchange": "ae"})
    defs.save_exchange("prod", "ae", "fanout", auto_delete=True, internal=True)
    defs.save_queue("/", "orders", arguments=ALL_TYPES)
    defs.save_queue("prod", "q2", auto_delete=True)
    defs.save_binding("/", "events", "queue", "orders", "order.*", {"x-match": "all", "n": 1})
    defs.save_binding("/", "events", "exchange", "ae", "#")
    defs.close()
    with DefinitionsStore(path) as again:
        loaded = again.load()
    assert loaded.vhosts == (VHost("/"), VHost("prod", "production", ("critical", "eu")))
    assert loaded.users == (User("guest", "aGFzaA==", tags=("administrator",)),)
    assert loaded.permissions == (Permission("guest", "/", "^amq\\.gen.*", ".*", ""),)
    assert loaded.exchanges == (
        ExchangeDef("/", "events", "topic", arguments={"alternate-exchange": "ae"}),
        ExchangeDef("prod", "ae", "fanout", True, True, True, {}))
    orders = loaded.queues[0]
    assert orders.name == "orders" and same(ALL_TYPES, orders.arguments)
    assert loaded.queues[1] == QueueDef("prod", "q2", True, True, {})
    assert loaded.bindings == (
        BindingDef("/", "events", "queue", "orders", "order.*", {"x-match": "all", "n": 1}),
        BindingDef("/", "events", "exchange", "ae", "#", {}))


def test_types_survive_exactly(defs):
    args = {"x-max-length": 10, "x-flag": True, "x-ratio": 0.1, "x-when":
            datetime.datetime(2024, 5, 6, 7, 8, 9, 123456), "x-d": decimal.Decimal("1.50"),
            "x-raw": b"\xfe", "x-list": [1, "two", None]}
    defs.save_queue("/", "q", arguments=args)
    got = defs.load().queues[0].arguments
    assert same(args, got)
    assert type(got["x-max-length"]) is int and type(got["x-flag"]) is bool


def test_save_replaces(defs):
    defs.save_queue("/", "q", arguments={"a": 1})
    defs.save_binding("/", "amq.direct", "queue", "q", "k")
    defs.save_queue("/", "q", auto_delete=True, arguments={"b": 2})
    loaded = defs.load()
    assert loaded.queues == (QueueDef("/", "q", True, True, {"b": 2}),)
    assert len(loaded.bindings) == 1, "replacing a queue keeps its bindings"


def test_bindings_are_identified_by_key_and_arguments(defs):
    defs.save_binding("/", "x", "queue", "q", "k", {"a": 1, "b": 2})
    defs.save_binding("/", "x", "queue", "q", "k", {"b": 2, "a": 1})  # same table, other order
    defs.save_binding("/", "x", "queue", "q", "k", {"a": True})  # other argument type
    defs.save_binding("/", "x", "queue", "q", "k2")
    assert len(defs.load().bindings) == 3
    assert defs.delete_binding("/", "x", "queue", "q", "k", {"b": 2, "a": 1})
    assert not defs.delete_binding("/", "x", "queue", "q", "k", {"a": 1, "b": 2})
    assert [b.binding_key for b in defs.load().bindings] == ["k", "k2"]


def test_deleting_a_queue_deletes_its_bindings(defs):
    defs.save_exchange("/", "x", "direct")
    defs.save_queue("/", "q")
    defs.save_queue("/", "other")
    defs.save_binding("/", "x", "queue", "q", "k")
    defs.save_binding("/", "x", "queue", "other", "k")
    defs.save_binding("/", "x", "exchange", "q", "k")  # an exchange that happens to be named q
    assert defs.delete_queue("/", "q") and not defs.delete_queue("/", "q")
    assert [(b.destination_kind, b.destination) for b in defs.load().bindings] == [
        ("queue", "other"), ("exchange", "q")]


def test_deleting_an_exchange_deletes_bindings_from_and_to_it(defs):
    for name in ("x", "y", "z"):
        defs.save_exchange("/", name, "fanout")
    defs.save_queue("/", "q")
    defs.save_binding("/", "x", "queue", "q", "")
    defs.save_binding("/", "y", "exchange", "x", "")
    defs.save_binding("/", "y", "exchange", "z", "")
    assert defs.delete_exchange("/", "x")
    loaded = defs.load()
    assert [e.name for e in loaded.exchanges] == ["y", "z"]
    assert [(b.source, b.destination) for b in loaded.bindings] == [("y", "z")]


def test_deleting_a_vhost_or_user_cascades(defs):
    defs.save_vhost("v")
    defs.save_user("u", "h")
    defs.save_permission("u", "v")
    defs.save_permission("u", "/")
    defs.save_exchange("v", "x", "direct")
    defs.save_queue("v", "q")
    defs.save_binding("v", "x", "queue", "q", "")
    defs.save_queue("/", "keep")
    assert defs.delete_vhost("v")
    loaded = defs.load()
    assert [q.name for q in loaded.queues] == ["keep"] and not loaded.exchanges
    assert not loaded.bindings and loaded.permissions == (Permission("u", "/"),)
    assert defs.delete_user("u") and defs.load().permissions == ()


def test_unknown_vhost_or_user_is_refused(defs):
    with pytest.raises(DefinitionsError):
        defs.save_queue("nope", "q")
    with pytest.raises(DefinitionsError):
        defs.save_permission("nobody", "/")
    with pytest.raises(DefinitionsError):
        defs.save_binding("/", "x", "topic", "q", "")
    with pytest.raises(TypeError):
        defs.save_queue("/", "q", arguments={"bad": object()})
    assert defs.load().queues == ()


def test_transaction_groups_and_rolls_back(path, defs):
    with defs.transaction():
        defs.save_queue("/", "a")
        defs.save_queue("/", "b")
    with pytest.raises(RuntimeError), defs.transaction():
        defs.save_queue("/", "c")
        raise RuntimeError("import failed half way")
    assert [q.name for q in defs.load().queues] == ["a", "b"]


def test_newer_schema_is_refused(path):
    DefinitionsStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(DefinitionsError, match="newer"):
        DefinitionsStore(path)


def test_committed_changes_are_visible_to_another_connection(path, defs):
    defs.save_queue("/", "q")
    with DefinitionsStore(path) as other:
        assert [q.name for q in other.load().queues] == ["q"]
