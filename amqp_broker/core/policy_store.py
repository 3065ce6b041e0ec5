"""Setting, clearing and restoring policies (issue 12): ``broker.policies`` (``core.policies``),
the definitions store (table ``policies`` of definitions.db) and the cluster, in one place.

A change made here is applied to this broker and stored: on a single broker by the management
API (``amqp-broker ctl set_policy``, a definitions import); in a cluster by every member when it
applies the change committed in the cluster metadata log (``amqp_broker.clustering``), which the
API proposes instead. Every change is re-applied to the vhost's existing classic queues
(``reapply``). Errors: ``PolicyError`` (400) for a bad policy,
``KeyError`` for an unknown vhost. Source: RabbitMQ "Policies" (policies are cluster-wide and
survive restarts).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from queues.arguments import parse_arguments
from queues.errors import InvalidArgument
from queues.queue import Queue

from .policies import Policy, PolicyError, reapplied_arguments

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["load_policies", "set_policy", "clear_policy", "reapply"]

log = logging.getLogger(__name__)


def load_policies(broker: Broker) -> int:
    """Restore the stored policies into ``broker.policies`` (at start). Recovered queues keep
    the arguments they were declared with (see ``core.policies``). Returns how many; a stored
    policy that no longer validates is skipped with a warning."""
    store = broker.durability.definitions
    if store is None:
        return 0
    count = 0
    for vhost, name, body in store.load_policies():
        try:
            policy = Policy.decode(body)
        except PolicyError as exc:
            log.warning("stored policy %r of vhost %r skipped: %s", name, vhost, exc)
            continue
        broker.policies.put(policy)
        count += 1
    return count


def set_policy(broker: Broker, policy: Policy) -> bool:
    """Add or replace ``policy`` (already validated: ``policies.make_policy``); True when it
    replaced one. ``KeyError`` when its vhost does not exist. Re-applied to the vhost's existing
    classic queues (``reapply``)."""
    if policy.vhost not in broker.vhosts:
        raise KeyError(policy.vhost)
    existed = broker.policies.put(policy)
    store = broker.durability.definitions
    body = policy.encode()
    if store is not None:
        store.save_policy(policy.vhost, policy.name, body)
    log.info("policy %r of vhost %r set: %s", policy.name, policy.vhost, body)
    reapply(broker, policy.vhost)
    return existed


def clear_policy(broker: Broker, vhost: str, name: str) -> bool:
    """Remove policy ``name`` of ``vhost``; False when there was none."""
    gone = broker.policies.delete(vhost, name)
    store = broker.durability.definitions
    if store is not None:
        store.delete_policy(vhost, name)
    if gone:
        log.info("policy %r of vhost %r cleared", name, vhost)
        reapply(broker, vhost)
    return gone


def reapply(broker: Broker, vhost_name: str) -> int:
    """Re-apply the policies to the existing classic queues of ``vhost_name`` (RabbitMQ
    "Policies": a change applies to matching queues at once): each queue whose arguments change
    takes them (``Queue.reconfigure``: TTL, limits, overflow, dead-lettering; a lower drop-head
    limit drops at once), restarts its x-expires period and is stored again when durable.
    Arguments that no longer validate (e.g. a policy's dead-letter-routing-key without an
    exchange) leave the queue as it was, with a warning. Returns how many queues changed."""
    vhost = broker.vhosts.get(vhost_name)
    if vhost is None:
        return 0
    changed = 0
    for q in list(vhost.queues.values()):
        if not isinstance(q, Queue):   # classic only: quorum config is in the replicated state
            continue
        new = reapplied_arguments(broker.policies, vhost_name, q.name, q.arguments,
                                  durable=q.durable, exclusive=q.exclusive_owner is not None,
                                  auto_delete=q.auto_delete)
        if new == dict(q.arguments or {}):
            continue
        try:
            settings = parse_arguments(new)
        except InvalidArgument as exc:
            log.warning("queue %r of vhost %r keeps its arguments: the policy gives %s",
                        q.name, vhost_name, exc)
            continue
        q.arguments = new
        q.reconfigure(settings)
        vhost.touch(q.name)
        broker.durability.queue_declared(vhost_name, q)
        changed += 1
    if changed:
        log.info("policies re-applied to %d queue(s) of vhost %r", changed, vhost_name)
    return changed
