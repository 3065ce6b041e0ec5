"""Changes of users, vhosts, permissions and policies asked through the management API (routes,
definitions import): applied here on a single broker (``core.access_store``,
``core.policy_store``), or, in a cluster, proposed to the cluster metadata log
(``broker.metadata``, ``amqp_broker.clustering.metadata``) and answered from the outcome every
member decides alike once it committed (issue 23) -- this broker's objects change when the log
is applied, like every other member's.

Each function returns what the route answers with (``True``: created / existed) and raises what a
single broker raises: ``KeyError`` for an unknown user or vhost (404 from the log),
``PolicyError`` for a policy the log refuses (400); in a cluster also ``HTTPError`` 503
``timeout`` with RabbitMQ 4's Khepri text when the change did not commit within
``--metadata-timeout`` (a minority member, or no leader: 541 on AMQP). Sources: RabbitMQ
"Management HTTP API", "Access Control", "Virtual Hosts", "Policies", "Metadata store".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.metadata import commands as m
from cluster.metadata.outcomes import Deleted, Outcome, Refused, Stored

from ..core import access_store, policy_store
from ..core.access import Account, Grant
from ..core.policies import Policy, PolicyError
from .http import HTTPError

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["put_user", "delete_user", "set_permission", "clear_permission", "put_vhost",
           "delete_vhost", "set_policy", "clear_policy"]

#: The management API's answer to a change the metadata store did not commit in time.
TIMEOUT_STATUS = 503


async def _decide(broker: Broker, command: m.Command) -> Outcome:
    outcome = await broker.metadata.decide(command)
    if isinstance(outcome, Refused):
        if outcome.code == 404:
            raise KeyError(outcome.text)
        if outcome.code == 400:
            raise PolicyError(outcome.text)
        raise HTTPError(TIMEOUT_STATUS if outcome.code == 541 else 500,
                        "timeout" if outcome.code == 541 else "internal_error", outcome.text)
    return outcome


def _created(outcome: Outcome) -> bool:
    return isinstance(outcome, Stored) and outcome.created


def _existed(outcome: Outcome) -> bool:
    return isinstance(outcome, Deleted) and outcome.existed


async def put_user(broker: Broker, account: Account) -> bool:
    """Create or replace a user; True when it is new."""
    if broker.metadata is None:
        new = account.name not in broker.access.users
        access_store.save_user(broker, account)
        return new
    return _created(await _decide(broker, m.PutUser(
        account.name, account.password_hash, account.hashing_algorithm, tuple(account.tags))))


async def delete_user(broker: Broker, name: str) -> bool:
    """Delete a user and its permissions; True when it existed."""
    if broker.metadata is None:
        return access_store.delete_user(broker, name)
    return _existed(await _decide(broker, m.DeleteUser(name)))


async def set_permission(broker: Broker, user: str, vhost: str, grant: Grant) -> bool:
    """Set ``user``'s permissions in ``vhost``; True when new. ``KeyError``: unknown user or
    vhost."""
    if broker.metadata is None:
        new = (user, vhost) not in broker.access.permissions
        access_store.save_permission(broker, user, vhost, grant)
        return new
    return _created(await _decide(broker, m.SetPermission(user, vhost, grant.configure,
                                                          grant.write, grant.read)))


async def clear_permission(broker: Broker, user: str, vhost: str) -> bool:
    """Clear ``user``'s permissions in ``vhost``; True when there were some."""
    if broker.metadata is None:
        return access_store.delete_permission(broker, user, vhost)
    return _existed(await _decide(broker, m.ClearPermission(user, vhost)))


async def put_vhost(broker: Broker, name: str, description: str = "",
                    tags: tuple[str, ...] = (), creator: str | None = None) -> bool:
    """Create vhost ``name`` or update its metadata; True when new (``creator`` gets full
    permissions in a new one)."""
    if broker.metadata is None:
        return access_store.add_vhost(broker, name, description, tags, creator)
    return _created(await _decide(broker, m.AddVhost(name, description, tuple(tags),
                                                     creator or "")))


async def delete_vhost(broker: Broker, name: str) -> bool:
    """Delete vhost ``name`` with everything in it; True when it existed."""
    if broker.metadata is None:
        return access_store.delete_vhost(broker, name)
    return _existed(await _decide(broker, m.DeleteVhost(name)))


async def set_policy(broker: Broker, policy: Policy) -> bool:
    """Set ``policy`` (validated: ``core.policies.make_policy``); True when it replaced one.
    ``KeyError``: unknown vhost."""
    if broker.metadata is None:
        return policy_store.set_policy(broker, policy)
    outcome = await _decide(broker, m.SetPolicy(policy.vhost, policy.name, policy.pattern,
                                                dict(policy.definition), policy.priority,
                                                policy.apply_to))
    return isinstance(outcome, Stored) and not outcome.created


async def clear_policy(broker: Broker, vhost: str, name: str) -> bool:
    """Clear policy ``name`` of ``vhost``; True when there was one."""
    if broker.metadata is None:
        return policy_store.clear_policy(broker, vhost, name)
    return _existed(await _decide(broker, m.ClearPolicy(vhost, name)))
