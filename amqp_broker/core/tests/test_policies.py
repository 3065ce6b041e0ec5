"""Policies, pure (``core.policies``): validation (the management API's 400 reasons), matching
(pattern, apply-to, priority), the definition -> queue arguments mapping (ha-mode -> quorum),
what the equivalence check of a redeclaration sees, and re-applying to existing queues."""

from __future__ import annotations

import pytest

from amqp_broker.core.policies import (
    ADDED_ARG,
    MEMBERS_ARG,
    POLICY_ARG,
    QUORUM_REFUSES,
    Policies,
    Policy,
    PolicyError,
    apply_policy,
    declared_arguments,
    effective_definition,
    make_policy,
    reapplied_arguments,
    validate_definition,
)

VIEW = ("n1", "n2", "n3")


def policy(name: str, pattern: str, definition: dict, priority: int = 0,
           apply_to: str = "queues", vhost: str = "/") -> Policy:
    return make_policy(vhost, name, {"pattern": pattern, "definition": definition,
                                     "priority": priority, "apply-to": apply_to})


@pytest.mark.parametrize("definition,reason", [
    ({}, "non-empty"),
    ([], "non-empty"),
    ({"foo": 1}, "['foo'] are not recognised policy settings"),
    ({"ha-mode": "some"}, "'some' is not a valid ha-mode value"),
    ({"ha-mode": "exactly"}, "ha-mode exactly needs ha-params"),
    ({"ha-mode": "exactly", "ha-params": "2"}, "ha-mode exactly needs ha-params"),
    ({"ha-mode": "exactly", "ha-params": 0}, "ha-mode exactly needs ha-params"),
    ({"ha-mode": "nodes"}, "ha-mode nodes needs ha-params"),
    ({"ha-mode": "nodes", "ha-params": "n1"}, "ha-mode nodes needs ha-params"),
    ({"ha-mode": "nodes", "ha-params": []}, "ha-mode nodes needs ha-params"),
    ({"ha-mode": "all", "ha-params": 2}, "ha-mode all does not take ha-params"),
    ({"ha-params": 2}, "ha-params are set but ha-mode is not"),
    ({"ha-mode": "all", "ha-sync-mode": "sometimes"}, "not a valid sync mode"),
    ({"message-ttl": -1}, "message-ttl must be a non-negative integer"),
    ({"max-length": "10"}, "max-length must be a non-negative integer"),
    ({"max-length": True}, "max-length must be a non-negative integer"),
    ({"overflow": "drop-tail"}, "not a valid overflow value"),
    ({"dead-letter-exchange": 5}, "dead-letter-exchange must be a string"),
])
def test_bad_definitions_are_refused_with_a_reason(definition: object, reason: str) -> None:
    with pytest.raises(PolicyError, match="Validation failed") as info:
        validate_definition(definition)
    assert reason in str(info.value)


def test_good_definitions() -> None:
    for d in ({"ha-mode": "all"}, {"ha-mode": "exactly", "ha-params": 2},
              {"ha-mode": "nodes", "ha-params": ["n1", "n2"], "ha-sync-mode": "automatic"},
              {"message-ttl": 0, "expires": 1000, "max-length": 5, "max-length-bytes": 10,
               "overflow": "reject-publish", "dead-letter-exchange": "dlx",
               "dead-letter-routing-key": "dead", "delivery-limit": 3}):
        assert validate_definition(d) == d


@pytest.mark.parametrize("body,reason", [
    ({"definition": {"ha-mode": "all"}}, "key_missing: pattern"),
    ({"pattern": "^a"}, "key_missing: definition"),
    ({"pattern": "(", "definition": {"ha-mode": "all"}}, "not a regular expression"),
    ({"pattern": "^a", "definition": {"ha-mode": "all"}, "apply-to": "streams"}, "apply-to"),
    ({"pattern": "^a", "definition": {"ha-mode": "all"}, "priority": "high"}, "priority"),
])
def test_bad_policy_bodies(body: dict, reason: str) -> None:
    with pytest.raises(PolicyError, match=reason):
        make_policy("/", "p", body)


def test_encode_decode_round_trip() -> None:
    p = policy("ha-all", r"^ha\.", {"ha-mode": "all", "message-ttl": 60000}, 3, "classic_queues")
    assert Policy.decode(p.encode()) == p
    assert p.to_json() == {"vhost": "/", "name": "ha-all", "pattern": r"^ha\.",
                           "apply-to": "classic_queues",
                           "definition": {"ha-mode": "all", "message-ttl": 60000}, "priority": 3}
    with pytest.raises(PolicyError):
        Policy.decode("[1]")


