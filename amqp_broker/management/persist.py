"""Users, permissions and vhosts changed through the API: applied to the broker (``core.access``,
``Broker.vhosts``) and written to the definitions store (definitions.db) so they survive a
restart; ``load_access`` restores them at start.

Rules (RabbitMQ "Access Control" / "Virtual Hosts"): users from the configuration file are created
at start when the store does not know them yet (so a password changed through the API stays
changed); a configured user with vhosts "*" gets full permissions on every vhost it has none in.
A new vhost gets full permissions for the user who created it (as the management UI does); deleting
a vhost closes its connections (320), deletes its queues (their stored messages go too) and its
permissions. Must not know: HTTP. Errors: ``KeyError`` for an unknown user or vhost.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.access import FULL, Account, Grant
from ..core.vhost import VirtualHost

if TYPE_CHECKING:
    from ..core.broker import Broker
    from ..definitions.store import DefinitionsStore

__all__ = ["load_access", "save_user", "delete_user", "save_permission", "delete_permission",
           "add_vhost", "delete_vhost"]

log = logging.getLogger(__name__)


def _store(broker: Broker) -> DefinitionsStore | None:
    return broker.durability.definitions


def load_access(broker: Broker) -> None:
    """Merge the stored users and permissions into ``broker.access`` (call after recovery, so
    every stored vhost exists): stored users win over configured ones of the same name; users
    only configured are saved; configured "*" users get full permissions where they have none."""
    store = _store(broker)
    access = broker.access
    configured_all = {name for (name, vhost) in access.permissions if vhost == "/"}
    if store is None:
        return
    defs = store.load()
    with store.transaction():
        stored = {u.name for u in defs.users}
        for u in defs.users:
            loopback = access.users[u.name].loopback_only if u.name in access.users else False
            access.put_user(Account(u.name, u.password_hash, u.hashing_algorithm, tuple(u.tags),
                                    loopback))
        for p in defs.permissions:
            access.set_permission(p.user, p.vhost, Grant(p.configure, p.write, p.read))
        for name, account in access.users.items():
            if name not in stored:
                store.save_user(name, account.password_hash, account.hashing_algorithm,
                                account.tags)
        for name in configured_all & set(access.users):
            for vhost in broker.vhosts:
                if (name, vhost) not in access.permissions and name not in stored:
                    access.set_permission(name, vhost, FULL)
        for (user, vhost), grant in access.permissions.items():
            if vhost in broker.vhosts:
                store.save_permission(user, vhost, grant.configure, grant.write, grant.read)


def save_user(broker: Broker, account: Account) -> None:
    """Create or replace a user (its permissions stay)."""
    broker.access.put_user(account)
    store = _store(broker)
    if store is not None:
        store.save_user(account.name, account.password_hash, account.hashing_algorithm,
                        account.tags)


def delete_user(broker: Broker, name: str) -> bool:
    """Delete a user and its permissions (its open connections stay, as RabbitMQ)."""
    gone = broker.access.delete_user(name)
    store = _store(broker)
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
    store = _store(broker)
    if store is not None:
        store.save_permission(user, vhost, grant.configure, grant.write, grant.read)


def delete_permission(broker: Broker, user: str, vhost: str) -> bool:
    """Clear ``user``'s permissions in ``vhost``."""
    gone = broker.access.clear_permission(user, vhost)
    store = _store(broker)
    if store is not None:
        store.delete_permission(user, vhost)
    return gone


def add_vhost(broker: Broker, name: str, description: str = "", tags: tuple[str, ...] = (),
              creator: str | None = None) -> bool:
    """Create vhost ``name`` (with the default exchanges); True when it is new. ``creator``
    gets full permissions in it."""
    new = name not in broker.vhosts
    if new:
        broker.vhosts[name] = VirtualHost(broker, name)
    store = _store(broker)
    if store is not None:
        store.save_vhost(name, description, tags)
    if new and creator is not None and creator in broker.access.users:
        save_permission(broker, creator, name, FULL)
    return new


def delete_vhost(broker: Broker, name: str) -> bool:
    """Delete vhost ``name`` and everything in it; False when there was none."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return False
    for conn in list(broker.connections.values()):
        if conn.vhost is vhost:
            conn.close_forced(f"CONNECTION_FORCED - vhost '{name}' is deleted")
    for q in list(vhost.queues.values()):
        vhost.delete_queue(q)
    del broker.vhosts[name]
    broker.access.vhost_deleted(name)
    store = _store(broker)
    if store is not None:
        store.delete_vhost(name)
    log.info("vhost %r deleted", name)
    return True
