"""The federation's pure rules as a user meets them: which messages a link forwards
(``max-hops``, cycles), the ``x-received-from`` hops it writes, and which upstreams a policy gives
an exchange or a queue (sets, ``all``, overrides, missing upstreams). The links themselves are
tested with real brokers in ``interop_tests/test_federation.py``."""

from __future__ import annotations

import pytest

from amqp_broker.core.policies import Policies, PolicyError, make_policy
from amqp_broker.federation.headers import (
    exchange_hop,
    identity,
    queue_hop,
    should_forward,
    upstream_identity,
)
from amqp_broker.federation.params import FederationParamError, validate
from amqp_broker.federation.upstreams import federated


def test_max_hops_and_cycles():
    one = exchange_hop(None, "amqp://a", "x", False, "A", "/")
    assert should_forward(None, 1, "B", "/")
    assert not should_forward(one, 1, "B", "/")      # one hop made, max-hops 1
    assert should_forward(one, 2, "B", "/")
    assert not should_forward(one, 5, "A", "/")      # back where it came from: a cycle
    assert should_forward(one, 5, "A", "other")      # same broker, another vhost
    two = exchange_hop(one, "amqp://b", "x", True, "B", "/")
    assert [h["cluster-name"] for h in two["x-received-from"]] == ["B", "A"]   # newest first


def test_queue_hops_count_visits_and_keep_the_origin():
    first = queue_hop({"CC": ["k2"]}, "amqp://a", "q", False, "ex", "k")
    assert first["x-original-exchange"] == "ex" and first["x-original-routing-key"] == "k"
    assert first["x-original-cc"] == ["k2"] and "CC" not in first
    back = queue_hop(queue_hop(first, "amqp://b", "q", False, "", "q"), "amqp://a", "q", True,
                     "", "q")
    assert [(h["uri"], h["visit-count"]) for h in back["x-received-from"]] == [
        ("amqp://a", 2), ("amqp://b", 1)]


def test_names_of_brokers():
    assert identity({}, "down@h") == "down@h"
    assert identity({"cluster_name": "blue", "cluster_members": ["a"]}, "a@h") == "blue"
    assert upstream_identity({"product": "RabbitMQ", "cluster_name": "rabbit@h"}) == "rabbit@h"
    assert upstream_identity({"product": b"amqp-broker", "cluster_name": "amqp-broker",
                              "node_name": "up@h"}) == "up@h"


def _policies(*bodies: dict) -> Policies:
    return Policies(make_policy("/", f"p{i}", b) for i, b in enumerate(bodies))


def test_policies_give_upstreams():
    params = {("federation-upstream", "a"): {"uri": "amqp://a", "prefetch-count": 5},
              ("federation-upstream", "b"): {"uri": ["amqp://b1", "amqp://b2"]},
              ("federation-upstream-set", "s"): [{"upstream": "a", "prefetch-count": 7},
                                                 {"upstream": "gone"}]}
    policies = _policies(
        {"pattern": "^fx", "apply-to": "exchanges", "definition": {"federation-upstream-set":
                                                                   "all"}},
        {"pattern": "^fq", "definition": {"federation-upstream-set": "s"}},
        {"pattern": "^fq.one$", "priority": 5, "definition": {"federation-upstream": "b"}})
    ups = federated(policies, "/", "exchange", "fx1", {}, params)
    assert [(u.name, u.uris, u.prefetch) for u in ups] == [
        ("a", ("amqp://a",), 5), ("b", ("amqp://b1", "amqp://b2"), 1000)]
    assert federated(policies, "/", "queue", "fx1", {}, params) == []   # exchanges only
    [u] = federated(policies, "/", "queue", "fq2", {}, params)
    assert (u.name, u.prefetch, u.max_hops, u.ack_mode) == ("a", 7, 1, "on-confirm")  # override
    assert [u.name for u in federated(policies, "/", "queue", "fq.one", {}, params)] == ["b"]
    assert federated(policies, "/", "exchange", "", {}, params) == []    # the default exchange
    assert federated(policies, "/", "queue", "fq3", {"x-internal-purpose": "federation"},
                     params) == []


def test_parameter_and_policy_refusals():
    with pytest.raises(FederationParamError, match="federation-upstream-set-x should be list"):
        validate("federation-upstream-set", "federation-upstream-set-x", {"upstream": "a"})
    assert validate("federation-upstream", "u", {"uri": "amqps://h"}) == {"uri": "amqps://h"}
    with pytest.raises(PolicyError, match="cannot specify federation-upstream"):
        make_policy("/", "p", {"pattern": ".", "definition": {"federation-upstream": "a",
                                                              "federation-upstream-set": "s"}})
    with pytest.raises(PolicyError, match="not a valid federation upstream name"):
        make_policy("/", "p", {"pattern": ".", "definition": {"federation-upstream": 1}})