def test_matching_by_pattern_priority_apply_to_and_vhost() -> None:
    ps = Policies([policy("low", "^ord", {"max-length": 1}),
                   policy("high", "ers$", {"max-length": 2}, priority=5),
                   policy("quorum", "^ord", {"delivery-limit": 3}, priority=9,
                          apply_to="quorum_queues"),
                   policy("ex", ".*", {"alternate-exchange": "ae"}, priority=99,
                          apply_to="exchanges"),
                   policy("other", ".*", {"max-length": 9}, priority=99, vhost="v")])
    assert ps.match("/", "orders").name == "high"            # type: ignore[union-attr]
    assert ps.match("/", "ordinal").name == "low"            # type: ignore[union-attr]
    assert ps.match("/", "orders", "quorum").name == "quorum"  # type: ignore[union-attr]
    assert ps.match("/", "xorders-not") is None
    assert ps.match("/", "buyers").name == "high"            # re.search, not a full match
    assert ps.match("v", "anything").name == "other"         # type: ignore[union-attr]
    assert ps.delete("/", "high") and not ps.delete("/", "high")
    assert ps.match("/", "orders").name == "low"             # type: ignore[union-attr]
    assert [p.name for p in ps.list("/")] == ["ex", "low", "quorum"]


def test_common_keys_become_arguments_where_the_client_set_none() -> None:
    ps = Policies([policy("p", "^q", {"message-ttl": 60000, "expires": 9000, "max-length": 5,
                                      "max-length-bytes": 100, "overflow": "reject-publish",
                                      "dead-letter-exchange": "dlx",
                                      "dead-letter-routing-key": "rk", "delivery-limit": 4})])
    args = apply_policy(ps, "/", "q1", {"x-max-length": 7}, durable=False, exclusive=False,
                        auto_delete=False, view=None)
    assert args == {"x-max-length": 7, "x-message-ttl": 60000, "x-expires": 9000,
                    "x-max-length-bytes": 100, "x-overflow": "reject-publish",
                    "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "rk",
                    POLICY_ARG: "p",
                    ADDED_ARG: "x-message-ttl,x-expires,x-max-length-bytes,x-overflow,"
                               "x-dead-letter-exchange,x-dead-letter-routing-key"}
    # delivery-limit is for quorum queues only
    quorum = apply_policy(ps, "/", "q2", {"x-queue-type": "quorum"}, durable=True,
                          exclusive=False, auto_delete=False, view=VIEW)
    assert quorum is not None and quorum["x-delivery-limit"] == 4
    assert declared_arguments(args) == {"x-max-length": 7}
    assert declared_arguments(quorum) == {"x-queue-type": "quorum"}


def test_no_policy_leaves_the_arguments_alone() -> None:
    ps = Policies([policy("p", "^q", {"max-length": 1})])
    assert apply_policy(ps, "/", "other", None, durable=True, exclusive=False,
                        auto_delete=False) is None
    assert apply_policy(ps, "/", "other", {"a": 1}, durable=True, exclusive=False,
                        auto_delete=False) == {"a": 1}
    # a declaration from another member already carries what its policy added
    marked = {"x-max-length": 1, POLICY_ARG: "p", ADDED_ARG: "x-max-length"}
    assert apply_policy(ps, "/", "q", marked, durable=True, exclusive=False,
                        auto_delete=False) == marked
    assert apply_policy(None, "/", "q", None, durable=True, exclusive=False,
                        auto_delete=False) is None


def test_ha_modes_make_a_durable_shared_classic_queue_quorum() -> None:
    ps = Policies([policy("all", r"^all\.", {"ha-mode": "all", "message-ttl": 60000}),
                   policy("two", r"^two\.", {"ha-mode": "exactly", "ha-params": 2}),
                   policy("nodes", r"^nodes\.", {"ha-mode": "nodes",
                                                 "ha-params": ["n3", "n1", "gone"]}),
                   policy("none", r"^none\.", {"ha-mode": "nodes", "ha-params": ["gone"]})])

    def apply(name: str, **kw: bool) -> dict:
        flags = {"durable": True, "exclusive": False, "auto_delete": False, **kw}
        out = apply_policy(ps, "/", name, None, view=VIEW, **flags)
        assert out is not None
        return out

    a = apply("all.orders")
    assert a["x-queue-type"] == "quorum" and a["x-quorum-initial-group-size"] == 3
    assert a["x-message-ttl"] == 60000 and a[POLICY_ARG] == "all"
    assert declared_arguments(a) == {}
    assert apply("two.x")["x-quorum-initial-group-size"] == 2
    n = apply("nodes.x")
    assert n[MEMBERS_ARG] == "n1,n3" and n["x-quorum-initial-group-size"] == 2
    assert apply("none.x")["x-quorum-initial-group-size"] == 1
    # not durable, exclusive or auto-delete: stays classic (RabbitMQ does not mirror those)
    for kw in ({"durable": False}, {"exclusive": True}, {"auto_delete": True}):
        assert "x-queue-type" not in apply("all.q", **kw)
    # no quorum engine (a single broker without clustering): a plain classic queue
    single = apply_policy(ps, "/", "all.q", None, durable=True, exclusive=False,
                          auto_delete=False, view=None)
    assert single == {"x-message-ttl": 60000, POLICY_ARG: "all", ADDED_ARG: "x-message-ttl"}
    # a client that chose a type keeps it
    stream = apply_policy(ps, "/", "all.s", {"x-queue-type": "stream"}, durable=True,
                          exclusive=False, auto_delete=False, view=VIEW)
    assert stream is not None and stream["x-queue-type"] == "stream"


