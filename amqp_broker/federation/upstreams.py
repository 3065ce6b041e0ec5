"""Which upstreams federate an exchange or a queue: the policy that applies to it (one policy per
object, the highest priority; exchanges take policies whose ``apply-to`` is ``exchanges`` or
``all``, queues as ``core.policies.Policies.match``) and its ``federation-upstream`` (one
upstream) or ``federation-upstream-set`` (a set; ``all``: every upstream of the vhost) key.
An upstream or set that does not exist gives no link (RabbitMQ's rule: the link appears once
the parameter does). The default exchange and the federation's own objects (argument
``x-internal-purpose``) are never federated. Pure. Source: RabbitMQ "Federation Reference"
(policies), rabbit_federation_upstream:for/1 (3.10).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.policies import Policies, Policy, queue_kind
from .params import UPSTREAM, UPSTREAM_SET, Upstream, upstream_of

__all__ = ["exchange_policy", "upstreams_for", "federated"]

#: the argument RabbitMQ's federation puts on the queues and exchanges it declares
INTERNAL_PURPOSE = "x-internal-purpose"


def exchange_policy(policies: Policies, vhost: str, name: str) -> Policy | None:
    """The policy that applies to exchange ``name`` of ``vhost`` (highest priority; ties: the
    smallest name), or None."""
    best: Policy | None = None
    for p in policies.list(vhost):
        if p.apply_to not in ("exchanges", "all") or re.search(p.pattern, name) is None:
            continue
        if best is None or p.priority > best.priority:
            best = p
    return best


def upstreams_for(policy: Policy | None, params: Mapping[tuple[str, str], Any]
                  ) -> list[Upstream]:
    """The upstreams ``policy`` names, from the vhost's federation ``params`` ((component,
    name) -> value), sorted by name; empty without a federation key."""
    if policy is None:
        return []
    d = policy.definition
    if UPSTREAM in d:
        value = params.get((UPSTREAM, d[UPSTREAM]))
        return [upstream_of(d[UPSTREAM], value)] if value is not None else []
    set_name = d.get(UPSTREAM_SET)
    if set_name is None:
        return []
    if set_name == "all":
        return [upstream_of(n, v) for (c, n), v in sorted(params.items()) if c == UPSTREAM]
    out: dict[str, Upstream] = {}
    for entry in params.get((UPSTREAM_SET, set_name)) or []:
        value = params.get((UPSTREAM, entry["upstream"]))
        if value is not None:
            overrides = {k: v for k, v in entry.items() if k != "upstream"}
            out[entry["upstream"]] = upstream_of(entry["upstream"], value, overrides)
    return [out[n] for n in sorted(out)]


def federated(policies: Policies, vhost: str, kind: str, name: str,
              arguments: Mapping[str, Any] | None, params: Mapping[tuple[str, str], Any]
              ) -> list[Upstream]:
    """The upstreams of exchange (``kind`` "exchange") or queue ("queue") ``name`` made with
    ``arguments`` (see the module docstring)."""
    if (kind == "exchange" and name == "") or INTERNAL_PURPOSE in (arguments or {}):
        return []
    if kind == "exchange":
        policy = exchange_policy(policies, vhost, name)
    else:
        policy = policies.match(vhost, name, queue_kind(arguments))
    return upstreams_for(policy, params)
