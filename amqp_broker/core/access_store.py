"""Changing users, permissions and vhosts (issue 13): ``broker.access`` (``core.access``),
``broker.vhosts`` and the definitions store (definitions.db), in one place (as ``policy_store``
does for policies).

A change made here is applied to this broker and stored. On a single broker the management API,
``amqp-broker ctl`` and a definitions import call it directly; in a cluster they propose the
change to the cluster metadata log instead (``amqp_broker.management.changes``), and every member
calls it when it applies the committed change (``amqp_broker.clustering.metadata_follow``), so
definitions.db is a cache of the log there. Users are kept with their salted password hash
(``rabbit_password_hashing_sha256``), never a password.

Rules (RabbitMQ "Access Control" / "Virtual Hosts"; users, vhosts and permissions are cluster-wide
there): a new vhost gets full permissions for the user who created it (as the management UI
does); deleting a vhost closes its connections (320), deletes its queues (their stored messages
go too) and its permissions; deleting a user deletes its permissions (its open connections stay).
Errors: ``KeyError`` for an unknown user or vhost.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .access import FULL, Account, Grant
from .vhost import VirtualHost

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["save_user", "delete_user", "save_permission", "delete_permission", "add_vhost",
           "delete_vhost"]

log = logging.getLogger(__name__)


def save_user(broker: Broker, account: Account) -> None:
    """Create or replace a user (its permissions stay)."""
    broker.access.put_user(account)
    store = broker.durability.definitions
    if store is not None:
        store.save_user(account.name, account.password_hash, account.hashing_algorithm,
                        account.tags)


def delete_user(broker: Broker, name: str) -> bool:
    """Delete a user and its permissions (its open connections stay, as RabbitMQ); False when
    there was none."""
    gone = broker.access.delete_user(name)
    store = broker.durability.definitions
    if store is not None:
        store.delete_user(name)
    return gone


def save_permission(broker: Broker, user: str, vhost: str, grant: Grant) -> None:
    """Set ``user``'s permissions in ``vhost``; KeyError for an unknown user or vhost."""
    if user not in broker.access.users:
        raise KeyError(user)
    if vhost not in broker.vhosts:
        raise KeyError(vhost)
    broker.access.set_permission(user, vhost, grant)
    store = broker.durability.definitions
    if store is not None:
        store.save_permission(user, vhost, grant.configure, grant.write, grant.read)


def delete_permission(broker: Broker, user: str, vhost: str) -> bool:
    """Clear ``user``'s permissions in ``vhost``; False when there were none here."""
    gone = broker.access.clear_permission(user, vhost)
    store = broker.durability.definitions
    if store is not None:
        store.delete_permission(user, vhost)
    return gone


def add_vhost(broker: Broker, name: str, description: str = "", tags: tuple[str, ...] = (),
              creator: str | None = None) -> bool:
    """Create vhost ``name`` (with the default exchanges) or update its description and tags;
    True when it is new. ``creator`` gets full permissions in a new one."""
    new = name not in broker.vhosts
    if new:
        broker.vhosts[name] = VirtualHost(broker, name)
    broker.vhost_meta[name] = (description, tuple(tags))
    store = broker.durability.definitions
    if store is not None:
        store.save_vhost(name, description, tags)
    if new and creator is not None and creator in broker.access.users:
        save_permission(broker, creator, name, FULL)
    return new


def delete_vhost(broker: Broker, name: str) -> bool:
    """Delete vhost ``name`` and everything in it here; False when there was none."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return False
    for conn in list(broker.connections.values()):
        if conn.vhost is vhost:
            conn.close_forced(f"CONNECTION_FORCED - vhost '{name}' is deleted")
    for q in list(vhost.queues.values()):
        vhost.delete_queue(q)
    del broker.vhosts[name]
    broker.vhost_meta.pop(name, None)
    broker.access.vhost_deleted(name)
    for policy in broker.policies.list(name):
        broker.policies.delete(name, policy.name)
    store = broker.durability.definitions
    if store is not None:
        store.delete_vhost(name)
    log.info("vhost %r deleted", name)
    return True