def test_effective_definition_follows_the_policy() -> None:
    ps = Policies([policy("p", "^q", {"max-length": 1})])
    args = apply_policy(ps, "/", "q", None, durable=True, exclusive=False, auto_delete=False)
    assert effective_definition(args, ps, "/") == ("p", {"max-length": 1})
    ps.delete("/", "p")
    assert effective_definition(args, ps, "/") == ("p", {})
    assert effective_definition({}, ps, "/") == (None, {})


def test_a_queue_with_arguments_quorum_refuses_is_not_mirrored() -> None:
    from cluster.quorum.config import UNSUPPORTED
    assert tuple(QUORUM_REFUSES) == tuple(UNSUPPORTED)
    ps = Policies([policy("all", ".*", {"ha-mode": "all"})])
    for client in ({"x-max-priority": 5}, {"x-overflow": "reject-publish-dlx"}):
        out = apply_policy(ps, "/", "q", client, durable=True, exclusive=False,
                           auto_delete=False, view=VIEW)
        assert out is not None and "x-queue-type" not in out and out[POLICY_ARG] == "all"


def test_an_explicit_classic_type_is_mirrored_too() -> None:
    ps = Policies([policy("all", ".*", {"ha-mode": "all"})])
    out = apply_policy(ps, "/", "q", {"x-queue-type": "classic"}, durable=True,
                       exclusive=False, auto_delete=False, view=VIEW)
    assert out is not None and out["x-queue-type"] == "quorum"
    assert "x-queue-type" not in declared_arguments(out)   # equivalent to classic


def test_re_applying_follows_the_policies_keeps_client_arguments_and_never_mirrors() -> None:
    pols = Policies([policy("cap", "^q", {"max-length": 3, "message-ttl": 500,
                                         "ha-mode": "all"})])
    kw = {"durable": True, "exclusive": False, "auto_delete": False}
    args = reapplied_arguments(pols, "/", "q1", {"x-message-ttl": 100}, **kw)
    assert args["x-max-length"] == 3 and args["x-message-ttl"] == 100   # the client's wins
    assert "x-queue-type" not in args and args[POLICY_ARG] == "cap"      # an existing queue
    assert declared_arguments(args) == {"x-message-ttl": 100}
    pols.delete("/", "cap")
    assert reapplied_arguments(pols, "/", "q1", args, **kw) == {"x-message-ttl": 100}
    assert reapplied_arguments(pols, "/", "q2", None, **kw) == {}


def test_quorum_keys_of_rabbitmq_4_delivery_limit_minus_one_and_dead_letter_strategy() -> None:
    """RabbitMQ 4.0: ``{"delivery-limit": -1}`` restores no limit (the documented way back to
    3.13's behaviour); ``dead-letter-strategy`` is at-most-once / at-least-once, quorum only."""
    ps = Policies([policy("qq", "^qq", {"delivery-limit": -1,
                                        "dead-letter-strategy": "at-least-once"})])
    quorum = apply_policy(ps, "/", "qq1", {"x-queue-type": "quorum"}, durable=True,
                          exclusive=False, auto_delete=False, view=VIEW)
    assert quorum is not None and quorum["x-delivery-limit"] == -1
    assert quorum["x-dead-letter-strategy"] == "at-least-once"
    classic = apply_policy(ps, "/", "qq2", {}, durable=True, exclusive=False,
                           auto_delete=False, view=None)
    assert classic is not None and "x-dead-letter-strategy" not in classic
    with pytest.raises(PolicyError, match="'twice' is not a valid dead letter strategy"):
        validate_definition({"dead-letter-strategy": "twice"})
    with pytest.raises(PolicyError, match="message-ttl must be a non-negative integer"):
        validate_definition({"message-ttl": -1})
