"""Restoring users, permissions and vhost metadata at start (``load_access``). Changing them
(applied, stored in definitions.db and sent to the cluster) is ``core.access_store``, re-exported
here for the API's routes.

Rules (RabbitMQ "Access Control" / "Virtual Hosts"): users from the configuration file are created
at start when the store does not know them yet (so a password changed through the API stays
changed); a configured user with vhosts "*" gets full permissions on every vhost it has none in.
Must not know: HTTP.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.access import FULL, Account, Grant
from ..core.access_store import (
    add_vhost,
    delete_permission,
    delete_user,
    delete_vhost,
    save_permission,
    save_user,
)

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
    broker.vhost_meta.update({v.name: (v.description, tuple(v.tags)) for v in defs.vhosts})
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
